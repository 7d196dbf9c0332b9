//! Memory a peer may be reading, held until it says it is done or its
//! link breaks: TCP's same-node loans (the exposed bytes a peer copies
//! or views in place), libfabric's registrations that a peer reads by RMA.
//! Withdrawing a buffer while a peer reads it never frees the memory
//! under the reader.

use std::collections::HashMap;

/// What is lent, by (peer, lease id). See the [module documentation](self).
/// A plain table: a transport that shares it between threads puts it
/// under its own lock.
#[derive(Debug)]
pub struct Leases<T> {
    map: HashMap<(u32, u64), T>,
    /// Leases out, by peer (peers with none are absent).
    per_peer: HashMap<u32, usize>,
}

impl<T> Default for Leases<T> {
    fn default() -> Self {
        Leases {
            map: HashMap::new(),
            per_peer: HashMap::new(),
        }
    }
}

impl<T> Leases<T> {
    /// Holds `what` while `peer` reads it under lease `id`.
    pub fn lend(&mut self, peer: u32, id: u64, what: T) {
        if self.map.insert((peer, id), what).is_none() {
            *self.per_peer.entry(peer).or_default() += 1;
        }
    }

    /// `peer` is done with lease `id` (a lease of another peer is left
    /// alone); returns what was held.
    pub fn returned(&mut self, peer: u32, id: u64) -> Option<T> {
        let what = self.map.remove(&(peer, id))?;
        if let Some(n) = self.per_peer.get_mut(&peer) {
            *n -= 1;
            if *n == 0 {
                self.per_peer.remove(&peer);
            }
        }
        Some(what)
    }

    /// Leases `peer` holds (a transport bounds them: see
    /// [`Leases::lend`]'s callers).
    pub fn of(&self, peer: u32) -> usize {
        self.per_peer.get(&peer).copied().unwrap_or(0)
    }

    /// The leases of `peer`, whose link broke: taken out, for the caller to
    /// drop or keep.
    pub fn take_peer(&mut self, peer: u32) -> Vec<T> {
        let ids: Vec<(u32, u64)> = self
            .map
            .keys()
            .filter(|(p, _)| *p == peer)
            .copied()
            .collect();
        self.per_peer.remove(&peer);
        ids.into_iter()
            .filter_map(|k| self.map.remove(&k))
            .collect()
    }

    /// Leases out.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True if nothing is lent.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Drops every lease.
    pub fn clear(&mut self) {
        self.map.clear();
        self.per_peer.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_returned_by_their_reader_only_and_dropped_with_its_link() {
        let mut l = Leases::default();
        l.lend(1, 10, "a");
        l.lend(2, 10, "b");
        l.lend(1, 11, "c");
        assert_eq!((l.of(1), l.of(2), l.of(3)), (2, 1, 0));
        assert_eq!(l.returned(2, 11), None, "not its lease");
        assert_eq!(l.returned(2, 10), Some("b"));
        assert_eq!(l.of(2), 0);
        let mut gone = l.take_peer(1);
        gone.sort();
        assert_eq!(gone, vec!["a", "c"]);
        assert!(l.is_empty());
        assert_eq!(l.of(1), 0);
    }
}
