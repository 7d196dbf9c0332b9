//! Global restart (Reinit++): when a rank is replaced, every rank unwinds
//! to the application's re-init entry point and all resume from the
//! newest checkpoint every rank holds. The master's side is this pure
//! state machine, one rollback at a time:
//!
//! ```text
//! Running(e) --a rank replaced--> Unwinding(e+1, waiting for every rank)
//!     ^                              |  another replaced: Unwinding(e+2)
//!     +---- every rank at its entry point: Go(e, newest common version)
//! ```
//!
//! A rank answers for the epoch it unwound for; an answer for an older
//! epoch is stale (the rank will answer again for the new one). A
//! replacement knows no epoch: it answers once it is in.
//!
//! Each answer lists the checkpoint versions the rank holds (it keeps
//! only its newest few, so a rank ahead of the others may no longer hold
//! the version a slower one has newest): the go names the newest version
//! in every list, or none, and every rank resumes from that one.

use crate::rankset::RankSet;
use std::collections::BTreeSet;

/// Versions one answer may list, at most (a rank keeps a few; more from a
/// peer is refused rather than stored).
pub const MAX_HELD: usize = 64;

/// Where the job's rollback stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rollback {
    /// No rollback: the job runs in epoch `.0`.
    Running(u32),
    /// Rolling back to epoch `epoch`: the ranks of `waiting` are not at
    /// their entry point yet.
    Unwinding {
        /// The epoch.
        epoch: u32,
        /// Ranks not at their entry point yet.
        waiting: RankSet,
        /// The checkpoint versions every rank that answered holds.
        common: BTreeSet<u64>,
        /// No rank answered yet.
        first: bool,
    },
}

/// Every rank is at its entry point: resume from `version`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Go {
    /// The epoch the job runs in now.
    pub epoch: u32,
    /// The newest checkpoint version every rank holds (`None`: start over).
    pub version: Option<u64>,
}

impl Default for Rollback {
    fn default() -> Self {
        Rollback::Running(0)
    }
}

impl Rollback {
    /// The current epoch.
    pub fn epoch(&self) -> u32 {
        match self {
            Rollback::Running(e) | Rollback::Unwinding { epoch: e, .. } => *e,
        }
    }

    /// True while `rank` has not reached its entry point in a rollback:
    /// its reduction messages are stale.
    pub fn waits_for(&self, rank: u32) -> bool {
        matches!(self, Rollback::Unwinding { waiting, .. } if waiting.contains(rank as usize))
    }

    /// A rank was replaced: the job rolls back to a new epoch, which every
    /// rank of `ranks` (the live ones and the awaited replacement) must
    /// reach. Returns the new epoch.
    pub fn begin(&mut self, ranks: impl IntoIterator<Item = u32>) -> u32 {
        let epoch = self.epoch() + 1;
        let mut waiting = RankSet::new();
        for r in ranks {
            waiting.insert(r as usize);
        }
        *self = Rollback::Unwinding {
            epoch,
            waiting,
            common: BTreeSet::new(),
            first: true,
        };
        epoch
    }

    /// `rank` is at its entry point for `epoch` (`None`: a replacement),
    /// holding the checkpoint versions `held` (at most [`MAX_HELD`] are
    /// counted). Returns the go once every rank is; a stale or repeated
    /// answer changes nothing.
    pub fn ready(&mut self, rank: u32, epoch: Option<u32>, held: &[u64]) -> Option<Go> {
        let Rollback::Unwinding {
            epoch: e,
            waiting,
            common,
            first,
        } = self
        else {
            return None;
        };
        if epoch.is_some_and(|a| a != *e) || !waiting.remove(rank as usize) {
            return None;
        }
        let held: BTreeSet<u64> = held.iter().take(MAX_HELD).copied().collect();
        *common = match *first {
            true => held,
            false => common.intersection(&held).copied().collect(),
        };
        *first = false;
        self.go_if_done()
    }

