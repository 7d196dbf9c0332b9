//! The master actor (rank 0): membership, one scheduler and one roster per
//! live reduction, completion notices, barriers (see the book's
//! Architecture chapter).
//!
//! Only control messages reach the master: joins and finished tasks in,
//! tasks and completions out. Data moves between workers. What to decide
//! lives in `taskfold_core` ([`taskfold_core::schedule`] pairs the data,
//! [`taskfold_core::roster`] follows each member's lifecycle); this actor
//! feeds them the messages and carries their decisions out.
//!
//! What a crash of the master loses: everything here (queues, the task log,
//! the performance table, the barriers in progress). Every other rank
//! declares it lost — at once when its link breaks, within the failure
//! timeout and one ping period when it falls silent
//! ([`taskfold_core::watch`]) — and fails its live reductions, barriers and
//! finalize with [`taskfold_core::ReduceError::MasterLost`]; the master is
//! not replicated.

mod barrier;
mod down;
mod drive;
mod ended;
mod gather;
mod handlers;
mod infer;
mod join;
mod left;
mod reinit;
mod respawn;
mod results;
mod spares;
pub(crate) mod spawn;
mod state;
mod stats;
mod takeover;

pub use stats::{MasterStats, TaskRecord};

use crate::outbox::Outbox;
use actix::prelude::*;
use state::Reduction;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::SystemTime;
use taskfold_core::perf::PerfTable;
use taskfold_core::{wire::Msg, Rank, ReduceError};

pub(crate) use barrier::BarrierIn;
pub(crate) use handlers::{ExitReport, FinalizeIn, GetStats, ReplicatedIn};
pub(crate) use join::{JoinIn, TaskDoneIn};
pub(crate) use reinit::{LeaveReinitIn, ReinitReadyIn};
pub(crate) use respawn::{ReadmittedIn, ReplacementIn};
pub(crate) use results::{ResultAlsoKeptIn, ResultKeptIn, ResultWhereIn, ResultsReleasedIn};
pub(crate) use state::TaskFailedIn;
pub(crate) use takeover::RejoinIn;

/// The notice that reduction `key` ended with `error`.
fn failed_msg(key: u64, error: &ReduceError) -> Msg {
    Msg::Complete {
        key,
        error: Some(error.into()),
        number: None,
    }
}

/// The master of a job.
pub struct Master {
    size: u32,
    out: Outbox,
    /// The live reductions and what is remembered of others.
    reductions: state::Reductions,
    /// This actor's address (for its own timers).
    me: Option<Addr<Master>>,
    /// When each dead rank was declared failed (who is dead is in the
    /// membership view, `out.view()`).
    dead_at: HashMap<u32, SystemTime>,
    /// Finding the disk copies of ranks that died before announcing them
    /// (only with a shared replica directory).
    infer: Option<infer::DiskInference>,
    finalized: HashSet<u32>,
    /// Ranks whose application left its re-init entry point for good
    /// (global restart, see `reinit`): while one has, no death rolls the
    /// job back.
    left: HashSet<u32>,
    /// Barrier number → the ranks that reached it, each with whether it
    /// reads the release on the board (see `barrier`).
    barriers: std::collections::BTreeMap<u64, std::collections::BTreeMap<u32, bool>>,
    perf: PerfTable,
    stats: MasterStats,
    task_log_limit: usize,
    /// Contributions up to this many bytes are gathered by node, by the
    /// root on its own (`Config::gather_max`; 0: never).
    gather_max: u64,
    detector: Option<Addr<crate::detector::FailureDetector>>,
    /// The notice board where released barriers are posted, if any.
    board: Option<std::sync::Arc<taskfold_transports::board::Board>>,
    /// A standby's takeover from a dead master, or running.
    taking: takeover::Taking,
    /// Replacements of dead ranks (see `respawn`).
    respawn: respawn::Replacements,
    /// How the application comes back from a replacement.
    restart: taskfold_core::settings::Restart,
    /// The global restart's rollback (see `reinit`).
    rollback: taskfold_core::reinit::Rollback,
    /// Where roots' results are kept for their replacements (see
    /// `results`).
    results: results::Results,
    /// Reductions completed by this master (see `completion_number`).
    completions: u64,
}

