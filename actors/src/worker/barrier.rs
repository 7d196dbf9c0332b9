//! This rank's side of barriers: tell the master, wait for its answer
//! (see `crate::master` for the protocol and its cost).

use super::Worker;
use actix::prelude::*;
use taskfold_core::wire::Msg;
use taskfold_core::ReduceError;

/// The application reached barrier `seq` (answered through `reply`);
/// `board`: its thread reads the release on the notice board, which the
/// master then does not send (decided by the application thread, which
/// waits on the board only if it had one when it called).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct BarrierReq {
    pub(crate) seq: u64,
    pub(crate) board: bool,
    pub(crate) reply: crate::notices::Reply<Result<(), ReduceError>>,
}

impl Handler<BarrierReq> for Worker {
    type Result = ();

    fn handle(&mut self, m: BarrierReq, _: &mut Context<Self>) {
        if let Some(e) = self.gone() {
            m.reply.send(Err(e));
            return;
        }
        // The answers of barriers released on the board never come: they
        // are dropped here, each at the next barrier. (A slot of the board
        // is reused only 64 barriers later, by which one every earlier
        // barrier was released, see `Board::barrier_released`.)
        if let Some(board) = m.reply.board() {
            self.barriers.retain(|&seq, _| !board.barrier_released(seq));
            debug_assert!(
                self.barriers.len() < taskfold_transports::board::BARRIERS as usize,
                "answers of released barriers pile up"
            );
        }
        let msg = Msg::Barrier {
            seq: m.seq,
            board: m.board,
        };
        if let Err(e) = self.out.to_master(&msg) {
            // The master cannot be reached (its link broke, or this
            // transport is closed): no answer will come.
            m.reply.send(Err(ReduceError::MasterLost(e.to_string())));
            return;
        }
        let replaced = self.barriers.insert(m.seq, m.reply);
        // Numbers come from one counter per runtime.
        debug_assert!(replaced.is_none(), "barrier {} entered twice", m.seq);
    }
}

/// The master's answer about barrier `seq`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct BarrierDoneIn {
    pub(crate) seq: u64,
    pub(crate) error: Option<ReduceError>,
}

impl Handler<BarrierDoneIn> for Worker {
    type Result = ();

    fn handle(&mut self, m: BarrierDoneIn, _: &mut Context<Self>) {
        if m.error.is_none() {
            self.barrier_passed = self.barrier_passed.max(m.seq);
        }
        match self.barriers.remove(&m.seq) {
            Some(tx) => {
                tx.send(m.error.map_or(Ok(()), Err));
            }
            // A release sent to a rank that called before it had the board
            // (so it asked for the message) may come after the next barrier
            // dropped the answer, once the release was read on the board.
            None if m.error.is_none() => {
                tracing::debug!(rank = %self.rank, seq = m.seq, "release of a barrier already read on the board")
            }
            None => {
                tracing::warn!(rank = %self.rank, seq = m.seq, "answer to a barrier this rank is not in; dropped")
            }
        }
    }
}

impl Worker {
    /// Answers everyone waiting for the master (finalize, barriers) with
    /// `error`: no answer will come.
    pub(super) fn fail_waiters(&mut self, error: &ReduceError) {
        for tx in self.finalize.drain(..) {
            let _ = tx.send(Err(error.clone()));
        }
        self.fail_barriers(error);
    }

    /// Answers every barrier waiting here with `error`.
    pub(super) fn fail_barriers(&mut self, error: &ReduceError) {
        for (_, tx) in self.barriers.drain() {
            tx.send(Err(error.clone()));
        }
    }
}
