//! Barriers: each rank says it reached barrier `seq`; the master answers
//! every rank once all have.
//!
//! Cost: one message from each rank to the master, the master's own
//! included, and one back to each rank that does not read the release on
//! the master's notice board (p messages when every rank lies on the
//! master's node, 2 p when none does; a barrier run as a reduction of an
//! empty array took about 6 p: joins, tasks, gets, task reports and
//! completions). Why the board spares the answer, not only its wait: the
//! answers went out after the post, one by one, and every one woke a rank's
//! transport and actors threads on a node with fewer cores than ranks
//! right when the released ranks started their next operation (after the
//! benchmark's barriers the master took their joins 0.2 ms late at
//! 128 KiB). A barrier carries no data, so a rank declared failed
//! before or during it, or one that finalized without reaching it, fails
//! it on every rank that reached it, with `ReduceError::RanksLost` naming
//! those ranks: no barrier can wait for a rank that will never come.

use super::Master;
use actix::prelude::*;
use std::collections::BTreeSet;
use taskfold_core::wire::Msg;
use taskfold_core::{Rank, ReduceError};

/// A rank reached barrier `seq` (`wire` bytes long); `board`: it reads
/// the release on the notice board, so only a failure is sent to it.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct BarrierIn {
    pub(crate) from: Rank,
    pub(crate) seq: u64,
    pub(crate) board: bool,
    pub(crate) wire: usize,
}

impl Handler<BarrierIn> for Master {
    type Result = ();

    fn handle(&mut self, m: BarrierIn, _: &mut Context<Self>) {
        if self.stale(m.from) {
            return; // sent before its rank heard of the rollback
        }
        if self.awaiting_reports() {
            return self.keep(m);
        }
        self.count_in(m.wire);
        if m.from.0 >= self.size || self.out.view().is_dead(m.from.0) {
            tracing::debug!(from = %m.from, "ignoring a barrier from a fenced or unknown rank");
            return;
        }
        if let Some(error) = self.barrier_error(m.seq, self.barriers.get(&m.seq)) {
            self.send(
                m.from,
                &Msg::BarrierDone {
                    seq: m.seq,
                    error: Some((&error).into()),
                },
            );
            return;
        }
        let arrived = self.barriers.entry(m.seq).or_default();
        arrived.insert(m.from.0, m.board);
        if arrived.len() as u32 == self.size {
            // Without a board no rank can read one (a rank only knows the
            // board this master sent it): everyone gets the message.
            let posted = self.board.is_some();
            let arrived: Vec<Rank> = self
                .barriers
                .remove(&m.seq)
                .unwrap_or_default()
                .into_iter()
                .filter(|&(_, board)| !(posted && board))
                .map(|(r, _)| Rank(r))
                .collect();
            let done = Msg::BarrierDone {
                seq: m.seq,
                error: None,
            };
            // The board first: the application threads of this node wake
            // at once, before the messages that follow wake the rest.
            if let Some(b) = &self.board {
                b.post_barrier(m.seq);
            }
            // The master's own rank last: it hears at once, through its own
            // mailbox, and would start its next operation while the others
            // still wait (see `completion_order`).
            let own = self.out.transport().rank();
            for r in super::drive::completion_order(&arrived, own, own) {
                self.send(r, &done);
            }
        }
    }
}

impl Master {
    /// Why barrier `seq`, reached so far by `arrived`, cannot complete:
    /// ranks of the job declared failed, or that finalized without
    /// reaching it (they reach no barrier any more).
    fn barrier_error(
        &self,
        seq: u64,
        arrived: Option<&std::collections::BTreeMap<u32, bool>>,
    ) -> Option<ReduceError> {
        let left = self
            .finalized
            .iter()
            .filter(|r| !arrived.is_some_and(|a| a.contains_key(r)));
        let dead = self.out.view().dead();
        let ranks: BTreeSet<u32> = dead.iter().map(|r| r as u32).chain(left.copied()).collect();
        if ranks.is_empty() {
            return None;
        }
        Some(ReduceError::RanksLost {
            id: format!("barrier-{seq}"),
            ranks: ranks.into_iter().collect(),
        })
    }

