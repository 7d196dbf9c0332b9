//! A rank that finalized: it joins nothing more, and reaches no barrier.
//!
//! The rule: every live reduction that the rank is a member of and has
//! not joined ends at once, on every member, with `RanksLost` naming it
//! (`RootLost` if it is the root) — its original will never come and no
//! copy of it exists. A reduction opened later that names it is refused
//! at once the same way, and so is every barrier it did not reach. A
//! reduction it joined goes on: a finalized rank keeps serving its data
//! until every rank finalized.

use super::state::Reduction;
use super::Master;
use taskfold_core::schedule::Unrecoverable;
use taskfold_core::{Rank, ReduceError};

impl Master {
    /// `rank` finalized: ends what waits for it (see the module).
    pub(super) fn rank_left(&mut self, rank: Rank) {
        let ended: Vec<(u64, ReduceError)> = self
            .reductions
            .live
            .iter()
            .filter_map(|(&key, r)| {
                let i = r.group.index_of(rank)?;
                let lost = r.schedule.left(i).err()?;
                Some((key, r.lost(&lost)))
            })
            .collect();
        for (key, error) in ended {
            tracing::warn!(%rank, key, "a rank finalized without joining a reduction");
            self.fail(key, error);
        }
        self.fail_barriers();
    }

    /// Members of `r`, a reduction just opened, that finalized without
    /// joining it: the error that refuses it, if any.
    pub(super) fn admit_the_departed(&self, r: &Reduction) -> Result<(), ReduceError> {
        let mut lost = Unrecoverable {
            lost: Vec::new(),
            root: false,
        };
        for &rank in &self.finalized {
            let Some(i) = r.group.index_of(Rank(rank)) else {
                continue;
            };
            if let Err(u) = r.schedule.left(i) {
                lost.lost.extend(u.lost);
                lost.root |= u.root;
            }
        }
        if lost.lost.is_empty() {
            return Ok(());
        }
        lost.lost.sort_unstable();
        Err(r.lost(&lost))
    }
}
