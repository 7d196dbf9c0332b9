//! Global restart at the master (`TASKFOLD_RESTART=global`, see the
//! book's chapter Surviving failures of the application): when a dead
//! rank's replacement is awaited, the job rolls back to a new epoch.
//! Every live reduction, barrier and remembered end is dropped (each rank
//! ends its own with `ReduceError::Reinit` on the notice), messages of a
//! rank not yet back at its entry point are stale and dropped, and once
//! every rank, the replacement too, is back
//! ([`taskfold_core::reinit::Rollback`]) all go on from the newest
//! checkpoint version every rank holds.

use super::Master;
use actix::prelude::*;
use taskfold_core::reinit::Go;
use taskfold_core::wire::Msg;
use taskfold_core::Rank;

/// Rank `from` is at its re-init entry point for `epoch`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ReinitReadyIn {
    pub(crate) from: Rank,
    pub(crate) epoch: Option<u32>,
    pub(crate) held: Vec<u64>,
}

impl Master {
    /// True while `from` has not come back to its entry point in a
    /// rollback: what it sends about reductions and barriers is stale.
    pub(super) fn stale(&self, from: Rank) -> bool {
        self.rollback.waits_for(from.0)
    }

    /// Rolls the job back after `rank`'s death (its replacement is
    /// awaited): every rank, the replacement included, must come back to
    /// its entry point.
    pub(super) fn roll_back(&mut self, rank: Rank) {
        // Every rank meets: the live ones, and every dead one whose
        // replacement is awaited (this one's, and those still on their way
        // from an earlier failure).
        let ranks: Vec<u32> = (0..self.size)
            .filter(|r| !self.finalized.contains(r))
            .filter(|&r| !self.out.view().is_dead(r) || r == rank.0 || self.respawn.book.awaited(r))
            .collect();
        let epoch = self.rollback.begin(ranks);
        tracing::warn!(%rank, epoch, "the job rolls back to its re-init entry point");
        let keys: Vec<u64> = self.reductions.live.keys().copied().collect();
        for key in keys {
            if let Some(r) = self.reductions.live.remove(&key) {
                self.note_end(key, &r);
            }
        }
        self.reductions.ended.clear();
        self.reductions.early.clear();
        self.reductions.waiting.clear();
        // Every rank drops its copies of kept results as it hears of the
        // rollback: the records go with them.
        self.results_rolled_back();
        self.barriers.clear();
        self.respawn.forget_ended();
        self.stats.rollbacks += 1;
        metrics::counter!(crate::metrics::ROLLBACKS).increment(1);
        self.update_queue_gauge();
        let notice = Msg::Reinit { epoch };
        for r in 0..self.size {
            self.send(Rank(r), &notice);
        }
    }

    /// A standby took over a job that ran in `epoch`: its rollbacks are
    /// numbered after it; under global restart, if a dead rank's
    /// replacement is awaited (the dead master's, say), or some rank
    /// reported from an older epoch (`lagging`), the job rolls back at
    /// once (a rollback the dead master began is begun again).
    pub(super) fn resume_epoch(&mut self, epoch: u32, lagging: bool) {
        self.rollback = taskfold_core::reinit::Rollback::Running(epoch);
        if !self.rolls_back() {
            return;
        }
        let awaited = (0..self.size).find(|&r| self.respawn.book.awaited(r));
        match (awaited, lagging) {
            (Some(r), _) => self.roll_back(Rank(r)),
            // Some rank never heard of the newest rollback (the dead
            // master's notice did not reach it): a new one brings every
            // rank to one epoch.
            (None, true) => self.roll_back(self.out.transport().rank()),
            (None, false) => {}
        }
    }

    /// Whether a standby's takeover ends in a rollback
    /// ([`Master::resume_epoch`] with `lagging`): then nothing of the
    /// epoch is rebuilt first.
    pub(super) fn rollback_follows(&self, lagging: bool) -> bool {
        self.rolls_back() && (lagging || (0..self.size).any(|r| self.respawn.book.awaited(r)))
    }

    /// Whether a death rolls the job back: under global restart, while no
    /// rank finalized or left its entry point ([`LeaveReinitIn`]). Such a
    /// rank left its entry point for good, so the steps it was in cannot
    /// be done again; from then on a replacement redoes its own work as
    /// under local restart (it resumes
    /// from the newest checkpoint it holds, and the reductions that
    /// completed meanwhile are answered as completed).
    pub(super) fn rolls_back(&self) -> bool {
        self.restart == taskfold_core::settings::Restart::Global
            && self.finalized.is_empty()
            && self.left.is_empty()
    }

    /// `rank` will not come back (no replacement): not waited for.
    pub(super) fn left_rollback(&mut self, rank: u32) {
        if let Some(go) = self.rollback.left(rank) {
            self.go(go);
        }
    }

    fn go(&mut self, go: Go) {
        tracing::info!(epoch = go.epoch, version = ?go.version, "every rank is at its re-init entry point");
        let msg = Msg::ReinitGo {
            epoch: go.epoch,
            version: go.version,
        };
        for r in 0..self.size {
            self.send(Rank(r), &msg);
        }
    }
}

impl Handler<ReinitReadyIn> for Master {
    type Result = ();

    fn handle(&mut self, m: ReinitReadyIn, _: &mut Context<Self>) {
        if self.awaiting_reports() {
            // The epoch the job runs in is known once every report is in.
            return self.keep(m);
        }
        if let (None, taskfold_core::reinit::Rollback::Running(epoch)) = (m.epoch, &self.rollback) {
            // A replacement that met no rollback: it took its rank's place
            // while the job started (its dead process never joined, and it
            // holds no checkpoint: it starts from the beginning, as the
            // others did), or after a rank finalized (see `rolls_back`:
            // it resumes from its newest checkpoint).
            let msg = Msg::ReinitGo {
                epoch: *epoch,
                version: m.held.iter().max().copied(),
            };
            self.send(m.from, &msg);
            return;
        }
        if let Some(go) = self.rollback.ready(m.from.0, m.epoch, &m.held) {
            self.go(go);
        }
    }
}

/// Rank `from`'s application returned from its re-init entry point in
/// `epoch`, for good ([`Msg::LeaveReinit`]).
///
/// Taken (recorded, and answered with [`Msg::ReinitLeft`]) unless a
/// rollback waits for the rank: then the rollback's notice, sent before,
/// reaches the rank first, and its application meets the others and does
/// its steps again instead of leaving. So a death is either before the
/// leave, and rolls the rank back with the others, or after it, and rolls
/// nothing back: a rank never finishes while the others redo steps it was
/// in (whose reductions it would be missing from).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct LeaveReinitIn {
    pub(crate) from: Rank,
    pub(crate) epoch: u32,
}

impl Handler<LeaveReinitIn> for Master {
    type Result = ();

    fn handle(&mut self, m: LeaveReinitIn, _: &mut Context<Self>) {
        if self.awaiting_reports() {
            return self.keep(m);
        }
        let stale = m.epoch < self.rollback.epoch() || self.stale(m.from);
        if stale || m.from.0 >= self.size || self.out.view().is_dead(m.from.0) {
            return;
        }
        if self.left.insert(m.from.0) {
            tracing::info!(rank = %m.from, epoch = m.epoch, "a rank left its re-init entry point: no death rolls the job back from now on");
        }
        self.send(m.from, &Msg::ReinitLeft { epoch: m.epoch });
    }
}
