//! A rank declared failed: fencing it, offering its standing copies to
//! their buddies, and recovering or ending every reduction that needed its
//! data.
//!
//! The rule: the master fences the rank, tells every rank, and for each
//! live reduction lets its scheduler re-queue what the rank held — from
//! copies of the originals if they can still be had (a live buddy's
//! replica, a readable disk copy), else the reduction ends with
//! `RanksLost`. A member with a standing copy at a live buddy is decided
//! only once that buddy says whether it keeps the copy (see
//! `taskfold_core::roster`).

use super::{handlers, Master, VERDICT_WAIT};
use std::time::{Duration, SystemTime};
use taskfold_core::roster::Death;
use taskfold_core::schedule::Unrecoverable;
use taskfold_core::wire::{Msg, Standing};
use taskfold_core::Rank;

impl Master {
    /// Declares `rank` failed: fences it, tells every rank, and recovers or
    /// ends every reduction that needed its data.
    pub(super) fn rank_down(&mut self, rank: Rank, reason: String, latency: Option<Duration>) {
        let own = self.out.transport().rank();
        if rank.0 >= self.size || rank == own || !self.out.view().failed(rank) {
            return;
        }
        if self.finalized.contains(&rank.0) {
            // It finished its work and left: not a failure. A standby
            // taking over waits for it no more.
            return self.heard_for_takeover(rank.0);
        }
        let awaited = self.respawn_on_death(rank.0);
        // A standby taking over waits for it no more, and rebuilds (if it
        // was the last report awaited) knowing its replacement is awaited:
        // its reductions then wait for it instead of losing its data.
        let taking_over = self.awaiting_reports();
        self.heard_for_takeover(rank.0);
        // A standby rolls back once the reports told it the job's epoch
        // (`resume_epoch`), never before: two rollbacks of one epoch would
        // leave the ranks that answered the first unheard in the second.
        let global = awaited && self.rolls_back() && !taking_over;
        self.fence(rank, &reason, latency);
        // A join this process sent that waited for a verdict dies with it:
        // its rank's next process joins for itself.
        self.reductions.waiting.retain(|(from, _)| *from != rank);
        self.results_rank_died(rank.0);
        // Before the notice that the rank failed: a buddy holding a
        // standing copy of one of its originals is offered it first, on
        // the same ordered link, so that it still maps the dead rank's
        // memory when it reads the offer (it lets go of that mapping once
        // it hears of the death).
        self.offer_standing_copies(rank);
        let incarnation = self.out.view().read().incarnation(rank.0);
        let notice = Msg::RankFailed {
            rank: rank.0,
            incarnation,
        };
        for r in 0..self.size {
            if r != rank.0 {
                self.send(Rank(r), &notice);
            }
        }
        // Tell the fenced rank too: if it was only stopped, it learns on
        // resuming that it is out of the run.
        let _ = self.out.send(rank, &notice);
        if awaited {
            // After the notice, on the same ordered links.
            self.ask_held(rank.0);
        }
        if global {
            // Every rank comes back to its entry point instead.
            return self.roll_back(rank);
        }
        if taking_over && awaited && self.rolls_back() {
            return; // no reduction to recover: the rollback drops them
        }
        self.fail_barriers();
        let keys: Vec<u64> = self.reductions.live.keys().copied().collect();
        for key in keys {
            if awaited {
                self.await_replacement(key, rank);
            }
            self.recover(key, rank);
        }
        self.check_finalize();
    }

    /// Reduction `key` waits for the replacement of its member `rank`
    /// instead of losing that member's original.
    fn await_replacement(&mut self, key: u64, rank: Rank) {
        if let Some(r) = self.reductions.live.get_mut(&key) {
            if let Some(i) = r.group.index_of(rank) {
                r.schedule.await_replacement(i);
            }
        }
    }

    /// Records `rank`'s failure: its time, the board's fence (before any
    /// completion posted from now on, which may go on without it: it hears
    /// it was fenced by message), the detector, the counters.
    fn fence(&mut self, rank: Rank, reason: &str, latency: Option<Duration>) {
        self.dead_at.insert(rank.0, SystemTime::now());
        tracing::error!(%rank, %reason, "rank declared failed");
        if let Some(b) = &self.board {
            b.fence(rank.0);
        }
        self.stats.dead.push(rank.0);
        metrics::counter!(crate::metrics::FAILURES_DETECTED).increment(1);
        if let Some(l) = latency {
            metrics::histogram!(crate::metrics::DETECTION_SECONDS).record(l.as_secs_f64());
        }
    }

    /// Tells every roster that `rank`, just declared failed, died, and
    /// offers every standing copy of its originals (`Joining::standing`) to
    /// the buddy that maps it, on its behalf; those reductions are held
    /// until the buddy answers (at most [`VERDICT_WAIT`]).
    fn offer_standing_copies(&mut self, rank: Rank) {
        let mut offers = Vec::new();
        for (&key, r) in self.reductions.live.iter_mut() {
            let Some(i) = r.group.index_of(rank) else {
                continue;
            };
            if let Some(Death::Offer(s)) = r.roster.died(i, &self.out.view().dead()) {
                offers.push((key, i, s));
            }
        }
        for (key, index, s) in offers {
            self.offer_standing_copy(key, index, rank, s);
        }
    }

