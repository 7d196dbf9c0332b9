//! The launcher's key-value store (PMI): how the ranks of a job started by
//! `mpiexec`, `srun` or `mpirun` find their master, and the job's key,
//! without a shared file or a variable naming either.
//!
//! # Layout
//!
//! - [`Kvs`] (this file): one process's connection to its launcher's store
//!   (put, fence, get, finalize), one implementation per protocol:
//!   `pmi1` (the PMI-1 wire protocol on the socket `PMI_FD` names, in
//!   Rust: MPICH's Hydra, Slurm's `--mpi=pmi2`), `pmix` (cargo feature
//!   `pmix`, the system `libpmix` through `pmix-sys`: Open MPI's `mpirun`,
//!   Slurm's `--mpi=pmix`) and `pmi2` (cargo feature `pmi2`, Slurm's
//!   `libpmi2` through `pmi2-sys`).
//! - [`StoreMaster`]: the two exchanges of a start, over a [`Kvs`];
//!   the TCP bootstrap calls it through [`crate::tcp::MasterAddr::Store`].
//!
//! # The exchanges
//!
//! Every rank goes through two fences, in the same order:
//!
//! 1. **The key** ([`StoreMaster::share_key`], before the transport
//!    starts): rank 0 puts `taskfold-key`, a fresh key from the system's
//!    random source (or the word `given` when it has a key of its own);
//!    fence; every other rank gets it. A rank with a key of its own keeps
//!    it; a rank without one takes rank 0's, and fails, saying so, if rank
//!    0 had its own (the ranks of one job get the same variables).
//! 2. **The master** (inside the transport's start): rank 0 binds its
//!    listener, puts `taskfold-master`, its address; fence; every other
//!    rank gets it, then registers with the master as under any launcher.
//!
//! Then each rank finalizes its connection: the launcher treats the
//! process from there on as one that does not use its store, so a rank
//! that dies later is only a process that died (the job goes on, when the
//! launcher lets it: `srun --kill-on-bad-exit=0`), not a broken job.
//!
//! Cost: two fences of the launcher (each a round trip through its
//! daemons, milliseconds on one node), two puts by rank 0, two gets by
//! each other rank. A rank that never reaches a fence (it died before, or
//! is not a taskfold rank) leaves the others waiting at most their connect
//! timeout; they then fail, naming the fence. A process uses its store for
//! one start only: a second runtime in the same process needs
//! `TASKFOLD_MASTER` or `TASKFOLD_RENDEZVOUS`.
//!
//! What the key in the store protects is said in the book (Security, The
//! job key under a launcher): it keeps out every process that can only
//! reach the ranks' ports; it is as visible as the launcher's own traffic.

mod pmi1;
#[cfg(feature = "pmi2")]
mod pmi2;
#[cfg(feature = "pmix")]
mod pmix;
#[cfg(test)]
mod tests;

use crate::TransportError;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use taskfold_core::auth::JobKey;
pub use taskfold_core::settings::Protocol;

/// The key rank 0 puts the job's key under.
pub const KEY_KEY: &str = "taskfold-key";
/// The key rank 0 puts the master's address under.
pub const MASTER_KEY: &str = "taskfold-master";
/// What rank 0 puts under [`KEY_KEY`] when it has a key of its own.
const GIVEN: &str = "given";

/// One process's connection to its launcher's key-value store.
pub trait Kvs: Send {
    /// The job's name at the store (PMI's KVS name, PMIx's namespace):
    /// the same for every rank of a job, another for every other job.
    fn name(&self) -> &str;
    /// Puts `value` under `key`, for every rank to get after the next
    /// fence.
    fn put(&mut self, key: &str, value: &str) -> Result<(), String>;
    /// Waits until every rank of the job reached its fence (at most
    /// `timeout`); what was put before is then visible to all.
    fn fence(&mut self, timeout: Duration) -> Result<(), String>;
    /// What rank `rank` put under `key` before the last fence.
    fn get(&mut self, rank: u32, key: &str) -> Result<String, String>;
    /// Ends this process's use of the store (the launcher forgets it).
    fn finalize(&mut self) -> Result<(), String>;
}

