//! Whose memory a locator names: the pid a peer's locator carries,
//! checked against the process that holds the peer's listening socket
//! before anything of that process is opened.
//!
//! A locator is the peer's word: a peer that holds the job key could name
//! any process of this user (`/proc/<pid>/fd/<fd>`), and this rank would
//! map that process's file as if it were the peer's heap. The peer's
//! listen address, though, is proven: it came in the job's table, from
//! the master, over authenticated connections, and it is where the
//! peer's own handshakes answered. So the first locator of a peer's
//! process that would open anything is checked against the kernel's
//! tables: the named process must hold the TCP socket listening at the
//! peer's address (`/proc/<pid>/net/tcp` and `/proc/<pid>/fd`). Once
//! proven, that pid is the only one a locator of the peer may name, until
//! the peer is replaced.
//!
//! Every read of the kernel's TCP tables walks its whole hash of
//! connections, milliseconds on a machine with much memory however few
//! sockets there are: a rank that proved each peer with a read of its own
//! spent that many on its first reduction with each peer (a quiet 2 MiB
//! reduction of 8 ranks took twice as long over 20 repetitions). So the
//! listeners read are kept, and each proof looks its peer up there first;
//! the tables are read again only for a listener not among them (a
//! replacement's), or one that the named process does not hold. A read
//! asks the kernel for this namespace's listening sockets alone first
//! (`sock_diag`, see `tcp::lender::diag`), and reads the named process's
//! `/proc` tables only if that does not prove it.
//!
//! What a refusal does: nothing is opened or read (the view is `None`, so
//! the caller fetches the bytes with a get instead), the refusal is logged
//! and counted ([`LOCATORS_REFUSED`]). If the kernel's tables cannot be
//! read, nothing is opened either.

use crate::tcp::lender::{self, Listening};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// Locators refused because the process they name is not the peer's
/// (label `transport`).
pub const LOCATORS_REFUSED: &str = "taskfold_transport_locators_refused_total";

/// [`LOCATORS_REFUSED`] of this process, also without a metrics recorder.
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// Locators this process refused because the process they name is not the
/// peer's (all transports of the process together).
pub fn locators_refused() -> u64 {
    REFUSED.load(Ordering::Relaxed)
}

/// Where a peer listens, as the transport knows it (`None`: unknown).
pub type Listeners = Box<dyn Fn(u32) -> Option<SocketAddr> + Send + Sync>;

/// Each peer's process, once proven. See the [module documentation](self).
pub(super) struct Owners {
    listeners: OnceLock<Listeners>,
    /// Per peer: the pid proven to be its process (0: none yet).
    proven: Vec<AtomicU32>,
    /// The listening sockets of the last read of the kernel's tables.
    listening: Mutex<Vec<Listening>>,
    /// Reads of the kernel's tables so far.
    reads: AtomicU32,
}

impl Owners {
    pub(super) fn new(size: u32) -> Owners {
        Owners {
            listeners: OnceLock::new(),
            proven: (0..size).map(|_| AtomicU32::new(0)).collect(),
            listening: Mutex::new(Vec::new()),
            reads: AtomicU32::new(0),
        }
    }

    /// Tells where peers listen; the first call is kept.
    pub(super) fn set_listeners(&self, f: Listeners) {
        let _ = self.listeners.set(f);
    }

    /// `peer` was replaced: its new process is proven anew.
    pub(super) fn forget(&self, peer: u32) {
        if let Some(p) = self.proven.get(peer as usize) {
            p.store(0, Ordering::SeqCst);
        }
    }

    /// Whether `pid` is `peer`'s process (proving it, the first time);
    /// logs and counts a refusal (`rank`, `label`: who refuses, for the
    /// log and the counter).
    pub(super) fn check(&self, rank: u32, label: &'static str, peer: u32, pid: u32) -> bool {
        let Some(slot) = self.proven.get(peer as usize) else {
            return false;
        };
        let known = slot.load(Ordering::SeqCst);
        if known != 0 && known == pid {
            return true;
        }
        let why = if known != 0 {
            format!("rank {peer}'s process is {known}")
        } else {
            match self.listeners.get().and_then(|f| f(peer)) {
                None => "where it listens is not known".to_string(),
                Some(addr) => match self.holds_listener(pid, addr) {
                    Ok(true) => {
                        // A concurrent proof found the same process.
                        let _ = slot.compare_exchange(0, pid, Ordering::SeqCst, Ordering::SeqCst);
                        return slot.load(Ordering::SeqCst) == pid;
                    }
                    Ok(false) => format!("it does not hold rank {peer}'s listener at {addr}"),
                    Err(e) => format!("the kernel's tables cannot tell ({e})"),
                },
            }
        };
        metrics::counter!(LOCATORS_REFUSED, "transport" => label).increment(1);
        REFUSED.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(rank, peer, pid, reason = %why, "a same-node locator names a process that is not the peer's; nothing is read there");
        false
    }