    /// Offers dead `owner`'s standing copy `s`, member `index` of
    /// reduction `key`, to the buddy that maps it; its verdict is awaited
    /// at most [`VERDICT_WAIT`].
    pub(super) fn offer_standing_copy(&mut self, key: u64, index: usize, owner: Rank, s: Standing) {
        tracing::warn!(rank = %owner, buddy = s.buddy, key, "offering a dead rank's original to the buddy that maps it");
        metrics::counter!(crate::metrics::STANDING_COPIES_OFFERED).increment(1);
        let buddy = Rank(s.buddy);
        let offer = Msg::ReplicaOffer {
            key,
            owner: owner.0,
            len: s.len,
            crc: s.crc,
            node: s.node,
            file: None,
            heap: Some(s.heap),
            warm: None,
            wants_ack: false,
            // The buddy views the owner's heap: no bytes to carry.
            data: None,
            after: self.completion_mark(),
        };
        // If it cannot be sent, the buddy's link is down: its death, or
        // the wait, decides.
        self.send(buddy, &offer);
        if let Some(me) = &self.me {
            let me = me.clone();
            actix::spawn(async move {
                actix_rt::time::sleep(VERDICT_WAIT).await;
                me.do_send(handlers::VerdictDue { key, index });
            });
        }
    }

    /// Reduction `key` after `rank`'s death: its scheduler hears of it
    /// (unless its standing copy's verdict is awaited), and the members
    /// whose verdict `rank` owed are decided without it.
    fn recover(&mut self, key: u64, rank: Rank) {
        // Before the scheduler decides whether the lost originals can be
        // had: a copy found on disk counts.
        self.infer_disks(key);
        let Some(r) = self.reductions.live.get_mut(&key) else {
            return;
        };
        let member = r.group.index_of(rank);
        // This rank's original has a standing copy whose buddy was just
        // offered it: the buddy's answer says whether the original can be
        // had, and the scheduler hears of this death then (or when the wait
        // runs out).
        let awaits = member.is_some_and(|i| r.roster.awaits(i));
        // Dead members whose buddy this rank was: it can no longer answer,
        // so they are decided now, without a copy.
        let unanswered: Vec<usize> = member
            .map(|i| r.roster.awaiting_on(i).collect())
            .unwrap_or_default();
        let (dead, roster) = (&self.out.view().dead(), &r.roster);
        let has = |k: usize| roster.has_copy(k, dead);
        let outcome = match member {
            Some(i) if !awaits => r.schedule.fail(i, has),
            _ => r.schedule.copies_lost(has),
        };
        if outcome.is_ok() {
            for i in unanswered {
                self.decide(key, i);
            }
        }
        self.settle(key, outcome, member.is_some() && !awaits);
    }

    /// The buddy of the member at position `index` of `key`, dead with a
    /// standing copy of its original, answered (or died, or the wait for
    /// it ran out): the scheduler hears of the death now, with the copy if
    /// the buddy keeps one, and once no other answer is awaited the
    /// reduction goes on with the fetch failures held meanwhile.
    pub(super) fn decide(&mut self, key: u64, index: usize) {
        let Some(r) = self.reductions.live.get_mut(&key) else {
            return;
        };
        if !r.roster.verdict(index) {
            return;
        }
        let (dead, roster) = (&self.out.view().dead(), &r.roster);
        let outcome = r.schedule.fail(index, |k| roster.has_copy(k, dead));
        // A replacement let in while the answer was awaited revives the
        // position now, as it would have had the answer come first.
        if outcome.is_ok() && !dead.contains(r.group.rank_at(index).0 as usize) {
            r.schedule.revive(index);
        }
        if outcome.is_ok() {
            if r.roster.is_held() {
                // Still held for another dead member's buddy.
                return self.take_waiting_joins(key);
            }
            for m in r.roster.take_held() {
                self.task_failed(m);
            }
        }
        self.settle(key, outcome, true);
        self.take_waiting_joins(key);
    }

    /// Goes on with reduction `key` after the scheduler took in a death
    /// (`recovered`: of one of its members), or ends it if an original
    /// is lost.
    pub(super) fn settle(&mut self, key: u64, outcome: Result<(), Unrecoverable>, recovered: bool) {
        match outcome {
            Ok(()) => {
                if recovered {
                    metrics::counter!(crate::metrics::RECOVERIES).increment(1);
                }
                self.drive(key);
            }
            Err(u) => {
                if let Some(r) = self.reductions.live.get(&key) {
                    let error = r.lost(&u);
                    self.fail(key, error);
                }
            }
        }
    }
}
