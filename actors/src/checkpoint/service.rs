//! A rank's checkpoints: its directories, opened at the first use, and
//! the thread that writes its pieces behind the application's back.

use super::future::{CheckpointFuture, Completer, Written};
use super::store::{FileStore, StoreError};
use super::CheckpointError;
use crate::hooks;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use taskfold_core::checkpoint::{Expect, Header, JobId, Level};
use taskfold_core::settings::hooks::{Hook, Point};
use taskfold_core::settings::CheckpointConfig;

/// The name a job's pieces are stamped with when neither
/// `TASKFOLD_CHECKPOINT_JOB` nor the job's name says (a [`crate::LocalCluster`]).
pub const DEFAULT_JOB: &str = "taskfold";

/// Where rank `rank` of job `job` keeps its pieces under the root `root`
/// (`TASKFOLD_CHECKPOINT_DIR`, `TASKFOLD_CHECKPOINT_SHARED_DIR`):
/// `<root>/job-<job id>/r<rank>`. Each job has its own directory, so that
/// two jobs never write over each other's pieces.
pub fn rank_dir(root: &Path, job: JobId, rank: u32) -> PathBuf {
    root.join(format!("job-{:016x}", job.0))
        .join(format!("r{rank}"))
}

/// A rank's directories of pieces.
struct Stores {
    /// L1.
    local: FileStore,
    /// L4, if the job has a shared directory.
    shared: Option<FileStore>,
    /// A fresh directory made for this process (no directory was
    /// configured): removed when the last write is done.
    fresh: Option<PathBuf>,
}

