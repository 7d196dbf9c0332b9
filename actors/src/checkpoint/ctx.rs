//! What a rank's checkpoint engine and its application threads share: the
//! rank's directories, the placement, the ranks known dead, the transport,
//! and the questions awaiting an answer.

use super::store::FileStore;
use super::CheckpointError;
use crate::hooks::Hook;
use bytes::Bytes;
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use taskfold_core::checkpoint::{Failure, JobId, Placement};
use taskfold_core::settings::CheckpointConfig;
use taskfold_core::wire::checkpoint::CheckpointMsg;
use taskfold_core::wire::{self, Msg};
use taskfold_core::Rank;
use taskfold_transports::{BufferKey, Transport};

/// Where rank `rank` of job `job` keeps its pieces under the root `root`
/// (`TASKFOLD_CHECKPOINT_DIR`, `TASKFOLD_CHECKPOINT_SHARED_DIR`):
/// `<root>/job-<job id>/r<rank>`. Each job has its own directory, so that
/// two jobs never write over each other's pieces.
pub fn rank_dir(root: &Path, job: JobId, rank: u32) -> PathBuf {
    root.join(format!("job-{:016x}", job.0))
        .join(format!("r{rank}"))
}

/// Whose pieces a holder keeps for others, each in a private
/// subdirectory of its local directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Held {
    /// A partner's L2 copies: `held-r<owner>`.
    Copies(u32),
    /// A group's L3 parity pieces: `held-g<group>`.
    Parity(u32),
}

/// A rank's directories of pieces.
pub(crate) struct Stores {
    /// L1, and this rank's own L3 data pieces.
    pub(crate) local: Arc<FileStore>,
    /// L4, if the job has a shared directory.
    pub(crate) shared: Option<FileStore>,
    /// A fresh directory made for this process (no directory was
    /// configured): removed when the last user is gone.
    fresh: Option<PathBuf>,
    /// The pieces held for others, opened at the first use.
    held: Mutex<HashMap<Held, Arc<FileStore>>>,
    keep: usize,
}

impl Stores {
    /// Keeps this rank's own pieces from `version` up
    /// ([`FileStore::hold_from`]), locally and in the shared directory.
    pub(crate) fn hold_from(&self, version: u64) {
        self.local.hold_from(version);
        if let Some(s) = &self.shared {
            s.hold_from(version);
        }
    }

    /// Ends [`Stores::hold_from`].
    pub(crate) fn release(&self) {
        self.local.release();
        if let Some(s) = &self.shared {
            s.release();
        }
    }
}

