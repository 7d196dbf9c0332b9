//! The end of a contribution here: the master's releases and completion
//! notices, a lost master, shutdown; and what ending does (withdraw, seal
//! the disk write, fill the future, keep what a buddy may still view).

use super::Worker;
use actix::prelude::*;
use taskfold_core::contribution::End;
use taskfold_core::replica::original_key;
use taskfold_core::wire::Msg;
use taskfold_core::ReduceError;
use taskfold_transports::BufferKey;

/// The master says our data of `key` was consumed.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ReleaseIn {
    pub(crate) key: u64,
}

impl Handler<ReleaseIn> for Worker {
    type Result = ();

    fn handle(&mut self, m: ReleaseIn, _: &mut Context<Self>) {
        let Some(l) = self.locals.get_mut(&m.key) else {
            // Ended here already (its places were withdrawn then).
            return;
        };
        let r = l.state.released();
        // A single original is kept as it is until the reduction ends
        // (the master releases one only for a member that asked, below).
        if r.drop_value {
            // The original stays exposed: recovery may still need it.
            self.out.transport().withdraw(BufferKey(m.key));
            l.value = None;
        }
        if r.safe {
            // Folded in: this rank's death no longer loses it.
            l.slot.mark_safe();
        }
        if r.fill {
            // `Completion::Contributed`: this member's part is done. The
            // reduction goes on here (originals kept for recovery) until
            // the master's completion notice, which then finds the future
            // filled.
            l.slot.fill(Ok(None));
            metrics::counter!(crate::metrics::REDUCTIONS_CONTRIBUTED).increment(1);
        }
    }
}

/// The master says reduction `key` ended.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct CompleteIn {
    pub(crate) key: u64,
    pub(crate) error: Option<ReduceError>,
    /// The master's number of the completion (`Msg::Complete::number`).
    pub(crate) number: Option<u64>,
}

impl Handler<CompleteIn> for Worker {
    type Result = ();

    fn handle(&mut self, m: CompleteIn, _: &mut Context<Self>) {
        if let Some(n) = m.number {
            // Even where it ended early: this rank's next copy of the key
            // is for a later use than this one.
            self.completions.note(m.key, n);
        }
        if self.ended_early.remove(&m.key) {
            // This root ended the reduction when its last fold made it whole
            // (a later reduction with the same id may be live here now).
            return;
        }
        if m.error.is_none() && self.complete_once_kept(m.key) {
            return;
        }
        let how = match m.error {
            None => End::Completed,
            Some(_) => End::Failed,
        };
        self.end(m.key, m.error, how, m.number.unwrap_or(u64::MAX));
    }
}

/// This rank's watch declared the master lost (its link broke, or it was
/// silent past the failure timeout): every reduction, barrier and
/// finalize waiting for it ends with [`ReduceError::MasterLost`], and so
/// does every later one, at once.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct MasterGone {
    pub(crate) reason: String,
}

impl Handler<MasterGone> for Worker {
    type Result = ();

    fn handle(&mut self, m: MasterGone, _: &mut Context<Self>) {
        // A fenced rank is out of the run (the master stops pinging it);
        // it already ended everything with `Fenced`.
        if self.rank == self.out.master() || self.fenced || self.master_lost.is_some() {
            return;
        }
        let error = ReduceError::MasterLost(m.reason);
        self.master_lost = Some(error.clone());
        self.fail_all(error.clone());
        self.fail_waiters(&error);
    }
}

/// The application shuts the runtime down: tell the master and wait for
/// every rank (replied through `reply`).
///
/// The master reads a finalize as "this rank joins nothing more": it ends
/// every reduction this rank has not joined. So the message waits until
/// every contribution live here has sent its join (they were started
/// before the shutdown; see [`Finalize`]).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct FinalizeReq {
    pub(crate) reply: flume::Sender<Result<(), ReduceError>>,
}

impl Handler<FinalizeReq> for Worker {
    type Result = ();

    fn handle(&mut self, m: FinalizeReq, _: &mut Context<Self>) {
        if let Some(e) = self.gone() {
            let _ = m.reply.send(Err(e));
            return;
        }
        self.finalize.push(m.reply);
        // Asked again (after an answer, or while waiting for one): the
        // message goes again, and the master answers again.
        self.finalizing = Finalize::AwaitingJoins;
        self.finalize_if_joined();
    }
}

/// Where this rank's finalize stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Finalize {
    /// Not asked.
    No,
    /// Asked; the message goes once every live contribution joined.
    AwaitingJoins,
    /// Sent to the master; the answer comes once every rank finalized.
    Sent,
}

/// Every rank finalized.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct FinalizeAckIn;

impl Handler<FinalizeAckIn> for Worker {
    type Result = ();