impl Drop for Stores {
    fn drop(&mut self) {
        if let Some(dir) = &self.fresh {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// One checkpoint for the writer.
struct Job {
    version: u64,
    type_tag: u64,
    payload: rkyv::util::AlignedVec,
    levels: Vec<Level>,
    stores: Arc<Stores>,
    done: Completer,
}

/// The writer thread, and the channel that feeds it (closed on drop: the
/// thread writes what it was given, then ends).
struct Writer {
    tx: Option<flume::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Writer {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A rank's checkpoints (see [`crate::Runtime::checkpoint`]).
pub(crate) struct Checkpoints {
    rank: u32,
    job: JobId,
    config: CheckpointConfig,
    hooks: Vec<Hook>,
    stores: Mutex<Option<Arc<Stores>>>,
    writer: Mutex<Option<Writer>>,
    /// A due L2 or L3 was skipped (warned about once).
    warned: AtomicBool,
}

impl Checkpoints {
    /// Rank `rank`'s checkpoints as `config` describes them; nothing is
    /// opened or started before the first use.
    pub(crate) fn new(rank: u32, config: &CheckpointConfig, hooks: &[Hook]) -> Checkpoints {
        let name = config.job.as_deref().unwrap_or(DEFAULT_JOB);
        Checkpoints {
            rank,
            job: JobId::named(name),
            config: config.clone(),
            hooks: hooks.to_vec(),
            stores: Mutex::new(None),
            writer: Mutex::new(None),
            warned: AtomicBool::new(false),
        }
    }

    /// The job id pieces are stamped with.
    pub(crate) fn job(&self) -> JobId {
        self.job
    }

    /// The directories, opened (made, checked, swept of a crashed write's
    /// temporary files) at the first call, and again if the local one
    /// disappeared; a failure is returned and the next call tries again.
    fn stores(&self) -> Result<Arc<Stores>, CheckpointError> {
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
        let local = FileStore::open(&local_dir, keep).map_err(CheckpointError::Open)?;
        local.sweep(self.rank).map_err(CheckpointError::Open)?;
        let shared = match &self.config.shared_dir {
            Some(root) => {
                let s = FileStore::open(&rank_dir(root, self.job, self.rank), keep)
                    .map_err(CheckpointError::Open)?;
                s.sweep(self.rank).map_err(CheckpointError::Open)?;
                Some(s)
            }
            None => None,
        };
        let stores = Arc::new(Stores {
            local,
            shared,
            fresh,
        });
        *held = Some(stores.clone());
        Ok(stores)
    }

    /// The levels written at `version` (L2 and L3 are not written by this
    /// runtime: a due one is skipped, with a warning the first time).
    pub(crate) fn due(&self, version: u64) -> Vec<Level> {
        let mut levels = self.config.intervals.levels_at(version);
        if levels.iter().any(|l| matches!(l, Level::L2 | Level::L3))
            && !self.warned.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                rank = self.rank,
                version,
                "a version is due at L2 or L3 (TASKFOLD_CHECKPOINT_L2, _L3), which this runtime \
                 does not write: those levels are skipped, L1 and L4 written"
            );
        }
        levels.retain(|l| match l {
            Level::L1 => true,
            Level::L4 => self.config.shared_dir.is_some(),
            Level::L2 | Level::L3 => false,
        });
        levels
    }

    /// Hands `payload` (the state's archive) to the writer for the levels
    /// due at `version`.
    pub(crate) fn write(
        &self,
        version: u64,
        type_tag: u64,
        payload: rkyv::util::AlignedVec,
        levels: Vec<Level>,
    ) -> CheckpointFuture {
        let stores = match self.stores() {
            Ok(s) => s,
            Err(e) => return CheckpointFuture::ready(version, Err(e)),
        };
        let (future, done) = CheckpointFuture::pending(version);
        let job = Job {
            version,
            type_tag,
            payload,
            levels,
            stores,
            done,
        };
        let mut writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        if writer.is_none() {
            match self.start_writer() {
                Ok(w) => *writer = Some(w),
                Err(e) => {
                    job.done.fill(Err(CheckpointError::Thread(e)));
                    return future;
                }
            }
        }
        if let Some(tx) = writer.as_ref().and_then(|w| w.tx.as_ref()) {
            // A send that fails drops the job: its completer fails the
            // future with `Shutdown`.
            let _ = tx.send(job);
        }
        future
    }

    fn start_writer(&self) -> std::io::Result<Writer> {
        let (tx, rx) = flume::unbounded::<Job>();
        let (rank, job_id, hooks) = (self.rank, self.job, self.hooks.clone());
        let thread = std::thread::Builder::new()
            .name(format!("taskfold-ckpt-{rank}"))
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    if let Some(hold) = hooks::hold_blocking(
                        &hooks,
                        rank,
                        Point::Checkpoint,
                        &job.version.to_string(),
                    ) {
                        hold();
                    }
                    let outcome = write_levels(rank, job_id, &job);
                    job.done.fill(outcome);
                }
            })?;
        Ok(Writer {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// The newest version of this rank's state of type tag `type_tag` that
    /// reads back intact, and decodes with `decode`, from the cheapest
    /// level holding it; every piece skipped is logged with the reason.
    pub(crate) fn restore<T>(
        &self,
        type_tag: u64,
        max: Option<u64>,
        decode: impl Fn(&[u8]) -> Result<T, String>,
    ) -> Result<Option<(u64, T)>, CheckpointError> {
        let stores = self.stores()?;
        let levels = [
            (Level::L1, Some(&stores.local)),
            (Level::L4, stores.shared.as_ref()),
        ];
        let mut found: Vec<(u64, Level, &FileStore)> = Vec::new();
        for (level, store) in levels {
            let Some(store) = store else { continue };
            match store.versions(self.rank, level) {
                Ok(vs) => found.extend(vs.into_iter().map(|v| (v, level, store))),
                Err(e) => {
                    tracing::warn!(rank = self.rank, %level, reason = %e, "checkpoint level unreadable, skipped")
                }
            }
        }
        // Newest first (up to `max`); of one version, the cheapest level
        // first.
        found.retain(|f| max.is_none_or(|m| f.0 <= m));
        found.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for (version, level, store) in found {
            let expect = Expect {
                job: self.job,
                type_tag,
                owner: Some(self.rank),
                version: Some(version),
                level: Some(level),
            };
            let key = super::PieceKey {
                owner: self.rank,
                level,
                shard: None,
                version,
            };
            let skipped = |reason: &dyn std::fmt::Display| tracing::warn!(rank = self.rank, version, %level, %reason, "checkpoint piece skipped");
            match store.read(&key, &expect) {
                Ok(stored) => match decode(&stored.payload) {
                    Ok(state) => return Ok(Some((version, state))),
                    Err(e) => skipped(&format!("its state does not decode: {e}")),
                },
                Err(e) => skipped(&e),
            }
        }
        Ok(None)
    }
}

impl Checkpoints {
    /// The newest version of which this rank holds a piece at some level
    /// (not read back: [`Checkpoints::restore`] checks it), `None` if none.
    pub(crate) fn newest_version(&self) -> Option<u64> {
        let stores = self.stores().ok()?;
        let levels = [
            (Level::L1, Some(&stores.local)),
            (Level::L4, stores.shared.as_ref()),
        ];
        levels
            .into_iter()
            .filter_map(|(level, store)| store?.versions(self.rank, level).ok())
            .flatten()
            .max()
    }
}

/// Writes `job`'s piece at each of its levels, cheapest first; stops at
/// the first failure.
fn write_levels(rank: u32, job_id: JobId, job: &Job) -> Result<Written, CheckpointError> {
    for &level in &job.levels {
        let store = match level {
            Level::L4 => job.stores.shared.as_ref(),
            _ => Some(&job.stores.local),
        };
        let Some(store) = store else { continue };
        let header = Header {
            job: job_id,
            owner: rank,
            version: job.version,
            type_tag: job.type_tag,
            level,
            shard: None,
        };
        store
            .write(&header, &job.payload)
            .map_err(|source: StoreError| CheckpointError::Write {
                level,
                version: job.version,
                source,
            })?;
    }
    Ok(Written {
        version: job.version,
        levels: job.levels.clone(),
    })
}
