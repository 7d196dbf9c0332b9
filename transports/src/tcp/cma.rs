//! Same-node gets without the network: cross-memory attach (CMA).
//!
//! Two ranks on one node need not push a contribution through TCP loopback
//! (two copies through the kernel's socket buffers, plus the syscalls and
//! wake-ups of every chunk). When the requester's `GET_REQ` carries the
//! owner's own node token, the owner lends the exposed buffer instead of
//! streaming it: a `GET_LEND` frame names its process, address and length,
//! and the owner keeps a reference to the (immutable) `Bytes` so the memory
//! stays valid and unchanged. The requester copies it in one
//! `process_vm_readv` call (one copy, at memory speed) and sends
//! `GET_RETURN`, which drops the owner's reference. A broken link drops the
//! references lent to that peer.
//!
//! The node token is [`crate::same_node::node_token`]: two processes agree
//! only if they share the kernel and the PID and mount namespaces. Buffers under
//! [`crate::same_node::MIN_LOAN`] are streamed. If the kernel refuses the read (ptrace policy,
//! e.g. Yama's `ptrace_scope`, or a seccomp filter), the requester falls
//! back to the streamed get for that request and stops asking for loans.
//! [`super::TcpConfig::loans`] (`TASKFOLD_TCP_CMA=off`) turns loans off.

use crate::RecvBuf;

/// Why a loan could not be read.
#[derive(Debug)]
pub enum ReadFailure {
    /// The kernel does not allow it here: stop asking for loans.
    NotPermitted(String),
    /// This loan failed (the owner died, or the range was wrong).
    Failed(String),
}

/// Copies `len` bytes at `addr` in process `pid` into an aligned buffer
/// (recycled from [`taskfold_core::pool`] when one fits).
///
/// The kernel writes straight into the buffer's spare capacity: zeroing it
/// first would cost one more pass over the data.
pub fn read(pid: u32, addr: u64, len: usize) -> Result<RecvBuf, ReadFailure> {
    let pid =
        libc::pid_t::try_from(pid).map_err(|_| ReadFailure::Failed(format!("bad pid {pid}")))?;
    let mut buf = taskfold_core::pool::take(len);
    debug_assert!(buf.is_empty() && buf.capacity() >= len);
    let base = buf.as_mut_ptr();
    let mut done = 0usize;
    // Bounded: every pass moves at least one byte or returns.
    while done < len {
        let local = libc::iovec {
            // SAFETY: `done < len <= capacity`: the pointer stays inside the
            // buffer's allocation.
            iov_base: unsafe { base.add(done) }.cast(),
            iov_len: len - done,
        };
        let remote = libc::iovec {
            iov_base: (addr as usize + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: `local` covers `len - done` writable bytes of `buf`'s
        // spare capacity, which nothing else references while the call
        // runs; `remote` names memory of another process, which the kernel
        // checks (EFAULT, never a write here).
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EPERM | libc::ENOSYS | libc::EACCES) => {
                    ReadFailure::NotPermitted(e.to_string())
                }
                _ => ReadFailure::Failed(e.to_string()),
            });
        }
        if n == 0 {
            return Err(ReadFailure::Failed("the owner's buffer ended early".into()));
        }
        done += n as usize;
    }
    // SAFETY: the kernel wrote every byte of `[0, len)` (the reads above
    // cover it without gaps), and `len <= capacity`.
    unsafe { buf.set_len(len) };
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory_and_refuses_bad_ranges() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let got = read(std::process::id(), data.as_ptr() as u64, data.len()).unwrap();
        assert_eq!(&got[..], &data[..]);
        assert!(matches!(
            read(std::process::id(), 8, 4096),
            Err(ReadFailure::Failed(_))
        ));
    }
}
