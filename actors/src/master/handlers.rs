//! The master's messages, one type each, and their handlers.

use super::{Master, MasterStats};
use crate::detector::RankDown;
use crate::master::state::{Reduction, TaskFailedIn};
use actix::prelude::*;
use taskfold_core::schedule::Replacement;
use taskfold_core::schedule::Source;
use taskfold_core::wire::{Join, Msg, TaskFailure};
use taskfold_core::{Rank, ReduceError};

impl Master {
    /// Ends reduction `key` with `error` and tells `to`, whose message
    /// showed it (a member that may not be told otherwise).
    pub(super) fn fail_and_tell(&mut self, key: u64, to: Rank, error: ReduceError) {
        let failure = (&error).into();
        self.fail(key, error);
        self.send(
            to,
            &Msg::Complete {
                key,
                error: Some(failure),
                number: None,
            },
        );
    }
}

/// Counts `from`'s join at position `index` of `r`, unless it contradicts
/// the joins before it or breaks the protocol.
pub(super) fn admit_join(
    r: &mut Reduction,
    join: &Join,
    from: Rank,
    index: usize,
) -> Result<Replacement, ReduceError> {
    if let Some(detail) = r.mismatch(join, from) {
        return Err(ReduceError::Mismatched {
            id: r.id.clone(),
            detail,
        });
    }
    // A replacement's join (or any member's: `join_replacement` is a join
    // unless the member was replaced with its dead original still in).
    r.schedule
        .join_replacement(index)
        .map_err(|e| protocol(&r.id, from, e))
}

pub(super) fn protocol(id: &str, from: Rank, e: impl std::fmt::Display) -> ReduceError {
    ReduceError::Mismatched {
        id: id.to_string(),
        detail: format!("protocol violation by {from}: {e}"),
    }
}

impl Handler<TaskFailedIn> for Master {
    type Result = ();

    fn handle(&mut self, m: TaskFailedIn, _: &mut Context<Self>) {
        if self.stale(m.from) {
            return; // sent before its rank heard of the rollback
        }
        self.count_in(m.wire);
        self.task_failed(m);
    }
}

impl TaskFailedIn {
    /// Why the fetch failed, for a failed fetch.
    fn fetch_reason(&self) -> &str {
        match &self.failed.reason {
            TaskFailure::Fetch { reason, .. } => reason,
            _ => "",
        }
    }
}

impl Master {
    /// Handles a task's failure report (also one held while the reduction
    /// waited for a buddy's verdict, see `taskfold_core::roster`).
    pub(super) fn task_failed(&mut self, m: TaskFailedIn) {
        if self.out.view().is_dead(m.from.0) {
            return;
        }
        let key = m.failed.key;
        let Some(r) = self.reductions.live.get_mut(&key) else {
            return;
        };
        let Some(m) = r.roster.hold(m) else {
            return; // read once no verdict is awaited
        };
        let error = match m.failed.reason {
            TaskFailure::Fold(error) => ReduceError::Fold {
                id: r.id.clone(),
                error: error.into(),
            },
            TaskFailure::Unknown => ReduceError::Mismatched {
                id: r.id.clone(),
                detail: format!("{} holds no data for this reduction", m.from),
            },
            TaskFailure::Fetch { peer_down, .. } => return self.fetch_failed(m, peer_down, 0),
        };
        self.fail(key, error);
    }

