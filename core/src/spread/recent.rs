//! The newest keys of spreads that finished, bounded: what a coordinator
//! answers a replacement that redoes one (`Finished`: nobody holds the
//! value any more) instead of leaving it waiting for a value that will not
//! come.
//!
//! Why a bound: members name keys, so the set must not grow without end;
//! why a large one: a replacement under local restart redoes every spread
//! since its newest checkpoint, and one older than the bound waits for
//! ever (see the book's chapter Surviving failures of the application,
//! Allreduce and broadcast). At 8 bytes a key, the bound the master keeps
//! for ended reductions (65,536) costs about 1.5 MiB here with the set's
//! overhead; lookups stay O(1), as every `Have` and `Want` looks.

use std::collections::{HashSet, VecDeque};

/// Keys of finished spreads, the newest `limit` of them.
#[derive(Debug)]
pub struct Recent {
    set: HashSet<u64>,
    order: VecDeque<u64>,
    limit: usize,
}

impl Recent {
    /// An empty record of at most `limit` keys (at least one).
    pub fn new(limit: usize) -> Recent {
        Recent {
            set: HashSet::new(),
            order: VecDeque::new(),
            limit: limit.max(1),
        }
    }

    /// Records `key`; the oldest is forgotten past the limit. A key
    /// recorded again keeps its place.
    pub fn insert(&mut self, key: u64) {
        if !self.set.insert(key) {
            return;
        }
        self.order.push_back(key);
        if self.order.len() > self.limit {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }

    /// Whether `key` is recorded.
    pub fn contains(&self, key: u64) -> bool {
        self.set.contains(&key)
    }

    /// Keys recorded.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Forgets every key.
    pub fn clear(&mut self) {
        self.set.clear();
        self.order.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_oldest_is_forgotten_first() {
        let mut r = Recent::new(3);
        for k in [10, 11, 12, 11, 13] {
            r.insert(k);
        }
        assert!(!r.contains(10));
        assert!([11, 12, 13].iter().all(|&k| r.contains(k)));
        assert_eq!(r.len(), 3);
        r.clear();
        assert!(r.is_empty() && !r.contains(13));
    }

    proptest! {
        /// As a plain list that forgets its front past the limit (a key
        /// present already is not added again), which every lookup scans.
        #[test]
        fn it_behaves_as_a_bounded_list(
            keys in proptest::collection::vec(0u64..64, 0..300),
            limit in 1usize..40,
        ) {
            let mut r = Recent::new(limit);
            let mut model: Vec<u64> = Vec::new();
            for &k in &keys {
                r.insert(k);
                if !model.contains(&k) {
                    model.push(k);
                    if model.len() > limit {
                        model.remove(0);
                    }
                }
                prop_assert!(r.contains(k));
            }
            prop_assert_eq!(r.len(), model.len());
            for k in 0..64u64 {
                prop_assert_eq!(r.contains(k), model.contains(&k));
            }
        }
    }
}
