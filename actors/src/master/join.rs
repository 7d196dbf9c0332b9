//! A member's join and its finished tasks: the two messages that feed a
//! reduction's scheduler.

use super::handlers::{admit_join, protocol};
use super::state::Reduction;
use super::Master;
use actix::prelude::*;
use std::collections::HashSet;
use taskfold_core::roster::{Announcement, Death, StandingCopy};
use taskfold_core::schedule::Replacement;
use taskfold_core::wire::{Join, Joining, Msg, TaskDone};
use taskfold_core::{Rank, ReduceError};

/// A rank's join of a reduction (`wire` bytes long).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct JoinIn {
    pub(crate) from: Rank,
    pub(crate) joining: Joining,
    pub(crate) wire: usize,
}

/// A rank's finished task (`wire` bytes long).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct TaskDoneIn {
    pub(crate) from: Rank,
    pub(crate) done: TaskDone,
    pub(crate) wire: usize,
}

impl Handler<JoinIn> for Master {
    type Result = ();

    fn handle(&mut self, m: JoinIn, _: &mut Context<Self>) {
        if self.stale(m.from) {
            return; // sent before its rank heard of the rollback
        }
        if self.awaiting_reports() {
            return self.keep(m);
        }
        self.count_in(m.wire);
        if !self.accepts(m.from, m.joining.rank) {
            return;
        }
        self.join_in(m.from, m.joining);
    }
}

impl Master {
    /// Takes in `from`'s join (accepted from that rank): opens the
    /// reduction if it is the first, or answers it at once if it ended.
    fn join_in(&mut self, from: Rank, mut joining: Joining) {
        let key = joining.key;
        if self.answer_late_join(key, from)
            || self.answer_replayed_root(key, from, &joining.join)
            || self.answer_replayed_join(key, from)
            || !self.open_reduction(key, &joining.join, from)
        {
            return;
        }
        let Some(index) = self.member_index(key, from) else {
            return;
        };
        let r = self
            .reductions
            .live
            .get_mut(&key)
            .expect("checked by member_index");
        if r.roster.awaits(index) {
            // A replacement's join while its dead original may still be
            // had from a standing copy: counted once that is known, as
            // the original's or as its stand-in.
            self.reductions.waiting.push((from, joining));
            return;
        }
        // A standing copy the master may have to ask for later, if the
        // buddy is another member (untrusted: anything else is no copy).
        let standing = joining.standing.and_then(|copy| {
            let buddy = r.group.index_of(Rank(copy.buddy))?;
            Some(StandingCopy { buddy, copy })
        });
        let announcement = Announcement {
            // (The root never provides: its flag, if a peer sets it, is
            // never read.)
            early: joining.join.early,
            direct: joining.direct,
            replica: joining.replica,
            disk: joining.join.disk.take(),
            standing,
        };
        let outcome = admit_join(r, &joining.join, from, index)
            .and_then(|kind| match kind {
                // Its dead incarnation's original stays in: the roster
                // keeps that member's record.
                Replacement::Held => Ok(()),
                Replacement::Joined => {
                    r.roster.revive(index);
                    r.roster
                        .join(index, announcement)
                        .map_err(|e| protocol(&r.id, from, e))
                }
            })
            .map(|()| Vec::new());
        self.after_ready(key, from, outcome);
    }
}

impl Handler<TaskDoneIn> for Master {
    type Result = ();

