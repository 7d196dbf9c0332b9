//! The master's record of one live reduction.

use std::collections::{HashMap, HashSet};
use std::time::Instant;
use taskfold_core::schedule::Schedule;
use taskfold_core::wire::{Join, Standing};
use taskfold_core::{Group, Rank};

/// One live reduction at the master.
pub(crate) struct Reduction {
    pub(crate) id: String,
    pub(crate) group: Group,
    pub(crate) root: Rank,
    pub(crate) join: Join,
    pub(crate) schedule: Schedule,
    pub(crate) started: Instant,
    /// Group position → the live rank holding a copy of its original.
    pub(crate) replicas: HashMap<usize, u32>,
    /// Group position → the directory of that rank's own disk copies, for
    /// ranks that said others may read it.
    pub(crate) disks: HashMap<usize, String>,
    /// Group positions whose own announcement (join) arrived: they wrote
    /// their disk copy before sending it.
    pub(crate) announced: HashSet<usize>,
    /// Group positions whose unannounced disk copy the master looked for
    /// (once: a copy that failed to read is not inferred again).
    pub(crate) disk_checked: HashSet<usize>,
    /// Fetches that failed although the provider lived (bounded retries).
    pub(crate) fetch_failures: u32,
    /// Group position → where a same-node receiver reads its current data
    /// in place (from its last ready message), forwarded in its tasks.
    pub(crate) directs: HashMap<usize, taskfold_core::wire::Locator>,
    /// Group position → the standing copy its join named
    /// (`Ready::standing`): its buddy maps the original where it lies, and
    /// is offered it on the member's behalf if the member dies (unless the
    /// buddy died first: the copy went with it).
    pub(crate) standing: HashMap<usize, Standing>,
    /// Group position → the buddy whose answer about the standing copy of
    /// that member, dead since, the reduction waits for: no task goes out
    /// and no completion is sent while any is awaited, and the scheduler
    /// hears of the death once the answer says whether the original can
    /// be had.
    pub(crate) awaiting: HashMap<usize, u32>,
    /// Fetch failures reported while the reduction waited for such an
    /// answer (a fetch from the dead member, most likely): handled once
    /// the scheduler knows whether its original can be had.
    pub(crate) held_failures: Vec<super::handlers::TaskFailedIn>,
    /// Group positions whose buddy refused to keep a copy.
    pub(crate) refused: HashSet<usize>,
    /// Group positions whose future completes once their data was folded
    /// in (`Join::early`): released even when that data is one original.
    pub(crate) early: HashSet<usize>,
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
            group,
            root,
            join: join.clone(),
            started: Instant::now(),
            replicas: HashMap::new(),
            disks: HashMap::new(),
            announced: HashSet::new(),
            disk_checked: HashSet::new(),
            fetch_failures: 0,
            directs: HashMap::new(),
            standing: HashMap::new(),
            awaiting: HashMap::new(),
            held_failures: Vec::new(),
            refused: HashSet::new(),
            early: HashSet::new(),
        })
    }
}

/// Whether a copy of position `k`'s original can still be had: a live
/// buddy's replica, or the rank's own disk copy where others can read it.
pub(crate) fn has_copy(
    replicas: &HashMap<usize, u32>,
    disks: &HashMap<usize, String>,
    dead: &std::collections::HashSet<u32>,
    k: usize,
) -> bool {
    replicas.get(&k).is_some_and(|h| !dead.contains(h)) || disks.contains_key(&k)
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
