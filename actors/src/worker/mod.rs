//! The worker actor (every rank): holds this rank's contributions, executes
//! tasks (one-sided get, fold, ready message) and completes futures.
//!
//! CPU work (serialising a contribution, folding) runs on the fold pool
//! (`crate::pool::FoldPool`); the actor's thread only routes messages.
//!
//! Each non-root contribution is kept as a replica buffer (its original,
//! checksummed), exposed for gets, written to the local replica directory
//! and offered to the buddy rank, so that it can be recovered (see the
//! book's Architecture chapter). What happens to a contribution, and when,
//! is decided by its state machine, [`Contribution`]; the handlers carry
//! its actions out.
//!
//! What a crash of a worker loses: its intermediate data and the buddy
//! copies it held. The master recovers the originals its data held from
//! their replicas, or ends the reduction with a typed error naming them.

mod barrier;
mod end;
mod failover;
mod fold;
mod join;
mod pieces;
mod prepare;
mod recovery;
mod results;
mod task;

pub(crate) use barrier::{BarrierDoneIn, BarrierReq};
pub(crate) use end::{CompleteIn, FinalizeAckIn, FinalizeReq, MasterGone, ReleaseIn};
pub(crate) use failover::Failover;
pub(crate) use join::StartReduce;
pub(crate) use prepare::original_inline;
pub(crate) use recovery::{RankFailedIn, ReinitIn, ReinitLeftIn, ReplicaAckIn};
pub(crate) use results::{ReleaseResults, ResultAtIn, ResultStoredIn};
pub(crate) use task::TaskIn;

use crate::future::Slot;
use crate::hooks::Hook;
use crate::outbox::Outbox;
use crate::perf::PerformanceCounter;
use crate::pool::FoldPool;
use crate::replica::{ReplicaDisk, ReplicaStore};
use actix::prelude::*;
use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use taskfold_core::contribution::Contribution;
use taskfold_core::reducer::Decoder;
use taskfold_core::wire::{Join, Msg, Task};
use taskfold_core::{Group, Rank, ReduceError, ReduceValue};

/// A fetch in progress, cancellable if its source is declared failed.
pub(crate) struct Fetching {
    pub(crate) task: Task,
    /// The rank the data comes from (provider, or the replica's holder).
    pub(crate) from: Rank,
    pub(crate) handle: SpawnHandle,
    /// A piecewise fold in progress (the value is in there meanwhile).
    pub(crate) pieces: Option<pieces::Shared>,
}

