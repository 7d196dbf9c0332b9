//! Copies of a reused key: which end of a reduction drops which copy.
//!
//! A reduction's key repeats when its id is used again, and a buddy drops
//! its copies of a key when the reduction ends there. An owner that saw
//! the end first may offer its copy for the next use of the key before
//! the buddy heard of that end: the buddy must keep that copy. The master
//! numbers its completions in increasing order ([`crate::wire::Msg`]'s
//! `Complete::number`); an owner tags each offer with the last number it
//! saw for the key ([`Completions::last`]); a buddy's end numbered `upto`
//! drops the copies tagged below it ([`drops`]), and an end with no number
//! (a failure, a rollback) drops them all.
//!
//! Why this is exact: a copy for use `i` of a key is tagged with the
//! number of use `i - 1`'s completion at most (0 if its owner saw none),
//! which is below use `i`'s own completion number and at least every
//! earlier use's. So the end of use `i` drops it, and no earlier use's end
//! does. A tag lower than that (the owner forgot the key, or heard of the
//! end otherwise) only makes the copy go sooner, as every copy did before
//! the tags: never later than its own use's end.

use std::collections::{HashMap, VecDeque};

/// Whether a buddy's end of a key numbered `upto` (`u64::MAX` if it had no
/// number) drops a copy tagged `after`.
pub fn drops(after: u64, upto: u64) -> bool {
    after < upto
}

/// Keys remembered by [`Completions`]: an owner that forgot a key tags
/// its next copy 0, which the buddy drops at the next end it hears of.
pub const COMPLETIONS_KEPT: usize = 4096;

/// The last completion number an owner saw for each key, for the keys it
/// completed lately (at most `limit`).
#[derive(Debug, Clone)]
pub struct Completions {
    last: HashMap<u64, u64>,
    order: VecDeque<u64>,
    limit: usize,
}

impl Default for Completions {
    fn default() -> Self {
        Completions::new(COMPLETIONS_KEPT)
    }
}

impl Completions {
    /// Remembers at most `limit` keys (at least one).
    pub fn new(limit: usize) -> Self {
        Completions {
            last: HashMap::new(),
            order: VecDeque::new(),
            limit: limit.max(1),
        }
    }

    /// Key `key` completed with number `number`. Numbers of one key only
    /// grow: a lower one (a notice that lagged) is ignored.
    pub fn note(&mut self, key: u64, number: u64) {
        match self.last.get_mut(&key) {
            Some(n) => *n = (*n).max(number),
            None => {
                if self.order.len() == self.limit {
                    if let Some(old) = self.order.pop_front() {
                        self.last.remove(&old);
                    }
                }
                self.order.push_back(key);
                self.last.insert(key, number);
            }
        }
    }

    /// The tag of a copy offered now for `key`: the last completion number
    /// seen for it, 0 if none is remembered.
    pub fn last(&self, key: u64) -> u64 {
        self.last.get(&key).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_copy_for_the_next_use_outlives_the_previous_end() {
        let mut owner = Completions::default();
        // Use 1 of key 7 completes as number 5; the owner hears first and
        // offers for use 2.
        owner.note(7, 5);
        let tag = owner.last(7);
        assert!(!drops(tag, 5), "the buddy's late end of use 1 keeps it");
        assert!(drops(tag, 9), "use 2's end drops it");
        assert!(drops(tag, u64::MAX), "a failure drops it");
    }

    #[test]
    fn a_key_never_completed_is_tagged_zero_and_dropped_by_any_end() {
        let owner = Completions::default();
        assert_eq!(owner.last(3), 0);
        assert!(drops(owner.last(3), 1));
    }

    #[test]
    fn the_oldest_key_is_forgotten_and_numbers_only_grow() {
        let mut c = Completions::new(2);
        c.note(1, 10);
        c.note(1, 4);
        assert_eq!(c.last(1), 10);
        c.note(2, 11);
        c.note(3, 12);
        assert_eq!((c.last(1), c.last(2), c.last(3)), (0, 11, 12));
    }

    proptest! {
        /// Uses of one key, one after the other, each completed with the
        /// next number of a master that also completes other keys; the
        /// owner hears of each end at any time before its next offer, the
        /// buddy at any time: each copy is dropped by its own use's end
        /// and by no earlier one's, whatever the owner forgot.
        #[test]
        fn each_copy_goes_at_its_own_end_only(
            gaps in proptest::collection::vec(1u64..5, 1..20),
            forget in proptest::collection::vec(any::<bool>(), 20),
        ) {
            let mut owner = Completions::new(1);
            let mut number = 0;
            let mut ends = Vec::new();
            let mut tags = Vec::new();
            for (i, gap) in gaps.iter().enumerate() {
                tags.push(owner.last(7));
                number += gap;
                ends.push(number);
                owner.note(7, number);
                if forget[i] {
                    owner.note(8 + i as u64, number);
                }
            }
            for (i, &tag) in tags.iter().enumerate() {
                prop_assert!(drops(tag, ends[i]), "use {i}'s end drops its copy");
                for (j, &end) in ends.iter().enumerate().take(i) {
                    prop_assert!(
                        !drops(tag, end) || tag == 0,
                        "use {j}'s end dropped use {i}'s copy"
                    );
                }
            }
        }
    }
}