/// Whether this process opened its launcher's store already.
static OPENED: AtomicBool = AtomicBool::new(false);

/// Opens this process's connection to its launcher's store, through
/// `protocol`, as rank `rank` (checked against the store's, where the
/// store says). Once per process.
pub fn open(protocol: Protocol, rank: u32, timeout: Duration) -> Result<Box<dyn Kvs>, String> {
    if OPENED.swap(true, Ordering::SeqCst) {
        return Err(
            "this process used its launcher's store for a start already, and a store \
             serves one: a second runtime needs TASKFOLD_MASTER or TASKFOLD_RENDEZVOUS"
                .into(),
        );
    }
    match protocol {
        Protocol::Pmi1 { fd } => Ok(Box::new(pmi1::Pmi1::connect(fd, rank, timeout)?)),
        #[cfg(feature = "pmix")]
        Protocol::Pmix => Ok(Box::new(pmix::Pmix::init(rank, timeout)?)),
        #[cfg(feature = "pmi2")]
        Protocol::Pmi2 => Ok(Box::new(pmi2::Pmi2::init(rank)?)),
        #[allow(unreachable_patterns)]
        other => Err(not_built(other)),
    }
}

/// Why a protocol this build lacks cannot be used.
fn not_built(p: Protocol) -> String {
    let name = p.name();
    format!(
        "the launcher serves {name}, which this build of taskfold does not speak: build it with \
         the cargo feature `{name}` (taskfold/{name}; needs {}), or launch with srun --mpi=pmi2 \
         or MPICH's mpiexec (PMI-1, always built), or set TASKFOLD_MASTER or TASKFOLD_RENDEZVOUS",
        if name == "pmix" {
            "libpmix-dev"
        } else {
            "libpmi2-0-dev"
        }
    )
}

/// The start of one rank through its launcher's store: the job's key, then
/// the master's address (see the [module documentation](self)).
pub struct StoreMaster {
    protocol: &'static str,
    rank: u32,
    timeout: Duration,
    job: String,
    /// `None` once finalized.
    kvs: Mutex<Option<Box<dyn Kvs>>>,
    /// What [`StoreMaster::lookup`] found (it asks the store once).
    master: OnceLock<Result<SocketAddr, String>>,
}

impl std::fmt::Debug for StoreMaster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreMaster")
            .field("protocol", &self.protocol)
            .field("job", &self.job)
            .field("rank", &self.rank)
            .finish()
    }
}

/// Two handles are the same store only if they are one.
impl PartialEq for StoreMaster {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}
impl Eq for StoreMaster {}

impl StoreMaster {
    /// Opens this process's store (see [`open`]) for rank `rank`; each
    /// fence waits at most `timeout`.
    pub fn open(protocol: Protocol, rank: u32, timeout: Duration) -> Result<Self, TransportError> {
        let kvs = open(protocol, rank, timeout).map_err(|e| fail(protocol.name(), e))?;
        Ok(StoreMaster::over(kvs, protocol.name(), rank, timeout))
    }

    /// A start over `kvs`, named `protocol` in errors.
    pub fn over(kvs: Box<dyn Kvs>, protocol: &'static str, rank: u32, timeout: Duration) -> Self {
        StoreMaster {
            protocol,
            rank,
            timeout,
            job: kvs.name().to_string(),
            kvs: Mutex::new(Some(kvs)),
            master: OnceLock::new(),
        }
    }

    /// The job's name at the store (the same on every rank of the job).
    pub fn job_name(&self) -> &str {
        &self.job
    }