/// This rank's part in one live reduction: its state machine
/// ([`Contribution`]: what was done, what may happen next) and the
/// resources the actor carries its actions out with.
pub(crate) struct Local {
    /// Where the contribution stands: every decision of its protocol.
    pub(crate) state: Contribution,
    pub(crate) join: Join,
    pub(crate) group: Group,
    /// `D_i`; `None` while a fold holds it, or after it was consumed.
    pub(crate) value: Option<Box<dyn ReduceValue>>,
    pub(crate) slot: Arc<Slot>,
    pub(crate) decode: Decoder,
    /// `O_i` as a replica buffer (header + archive), kept for recovery:
    /// the contribution's own buffer until the local disk copy is written,
    /// then a read-only mapping of that copy (so that the buffer is the
    /// value's alone and folds go into it in place). With a buddy on this
    /// node and no disk copy, the buffer itself, for the whole reduction:
    /// the buddy's copy is a view of it, so the first fold goes into a new
    /// buffer. `None` at the root and with durability off.
    pub(crate) original: Option<Bytes>,
    /// True until the reduction ends here; its disk write checks it before
    /// creating the file (see [`ReplicaDisk::seal`]).
    pub(crate) disk_live: Arc<AtomicBool>,
    /// Where same-node peers read the original in place, for the join.
    pub(crate) direct: Option<taskfold_transports::Locator>,
    /// Tasks that came while an `after-join` test hook holds the
    /// reduction (see [`taskfold_core::contribution::Work::Held`]).
    pub(crate) held: Vec<Task>,
    /// Bytes this reduction counts in the buffer pool's reduction data in
    /// flight (`taskfold_core::pool::start_flight`).
    pub(crate) flight: usize,
    pub(crate) fetch: Option<Fetching>,
    /// What the join named of the original's copies (for a new master).
    pub(crate) announced: failover::Announced,
    /// The buddy the original was last offered to (a copy there is made
    /// again elsewhere if that buddy dies).
    pub(crate) holder: Option<Rank>,
    /// Which of this worker's reductions this is ([`Worker::new_life`]):
    /// work started for one (a fetch, a fold, a serialisation) reports
    /// back with it, and is dropped if the key now belongs to another.
    pub(crate) life: u64,
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
    fenced: bool,
    /// Keys of this rank's live reductions, shared with `Runtime::reduce` so
    /// that a duplicate id is refused at once, on the caller's thread.
    live: Arc<Mutex<HashSet<u64>>>,
    finalize: Vec<flume::Sender<Result<(), ReduceError>>>,
    /// Where this rank's finalize stands.
    finalizing: end::Finalize,
    /// Set once this rank's watch declared the master lost: every request
    /// that needs the master fails with it at once.
    master_lost: Option<ReduceError>,
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
    /// A report to a new master in preparation (see `failover`).
    rejoining: Option<failover::Rejoining>,
    /// Reductions that ended here lately (for a new master).
    ended: failover::Ended,
    /// The last completion number of each key completed here lately: the
    /// tag of this rank's next offer of a copy for that key.
    completions: taskfold_core::replica::reuse::Completions,
    /// When each reduction key last ended here, to judge whether a dead
    /// master's disk copy found on this node is stale (see `failover`).
    file_ends: crate::replica::stale::KeyEnds,
    /// The highest barrier released here by message.
    barrier_passed: u64,
    /// This actor's address, for messages to itself.
    me: Option<Addr<Worker>>,
    /// The global restart's epoch this worker heard of last.
    epoch: u32,
    /// The master took this rank's leave of its re-init entry point
    /// (`Msg::ReinitLeft`): a standby is told, so that it rolls nothing
    /// back either.
    left_reinit: bool,
    /// This root's results kept for a replacement (see `results`).
    results: results::RootSide,
    /// The last life given to a reduction here ([`Local::life`]).
    lives: u64,
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
    /// Whether roots keep their results, and the ledger of those handed
    /// to the application (shared with the runtime).
    pub(crate) results: crate::results::Kept,
    /// No replica file of the job that this rank may take up was written
    /// before this moment (this process's start, before its bootstrap:
    /// every other rank's first reduction comes after that).
    pub(crate) since: std::time::SystemTime,
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
            fenced: false,
            live: p.live,
            finalize: Vec::new(),
            finalizing: end::Finalize::No,
            master_lost: None,
            barriers: HashMap::new(),
            ended_early: HashSet::new(),
            same_node_buddy: None,
            stranded: Vec::new(),
            rejoining: None,
            ended: Default::default(),
            completions: Default::default(),
            file_ends: crate::replica::stale::KeyEnds::new(
                crate::replica::stale::ENDS_LIMIT,
                p.since,
            ),
            barrier_passed: 0,
            me: None,
            epoch: 0,
            left_reinit: false,
            results: results::RootSide::new(p.results),
            lives: 0,
        }
    }

    /// A life for a new reduction here, never given before. A key is
    /// reused (a global rollback redoes reductions under their ids, whose
    /// tasks are numbered from 0 again), while work of the old reduction
    /// may still be on its way back: a fetch, a fold on the pool, a
    /// serialisation. Each carries its reduction's life, and is dropped
    /// unless the key's live reduction has that life: the old data would
    /// otherwise be folded into, or replace, the new reduction's value.
    fn new_life(&mut self) -> u64 {
        self.lives += 1;
        self.lives
    }

    /// The live reduction of `key`, if it is the one of life `life`.
    fn local_of(&mut self, key: u64, life: u64) -> Option<&mut Local> {
        self.locals.get_mut(&key).filter(|l| l.life == life)
    }

    /// `key`'s buddy, if it is the one known to be on this node (it views
    /// originals in this rank's shared heap in place): the same answer
    /// when the original is sealed and when it is kept.
    fn viewing_buddy(&self, key: u64) -> Option<Rank> {
        let l = self.locals.get(&key)?;
        viewing_buddy(self.buddy(&l.group), self.same_node_buddy)
    }

    /// This rank's buddy in `group` ([`taskfold_core::replica::buddy_on`]):
    /// the next live member on another node, by the membership view, so
    /// that the worker offers to the rank the others expect.
    fn buddy(&self, group: &Group) -> Option<Rank> {
        buddy(group, self.rank, self.out.view())
    }

    fn to_master(&self, msg: &Msg) {
        if let Err(e) = self.out.to_master(msg) {
            tracing::warn!(rank = %self.rank, error = %e, "could not reach the master");
        }
    }
}

/// `rank`'s buddy in `group` by the membership `view` (see
/// [`Worker::buddy`]); for call sites that hold a borrow of a local.
fn buddy(group: &Group, rank: Rank, view: &crate::membership::View) -> Option<Rank> {
    let nodes = view.nodes();
    taskfold_core::replica::buddy_on(group, rank, &view.dead(), nodes.as_deref())
}

/// Whether `buddy` runs on another node than `rank`, by the membership
/// `view`'s node table (false while the table is not whole).
fn on_another_node(rank: Rank, buddy: Rank, view: &crate::membership::View) -> bool {
    let Some(nodes) = view.nodes() else {
        return false;
    };
    let node = |r: Rank| nodes.get(r.0 as usize).copied();
    matches!((node(rank), node(buddy)), (Some(a), Some(b)) if a != b)
}

/// `buddy` ([`Worker::buddy`]), if it is `same_node` (see
/// [`Worker::viewing_buddy`]).
fn viewing_buddy(buddy: Option<Rank>, same_node: Option<Rank>) -> Option<Rank> {
    buddy.filter(|b| Some(*b) == same_node)
}

impl Actor for Worker {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.me = Some(ctx.address());
    }
}

/// Where a peer on this node may read `data` in place, if the transport
/// offers same-node reads ([`taskfold_transports::SameNode::locate`]).
fn locate(
    t: &std::sync::Arc<dyn taskfold_transports::Transport>,
    data: &[u8],
) -> Option<taskfold_transports::Locator> {
    t.same_node()?.locate(data)
}