    fn handle(&mut self, _: FinalizeAckIn, _: &mut Context<Self>) {
        for tx in self.finalize.drain(..) {
            let _ = tx.send(Ok(()));
        }
    }
}

impl Worker {
    /// Ends a local reduction normally (`error`: how the master or this
    /// rank failed it) and fills its future.
    pub(super) fn finish(&mut self, key: u64, error: Option<ReduceError>) {
        let how = match error {
            None => End::Completed,
            Some(_) => End::Failed,
        };
        self.end(key, error, how, u64::MAX);
    }

    /// Why no request to the master can be answered any more: this rank
    /// was fenced, or the master is lost.
    pub(super) fn gone(&self) -> Option<ReduceError> {
        if self.fenced {
            return Some(ReduceError::Fenced);
        }
        self.master_lost.clone()
    }

    /// Sends the finalize the application asked for, once no contribution
    /// live here is still on its way to its join.
    pub(super) fn finalize_if_joined(&mut self) {
        if self.finalizing != Finalize::AwaitingJoins
            || self.locals.values().any(|l| !l.state.joined())
        {
            return;
        }
        self.finalizing = Finalize::Sent;
        if let Err(e) = self.out.to_master(&Msg::Finalize) {
            // A dead transport cannot finalize: do not wait for an answer.
            let error = ReduceError::Transport(e.to_string());
            for tx in self.finalize.drain(..) {
                let _ = tx.send(Err(error.clone()));
            }
        }
    }

    /// Ends a local reduction as its state machine says; `upto`: the
    /// number of the master's completion that ended it, `u64::MAX` if none
    /// (see `DropKey`).
    fn end(&mut self, key: u64, error: Option<ReduceError>, how: End, upto: u64) {
        self.results_ended(key);
        let Some(mut local) = self.locals.remove(&key) else {
            let disk = crate::replica::Removal::Nothing;
            self.store
                .do_send(crate::replica::DropKey { key, upto, disk });
            return;
        };
        // The last contribution on its way to a join may end here.
        self.finalize_if_joined();
        // Before the removal of the reduction's files: a write still in
        // flight must not recreate this rank's file afterwards, where the
        // master could take it for the original of a later reduction
        // with the same key.
        self.disk.seal(&local.disk_live);
        // Only here does a contribution end, as it leaves `locals`.
        let f = local
            .state
            .end(how)
            .expect("a live contribution has not ended");
        if how != End::Abandoned {
            // For a new master, should this one die (see `failover`).
            self.ended.push(key, error.as_ref().map(Into::into));
        }
        // A completion means every member's join was in, so each member's
        // disk copy of it was written before now. Any other end leaves
        // every member's write possibly in flight: no bound for the key.
        let unsure = match (how, &error) {
            (End::Completed, None) => &[][..],
            _ => &local.join.group[..],
        };
        self.file_ends
            .ended(key, std::time::SystemTime::now(), unsure.iter().copied());
        let len = local.original.as_ref().map_or(0, |o| o.len());
        let disk = crate::replica::Removal::of(f.remove_disk, len);
        self.store
            .do_send(crate::replica::DropKey { key, upto, disk });
        if f.strand {
            // A buddy may be recovering this original from its view of the
            // buffer: kept, unchanged, until the process ends, never reused
            // for other data that could pass for the original.
            if let Some(o) = &local.original {
                self.stranded.push(o.clone());
            }
        }
        taskfold_core::pool::end_flight(local.flight);
        // A fetch in progress ends with the actor's context.
        drop(local.fetch.take());
        let t = self.out.transport();
        t.withdraw(BufferKey(key));
        t.withdraw(BufferKey(original_key(key)));
        local.slot.release_key(&self.live, key);
        let outcome = match error {
            Some(e) => Err(e),
            None if local.state.setup().root => match local.value.take() {
                Some(v) => Ok(Some(v.into_any())),
                None => Err(ReduceError::Mismatched {
                    id: local.join.id.clone(),
                    detail: "the root completed without holding the result".into(),
                }),
            },
            None => Ok(None),
        };
        // Release this reduction's buffers (back to the pool) before the
        // application wakes up: its next contribution can reuse them.
        let slot = local.slot.clone();
        drop(local);
        if f.fill {
            slot.fill(outcome);
        }
    }

    /// Fails every live reduction (the master is gone, fenced): they may go
    /// on elsewhere without this rank, which may have been declared failed
    /// (see [`End::Abandoned`]).
    pub(super) fn fail_all(&mut self, error: ReduceError) {
        // No completion notice will come for them any more.
        self.ended_early.clear();
        let keys: Vec<u64> = self.locals.keys().copied().collect();
        for k in keys {
            self.end(k, Some(error.clone()), End::Abandoned, u64::MAX);
        }
    }
}