    /// A rank was declared failed or finalized: every barrier still
    /// waiting that it cannot complete fails on the ranks that reached it.
    pub(super) fn fail_barriers(&mut self) {
        let pending = std::mem::take(&mut self.barriers);
        for (seq, arrived) in pending {
            let Some(error) = self.barrier_error(seq, Some(&arrived)) else {
                self.barriers.insert(seq, arrived);
                continue;
            };
            let msg = Msg::BarrierDone {
                seq,
                error: Some((&error).into()),
            };
            // Whether or not they read the board: a failure is never
            // posted. (`send` skips the dead.)
            for &r in arrived.keys() {
                self.send(Rank(r), &msg);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Barriers driven message by message over the serialising loopback.
    use super::*;
    use crate::master::tests::down;
    use crate::outbox::Outbox;
    use std::sync::Arc;
    use std::time::Duration;
    use taskfold_core::wire;
    use taskfold_transports::board::Board;
    use taskfold_transports::loopback::{LoopbackHub, LoopbackTransport};
    use taskfold_transports::{Event, Transport};

    fn master(ts: &[Arc<LoopbackTransport>]) -> Addr<Master> {
        let t: Arc<dyn Transport> = ts[0].clone();
        Master::new(ts.len() as u32, Outbox::of(t), 1000).start()
    }

    /// A master that posts on `board` (call inside a system).
    fn master_with_board(ts: &[Arc<LoopbackTransport>], board: Arc<Board>) -> Addr<Master> {
        let t: Arc<dyn Transport> = ts[0].clone();
        let mut master = Master::new(ts.len() as u32, Outbox::of(t), 1000);
        master.set_board(board);
        master.start()
    }

    /// `n` ranks over the loopback, and a board for their master.
    fn ranks_and_board(n: u32) -> (Arc<LoopbackHub>, Vec<Arc<LoopbackTransport>>, Arc<Board>) {
        let (hub, ts) = LoopbackHub::new(n);
        (hub, ts, Arc::new(Board::create().unwrap()))
    }

    /// The barrier answers sent so far: (to, seq, error).
    fn answers(ts: &[Arc<LoopbackTransport>]) -> Vec<(u32, u64, Option<ReduceError>)> {
        let mut out = Vec::new();
        for (r, t) in ts.iter().enumerate() {
            for e in t.events().try_iter() {
                if let Event::Message { frame, .. } = e {
                    if let Msg::BarrierDone { seq, error } = wire::decode(&frame).unwrap() {
                        out.push((r as u32, seq, error.map(Into::into)));
                    }
                }
            }
        }
        out
    }

    async fn reach(m: &Addr<Master>, from: u32, seq: u64) {
        reach_watching(m, from, seq, false).await
    }

    /// Rank `from` reaches barrier `seq`, reading its release on the board
    /// if `board`.
    async fn reach_watching(m: &Addr<Master>, from: u32, seq: u64, board: bool) {
        m.send(BarrierIn {
            from: Rank(from),
            seq,
            board,
            wire: 0,
        })
        .await
        .unwrap();
    }

    async fn settle() {
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }

    #[test]
    fn a_barrier_answers_every_rank_once_the_last_arrives() {
        let (_hub, ts) = LoopbackHub::new(3);
        actix_rt::System::new().block_on(async move {
            let m = master(&ts);
            reach(&m, 2, 0).await;
            reach(&m, 0, 0).await;
            // The next barrier's early arrival is kept apart.
            reach(&m, 0, 1).await;
            settle().await;
            assert_eq!(answers(&ts), vec![], "rank 1 has not arrived");
            reach(&m, 1, 0).await;
            settle().await;
            let mut got = answers(&ts);
            got.sort_by_key(|a| a.0);
            assert_eq!(got, vec![(0, 0, None), (1, 0, None), (2, 0, None)]);
        });
    }

    #[test]
    fn only_released_barriers_are_posted_on_the_board() {
        let (_hub, ts, board) = ranks_and_board(3);
        let b = board.clone();
        actix_rt::System::new().block_on(async move {
            let m = master_with_board(&ts, b);
            settle().await;
            // Every other rank is told where the board lies, at start.
            for t in &ts[1..] {
                let told = t.events().try_iter().any(|e| {
                    matches!(e, Event::Message { frame, .. }
                        if matches!(wire::decode(&frame), Ok(Msg::Board { .. })))
                });
                assert!(told);
            }
            for r in [0, 1, 2] {
                assert!(!board.barrier_released(0));
                reach(&m, r, 0).await;
            }
            assert!(board.barrier_released(0));
            // A barrier that fails (rank 2 died) is never posted: its
            // waiters hear the loss by message.
            reach(&m, 0, 1).await;
            down(&m, 2).await;
            reach(&m, 1, 1).await;
            settle().await;
            assert!(!board.barrier_released(1));
            assert_eq!(answers(&ts).len(), 5, "three releases and two losses");
        });
    }

    #[test]
    fn ranks_that_read_the_board_get_only_failures_by_message() {
        let (_hub, ts, board) = ranks_and_board(3);
        let b = board.clone();
        actix_rt::System::new().block_on(async move {
            let m = master_with_board(&ts, b);
            settle().await;
            // (Drops the board's whereabouts, sent at start.)
            answers(&ts);
            // Ranks 0 and 2 read the board, rank 1 does not.
            reach_watching(&m, 0, 0, true).await;
            reach_watching(&m, 1, 0, false).await;
            reach_watching(&m, 2, 0, true).await;
            settle().await;
            assert!(board.barrier_released(0));
            assert_eq!(answers(&ts), vec![(1, 0, None)]);
            // A failure is never posted: all of its waiters hear it.
            reach_watching(&m, 0, 1, true).await;
            reach_watching(&m, 1, 1, false).await;
            down(&m, 2).await;
            settle().await;
            assert!(!board.barrier_released(1));
            let lost = Some(ReduceError::RanksLost {
                id: "barrier-1".into(),
                ranks: vec![2],
            });
            let mut got = answers(&ts);
            got.sort_by_key(|a| a.0);
            assert_eq!(got, vec![(0, 1, lost.clone()), (1, 1, lost)]);
        });
    }

    #[test]
    fn without_a_board_every_rank_gets_its_release_by_message() {
        // A rank can only say it reads the board this master sent it; if
        // one says so anyway, it still gets its answer.
        let (_hub, ts) = LoopbackHub::new(2);
        actix_rt::System::new().block_on(async move {
            let m = master(&ts);
            reach_watching(&m, 0, 0, true).await;
            reach_watching(&m, 1, 0, true).await;
            settle().await;
            let mut got = answers(&ts);
            got.sort_by_key(|a| a.0);
            assert_eq!(got, vec![(0, 0, None), (1, 0, None)]);
        });
    }

    #[test]
    fn a_dead_rank_fails_the_waiting_barrier_and_the_later_ones() {
        let (_hub, ts) = LoopbackHub::new(3);
        actix_rt::System::new().block_on(async move {
            let m = master(&ts);
            reach(&m, 0, 0).await;
            reach(&m, 1, 0).await;
            down(&m, 2).await;
            settle().await;
            // Rank 2's loss, as barrier `seq` reports it.
            let lost = |seq: u64| {
                Some(ReduceError::RanksLost {
                    id: format!("barrier-{seq}"),
                    ranks: vec![2],
                })
            };
            let mut got = answers(&ts);
            got.sort_by_key(|a| a.0);
            assert_eq!(got, vec![(0, 0, lost(0)), (1, 0, lost(0))]);
            // A later barrier cannot wait for rank 2 either; its frames are
            // ignored.
            reach(&m, 2, 1).await;
            reach(&m, 1, 1).await;
            settle().await;
            assert_eq!(answers(&ts), vec![(1, 1, lost(1))]);
        });
    }
}
