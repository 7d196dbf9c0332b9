//! Barriers: each rank says it reached barrier `seq`; the master answers
//! every rank once all have.
//!
//! Cost: one message from each rank to the master and one back, the
//! master's own included (2 p messages; a barrier run as a reduction of an
//! empty array took about 6 p: joins, tasks, gets, task reports and
//! completions). A barrier carries no data, so a rank declared failed
//! before or during it fails it on every rank that reached it, with
//! `ReduceError::RanksLost` naming the dead ranks: no barrier can wait for
//! a rank that will never come.

use super::Master;
use actix::prelude::*;
use std::collections::BTreeSet;
use taskfold_core::wire::Msg;
use taskfold_core::{Rank, ReduceError};

/// A rank reached barrier `seq` (`wire` bytes long).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct BarrierIn {
    pub(crate) from: Rank,
    pub(crate) seq: u64,
    pub(crate) wire: usize,
}

impl Handler<BarrierIn> for Master {
    type Result = ();

    fn handle(&mut self, m: BarrierIn, _: &mut Context<Self>) {
        self.count_in(m.wire);
        if m.from.0 >= self.size || self.dead.contains(&m.from.0) {
            tracing::debug!(from = %m.from, "ignoring a barrier from a fenced or unknown rank");
            return;
        }
        if let Some(error) = self.barrier_error(m.seq) {
            self.send(
                m.from,
                &Msg::BarrierDone {
                    seq: m.seq,
                    error: Some(error),
                },
            );
            return;
        }
        let arrived = self.barriers.entry(m.seq).or_default();
        arrived.insert(m.from.0);
        if arrived.len() as u32 == self.size {
            let arrived = self.barriers.remove(&m.seq).unwrap_or_default();
            let done = Msg::BarrierDone {
                seq: m.seq,
                error: None,
            };
            for r in arrived {
                self.send(Rank(r), &done);
            }
        }
    }
}

impl Master {
    /// Why barrier `seq` cannot complete: ranks of the job declared failed.
    fn barrier_error(&self, seq: u64) -> Option<ReduceError> {
        if self.dead.is_empty() {
            return None;
        }
        let ranks: BTreeSet<u32> = self.dead.iter().copied().collect();
        Some(ReduceError::RanksLost {
            id: format!("barrier-{seq}"),
            ranks: ranks.into_iter().collect(),
        })
    }

    /// A rank was declared failed: every barrier still waiting fails on
    /// the ranks that reached it.
    pub(super) fn fail_barriers(&mut self) {
        let pending = std::mem::take(&mut self.barriers);
        for (seq, arrived) in pending {
            let Some(error) = self.barrier_error(seq) else {
                continue;
            };
            let msg = Msg::BarrierDone {
                seq,
                error: Some(error),
            };
            // (`send` skips the dead.)
            for r in arrived {
                self.send(Rank(r), &msg);
            }
        }
    }
}
