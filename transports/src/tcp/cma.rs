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
//! The node token hashes the kernel's boot id with the PID namespace, so two
//! processes agree only if they share both (the same kernel, and PIDs that
//! mean the same process). If the kernel refuses the read (ptrace policy,
//! e.g. Yama's `ptrace_scope`, or a seccomp filter), the requester falls
//! back to the streamed get for that request and stops asking for loans.
//! `TASKFOLD_TCP_CMA=0` turns loans off.

use crate::RecvBuf;
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;
use std::io::IoSliceMut;
use std::os::unix::fs::MetadataExt;

/// Buffers smaller than this are streamed: a loan costs a round trip more.
pub const MIN_LOAN: usize = 64 << 10;

/// This node's token, or 0 if it cannot be known (then no loans).
pub fn node_token() -> u64 {
    let Ok(boot) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") else {
        return 0;
    };
    let Ok(ns) = std::fs::metadata("/proc/self/ns/pid") else {
        return 0;
    };
    let h = taskfold_core::id::stable_hash(&format!("{}/{}:{}", boot.trim(), ns.dev(), ns.ino()));
    h | 1
}

/// Whether loans are enabled by the environment (`TASKFOLD_TCP_CMA`).
pub fn enabled_by_env() -> bool {
    !matches!(
        std::env::var("TASKFOLD_TCP_CMA").as_deref(),
        Ok("0" | "off" | "false" | "no")
    )
}

/// Why a loan could not be read.
#[derive(Debug)]
pub enum ReadFailure {
    /// The kernel does not allow it here: stop asking for loans.
    NotPermitted(String),
    /// This loan failed (the owner died, or the range was wrong).
    Failed(String),
}

/// Copies `len` bytes at `addr` in process `pid` into a fresh aligned
/// buffer.
pub fn read(pid: u32, addr: u64, len: usize) -> Result<RecvBuf, ReadFailure> {
    let mut buf = RecvBuf::with_capacity(len);
    buf.resize(len, 0);
    let pid = Pid::from_raw(
        i32::try_from(pid).map_err(|_| ReadFailure::Failed(format!("bad pid {pid}")))?,
    );
    let mut done = 0usize;
    // Bounded: every pass moves at least one byte or returns.
    while done < len {
        let remote = [RemoteIoVec {
            base: addr as usize + done,
            len: len - done,
        }];
        let mut local = [IoSliceMut::new(&mut buf[done..])];
        match process_vm_readv(pid, &mut local, &remote) {
            Ok(0) => return Err(ReadFailure::Failed("the owner's buffer ended early".into())),
            Ok(n) => done += n,
            Err(e @ (nix::Error::EPERM | nix::Error::ENOSYS | nix::Error::EACCES)) => {
                return Err(ReadFailure::NotPermitted(e.to_string()))
            }
            Err(e) => return Err(ReadFailure::Failed(e.to_string())),
        }
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory_and_refuses_bad_ranges() {
        assert_ne!(node_token(), 0, "Linux has a boot id and a pid namespace");
        assert_eq!(node_token(), node_token());
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let got = read(std::process::id(), data.as_ptr() as u64, data.len()).unwrap();
        assert_eq!(&got[..], &data[..]);
        assert!(matches!(
            read(std::process::id(), 8, 4096),
            Err(ReadFailure::Failed(_))
        ));
    }
}
