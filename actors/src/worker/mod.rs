//! The worker actor (every rank): holds this rank's contributions, executes
//! tasks (one-sided get, fold, ready message) and completes futures.
//!
//! CPU work (serialising a contribution, folding) runs on the fold pool
//! (`crate::pool::FoldPool`); the actor's thread only routes messages.
//!
//! Each non-root contribution is kept as a replica buffer (its original,
//! checksummed), exposed for gets, written to the local replica directory
//! and offered to the buddy rank, so that it can be recovered (DESIGN.md §2).
//!
//! What a crash of a worker loses: its intermediate data and the buddy
//! copies it held. The master recovers the originals its data held from
//! their replicas, or ends the reduction with a typed error naming them.

mod barrier;
mod handlers;
mod pieces;
mod recovery;

pub(crate) use barrier::{BarrierDoneIn, BarrierReq};
pub(crate) use handlers::{
    CompleteIn, FinalizeAckIn, FinalizeReq, PeerDown, ReleaseIn, StartReduce, TaskIn,
};
pub(crate) use recovery::{RankFailedIn, ReplicaAckIn};

use crate::config::Durability;
use crate::future::Slot;
use crate::hooks::Hook;
use crate::outbox::Outbox;
use crate::perf::PerformanceCounter;
use crate::pool::FoldPool;
use crate::replica::{DropKey, ReplicaDisk, ReplicaStore};
use actix::prelude::*;
use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use taskfold_core::reducer::Decoder;
use taskfold_core::replica::original_key;
use taskfold_core::wire::{Join, Msg, Task};
use taskfold_core::{Group, Rank, RankSet, ReduceError, ReduceValue};
use taskfold_transports::BufferKey;

/// A fetch in progress, cancellable if its source is declared failed.
pub(crate) struct Fetching {
    pub(crate) task: Task,
    /// The rank the data comes from (provider, or the replica's holder).
    pub(crate) from: Rank,
    pub(crate) handle: SpawnHandle,
    /// A piecewise fold in progress (the value is in there meanwhile).
    pub(crate) pieces: Option<pieces::Shared>,
}

/// This rank's part in one live reduction.
pub(crate) struct Local {
    pub(crate) join: Join,
    pub(crate) group: Group,
    /// This rank's position in the group.
    pub(crate) index: usize,
    /// `D_i`; `None` while a fold holds it, or after it was consumed.
    pub(crate) value: Option<Box<dyn ReduceValue>>,
    /// Which originals `value` holds.
    pub(crate) path: RankSet,
    pub(crate) slot: Arc<Slot>,
    pub(crate) is_root: bool,
    pub(crate) decode: Decoder,
    /// `O_i` as a replica buffer (header + archive), kept for recovery:
    /// the contribution's own buffer until the local disk copy is written,
    /// then a read-only mapping of that copy (so that the buffer is the
    /// value's alone and folds go into it in place). With a buddy on this
    /// node and no disk copy, the buffer itself, for the whole reduction:
    /// the buddy's copy is a view of it, so the first fold goes into a new
    /// buffer. `None` at the root and with durability off.
    pub(crate) original: Option<Bytes>,
    pub(crate) durability: Durability,
    /// The buddy the original was offered to.
    pub(crate) buddy: Option<Rank>,
    /// The join was announced to the master.
    pub(crate) joined: bool,
    /// The local disk copy was written (or failed): the join may go.
    pub(crate) disk_written: bool,
    /// The local disk copy exists (offered to a buddy on this node, which
    /// maps it instead of copying).
    pub(crate) disk_copy: bool,
    /// True until the reduction ends here; its disk write checks it before
    /// creating the file (see [`ReplicaDisk::seal`]).
    pub(crate) disk_live: Arc<std::sync::atomic::AtomicBool>,
    /// The buddy acknowledged its copy.
    pub(crate) buddy_acked: bool,
    /// No disk copy was attempted: the buddy, on this node, maps
    /// `original` where it lies (so there is no file to remove at the end).
    pub(crate) in_memory: bool,
    /// The standing copy the join names (`Ready::standing`): asynchronous
    /// durability with the buddy on this node.
    pub(crate) standing: Option<taskfold_core::wire::Standing>,
    /// `original`'s place in the shared heap was offered to the buddy,
    /// which may hold a view of it: if the reduction ends here abnormally
    /// (fenced, master lost), the buffer is never reused (see
    /// [`Worker::fail_all`]).
    pub(crate) heap_offered: bool,
    /// Where same-node peers read the original in place, for the join.
    pub(crate) direct: Option<taskfold_transports::Locator>,
    /// Tasks wait while an `after-join` test hook holds the reduction.
    pub(crate) held: Option<Vec<Task>>,
    /// Bytes this reduction counts in the buffer pool's reduction data in
    /// flight (`taskfold_core::pool::start_flight`).
    pub(crate) flight: usize,
    pub(crate) fetch: Option<Fetching>,
}

impl Local {
    /// Whether the join waits for the buddy's answer: with synchronous
    /// durability. (An original kept only in memory, whose buddy's view
    /// is its only copy that outlives this process, names that copy in
    /// its join instead: see `Ready::standing`.)
    pub(crate) fn waits_for_buddy(&self) -> bool {
        self.durability == Durability::Sync
    }
}

