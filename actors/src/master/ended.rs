//! What the master remembers of reductions that are no longer live:
//! those that ended in an error while some members had not joined (they
//! get the error when they join), and the replica notices of reductions
//! not open yet (handed to the reduction when its first join opens it).
//! Both are bounded, as peers send what fills them.

use std::collections::{HashMap, HashSet, VecDeque};
use taskfold_core::ReduceError;

/// Reductions that ended in an error while some members had not joined
/// yet. Bounded so it cannot grow forever: the oldest is forgotten first.
#[derive(Default)]
pub(super) struct Ended {
    by_key: HashMap<u64, (ReduceError, HashSet<u32>)>,
    order: VecDeque<u64>,
}

impl Ended {
    /// Most remembered at once.
    pub(super) const LIMIT: usize = 16_384;

    /// Remembers that `key` ended with `error`; `pending` had not joined.
    pub(super) fn remember(&mut self, key: u64, error: ReduceError, pending: HashSet<u32>) {
        if self.by_key.len() >= Self::LIMIT {
            if let Some(old) = self.order.pop_front() {
                self.by_key.remove(&old);
            }
        }
        self.by_key.insert(key, (error, pending));
        self.order.push_back(key);
    }

    /// `from` joined `key`, which had ended: its error, if `key` is
    /// remembered (forgotten once every pending member joined).
    pub(super) fn late_join(&mut self, key: u64, from: u32) -> Option<ReduceError> {
        let (error, pending) = self.by_key.get_mut(&key)?;
        let error = error.clone();
        pending.remove(&from);
        if pending.is_empty() {
            self.by_key.remove(&key);
        }
        Some(error)
    }

    /// Whether `key` ended and is remembered.
    pub(super) fn contains(&self, key: u64) -> bool {
        self.by_key.contains_key(&key)
    }

    /// Forgets everything (a global restart).
    pub(super) fn clear(&mut self) {
        self.by_key.clear();
        self.order.clear();
    }
}

/// A replica notice: its owner, its holder, whether the holder kept it.
pub(super) type Notice = (u32, u32, bool);

/// Replica notices of reductions the master has not seen open yet.
#[derive(Default)]
pub(super) struct EarlyReplicas {
    by_key: HashMap<u64, Vec<Notice>>,
}

impl EarlyReplicas {
    /// Most reductions whose notices are kept.
    pub(super) const KEYS: usize = 4096;

    /// Keeps a notice of reduction `key` in a job of `size` ranks. Bounded:
    /// at most [`Self::KEYS`] keys (emptied when full: notices of
    /// reductions that completed before they arrived would pile up) and
    /// one notice per owner and holder, twice `size` per key.
    pub(super) fn note(&mut self, key: u64, notice: Notice, size: u32) {
        if self.by_key.len() >= Self::KEYS && !self.by_key.contains_key(&key) {
            self.by_key.clear();
        }
        let room = (size as usize).saturating_mul(2);
        let notes = self.by_key.entry(key).or_default();
        let (owner, holder, ok) = notice;
        if let Some(n) = notes.iter_mut().find(|n| (n.0, n.1) == (owner, holder)) {
            n.2 = ok;
        } else if notes.len() < room {
            // Each owner has one buddy at a time: about one notice per
            // member, twice that leaves room for a buddy replaced.
            notes.push(notice);
        } else {
            tracing::warn!(
                key,
                owner,
                holder,
                "too many replica notices for one reduction; dropped"
            );
        }
    }

    /// The notices of `key`, now that it opened.
    pub(super) fn take(&mut self, key: u64) -> Vec<Notice> {
        self.by_key.remove(&key).unwrap_or_default()
    }

    /// Forgets everything (a global restart).
    pub(super) fn clear(&mut self) {
        self.by_key.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ended_reductions_are_bounded_and_forgotten_once_all_joined() {
        let mut e = Ended::default();
        let err = ReduceError::MasterLost("x".into());
        e.remember(1, err.clone(), [2, 3].into());
        assert_eq!(e.late_join(1, 2), Some(err.clone()));
        assert!(e.contains(1));
        assert_eq!(e.late_join(1, 3), Some(err.clone()));
        assert!(!e.contains(1));
        for k in 0..Ended::LIMIT as u64 + 5 {
            e.remember(k + 10, err.clone(), [1].into());
        }
        assert!(!e.contains(10), "the oldest is forgotten first");
        assert!(e.contains(Ended::LIMIT as u64 + 14));
    }

    #[test]
    fn early_notices_are_bounded_per_key_and_in_keys() {
        let mut n = EarlyReplicas::default();
        n.note(7, (1, 2, false), 2);
        n.note(7, (1, 2, true), 2);
        for h in 3..10 {
            n.note(7, (1, h, true), 2);
        }
        let got = n.take(7);
        assert_eq!(got.len(), 4, "twice the job's size");
        assert_eq!(got[0], (1, 2, true), "a notice again updates it");
        for k in 0..EarlyReplicas::KEYS as u64 {
            n.note(k, (0, 1, true), 2);
        }
        n.note(u64::MAX, (0, 1, true), 2);
        assert!(n.take(0).is_empty(), "emptied when full");
        assert_eq!(n.take(u64::MAX).len(), 1);
    }
}
