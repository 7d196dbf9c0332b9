//! The master's record of one live reduction.

use super::ended::{EarlyReplicas, Ended};
use actix::prelude::*;
use std::collections::HashMap;
use std::time::Instant;
use taskfold_core::roster::Roster;
use taskfold_core::schedule::Schedule;
use taskfold_core::wire::TaskFailed;
use taskfold_core::wire::{Join, Joining};
use taskfold_core::{Group, Rank};

/// The master's reductions: the live ones, what it remembers of those
/// that ended before every member joined and the copy notices of those
/// not open yet ([`super::ended`]), and the bound on live ones.
pub(crate) struct Reductions {
    pub(crate) live: HashMap<u64, Reduction>,
    pub(super) ended: Ended,
    pub(super) early: EarlyReplicas,
    /// Joins of replacements that came while their dead original's fate
    /// was not known (its buddy's verdict on a standing copy was awaited):
    /// taken in once it is, as any replacement's join then.
    pub(super) waiting: Vec<(Rank, Joining)>,
    /// Most reductions live at once (`Config::max_reductions`): a join
    /// that would open one more fails its reduction with
    /// `TooManyReductions`.
    pub(crate) max: usize,
}

impl Reductions {
    /// No reduction yet; at most `max` live at once.
    pub(crate) fn new(max: usize) -> Self {
        Reductions {
            live: HashMap::new(),
            ended: Ended::default(),
            early: EarlyReplicas::default(),
            waiting: Vec::new(),
            max,
        }
    }
}

/// A task that could not be carried out (handled in `handlers`; a
/// reduction keeps those that wait for a verdict, see [`Reduction`]).
#[derive(Message, Clone)]
#[rtype(result = "()")]
pub(crate) struct TaskFailedIn {
    pub(crate) from: Rank,
    pub(crate) failed: TaskFailed,
    pub(crate) wire: usize,
}

/// One live reduction at the master: the scheduler pairs its data, the
/// roster follows each member's lifecycle (see `taskfold_core::roster`).
pub(crate) struct Reduction {
    pub(crate) id: String,
    pub(crate) group: Group,
    pub(crate) root: Rank,
    pub(crate) join: Join,
    pub(crate) schedule: Schedule,
    /// The members; the fetch failures it holds were reported while the
    /// reduction waited for a verdict about a dead member's standing copy
    /// (a fetch from that member, most likely): they are handled once the
    /// scheduler knows whether its original can be had.
    pub(crate) roster: Roster<TaskFailedIn>,
    pub(crate) started: Instant,
    /// Each task in flight: the rank its data is read from, and that
    /// rank's incarnation when the task went out. A fetch failure blames
    /// that process only: one replaced since is not the one that failed.
    pub(crate) sources: HashMap<u64, (u32, u32)>,
}

impl Reduction {
    /// Validates the first join of a reduction (untrusted input).
    pub(crate) fn new(join: &Join, size: u32) -> Result<Self, String> {
        let group = Group::new(join.group.iter().copied(), size).map_err(|e| e.to_string())?;
        if group
            .members()
            .iter()
            .map(|r| r.0)
            .ne(join.group.iter().copied())
        {
            return Err("group must be sorted and free of duplicates".into());
        }
        let root = Rank(join.root);
        let root_index = group
            .index_of(root)
            .ok_or_else(|| format!("root {} is not in the group", join.root))?;
        Ok(Reduction {
            id: join.id.clone(),
            schedule: Schedule::new(group.len(), root_index),
            roster: Roster::new(group.len()),
            group,
            root,
            join: join.clone(),
            started: Instant::now(),
            sources: HashMap::new(),
        })
    }
}

impl Reduction {
    /// The error for an unrecoverable failure.
    pub(crate) fn lost(
        &self,
        u: &taskfold_core::schedule::Unrecoverable,
    ) -> taskfold_core::ReduceError {
        if u.root {
            taskfold_core::ReduceError::RootLost {
                id: self.id.clone(),
                root: self.root.0,
            }
        } else {
            taskfold_core::ReduceError::RanksLost {
                id: self.id.clone(),
                ranks: u.lost.iter().map(|&i| self.group.rank_at(i).0).collect(),
            }
        }
    }

    /// Why a later join disagrees with the first, if it does.
    pub(crate) fn mismatch(&self, join: &Join, from: Rank) -> Option<String> {
        if join.root != self.join.root {
            return Some(format!(
                "{from} names root {} but rank(s) before it named root {}",
                join.root, self.join.root
            ));
        }
        if join.type_tag != self.join.type_tag {
            return Some(format!("{from} contributes a different type"));
        }
        if join.shape != self.join.shape {
            return Some(format!(
                "{from} contributes shape {:?} but others contribute shape {:?} (mismatched lengths)",
                join.shape, self.join.shape
            ));
        }
        None
    }
}