    fn handle(&mut self, m: TaskDoneIn, _: &mut Context<Self>) {
        if self.stale(m.from) {
            return; // sent before its rank heard of the rollback
        }
        self.count_in(m.wire);
        let TaskDoneIn { from, done, .. } = m;
        if !self.accepts(from, done.rank) {
            return;
        }
        let key = done.key;
        let Some(index) = self.member_index(key, from) else {
            return;
        };
        let r = self
            .reductions
            .live
            .get_mut(&key)
            .expect("checked by member_index");
        r.roster.set_direct(index, done.direct);
        r.sources.remove(&done.task_id);
        // Asked only for a further provider left out of a gathering task.
        let (out, roster) = (&self.out, &r.roster);
        let has = |k: usize| roster.has_copy(k, &out.view().dead());
        let outcome = match r
            .schedule
            .task_done_with(done.task_id, index, &done.path, has)
        {
            Ok(providers) => {
                self.perf.record(from, done.nanos, done.bytes);
                // A provider of a single original keeps it until the
                // reduction ends anyway (recovery may ask for it; with no
                // copies it is the rank's only data, and its buffer is in
                // flight until then): a release would free nothing early.
                // Unless the provider's future waits for it
                // (`Completion::Contributed`). (`send` skips a dead
                // provider, whose original came from a copy.)
                let tell = |p: &&taskfold_core::schedule::Entry| {
                    p.path.len() > 1 || r.roster.early(p.index)
                };
                Ok(providers
                    .iter()
                    .filter(tell)
                    .map(|p| r.group.rank_at(p.index))
                    .collect())
            }
            Err(e) => Err(protocol(&r.id, from, e)),
        };
        self.after_ready(key, from, outcome);
    }
}

impl Master {
    /// Whether a message of `from` that names `claimed` as its sender is
    /// read at all: not from a fenced rank, not in another's name.
    /// Takes in the joins that waited for a verdict about one of
    /// reduction `key`'s members and wait no more. One whose reduction
    /// ended meanwhile is dropped: the member counted as joined (its dead
    /// original was in), so the end's notice went to its rank.
    pub(super) fn take_waiting_joins(&mut self, key: u64) {
        let waiting = std::mem::take(&mut self.reductions.waiting);
        let live = &self.reductions.live;
        let still = |from: Rank, j: &Joining| {
            j.key != key
                || live
                    .get(&key)
                    .is_some_and(|r| r.group.index_of(from).is_some_and(|i| r.roster.awaits(i)))
        };
        let (wait, due): (Vec<_>, Vec<_>) = waiting.into_iter().partition(|(f, j)| still(*f, j));
        self.reductions.waiting = wait;
        for (from, joining) in due {
            if self.reductions.live.contains_key(&key) && self.accepts(from, joining.rank) {
                self.join_in(from, joining);
            }
        }
    }

    fn accepts(&self, from: Rank, claimed: u32) -> bool {
        if self.out.view().is_dead(from.0) {
            tracing::debug!(%from, "ignoring a message from a fenced rank");
            return false;
        }
        if claimed != from.0 {
            tracing::warn!(%from, claimed, "message names another rank; dropped");
            return false;
        }
        true
    }

    /// A join of a reduction that already failed: the late member is told
    /// (true), as the failure's notice skipped it.
    fn answer_late_join(&mut self, key: u64, from: Rank) -> bool {
        let Some(error) = self.reductions.ended.late_join(key, from.0) else {
            return false;
        };
        let msg = super::failed_msg(key, &error);
        if let Some(inf) = &mut self.infer {
            // Its disk write for this key preceded this announcement.
            inf.ends
                .late_announcement(key, from.0, std::time::SystemTime::now());
        }
        self.send(from, &msg);
        true
    }

    /// Makes sure reduction `key` exists, opening it from `from`'s join if
    /// this is the first; false if the join was refused or the reduction
    /// could not start (`from` was told).
    fn open_reduction(&mut self, key: u64, join: &Join, from: Rank) -> bool {
        if self.reductions.live.contains_key(&key) {
            return true;
        }
        let mut r = match Reduction::new(join, self.size) {
            Ok(r) => r,
            Err(detail) => {
                let error = ReduceError::InvalidOptions(detail);
                let msg = super::failed_msg(key, &error);
                self.send(from, &msg);
                return false;
            }
        };
        if self.reductions.live.len() >= self.reductions.max {
            self.refuse_reduction(key, &r, from);
            return false;
        }
        for (owner, holder, ok) in self.reductions.early.take(key) {
            if let Some(i) = r.group.index_of(Rank(owner)) {
                r.roster.replicated(i, holder, ok);
            }
        }
        let outcome = self
            .admit_the_dead(key, &mut r)
            .and_then(|()| self.admit_the_departed(&r));
        self.reductions.live.insert(key, r);
        match outcome {
            Ok(()) => true,
            Err(error) => {
                self.fail_and_tell(key, from, error);
                false
            }
        }
    }