impl Drop for Stores {
    fn drop(&mut self) {
        if let Some(dir) = &self.fresh {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Stores {
    /// The store of the pieces held for `whose` (made if absent).
    pub(crate) fn held(&self, whose: Held, me: u32) -> Result<Arc<FileStore>, CheckpointError> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = held.get(&whose).filter(|s| s.dir().exists()) {
            return Ok(s.clone());
        }
        let (name, writer) = match whose {
            Held::Copies(owner) => (format!("held-r{owner}"), owner),
            Held::Parity(group) => (format!("held-g{group}"), me),
        };
        let store = FileStore::open(&self.local.dir().join(name), self.keep)
            .map_err(CheckpointError::Open)?;
        store.sweep(writer).map_err(CheckpointError::Open)?;
        let store = Arc::new(store);
        held.insert(whose, store.clone());
        Ok(store)
    }
}

/// Questions this rank asked other ranks, by number, with where their
/// answer goes.
#[derive(Default)]
pub(crate) struct Requests {
    next: AtomicU64,
    waiting: Mutex<HashMap<u64, (u32, flume::Sender<CheckpointMsg>)>>,
}

impl Requests {
    /// A fresh question to `to`, and where its answer will arrive.
    pub(crate) fn open(&self, to: u32) -> (u64, flume::Receiver<CheckpointMsg>) {
        let req = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = flume::bounded(1);
        self.lock().insert(req, (to, tx));
        (req, rx)
    }

    /// Forgets question `req` (answered, or given up).
    pub(crate) fn close(&self, req: u64) {
        self.lock().remove(&req);
    }

    /// Hands `from`'s answer to its question; an answer to no question of
    /// ours, or from another rank than the one asked, is dropped.
    pub(crate) fn answer(&self, from: u32, req: u64, msg: CheckpointMsg) {
        match self.lock().remove(&req) {
            Some((to, tx)) if to == from => {
                let _ = tx.send(msg);
            }
            Some(entry) => {
                tracing::warn!(
                    from,
                    req,
                    "a checkpoint answer from another rank than asked; dropped"
                );
                self.lock().insert(req, entry);
            }
            None => tracing::debug!(from, req, "a late or unknown checkpoint answer; dropped"),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (u32, flume::Sender<CheckpointMsg>)>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a rank's checkpoints share between the engine's thread and the
/// application's.
pub(crate) struct Ctx {
    pub(crate) rank: u32,
    pub(crate) job: JobId,
    pub(crate) config: CheckpointConfig,
    /// How long a question waits for its answer: the failure detection
    /// timeout (`Config::failure_timeout`).
    pub(crate) answer_timeout: Duration,
    /// How long a remote level may take before it is failed
    /// (`Config::finalize_timeout`); also bounds a get.
    pub(crate) deadline: Duration,
    pub(crate) hooks: Vec<Hook>,
    pub(crate) transport: Arc<dyn Transport>,
    /// Partners and groups, or why there are none.
    pub(crate) placement: Result<Placement, String>,
    stores: Mutex<Option<Arc<Stores>>>,
    /// This rank's membership view: which ranks are dead or unreachable.
    view: crate::membership::View,
    pub(crate) requests: Requests,
}

/// The settings a [`Ctx`] is made from.
pub(crate) struct CtxParts<'a> {
    pub(crate) job: JobId,
    pub(crate) config: &'a CheckpointConfig,
    pub(crate) answer_timeout: Duration,
    pub(crate) deadline: Duration,
    pub(crate) hooks: &'a [Hook],
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) view: crate::membership::View,
}

impl Ctx {
    pub(crate) fn new(p: CtxParts<'_>) -> Ctx {
        let (rank, size) = (p.transport.rank().0, p.transport.size());
        // Without the transport's node table, every rank counts as a node.
        let nodes: Vec<u64> = match p.transport.nodes() {
            Some(n) if n.len() == size as usize => n.to_vec(),
            _ => (0..u64::from(size)).collect(),
        };
        let (k, m) = (usize::from(p.config.group), usize::from(p.config.parity));
        let placement =
            Placement::new(&nodes, k, m, p.config.shared_dir.is_some()).map_err(|e| e.to_string());
        Ctx {
            rank,
            job: p.job,
            config: p.config.clone(),
            answer_timeout: p.answer_timeout,
            deadline: p.deadline,
            hooks: p.hooks.to_vec(),
            transport: p.transport,
            placement,
            stores: Mutex::new(None),
            view: p.view,
            requests: Requests::default(),
        }
    }

    /// The directories, opened (made, checked, swept of a crashed write's
    /// temporary files) at the first call, and again if the local one
    /// disappeared; a failure is returned and the next call tries again.
    pub(crate) fn stores(&self) -> Result<Arc<Stores>, CheckpointError> {
        let mut held = self.stores.lock().unwrap_or_else(|e| e.into_inner());
        // A local directory removed meanwhile (a cleaned scratch disk) is
        // made again rather than failing every later checkpoint.
        if let Some(s) = held.as_ref().filter(|s| s.local.dir().exists()) {
            return Ok(s.clone());
        }
        let keep = self.config.keep;
        let (local_dir, fresh) = match &self.config.dir {
            Some(root) => (rank_dir(root, self.job, self.rank), None),
            None => {
                let prefix = format!("taskfold-ckpt-r{}-", self.rank);
                let dir = taskfold_transports::private::fresh_dir(&prefix)
                    .map_err(CheckpointError::FreshDir)?;
                (dir.clone(), Some(dir))
            }
        };
        let open = |dir: &Path| -> Result<FileStore, CheckpointError> {
            let s = FileStore::open(dir, keep).map_err(CheckpointError::Open)?;
            s.sweep(self.rank).map_err(CheckpointError::Open)?;
            Ok(s)
        };
        let local = open(&local_dir)?;
        let shared = match &self.config.shared_dir {
            Some(root) => Some(open(&rank_dir(root, self.job, self.rank))?),
            None => None,
        };
        let stores = Arc::new(Stores {
            local: Arc::new(local),
            shared,
            fresh,
            held: Mutex::new(HashMap::new()),
            keep,
        });
        *held = Some(stores.clone());
        Ok(stores)
    }

    /// The placement, or why there is none.
    pub(crate) fn placement(&self) -> Result<&Placement, String> {
        self.placement.as_ref().map_err(Clone::clone)
    }

    /// Whether `rank` is known dead (declared failed, or its link from
    /// this rank broke).
    pub(crate) fn is_dead(&self, rank: u32) -> bool {
        self.view.read().is_unreachable(rank)
    }

    /// What this rank knows of the failures: the ranks known dead, and the
    /// nodes none of whose ranks is alive (this rank's own is alive).
    pub(crate) fn failure(&self) -> Failure {
        let dead: BTreeSet<u32> = self
            .view
            .read()
            .unreachable()
            .iter()
            .map(|r| r as u32)
            .collect();
        let mut nodes = BTreeSet::new();
        if let Ok(p) = self.placement() {
            let all: Vec<u32> = (0..p.ranks() as u32).collect();
            for node in all.iter().filter_map(|&r| p.node(r)) {
                let on = |r: &&u32| p.node(**r) == Some(node);
                if all
                    .iter()
                    .filter(on)
                    .all(|r| dead.contains(r) && *r != self.rank)
                {
                    nodes.insert(node);
                }
            }
        }
        Failure { ranks: dead, nodes }
    }

    /// Sends `msg` to `to`.
    pub(crate) fn send(&self, to: u32, msg: CheckpointMsg) -> Result<(), String> {
        let frame = wire::encode(&Msg::Checkpoint(msg));
        self.transport
            .send(Rank(to), Bytes::from(frame))
            .map_err(|e| e.to_string())
    }

    /// Exposes `body` under `key` for one-sided gets.
    pub(crate) fn expose(&self, key: u64, body: Bytes) {
        self.transport.expose(BufferKey(key), body);
    }

    /// Withdraws what is exposed under `key`.
    pub(crate) fn withdraw(&self, key: u64) {
        self.transport.withdraw(BufferKey(key));
    }

    /// Fetches the body `from` exposes under `key`, at most `max` bytes,
    /// within the deadline.
    pub(crate) fn get(&self, from: u32, key: u64, max: u64) -> Result<Vec<u8>, String> {
        let f = self.transport.get_within(Rank(from), BufferKey(key), max);
        match block_within(f, Instant::now() + self.deadline) {
            Some(Ok(r)) => Ok(r.to_vec()),
            Some(Err(e)) => Err(e.to_string()),
            None => Err(format!(
                "no answer from rank {from} within {:?}",
                self.deadline
            )),
        }
    }
}

struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `f` on this thread until it completes, or `None` at `deadline`.
pub(crate) fn block_within<F: Future>(f: F, deadline: Instant) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return Some(out);
        }
        let left = deadline.checked_duration_since(Instant::now())?;
        std::thread::park_timeout(left);
    }
}