impl Master {
    /// Connects the failure detector (it needs the master's address first).
    pub(crate) fn set_detector(&mut self, d: Addr<crate::detector::FailureDetector>) {
        self.detector = Some(d);
    }

    /// Bounds the reductions live at once (see `Config::max_reductions`).
    pub(crate) fn set_max_reductions(&mut self, limit: usize) {
        self.reductions.max = limit.max(1);
    }

    /// Gathers contributions up to `bytes` (see `Config::gather_max`).
    pub(crate) fn set_gather_max(&mut self, bytes: u64) {
        self.gather_max = bytes;
    }

    /// Posts released barriers on `board` too; every other rank is told
    /// where it lies when the master starts.
    pub(crate) fn set_board(&mut self, board: std::sync::Arc<taskfold_transports::board::Board>) {
        self.board = Some(board);
    }

    /// Lets the master infer the disk copies of ranks that died before
    /// announcing them (see `infer`): every rank's directory is
    /// `<root>/rank-<r>`, and no file of this job was written before
    /// `since` (rank 0's start). `own_dir` (rank 0's directory) holds the
    /// probe of the file system's clock: if its timestamps run ahead of this
    /// process's clock, stale files could pass the guard, so nothing is
    /// inferred.
    pub(crate) fn enable_disk_inference(
        &mut self,
        root: PathBuf,
        own_dir: &std::path::Path,
        since: SystemTime,
    ) {
        match crate::replica::disk::clock_lead(own_dir) {
            Ok(lead) if lead.is_zero() => {
                self.infer = Some(infer::DiskInference::new(root, since));
            }
            Ok(lead) => tracing::warn!(
                dir = %own_dir.display(),
                ?lead,
                "the replica directory's clock runs ahead of this node's: \
                 disk copies of ranks that die before announcing them will not be inferred"
            ),
            Err(e) => tracing::warn!(
                dir = %own_dir.display(),
                error = %e,
                "cannot probe the replica directory's clock: \
                 disk copies of ranks that die before announcing them will not be inferred"
            ),
        }
    }

    /// Records how reduction `r` (key `key`) ended, for the stale-file guard.
    fn note_end(&mut self, key: u64, r: &Reduction) {
        if let Some(inf) = &mut self.infer {
            inf.ends
                .ended(key, SystemTime::now(), infer::unannounced(r));
        }
    }

    /// Looks for the unannounced disk copies of `key`'s dead members.
    fn infer_disks(&mut self, key: u64) {
        let (Some(inf), Some(r)) = (&self.infer, self.reductions.live.get_mut(&key)) else {
            return;
        };
        let found = inf.infer(key, r, &self.out.view().dead(), &self.dead_at);
        self.stats.disk_copies_inferred += found.len() as u64;
    }

    pub(crate) fn new(size: u32, out: Outbox, task_log_limit: usize) -> Self {
        let out_rank = out.transport().rank().0;
        Master {
            size,
            out,
            reductions: state::Reductions::new(
                taskfold_core::settings::config::DEFAULT_MAX_REDUCTIONS,
            ),
            me: None,
            dead_at: HashMap::new(),
            infer: None,
            finalized: HashSet::new(),
            left: HashSet::new(),
            barriers: Default::default(),
            perf: PerfTable::new(),
            stats: MasterStats::new(size),
            task_log_limit,
            gather_max: taskfold_core::settings::config::DEFAULT_GATHER_MAX,
            detector: None,
            board: None,
            taking: takeover::Taking::running(),
            completions: 0,
            respawn: respawn::Replacements::none(size, out_rank),
            restart: Default::default(),
            rollback: Default::default(),
            results: Default::default(),
        }
    }

    /// Sends to a rank, counting the master's outgoing load. A failed send is
    /// logged: the link-down event that follows declares the rank failed.
    fn send(&mut self, to: Rank, msg: &Msg) -> bool {
        if self.out.view().is_dead(to.0) {
            return false;
        }
        match self.out.send(to, msg) {
            Ok(len) => {
                self.stats.msgs_out += 1;
                self.stats.bytes_out += len as u64;
                metrics::counter!(crate::metrics::MASTER_MSGS_OUT).increment(1);
                metrics::counter!(crate::metrics::MASTER_BYTES_OUT).increment(len as u64);
                true
            }
            Err(e) => {
                tracing::warn!(%to, error = %e, "master could not send");
                false
            }
        }
    }