    /// The protocol's name (`pmi1`, `pmi2`, `pmix`).
    pub fn protocol(&self) -> &'static str {
        self.protocol
    }

    /// Runs `f` on the open store; an error names the store.
    fn with<T>(&self, f: impl FnOnce(&mut dyn Kvs) -> Result<T, String>) -> Result<T, String> {
        let mut kvs = self.kvs.lock().unwrap_or_else(|e| e.into_inner());
        let Some(kvs) = kvs.as_mut() else {
            return Err(format!("{}: finalized already", self.describe()));
        };
        f(kvs.as_mut()).map_err(|e| format!("{}: {e}", self.describe()))
    }

    /// The first exchange: the job's key. `own`: whether this rank has a
    /// key of its own (it keeps it; `None` is returned). Otherwise the key
    /// rank 0 drew, or an error if rank 0 had its own.
    pub fn share_key(&self, own: bool) -> Result<Option<JobKey>, TransportError> {
        let timeout = self.timeout;
        if self.rank == 0 {
            let fresh = if own {
                None
            } else {
                Some(crate::auth::fresh_key()?)
            };
            let value = fresh.as_ref().map_or(GIVEN.to_string(), JobKey::to_hex);
            self.with(|kvs| {
                kvs.put(KEY_KEY, &value)?;
                kvs.fence(timeout)
            })
            .map_err(TransportError::MasterUnreachable)?;
            return Ok(fresh);
        }
        let value = self
            .with(|kvs| {
                kvs.fence(timeout)?;
                kvs.get(0, KEY_KEY)
            })
            .map_err(TransportError::MasterUnreachable)?;
        match (own, value.trim()) {
            (true, _) => Ok(None),
            (false, GIVEN) => Err({
                // This rank leaves the store now: said so, the launcher
                // does not find it gone in the middle of an answer (which
                // makes hydra end the job before the rank's message is
                // out).
                self.finalize();
                TransportError::Auth(
                "rank 0 was given the job's key (TASKFOLD_JOB_KEY or TASKFOLD_JOB_KEY_FILE) and \
                 this rank was not: give every rank the same, or none (the launcher's store then \
                 carries a fresh one)"
                        .into(),
                )
            }),
            (false, hex) => JobKey::from_hex(hex).map(Some).ok_or_else(|| {
                let why = format!("{}: {KEY_KEY} holds no job key", self.describe());
                TransportError::MasterUnreachable(why)
            }),
        }
    }

    /// Rank 0's part of the second exchange: puts the master's address,
    /// meets the others at the fence, finalizes.
    pub(crate) fn publish(&self, addr: SocketAddr) -> Result<(), TransportError> {
        let timeout = self.timeout;
        let r = self.with(|kvs| {
            kvs.put(MASTER_KEY, &addr.to_string())?;
            kvs.fence(timeout)
        });
        self.finalize();
        r.map_err(TransportError::MasterUnreachable)
    }

    /// Another rank's part of the second exchange: meets rank 0 at the
    /// fence, gets its address, finalizes. Asks the store once; later
    /// calls return the same answer.
    pub(crate) fn lookup(&self) -> Result<SocketAddr, TransportError> {
        let found = self.master.get_or_init(|| {
            let timeout = self.timeout;
            let value = self.with(|kvs| {
                kvs.fence(timeout)?;
                kvs.get(0, MASTER_KEY)
            });
            self.finalize();
            value.and_then(|v| {
                v.trim().parse().map_err(|_| {
                    format!(
                        "{}: {MASTER_KEY} holds {v:?}, not an address",
                        self.describe()
                    )
                })
            })
        });
        found.clone().map_err(TransportError::MasterUnreachable)
    }

    /// Ends this process's use of the store (a failure is only logged: the
    /// exchange it served is over).
    fn finalize(&self) {
        let kvs = self.kvs.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(Err(e)) = kvs.map(|mut k| k.finalize()) {
            tracing::warn!(
                protocol = self.protocol,
                "finalizing the launcher's store: {e}"
            );
        }
    }

    /// What errors call the store.
    pub(crate) fn describe(&self) -> String {
        format!(
            "the launcher's key-value store ({}, job {})",
            self.protocol, self.job
        )
    }
}

fn fail(protocol: &str, why: String) -> TransportError {
    TransportError::MasterUnreachable(format!(
        "the launcher's key-value store ({protocol}): {why}"
    ))
}
