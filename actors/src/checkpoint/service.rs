//! A rank's checkpoints as the runtime sees them: the engine's thread,
//! started with the runtime, the router's way in ([`Inbox`]), and the
//! application's calls (checkpoint, restore).

use super::ctx::{Ctx, CtxParts};
use super::engine::{Engine, Input, Job};
use super::future::{CheckpointFuture, Written};
use super::retrieve::{Reader, Restored, Retrieval};
use super::CheckpointError;
use crate::config::Config;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use taskfold_core::checkpoint::{Failure, JobId, Level, Placement};
use taskfold_core::wire::checkpoint::CheckpointMsg;
use taskfold_core::Rank;
use taskfold_transports::Transport;

/// The name a job's pieces are stamped with when neither
/// `TASKFOLD_CHECKPOINT_JOB` nor the job's name says (a [`crate::LocalCluster`]).
pub const DEFAULT_JOB: &str = "taskfold";

/// The router's way into a rank's checkpoint engine: checkpoint messages
/// and the deaths the runtime learns.
#[derive(Clone)]
pub(crate) struct Inbox {
    ctx: Arc<Ctx>,
    tx: flume::Sender<Input>,
}

impl Inbox {
    /// A checkpoint message from `from`: an answer goes straight to the
    /// thread that asked, anything else to the engine.
    pub(crate) fn deliver(&self, from: Rank, msg: CheckpointMsg) {
        match msg {
            CheckpointMsg::Holding { req, .. }
            | CheckpointMsg::Piece { req, .. }
            | CheckpointMsg::Missing { req, .. } => self.ctx.requests.answer(from.0, req, msg),
            msg => {
                let _ = self.tx.send(Input::Msg { from: from.0, msg });
            }
        }
    }

    /// `rank` died (declared failed, or its link broke: the membership
    /// view says so already): what waits for it fails.
    pub(crate) fn dead(&self, rank: Rank) {
        let _ = self.tx.send(Input::Dead(rank.0));
    }
}

/// A rank's checkpoints (see [`crate::checkpoint::Checkpointer::save`]).
pub(crate) struct Checkpoints {
    ctx: Arc<Ctx>,
    tx: Option<flume::Sender<Input>>,
    thread: Option<JoinHandle<()>>,
    /// A due level that cannot be written here was warned about.
    warned: AtomicBool,
}

impl Drop for Checkpoints {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Checkpoints {
    /// Rank `transport.rank()`'s checkpoints as `config` describes them,
    /// and the router's way in. The engine's thread starts now (it serves
    /// other ranks' pieces before this rank checkpoints); the directories
    /// are opened at the first use.
    pub(crate) fn start(
        transport: Arc<dyn Transport>,
        view: crate::membership::View,
        config: &Config,
    ) -> std::io::Result<(Checkpoints, Inbox)> {
        let c = &config.checkpoint;
        let name = c.job.as_deref().unwrap_or(DEFAULT_JOB);
        let ctx = Arc::new(Ctx::new(CtxParts {
            job: JobId::named(name),
            config: c,
            answer_timeout: config.failure_timeout,
            deadline: config.finalize_timeout,
            hooks: &crate::hooks::of(config),
            transport,
            view,
        }));
        let (tx, rx) = flume::unbounded();
        let engine_ctx = ctx.clone();
        let thread = std::thread::Builder::new()
            .name(format!("taskfold-ckpt-{}", ctx.rank))
            .spawn(move || Engine::run(engine_ctx, rx))?;
        let inbox = Inbox {
            ctx: ctx.clone(),
            tx: tx.clone(),
        };
        let me = Checkpoints {
            ctx,
            tx: Some(tx),
            thread: Some(thread),
            warned: AtomicBool::new(false),
        };
        Ok((me, inbox))
    }

    /// The job id pieces are stamped with.
    pub(crate) fn job(&self) -> JobId {
        self.ctx.job
    }

    /// The partners and groups, if the settings allow them.
    pub(crate) fn placement(&self) -> Option<&Placement> {
        self.ctx.placement().ok()
    }

    /// What this rank knows of the failures so far.
    pub(crate) fn failure(&self) -> Failure {
        self.ctx.failure()
    }

    /// Whether `level` can be written (or read) in this job at all.
    fn possible(&self, level: Level) -> Result<(), String> {
        let p = self.ctx.placement();
        match level {
            Level::L1 => Ok(()),
            Level::L2 => p?
                .partner(self.ctx.rank)
                .map(drop)
                .ok_or_else(|| "no partner in a job of one rank".into()),
            Level::L3 => p?
                .group_of(self.ctx.rank)
                .map(drop)
                .ok_or_else(|| "no L3 group".into()),
            Level::L4 => match self.ctx.config.shared_dir {
                Some(_) => Ok(()),
                None => Err("no shared directory".into()),
            },
        }
    }

    /// The levels written at `version` (a level due that this job cannot
    /// have is skipped, with a warning the first time).
    pub(crate) fn due(&self, version: u64) -> Vec<Level> {
        let mut levels = self.ctx.config.intervals.levels_at(version);
        levels.retain(|&l| match self.possible(l) {
            Ok(()) => true,
            Err(_) if l == Level::L4 => false,
            Err(reason) => {
                if !self.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(rank = self.ctx.rank, version, level = %l, %reason, "a checkpoint level is due that this job cannot write; skipped");
                }
                false
            }
        });
        levels
    }