    /// Failure place 3: a receiver could not fetch its provider's data (the
    /// data's source died, or is unreachable: `peer_down`). `deferred`:
    /// how many times this report was put off already (see
    /// [`FETCH_DEFERRALS`]).
    fn fetch_failed(&mut self, m: TaskFailedIn, peer_down: bool, deferred: u32) {
        let (key, task_id) = (m.failed.key, m.failed.task_id);
        tracing::debug!(key, task_id, from = %m.from, peer_down, reason = %m.fetch_reason(), "a fetch failed");
        let Some(r) = self.reductions.live.get(&key) else {
            return;
        };
        let task = r
            .schedule
            .task(task_id)
            .map(|t| (t.source, t.provider.index));
        let source = task.map(|(src, p)| match src {
            // `None`: it was the dead rank's disk copy.
            Source::Replica => r.roster.live_replica(p, &self.out.view().dead()).map(Rank),
            _ => Some(r.group.rank_at(p)),
        });
        // The process the task read from, if it is still the rank's: a
        // failure of one replaced since says nothing of its replacement.
        let issued = r.sources.get(&task_id).copied();
        // Whether the failure is the current process's, and whether this
        // rank still reaches it.
        let current = |src: Rank| {
            let v = self.out.view().read();
            // A replacement this rank still reaches failed only at a
            // receiver that may not know its address yet (the notice
            // that let it in came from a master that died), or one whose
            // link broke just now, its death not yet known here: its own
            // link, and its pings, say whether it lives.
            let reached = v.incarnation(src.0) > 0 && !v.is_unreachable(src.0);
            let same =
                issued.is_none_or(|(from, inc)| from != src.0 || v.incarnation(src.0) == inc);
            (same, reached)
        };
        if let (true, Some(Some(src))) = (peer_down, source) {
            match current(src) {
                (true, false) => {
                    let reason = format!("a fetch from it failed: {}", m.fetch_reason());
                    self.rank_down(src, reason, None);
                }
                (true, true) if deferred < FETCH_DEFERRALS => {
                    // Rescheduled at once, the task would fail at once
                    // again, as often as the reduction allows, before the
                    // link's fate is known: the report is read later.
                    return self.defer_fetch_failure(m, deferred);
                }
                _ => {}
            }
        }
        if let Some(r) = self.reductions.live.get_mut(&key) {
            r.sources.remove(&task_id);
        }
        let Some(r) = self.reductions.live.get_mut(&key) else {
            return; // ended by that failure
        };
        // The provider died with a standing copy: this report is read once
        // its buddy said whether it keeps it.
        let Some(m) = r.roster.hold(m) else {
            return;
        };
        if let (Some(None), Some((_, p))) = (source, task) {
            // The dead rank's disk copy cannot be read from here.
            r.roster.disk_unreadable(p);
        }
        let Some(index) = r.group.index_of(m.from) else {
            return;
        };
        if !r.roster.count_fetch_failure() {
            let error =
                ReduceError::Transport(format!("fetches keep failing: {}", m.fetch_reason()));
            self.fail(key, error);
            return;
        }
        let (dead, roster) = (&self.out.view().dead(), &r.roster);
        let has = |k: usize| roster.has_copy(k, dead);
        if r.schedule.fetch_failed(task_id, index, has).is_err() {
            return; // already rescheduled (the receiver's report came late)
        }
        match r.schedule.copies_lost(has) {
            Ok(()) => self.drive(key),
            Err(u) => {
                let error = r.lost(&u);
                self.fail(key, error);
            }
        }
    }
}

/// Times a failed fetch from a replacement this rank still reaches is put
/// off before it counts, the pause doubling from [`FETCH_DEFER_PAUSE`]
/// (375 ms in all): long enough for a broken link to be known as a death,
/// or for the receiver to learn the replacement's address.
const FETCH_DEFERRALS: u32 = 4;
/// The first pause of a deferred fetch failure.
const FETCH_DEFER_PAUSE: std::time::Duration = std::time::Duration::from_millis(25);

impl Master {
    /// Reads `m` again after a pause (see [`FETCH_DEFERRALS`]).
    fn defer_fetch_failure(&mut self, m: TaskFailedIn, deferred: u32) {
        let Some(me) = self.me.clone() else {
            return self.fetch_failed(m, true, FETCH_DEFERRALS);
        };
        let pause = FETCH_DEFER_PAUSE * 2u32.pow(deferred);
        actix::spawn(async move {
            actix_rt::time::sleep(pause).await;
            me.do_send(FetchFailureDue {
                m,
                deferred: deferred + 1,
            });
        });
    }
}

/// A failed fetch's report, put off (see [`FETCH_DEFERRALS`]).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct FetchFailureDue {
    m: TaskFailedIn,
    deferred: u32,
}

impl Handler<FetchFailureDue> for Master {
    type Result = ();

    fn handle(&mut self, d: FetchFailureDue, _: &mut Context<Self>) {
        if self.out.view().is_dead(d.m.from.0) {
            return;
        }
        self.fetch_failed(d.m, true, d.deferred);
    }
}

/// A buddy stored a copy of `owner`'s original of `key` (`ok`), or
/// refused to.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ReplicatedIn {
    pub(crate) holder: Rank,
    pub(crate) key: u64,
    pub(crate) owner: u32,
    pub(crate) ok: bool,
    pub(crate) wire: usize,
}

impl Handler<ReplicatedIn> for Master {
    type Result = ();

    fn handle(&mut self, m: ReplicatedIn, _: &mut Context<Self>) {
        if self.stale(m.holder) {
            return; // sent before its rank heard of the rollback
        }
        if self.awaiting_reports() {
            return self.keep(m);
        }
        self.count_in(m.wire);
        if self.out.view().is_dead(m.holder.0) {
            return;
        }
        match self.reductions.live.get_mut(&m.key) {
            Some(r) => {
                let Some(i) = r.group.index_of(Rank(m.owner)) else {
                    return;
                };
                r.roster.replicated(i, m.holder.0, m.ok);
                let from_buddy = r.group.index_of(m.holder);
                if from_buddy.is_some() && r.roster.awaited_buddy(i) == from_buddy {
                    if !m.ok {
                        metrics::counter!(crate::metrics::REPLICA_ERRORS).increment(1);
                        tracing::error!(owner = m.owner, buddy = %m.holder, "the buddy of a dead rank could not keep its original");
                    }
                    self.decide(m.key, i);
                }
            }
            None if !self.reductions.ended.contains(m.key) => {
                let size = self.size;
                self.reductions
                    .early
                    .note(m.key, (m.owner, m.holder.0, m.ok), size);
            }
            None => {}
        }
    }
}

