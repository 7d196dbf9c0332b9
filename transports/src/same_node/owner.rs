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
//! What a refusal does: nothing is opened or read (the view is `None`, so
//! the caller fetches the bytes with a get instead), the refusal is logged
//! and counted ([`LOCATORS_REFUSED`]). If the kernel's tables cannot be
//! read, nothing is opened either.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

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
}

impl Owners {
    pub(super) fn new(size: u32) -> Owners {
        Owners {
            listeners: OnceLock::new(),
            proven: (0..size).map(|_| AtomicU32::new(0)).collect(),
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
                Some(addr) => match crate::tcp::lender::listens(pid, addr) {
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
}