    /// Hands `payload` (the state's archive) to the engine for the levels
    /// due at `version`.
    pub(crate) fn write(
        &self,
        version: u64,
        type_tag: u64,
        payload: rkyv::util::AlignedVec,
        levels: Vec<Level>,
    ) -> CheckpointFuture {
        if levels.is_empty() {
            return CheckpointFuture::ready(version, Ok(Written { version, levels }));
        }
        if let Err(e) = self.ctx.stores() {
            return CheckpointFuture::ready(version, Err(e));
        }
        let (future, done) = CheckpointFuture::pending(version);
        let job = Job {
            version,
            type_tag,
            payload,
            levels,
            done,
        };
        if let Some(tx) = &self.tx {
            // A send that fails drops the job: its completer fails the
            // future with `Shutdown`.
            let _ = tx.send(Input::Job(job));
        }
        future
    }

    /// The newest version of this rank's state of type tag `type_tag` that
    /// reads back intact and decodes with `decode`, from the levels `how`
    /// chooses; every piece skipped is logged with the reason.
    pub(crate) fn restore<T>(
        &self,
        how: &Retrieval,
        type_tag: u64,
        max: Option<u64>,
        decode: &dyn Fn(&[u8]) -> Result<T, String>,
    ) -> Result<Option<Restored<T>>, CheckpointError> {
        let written = |l: Level| {
            (l == Level::L1 || self.ctx.config.intervals.0[usize::from(l.number() - 1)] != 0)
                && self.possible(l).is_ok()
        };
        let (levels, failure, probing): (Vec<Level>, Failure, bool) = match how {
            Retrieval::Probing => (Level::ALL.to_vec(), Failure::default(), true),
            Retrieval::Aware(f) => {
                let surviving = match self.ctx.placement() {
                    Ok(p) => p.surviving(self.ctx.rank, f),
                    Err(_) => vec![Level::L1, Level::L4],
                };
                (surviving, f.clone(), false)
            }
        };
        let reader = Reader {
            ctx: &self.ctx,
            type_tag,
            decode,
            probing,
            failure,
            max,
        };
        let mut tried = Vec::new();
        for level in levels.into_iter().filter(|&l| written(l)) {
            tried.push(level);
            if let Some((version, state)) = reader.level(level)? {
                return Ok(Some(Restored {
                    version,
                    state,
                    level,
                    tried,
                }));
            }
        }
        Ok(None)
    }
}

impl Checkpoints {
    /// The versions of which this rank holds a piece on its own disk or
    /// the shared directory (not read back: a restore checks it); with
    /// neither (a replacement on another node than its dead process),
    /// those its partner lists as L2 copies: what a global restart's rank
    /// reports, newest first, at most [`taskfold_core::reinit::MAX_HELD`].
    pub(crate) fn held_versions(&self) -> Vec<u64> {
        let rank = self.ctx.rank;
        let stores = self.ctx.stores();
        if let Ok(stores) = &stores {
            // Nothing is pruned from here until the hold is narrowed
            // below, and no prune that began before is still removing:
            // every version listed stays on disk (`FileStore::hold_from`).
            stores.hold_from(0);
        }
        let mut held: Vec<u64> = match &stores {
            Ok(stores) => {
                let local = stores.local.versions(rank, Level::L1).ok();
                let shared = stores
                    .shared
                    .as_ref()
                    .and_then(|s| s.versions(rank, Level::L4).ok());
                local.into_iter().chain(shared).flatten().collect()
            }
            Err(_) => Vec::new(),
        };
        if held.is_empty() {
            held = self.partner_versions();
        }
        held.sort_unstable_by(|a, b| b.cmp(a));
        held.dedup();
        held.truncate(taskfold_core::reinit::MAX_HELD);
        if let Ok(stores) = &stores {
            match held.last() {
                Some(&oldest) => stores.hold_from(oldest),
                None => stores.release(),
            }
        }
        held
    }

    /// Ends the hold [`Checkpoints::held_versions`] put on the versions
    /// this rank reported: it restored (or has nothing to restore).
    pub(crate) fn release_held(&self) {
        if let Ok(stores) = self.ctx.stores() {
            stores.release();
        }
    }

    /// The versions this rank's partner holds of its state at L2.
    fn partner_versions(&self) -> Vec<u64> {
        let written = self.ctx.config.intervals.0[usize::from(Level::L2.number() - 1)] != 0;
        let partner = self
            .ctx
            .placement()
            .ok()
            .and_then(|p| p.partner(self.ctx.rank));
        let (Some(partner), true) = (partner, written) else {
            return Vec::new();
        };
        if self.ctx.is_dead(partner) {
            return Vec::new();
        }
        let none = |_: &[u8]| -> Result<(), String> { Ok(()) };
        let reader = Reader {
            ctx: &self.ctx,
            type_tag: 0,
            decode: &none,
            probing: false,
            failure: Failure::default(),
            max: None,
        };
        reader
            .partner_listing(partner)
            .map(|l| l.into_iter().map(|(v, _)| v).collect())
            .unwrap_or_default()
    }
}