/// The worker of one rank.
pub struct Worker {
    rank: Rank,
    out: Outbox,
    pool: FoldPool,
    perf: Addr<PerformanceCounter>,
    store: Addr<ReplicaStore>,
    disk: Arc<ReplicaDisk>,
    hooks: Vec<Hook>,
    locals: HashMap<u64, Local>,
    /// Ranks the master declared failed.
    dead: RankSet,
    fenced: bool,
    /// Keys of this rank's live reductions, shared with `Runtime::reduce` so
    /// that a duplicate id is refused at once, on the caller's thread.
    live: Arc<Mutex<HashSet<u64>>>,
    finalize: Vec<flume::Sender<Result<(), ReduceError>>>,
    /// Barriers this rank is in, by number, waiting for the master.
    barriers: HashMap<u64, crate::notices::Reply<Result<(), ReduceError>>>,
    /// Reductions this rank, their root, ended when its value became whole,
    /// whose completion notice from the master is still to come (it is
    /// then ignored: the key may name a new reduction by then).
    ended_early: HashSet<u64>,
    /// The buddy that last said it is on this rank's node and keeps its
    /// copy as a view of this rank's own buffer: while it is still the
    /// buddy, originals in the shared heap get no disk copy (the view
    /// keeps them if this process dies).
    same_node_buddy: Option<Rank>,
    /// Originals a buddy may still be reading in place after their
    /// reductions ended here abnormally: kept until the process ends.
    stranded: Vec<Bytes>,
}

/// What a worker is built from.
pub(crate) struct WorkerParts {
    pub(crate) rank: Rank,
    pub(crate) out: Outbox,
    pub(crate) pool: FoldPool,
    pub(crate) perf: Addr<PerformanceCounter>,
    pub(crate) store: Addr<ReplicaStore>,
    pub(crate) disk: Arc<ReplicaDisk>,
    pub(crate) hooks: Vec<Hook>,
    pub(crate) live: Arc<Mutex<HashSet<u64>>>,
}

impl Worker {
    pub(crate) fn new(p: WorkerParts) -> Self {
        Worker {
            rank: p.rank,
            out: p.out,
            pool: p.pool,
            perf: p.perf,
            store: p.store,
            disk: p.disk,
            hooks: p.hooks,
            locals: HashMap::new(),
            dead: RankSet::new(),
            fenced: false,
            live: p.live,
            finalize: Vec::new(),
            barriers: HashMap::new(),
            ended_early: HashSet::new(),
            same_node_buddy: None,
            stranded: Vec::new(),
        }
    }

    /// `key`'s buddy, if it is the one known to be on this node (it views
    /// originals in this rank's shared heap in place): the same answer
    /// when the original is sealed and when it is kept.
    fn viewing_buddy(&self, key: u64) -> Option<Rank> {
        let l = self.locals.get(&key)?;
        let buddy = taskfold_core::replica::buddy(&l.group, self.rank, &self.dead)?;
        (Some(buddy) == self.same_node_buddy).then_some(buddy)
    }

    fn to_master(&self, msg: &Msg) {
        if let Err(e) = self.out.send(Rank(0), msg) {
            tracing::warn!(rank = %self.rank, error = %e, "could not reach the master");
        }
    }

    /// Ends a local reduction and fills its future.
    fn finish(&mut self, key: u64, error: Option<ReduceError>) {
        let local = self.locals.remove(&key);
        if let Some(l) = &local {
            // Before the removal of the reduction's files: a write still in
            // flight must not recreate this rank's file afterwards, where the
            // master could take it for the original of a later reduction
            // with the same key.
            self.disk.seal(&l.disk_live);
        }
        let disk = local
            .as_ref()
            .is_some_and(|l| l.durability != Durability::Off && !l.in_memory);
        self.store.do_send(DropKey { key, disk });
        let Some(mut local) = local else {
            return;
        };
        taskfold_core::pool::end_flight(local.flight);
        if let Some(f) = local.fetch.take() {
            let _ = f.handle; // the future ends with the actor's context
        }
        let t = self.out.transport();
        t.withdraw(BufferKey(key));
        t.withdraw(BufferKey(original_key(key)));
        local.slot.release_key(&self.live, key);
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
        // Release this reduction's buffers (back to the pool) before the
        // application wakes up: its next contribution can reuse them.
        let slot = local.slot.clone();
        drop(local);
        slot.fill(outcome);
    }

    /// Fails every live reduction (the master is gone, fenced, shutdown).
    ///
    /// The reductions may go on elsewhere without this rank, which may
    /// have been declared failed: a buddy may then be recovering an
    /// original of this rank from its view of the original's own buffer.
    /// Such buffers are kept, unchanged, until the process ends, never
    /// reused for other data that could pass for the original.
    fn fail_all(&mut self, error: ReduceError) {
        // No completion notice will come for them any more.
        self.ended_early.clear();
        for l in self.locals.values().filter(|l| l.heap_offered) {
            if let Some(o) = &l.original {
                self.stranded.push(o.clone());
            }
        }
        let keys: Vec<u64> = self.locals.keys().copied().collect();
        for k in keys {
            self.finish(k, Some(error.clone()));
        }
    }
}

impl Actor for Worker {
    type Context = Context<Self>;
}