    /// `rank` is gone for good (no replacement will come): not waited for.
    pub fn left(&mut self, rank: u32) -> Option<Go> {
        let Rollback::Unwinding { waiting, .. } = self else {
            return None;
        };
        match waiting.remove(rank as usize) {
            true => self.go_if_done(),
            false => None,
        }
    }

    fn go_if_done(&mut self) -> Option<Go> {
        let Rollback::Unwinding {
            epoch,
            waiting,
            common,
            ..
        } = self
        else {
            return None;
        };
        if !waiting.is_empty() {
            return None;
        }
        let go = Go {
            epoch: *epoch,
            version: common.last().copied(),
        };
        *self = Rollback::Running(go.epoch);
        Some(go)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_rank_at_its_entry_point_resumes_from_the_newest_common_version() {
        let mut r = Rollback::default();
        assert_eq!(r.begin([0, 1, 2]), 1);
        assert!(r.waits_for(2));
        assert_eq!(r.ready(0, Some(1), &[39, 40]), None);
        assert_eq!(r.ready(1, Some(1), &[29, 30, 40]), None);
        assert_eq!(r.ready(1, Some(1), &[10]), None, "once");
        let go = r.ready(2, None, &[30, 40, 50]);
        assert_eq!(
            go,
            Some(Go {
                epoch: 1,
                version: Some(40)
            })
        );
        assert_eq!(r, Rollback::Running(1));
        assert!(!r.waits_for(2));
    }

    #[test]
    fn a_rank_without_checkpoints_makes_everyone_start_over() {
        let mut r = Rollback::default();
        r.begin([0, 1]);
        r.ready(0, Some(1), &[4]);
        assert_eq!(r.ready(1, Some(1), &[]).unwrap().version, None);
    }

    #[test]
    fn a_rank_ahead_that_dropped_the_slowest_ranks_newest_agrees_on_none_older() {
        // Rank 1 keeps its two newest, 7 and 8; rank 0 is at 5 and 6.
        let mut r = Rollback::default();
        r.begin([0, 1]);
        r.ready(0, Some(1), &[5, 6]);
        assert_eq!(r.ready(1, Some(1), &[7, 8]).unwrap().version, None);
        r.begin([0, 1]);
        r.ready(0, Some(2), &[5, 6]);
        assert_eq!(r.ready(1, Some(2), &[6, 7]).unwrap().version, Some(6));
    }

    #[test]
    fn a_stale_answer_is_ignored_and_a_second_failure_starts_over() {
        let mut r = Rollback::default();
        r.begin([0, 1, 2]);
        r.ready(0, Some(1), &[4]);
        assert_eq!(r.begin([0, 1, 2]), 2);
        assert_eq!(r.ready(1, Some(1), &[4]), None, "stale");
        assert!(r.waits_for(1));
        r.ready(0, Some(2), &[4]);
        r.ready(1, Some(2), &[4]);
        assert_eq!(r.left(2).map(|g| g.epoch), Some(2));
    }

    proptest! {
        /// The go comes once every rank answered (or left), and names the
        /// newest version every rank holds.
        #[test]
        fn the_go_names_the_newest_version_every_rank_holds(
            held in proptest::collection::vec(proptest::collection::btree_set(0u64..12, 0..4), 1..10),
            order in any::<u64>(),
        ) {
            let n = held.len() as u32;
            let mut r = Rollback::default();
            let epoch = r.begin(0..n);
            let mut ranks: Vec<u32> = (0..n).collect();
            let k = ranks.len();
            ranks.rotate_left((order % k as u64) as usize);
            let mut go = None;
            for (i, &rank) in ranks.iter().enumerate() {
                prop_assert!(go.is_none());
                let list: Vec<u64> = held[rank as usize].iter().copied().collect();
                go = r.ready(rank, Some(epoch), &list);
                prop_assert_eq!(go.is_some(), i + 1 == k);
            }
            let want = (0..12u64).rev().find(|v| held.iter().all(|h| h.contains(v)));
            prop_assert_eq!(go, Some(Go { epoch, version: want }));
        }
    }
}
