//! The listener's gate: how many connections may be in their handshake at
//! once, in all and from one source address.
//!
//! Before a caller proved the job key it is nobody: whoever reaches the
//! port can open connections and say nothing. Each one holds a file
//! descriptor and a task, so their number is bounded — [`MAX_PENDING`] on
//! a listener, [`MAX_PENDING_PER_SOURCE`] from one address — and each has
//! [`PRE_PROOF_TIMEOUT`] to prove the key. When a bound is reached the
//! **oldest** pending connection (of that address, or of all) is closed to
//! make room, rather than the new one refused: a rank of the job proves
//! the key in a round trip, so a new connection of the job gets in however
//! many idle ones a stranger keeps open, and a stranger keeps a
//! connection only until it is the oldest. The rank's callers retry a
//! connection closed before its challenge (see the `conn` module). Each
//! eviction is counted in [`super::metrics::BOUNDS_HIT`] (`handshakes`).
//!
//! The bookkeeping is pure ([`Gate`]): the accept loop enters each
//! connection, attaches its task's abort handle, and aborts what
//! [`Gate::enter`] evicts; a connection leaves when its handshake ends,
//! either way (its ticket is dropped).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Connections in their handshake at once on one listener, at most.
pub const MAX_PENDING: usize = 256;
/// Connections in their handshake at once from one source address.
pub const MAX_PENDING_PER_SOURCE: usize = 64;
/// How long an accepted connection has to send its hello and prove the
/// job key (a rank of the job needs a round trip).
pub const PRE_PROOF_TIMEOUT: Duration = Duration::from_secs(3);

/// The pending connections, oldest first.
#[derive(Debug)]
pub struct Gate<H> {
    max: usize,
    per_source: usize,
    next: u64,
    pending: BTreeMap<u64, (IpAddr, Option<H>)>,
    from: HashMap<IpAddr, usize>,
}

impl<H> Gate<H> {
    /// A gate of `max` pending connections, `per_source` from one address.
    pub fn new(max: usize, per_source: usize) -> Gate<H> {
        Gate {
            max: max.max(1),
            per_source: per_source.max(1),
            next: 0,
            pending: BTreeMap::new(),
            from: HashMap::new(),
        }
    }

    /// A connection from `ip` enters: its id, and the handles of the
    /// connections evicted to make room for it (oldest first).
    pub fn enter(&mut self, ip: IpAddr) -> (u64, Vec<H>) {
        let mut evicted = Vec::new();
        if self.from.get(&ip).copied().unwrap_or(0) >= self.per_source {
            let oldest = self
                .pending
                .iter()
                .find(|(_, (a, _))| *a == ip)
                .map(|(&id, _)| id);
            evicted.extend(oldest.and_then(|id| self.leave(id)));
        }
        if self.pending.len() >= self.max {
            let oldest = self.pending.keys().next().copied();
            evicted.extend(oldest.and_then(|id| self.leave(id)));
        }
        let id = self.next;
        self.next += 1;
        self.pending.insert(id, (ip, None));
        *self.from.entry(ip).or_default() += 1;
        (id, evicted)
    }

    /// Attaches `handle` to connection `id`, if it is still pending (else
    /// it is handed back).
    pub fn attach(&mut self, id: u64, handle: H) -> Option<H> {
        match self.pending.get_mut(&id) {
            Some((_, h)) => {
                *h = Some(handle);
                None
            }
            None => Some(handle),
        }
    }

    /// Connection `id` leaves (its handshake ended, or it was evicted): its
    /// handle, if it had one. Nothing if it left already.
    pub fn leave(&mut self, id: u64) -> Option<H> {
        let (ip, h) = self.pending.remove(&id)?;
        if let Some(n) = self.from.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.from.remove(&ip);
            }
        }
        h
    }

    /// Connections pending now.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// True if none is pending.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// A listener's gate, shared by its accept loop and its handshakes.
pub(crate) type Shared = Arc<Mutex<Gate<tokio::task::AbortHandle>>>;

/// A new shared gate with the default bounds.
pub(crate) fn shared() -> Shared {
    Arc::new(Mutex::new(Gate::new(MAX_PENDING, MAX_PENDING_PER_SOURCE)))
}

/// A pending connection's place at the gate; leaving it (the handshake
/// ended, either way) frees the place.
pub(crate) struct Ticket {
    gate: Shared,
    id: u64,
}

impl Ticket {
    /// Connection `id` of `gate`.
    pub fn new(gate: Shared, id: u64) -> Ticket {
        Ticket { gate, id }
    }

    /// The handshake ended: the place is free now.
    pub fn done(self) {}
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut g = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        drop(g.leave(self.id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(n: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, n))
    }

    #[test]
    fn the_oldest_of_a_source_makes_room_for_its_newest() {
        let mut g: Gate<u64> = Gate::new(10, 2);
        let (a, _) = g.enter(ip(2));
        assert_eq!(g.attach(a, a), None);
        let (b, _) = g.enter(ip(2));
        g.attach(b, b);
        let (c, _) = g.enter(ip(3));
        g.attach(c, c);
        // A third from 127.0.0.2 evicts the first, not 127.0.0.3's.
        let (d, evicted) = g.enter(ip(2));
        assert_eq!(evicted, vec![a]);
        assert_eq!(g.len(), 3);
        // The evicted one's own leave finds nothing.
        assert_eq!(g.leave(a), None);
        assert_eq!(g.leave(d), None, "no handle attached");
        assert_eq!(g.leave(b), Some(b));
        assert_eq!(g.leave(c), Some(c));
        assert!(g.is_empty());
    }

    #[test]
    fn a_full_listener_evicts_its_oldest() {
        let mut g: Gate<u64> = Gate::new(3, 3);
        let ids: Vec<u64> = (0..3)
            .map(|n| {
                let (id, e) = g.enter(ip(10 + n));
                assert!(e.is_empty());
                g.attach(id, id);
                id
            })
            .collect();
        let (_, evicted) = g.enter(ip(50));
        assert_eq!(evicted, vec![ids[0]]);
        assert_eq!(g.len(), 3);
        // Evicted before its handle came: the handle is handed back.
        let (late, _) = g.enter(ip(51));
        let (_, evicted) = g.enter(ip(52));
        assert_eq!(evicted, vec![ids[2]]);
        let _ = late;
    }

    #[test]
    fn bounds_hold_under_any_order() {
        let mut g: Gate<u64> = Gate::new(8, 3);
        let mut live = Vec::new();
        for n in 0..1000u64 {
            let (id, _) = g.enter(ip((n % 5) as u8));
            g.attach(id, id);
            live.push(id);
            if n % 3 == 0 {
                let gone = live.remove((n as usize * 7) % live.len());
                g.leave(gone);
            }
            assert!(g.len() <= 8);
            for s in 0..5u8 {
                assert!(g.from.get(&ip(s)).copied().unwrap_or(0) <= 3);
            }
        }
    }
}