/// The wait for a buddy's answer about the standing copy of a rank that
/// died ([`super::VERDICT_WAIT`]) ran out.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct VerdictDue {
    pub(crate) key: u64,
    pub(crate) index: usize,
}

impl Handler<VerdictDue> for Master {
    type Result = ();

    fn handle(&mut self, m: VerdictDue, _: &mut Context<Self>) {
        let waiting = self
            .reductions
            .live
            .get(&m.key)
            .is_some_and(|r| r.roster.awaits(m.index));
        if waiting {
            tracing::warn!(
                key = m.key,
                index = m.index,
                "no answer from the buddy of a dead rank; its original is taken as lost"
            );
            self.decide(m.key, m.index);
        }
    }
}

impl Handler<RankDown> for Master {
    type Result = ();

    fn handle(&mut self, m: RankDown, ctx: &mut Context<Self>) {
        if let Some(wait) = self.grace_for_unproven(m.rank.0) {
            // A replacement whose admission the dead master cut cannot
            // answer pings until it asks this master again: its silence
            // counts only once the grace is over and it has not asked.
            ctx.run_later(wait, move |act, _| {
                if act.still_unproven(m.rank.0) {
                    act.rank_down(m.rank, m.reason, m.latency);
                }
            });
            return;
        }
        if m.latency.is_some() && self.admitting(m.rank.0) {
            // A replacement being let in answers no ping until it is in
            // (its view may already name it, when a dead master's notice
            // reached the ranks): its silence counts from its admission
            // (`admitted` watches it afresh). A broken link still counts.
            tracing::debug!(rank = %m.rank, reason = %m.reason, "silence of a replacement being let in: not a failure");
            return;
        }
        self.rank_down(m.rank, m.reason, m.latency);
    }
}

/// The launcher's report that a rank's process exited.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ExitReport {
    pub(crate) rank: u32,
    pub(crate) code: i32,
    pub(crate) signal: i32,
    pub(crate) incarnation: u32,
}

/// How long a launcher's exit report waits for the rank's link to break.
///
/// The report travels on the launcher's connection, the rank's last frames
/// on the rank's own: the report can win the race. Declaring the rank dead
/// at once would fence those frames — an announcement of its contribution,
/// with the directory of its disk copy, would be dropped and the original
/// counted lost. The broken link follows the frames within milliseconds and
/// declares the failure itself; the report stands if it does not.
pub(crate) const EXIT_REPORT_GRACE: std::time::Duration = std::time::Duration::from_millis(300);

impl Handler<ExitReport> for Master {
    type Result = ();

    fn handle(&mut self, m: ExitReport, ctx: &mut Context<Self>) {
        if self.finalized.contains(&m.rank) && m.code == 0 {
            return; // a clean exit after finalize
        }
        let reason = if m.signal != 0 {
            format!("process killed by signal {}", m.signal)
        } else {
            format!("process exited with code {} before finalizing", m.code)
        };
        let (rank, incarnation) = (Rank(m.rank), m.incarnation);
        ctx.run_later(EXIT_REPORT_GRACE, move |act, _| {
            // A process replaced since: its death was declared already.
            if act.serves(rank.0, incarnation) {
                act.rank_down(rank, reason, None)
            }
        });
    }
}

/// A rank reached finalize.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct FinalizeIn {
    pub(crate) from: Rank,
}

impl Handler<FinalizeIn> for Master {
    type Result = ();

    fn handle(&mut self, m: FinalizeIn, _: &mut Context<Self>) {
        if self.awaiting_reports() {
            return self.keep(m);
        }
        if m.from.0 < self.size && !self.out.view().is_dead(m.from.0) {
            if self.finalized.insert(m.from.0) {
                self.rank_left(m.from);
                // Finalized as a rollback began: it meets nobody (its
                // worker keeps waiting for the job's end).
                self.left_rollback(m.from.0);
            }
            self.check_finalize();
        }
    }
}

/// Asks for a snapshot of the master's counters.
#[derive(Message)]
#[rtype(result = "MasterStats")]
pub(crate) struct GetStats;

impl Handler<GetStats> for Master {
    type Result = MessageResult<GetStats>;

    fn handle(&mut self, _: GetStats, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.stats.clone())
    }
}