    fn count_in(&mut self, bytes: usize) {
        self.stats.msgs_in += 1;
        self.stats.bytes_in += bytes as u64;
        metrics::counter!(crate::metrics::MASTER_MSGS_IN).increment(1);
        metrics::counter!(crate::metrics::MASTER_BYTES_IN).increment(bytes as u64);
    }

    /// Ends reduction `key` with `error` on every member that joined; members
    /// that join later get the error then.
    fn fail(&mut self, key: u64, error: ReduceError) {
        let Some(r) = self.reductions.live.remove(&key) else {
            return;
        };
        self.note_end(key, &r);
        self.note_failed(key, &error);
        self.result_abandoned(key);
        tracing::warn!(id = %r.id, %error, "reduction failed");
        if let ReduceError::RanksLost { ranks, .. } = &error {
            // Say which copies were missing, for the post-mortem.
            for &lost in ranks {
                let Some(copies) = r
                    .group
                    .index_of(Rank(lost))
                    .and_then(|i| r.roster.member(i))
                    .map(|m| m.copies())
                else {
                    continue;
                };
                tracing::warn!(
                    id = %r.id,
                    rank = lost,
                    buddy_copy = ?copies.replica,
                    disk_copy = ?copies.disk,
                    buddy_refused = copies.refused,
                    "original lost: no live replica and no readable disk copy"
                );
            }
        }
        self.stats.reductions_failed += 1;
        metrics::counter!(crate::metrics::REDUCTIONS_FAILED).increment(1);
        let msg = failed_msg(key, &error);
        let mut pending = HashSet::new();
        for (i, &rank) in r.group.members().iter().enumerate() {
            if r.schedule.missing().any(|m| m == i) {
                if !self.out.view().is_dead(rank.0) {
                    pending.insert(rank.0);
                }
            } else {
                self.send(rank, &msg);
            }
        }
        if !pending.is_empty() {
            self.reductions.ended.remember(key, error, pending);
        }
        self.update_queue_gauge();
    }

    /// Publishes the master's load: queued ready messages, live reductions.
    fn update_queue_gauge(&mut self) {
        let depth: usize = self
            .reductions
            .live
            .values()
            .map(|r| r.schedule.queue_len())
            .sum();
        self.stats.queue_depth = depth as u64;
        metrics::gauge!(crate::metrics::MASTER_QUEUE_DEPTH).set(depth as f64);
        metrics::gauge!(crate::metrics::LIVE_REDUCTIONS).set(self.reductions.live.len() as f64);
    }

    /// Sends the finalize acknowledgement once every live rank finalized.
    fn check_finalize(&mut self) {
        let all = (0..self.size).all(|r| {
            let gone = self.out.view().is_dead(r) && !self.respawn.book.awaited(r);
            self.finalized.contains(&r) || gone
        });
        if all && !self.finalized.is_empty() {
            // The job is over: a replacement or spare still on its way
            // finds that out instead of a master that is gone.
            if let Err(e) = self.out.transport().job_over() {
                tracing::warn!(error = %e, "cannot say the job is over");
            }
            let ranks: Vec<u32> = self.finalized.iter().copied().collect();
            for r in ranks {
                self.send(Rank(r), &Msg::FinalizeAck);
            }
        }
    }
}

impl Actor for Master {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.me = Some(ctx.address());
        self.await_the_dead();
        if let Some(b) = &self.board {
            let msg = Msg::Board {
                at: b.reference().encode(),
            };
            let own = self.out.transport().rank().0;
            for rank in (0..self.size).filter(|&x| x != own) {
                self.send(Rank(rank), &msg);
            }
        }
    }
}

/// How long the master waits for the answer of a dead rank's buddy about
/// the standing copy of that rank's original (see `Joining::standing`). The
/// answer normally comes within a millisecond (the buddy maps the
/// original where it lies); it does not come if the buddy is stopped
/// without being declared failed, and then the original is taken as lost:
/// the reduction ends with `RanksLost` after this wait instead of waiting
/// forever.
pub(crate) const VERDICT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

#[cfg(test)]
mod tests;