    /// Whether process `pid` holds the socket listening at `addr`: looked
    /// up among the listeners read before, else in the kernel's tables
    /// read now (see the module documentation).
    fn holds_listener(&self, pid: u32, addr: SocketAddr) -> std::io::Result<bool> {
        let known = lender::listener_at(&self.listening(), addr);
        if let Some(inode) = known {
            if lender::holds_inode(pid, inode)? {
                return Ok(true);
            }
        }
        // Not seen yet, or another process's socket then: read anew, this
        // namespace's listeners first (the kernel walks those alone), then
        // the named process's tables (its namespace may be another).
        self.reads.fetch_add(1, Ordering::Relaxed);
        if let Ok(here) = lender::listening_here() {
            if let Some(inode) = lender::listener_at(&here, addr) {
                if lender::holds_inode(pid, inode)? {
                    *self.listening() = here;
                    return Ok(true);
                }
            }
        }
        let now = lender::listening(pid)?;
        let inode = lender::listener_at(&now, addr);
        *self.listening() = now;
        inode.map_or(Ok(false), |i| lender::holds_inode(pid, i))
    }

    fn listening(&self) -> std::sync::MutexGuard<'_, Vec<Listening>> {
        // A list replaced whole: never seen half written.
        self.listening.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn one_read_of_the_kernels_tables_proves_every_peer() {
        // Three peers whose listeners this process holds.
        let ls: Vec<TcpListener> = (0..3)
            .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind"))
            .collect();
        let addrs: Vec<SocketAddr> = ls.iter().map(|l| l.local_addr().unwrap()).collect();
        let owners = Owners::new(4);
        let table = addrs.clone();
        owners.set_listeners(Box::new(move |p| table.get(p as usize).copied()));
        let me = std::process::id();
        for peer in 0..3 {
            assert!(owners.check(9, "test", peer, me), "peer {peer}");
        }
        assert_eq!(owners.reads.load(Ordering::Relaxed), 1);
        // Another process named for a listener read before: the tables
        // are read anew, and it does not hold it either.
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let fresh = Owners::new(1);
        let a0 = addrs[0];
        fresh.set_listeners(Box::new(move |_| Some(a0)));
        *fresh.listening() = lender::listening(me).unwrap();
        assert!(!fresh.check(9, "test", 0, other.id()));
        let _ = other.kill();
        let _ = other.wait();
        assert_eq!(fresh.reads.load(Ordering::Relaxed), 1);
        // A listener opened after the last read (a replacement's) is found
        // by a read anew.
        let late_owners = Owners::new(1);
        *late_owners.listening() = lender::listening(me).unwrap();
        let late = TcpListener::bind("127.0.0.1:0").expect("bind");
        let late_addr = late.local_addr().unwrap();
        late_owners.set_listeners(Box::new(move |_| Some(late_addr)));
        assert!(late_owners.check(9, "test", 0, me));
        assert_eq!(late_owners.reads.load(Ordering::Relaxed), 1);
    }
    /// A `sleep` in a network namespace of its own, holding a socket that
    /// listens on every address at `port` there (made between the fork
    /// and the exec).
    fn listening_elsewhere(port: u16) -> std::io::Result<std::process::Child> {
        use std::os::unix::process::CommandExt;
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("30");
        // SAFETY: only async-signal-safe system calls between fork and
        // exec, on memory of the child's own stack.
        unsafe {
            cmd.pre_exec(move || {
                if libc::unshare(libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
                let mut at: libc::sockaddr_in = std::mem::zeroed();
                at.sin_family = libc::AF_INET as libc::sa_family_t;
                at.sin_port = port.to_be();
                let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
                let bound = libc::bind(fd, std::ptr::addr_of!(at).cast(), len);
                if fd < 0 || bound != 0 || libc::listen(fd, 1) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        };
        cmd.spawn()
    }

    /// A peer in another network namespace (this namespace's listeners do
    /// not show its socket) is proven through its own process's tables;
    /// a process of this namespace named for it is refused.
    #[test]
    fn a_peer_in_another_network_namespace_is_proven_through_its_tables() {
        // SAFETY: a plain system call.
        if unsafe { libc::geteuid() } != 0 {
            assert!(std::env::var_os("CI").is_none(), "CI runs as root");
            eprintln!("skipped: a network namespace needs root");
            return;
        }
        // Another socket of the same port here, which the peer does not
        // hold: the lookup in this namespace finds it and must go on.
        let here = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = here.local_addr().unwrap();
        let mut peer = listening_elsewhere(addr.port()).expect("a peer elsewhere");
        let owners = Owners::new(2);
        owners.set_listeners(Box::new(move |_| Some(addr)));
        assert!(owners.check(9, "test", 0, peer.id()), "the peer is proven");
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        assert!(!owners.check(9, "test", 1, other.id()), "another is not");
        for c in [&mut peer, &mut other] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