    /// Refuses to open reduction `key` (`r`, never inserted), as
    /// `max_reductions` are live: `from` is told at once, the other members
    /// when they join (as after any failure), so that all of them end it
    /// alike. The live reductions go on.
    fn refuse_reduction(&mut self, key: u64, r: &Reduction, from: Rank) {
        let limit = self.reductions.max as u64;
        tracing::warn!(id = %r.id, %from, limit, "too many live reductions; refused");
        metrics::counter!(crate::metrics::REDUCTIONS_REFUSED).increment(1);
        let error = ReduceError::TooManyReductions { limit };
        let msg = Msg::Complete {
            key,
            error: Some((&error).into()),
            number: None,
        };
        self.send(from, &msg);
        let pending: HashSet<u32> = r
            .group
            .members()
            .iter()
            .map(|m| m.0)
            .filter(|&m| m != from.0 && !self.out.view().is_dead(m))
            .collect();
        if !pending.is_empty() {
            self.reductions.ended.remember(key, error, pending);
        }
    }

    /// Members already dead when reduction `key` opens: recovered from
    /// their copies if they have one, else the reduction cannot complete.
    pub(super) fn admit_the_dead(
        &mut self,
        key: u64,
        r: &mut Reduction,
    ) -> Result<(), ReduceError> {
        let dead_members: Vec<usize> = (0..r.group.len())
            .filter(|&i| self.out.view().is_dead(r.group.rank_at(i).0))
            .collect();
        // Members that joined (as a standby's reports say) and died since
        // may have left a standing copy at a live buddy: it is offered,
        // and the scheduler hears of the death with the answer.
        let mut offered = Vec::new();
        for &i in &dead_members {
            if let Some(Death::Offer(s)) = r.roster.died(i, &self.out.view().dead()) {
                offered.push(i);
                self.offer_standing_copy(key, i, r.group.rank_at(i), s);
            }
        }
        if let Some(inf) = &self.infer {
            // Members that died before anyone joined may have left their
            // original on disk unannounced.
            let found = inf.infer(key, r, &self.out.view().dead(), &self.dead_at);
            self.stats.disk_copies_inferred += found.len() as u64;
        }
        for i in dead_members {
            if self.respawn.book.awaited(r.group.rank_at(i).0) {
                // Its replacement will join instead.
                r.schedule.await_replacement(i);
            }
            if offered.contains(&i) {
                continue; // decided on the buddy's answer
            }
            let (dead, roster) = (&self.out.view().dead(), &r.roster);
            r.schedule
                .fail(i, |k| roster.has_copy(k, dead))
                .map_err(|u| r.lost(&u))?;
        }
        Ok(())
    }

    /// `from`'s position in live reduction `key`; `None` (and `from` told,
    /// if it is no member) if there is none.
    fn member_index(&mut self, key: u64, from: Rank) -> Option<usize> {
        let Some(r) = self.reductions.live.get(&key) else {
            tracing::warn!(%from, key, "message for an unknown reduction; dropped");
            return None;
        };
        if let Some(index) = r.group.index_of(from) {
            return Some(index);
        }
        let error = ReduceError::InvalidOptions(format!("{from} is not a member of the group"));
        let msg = super::failed_msg(key, &error);
        self.send(from, &msg);
        None
    }

    /// Goes on after a join or a finished task was counted: the next tasks
    /// (or the completion) first, as they are on the reduction's path, then
    /// the provider's release, if one is due (a completion releases
    /// everything, so none goes with it).
    fn after_ready(&mut self, key: u64, from: Rank, outcome: Result<Vec<Rank>, ReduceError>) {
        match outcome {
            Ok(release) => {
                self.drive(key);
                for provider in release {
                    if self.reductions.live.contains_key(&key) {
                        self.send(provider, &Msg::Release { key });
                    }
                }
            }
            // A second join after the reduction failed: still answer it.
            Err(error) => self.fail_and_tell(key, from, error),
        }
    }
}
