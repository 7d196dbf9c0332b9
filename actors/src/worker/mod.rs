//! The worker actor (every rank): holds this rank's contributions, executes
//! tasks (one-sided get, fold, ready message) and completes futures.
//!
//! CPU work (serialising a contribution, folding) runs on the
//! [`crate::pool::FoldPool`]; the actor's thread only routes messages.
//!
//! What a crash of a worker loses: its originals and intermediate data of
//! every live reduction. The master then ends each reduction that still
//! needed them with a typed error naming the rank.

mod handlers;

pub(crate) use handlers::{
    CompleteIn, FinalizeAckIn, FinalizeReq, PeerDown, ReleaseIn, StartReduce, TaskIn,
};

use crate::future::Slot;
use crate::outbox::Outbox;
use crate::perf::PerformanceCounter;
use crate::pool::FoldPool;
use actix::prelude::*;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use taskfold_core::wire::{Join, Msg};
use taskfold_core::{Rank, RankSet, ReduceError, ReduceValue};

/// This rank's part in one live reduction.
pub(crate) struct Local {
    pub(crate) join: Join,
    /// `D_i`; `None` while a task or a serialisation holds it, or after a
    /// provider's data was consumed.
    pub(crate) value: Option<Box<dyn ReduceValue>>,
    /// Which originals `value` holds.
    pub(crate) path: RankSet,
    pub(crate) slot: Arc<Slot>,
    pub(crate) is_root: bool,
}

/// The worker of one rank.
pub struct Worker {
    rank: Rank,
    out: Outbox,
    pool: FoldPool,
    perf: Addr<PerformanceCounter>,
    locals: HashMap<u64, Local>,
    /// Keys of this rank's live reductions, shared with `Runtime::reduce` so
    /// that a duplicate id is refused at once, on the caller's thread.
    live: Arc<Mutex<HashSet<u64>>>,
    finalize: Vec<flume::Sender<Result<(), ReduceError>>>,
}

impl Worker {
    pub(crate) fn new(
        rank: Rank,
        out: Outbox,
        pool: FoldPool,
        perf: Addr<PerformanceCounter>,
        live: Arc<Mutex<HashSet<u64>>>,
    ) -> Self {
        Worker {
            rank,
            out,
            pool,
            perf,
            locals: HashMap::new(),
            live,
            finalize: Vec::new(),
        }
    }

    fn to_master(&self, msg: &Msg) {
        if let Err(e) = self.out.send(Rank(0), msg) {
            tracing::warn!(rank = %self.rank, error = %e, "could not reach the master");
        }
    }

    /// Ends a local reduction and fills its future.
    fn finish(&mut self, key: u64, error: Option<ReduceError>) {
        let Some(mut local) = self.locals.remove(&key) else {
            return;
        };
        self.out
            .transport()
            .withdraw(taskfold_transports::BufferKey(key));
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        let outcome = match error {
            Some(e) => Err(e),
            None if local.is_root => match local.value.take() {
                Some(v) => Ok(Some(v.into_any())),
                None => Err(ReduceError::Mismatched {
                    id: local.join.id.clone(),
                    detail: "the root completed without holding the result".into(),
                }),
            },
            None => Ok(None),
        };
        local.slot.fill(outcome);
    }

    /// Fails every live reduction (the master is gone, or shutdown).
    fn fail_all(&mut self, error: ReduceError) {
        let keys: Vec<u64> = self.locals.keys().copied().collect();
        for k in keys {
            self.finish(k, Some(error.clone()));
        }
    }
}

impl Actor for Worker {
    type Context = Context<Self>;
}
