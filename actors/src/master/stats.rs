//! What the master counts: its load, and the task log that shows the tree.

use serde::Serialize;
use taskfold_core::schedule::Assignment;
use taskfold_core::Group;

/// One task handed out by the master.
#[derive(Clone, Debug, Serialize)]
pub struct TaskRecord {
    /// The reduction's id.
    pub reduction: String,
    /// The task's id within the reduction.
    pub task_id: u64,
    /// Rank that fetched and folded.
    pub receiver: u32,
    /// Rank whose data was fetched.
    pub provider: u32,
    /// Ranks whose originals the receiver held before the task.
    pub receiver_path: Vec<u32>,
    /// Ranks whose originals the provider held.
    pub provider_path: Vec<u32>,
}

impl TaskRecord {
    pub(crate) fn new(id: &str, a: &Assignment, group: &Group) -> Self {
        let ranks = |p: &taskfold_core::RankSet| p.iter().map(|i| group.rank_at(i).0).collect();
        TaskRecord {
            reduction: id.to_string(),
            task_id: a.task_id,
            receiver: group.rank_at(a.receiver.index).0,
            provider: group.rank_at(a.provider.index).0,
            receiver_path: ranks(&a.receiver.path),
            provider_path: ranks(&a.provider.path),
        }
    }
}

/// A snapshot of the master's counters (see `Runtime::master_stats`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct MasterStats {
    /// Control messages received.
    pub msgs_in: u64,
    /// Control messages sent.
    pub msgs_out: u64,
    /// Control bytes received.
    pub bytes_in: u64,
    /// Control bytes sent.
    pub bytes_out: u64,
    /// Reductions completed successfully.
    pub reductions_completed: u64,
    /// Reductions ended with an error.
    pub reductions_failed: u64,
    /// Tasks handed to each rank (as receiver), indexed by rank.
    pub tasks_per_rank: Vec<u64>,
    /// Ready messages waiting in all queues now.
    pub queue_depth: u64,
    /// The most recent tasks, oldest first (bounded).
    pub task_log: std::collections::VecDeque<TaskRecord>,
    /// Ranks declared failed.
    pub dead: Vec<u32>,
    /// Ranks whose replacement was let in, in that order (see the book's
    /// chapter Surviving failures of the application).
    pub respawned: Vec<u32>,
    /// Global restarts: rollbacks of the job to its re-init entry point.
    pub rollbacks: u64,
    /// Disk copies of dead ranks' originals that the master inferred
    /// (their announcement never arrived) and handed to recovery.
    pub disk_copies_inferred: u64,
    /// Roots' results kept at their buddies for a replacement root, now
    /// (see the book's chapter Surviving failures of the application, A
    /// replaced root).
    pub results_kept: u64,
    /// Kept results whose copy is gone (its holder died, and its root has
    /// not copied it again): a replacement root would get `ResultLost`.
    pub results_without_copy: u64,
    /// Kept results with a second copy, made by their holder at once or
    /// once their root died: the holder's death then costs nothing.
    pub results_second_copies: u64,
    /// Copies of kept results beyond each one's first (a result with
    /// three copies counts two): as many deaths more than that, close
    /// together, its root's among them, still leave one.
    pub results_further_copies: u64,
    /// Kept results dropped for the bound on their number.
    pub results_evicted: u64,
    /// Replacement roots sent to their kept result.
    pub results_returned: u64,
    /// Replacement roots told their result was lost (`ResultLost`).
    pub results_lost: u64,
}

impl MasterStats {
    pub(crate) fn new(size: u32) -> Self {
        MasterStats {
            tasks_per_rank: vec![0; size as usize],
            ..Default::default()
        }
    }

    pub(crate) fn record_task(&mut self, t: TaskRecord, limit: usize) {
        if let Some(c) = self.tasks_per_rank.get_mut(t.receiver as usize) {
            *c += 1;
        }
        if self.task_log.len() >= limit && limit > 0 {
            self.task_log.pop_front();
        }
        if limit > 0 {
            self.task_log.push_back(t);
        }
    }
}
