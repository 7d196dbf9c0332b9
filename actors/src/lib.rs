//! taskfold: fault-tolerant, task-parallel distributed reductions that an
//! HPC application embeds next to its own computation.
//!
//! Every reduction is split into pairwise tasks that a master hands out as
//! contributions become ready, to the faster rank; data moves between
//! workers by one-sided gets and is folded in place from the receive buffer.
//!
//! ```
//! use taskfold::prelude::*;
//!
//! // Four ranks in this process (tests, laptops); over TCP, each process
//! // would call `Runtime::from_env()` instead.
//! let cluster = LocalCluster::new(4).unwrap();
//! let futures: Vec<_> = cluster
//!     .ranks()
//!     .iter()
//!     .map(|rt| rt.reduce(Sum(vec![rt.rank() as f32; 3]), Reduce::root(1).id("demo")).unwrap())
//!     .collect();
//! let results: Vec<_> = futures.into_iter().map(|f| f.get().unwrap()).collect();
//! assert_eq!(results[1].as_ref().unwrap().0, vec![6.0; 3]); // 0 + 1 + 2 + 3
//! assert!(results[0].is_none()); // only the root holds the result
//! ```
//!
//! # Layout
//!
//! - [`runtime`]: [`Runtime`] (`from_env`, `reduce`, `barrier`,
//!   `checkpoints()`, shutdown);
//!   [`builder`]: [`Builder`], a runtime from explicit settings.
//! - [`collective`]: [`Runtime::allreduce`] and [`Runtime::broadcast`]
//!   (the value on every member, ready-first), their [`SpreadFuture`];
//!   `spread`, the actor that moves the value (its coordinator on the
//!   master's rank).
//! - [`future`]: [`ReduceFuture`] (`get`, `is_done`, `wait_timeout`, `.await`;
//!   `is_safe`, `wait_safe`: when the contribution survives this rank).
//! - [`options`]: [`Reduce`] (root, id, group, durability, completion).
//! - [`mod@env`]: rank, size and master from `taskfold run`, `mpiexec`, `srun`.
//! - [`local`]: [`LocalCluster`], many ranks in one process over the loopback.
//! - the actors, internal, one module each with its messages and handlers:
//!   `master` (scheduling, barriers, rank 0), `worker` (this rank's
//!   contributions and tasks), `perf` (performance counter), `detector`
//!   (failure detector, rank 0), `replica` (replica store), `router`
//!   (transport ↔ actors). What they do and what a crash of each loses is
//!   in the book's Architecture chapter.
//! - `commands`: what the application's threads ask of the actors, one
//!   channel; a leaf (no two files of this crate need each other: the
//!   book's Architecture chapter, The shape of the code).
//! - `start`: one rank's actors wired together (`master::spawn` starts a
//!   master and its detector, for rank 0 or a standby).
//! - `results`: a root's results kept at its buddy for a replacement
//!   root, until the application checkpointed past them (its parts in
//!   `worker`, `replica` and `master`).
//! - `notices`: where application threads wait on the master's notice
//!   board (released barriers, completed reductions) beside their own
//!   answer.
//! - `hooks`: test hooks that hold a rank at an exact point, with the
//!   cargo feature `test-hooks` (test suites only; without it every check
//!   is a constant "no hook" and `TASKFOLD_TEST_HOOK` is refused).
//! - `logger`: the stderr logger the runtime installs when the application
//!   has no `tracing` subscriber (`TASKFOLD_LOG`, default `warn`).
//! - [`metrics`]: metric names (and, with the cargo feature `prometheus`,
//!   `metrics::serve_prometheus`). [`config`]: tunables, and [`Settings`]
//!   (every `TASKFOLD_*` variable, parsed once).
//! - [`checkpoint`]: [`CheckpointFuture`] and [`CheckpointError`] of
//!   [`Runtime::checkpoints`] ([`checkpoint::Checkpointer`]), the pieces in
//!   files (a rank's local directory, the shared directory), written
//!   atomically, read verified, and the rank's checkpoint engine, which
//!   moves L2 copies and L3 shards between ranks and serves the pieces it
//!   holds to a restarted rank.
//! - [`prelude`]: what an application that reduces needs, in one `use`.

#![forbid(unsafe_code)]

pub mod builder;
pub mod checkpoint;
pub mod collective;
mod commands;
pub mod config;
mod detector;
pub mod env;
pub mod future;
// Test hooks exist only in test builds (the cargo feature `test-hooks`);
// elsewhere every check is a constant "no hook".
#[cfg(feature = "test-hooks")]
pub mod hooks;
#[cfg(not(feature = "test-hooks"))]
#[path = "hooks_off.rs"]
mod hooks;
pub mod lifecycle;
pub mod local;
mod logger;
mod master;
mod membership;
pub mod metrics;
mod notices;
mod numbering;
pub mod options;
mod outbox;
mod perf;
mod pool;
pub mod reinit;
mod replica;
mod results;
mod router;
pub mod runtime;
mod spread;
mod start;
mod worker;

pub use builder::Builder;
pub use checkpoint::{CheckpointError, CheckpointFuture, Checkpointer};
pub use collective::{Broadcastable, SpreadFuture};
pub use config::{Completion, Config, Durability, Settings, SettingsError, Standby};
pub use future::{ReduceFuture, Safe};
pub use lifecycle::{Lifecycle, RecoveryEvent};
pub use local::LocalCluster;
pub use master::{MasterStats, TaskRecord};
pub use options::Reduce;
pub use perf::LocalStats;
pub use reinit::Entry;
pub use runtime::Runtime;
/// The job's secret key, which every connection between its processes
/// proves ([`Builder::job_key`]; see the book's Security chapter).
pub use taskfold_core::auth::JobKey;
/// Folding a peer's data piece by piece as it arrives: what a reducer
/// implements in [`ReducerBody::piecewise`] ([`pieces::Piecewise`],
/// [`pieces::combine`]) to have its streamed gets folded while they arrive.
pub use taskfold_core::pieces;
pub use taskfold_core::{
    FoldError, InPlace, Max, Min, Prod, ReduceError, ReduceValue, ReducerBody, Sum,
};
/// The shared heap: install it as a program's global allocator so that
/// same-node ranks fold each other's contributions in place, without a
/// copy (see [`taskfold_transports::shm`]; do not use it in a program that
/// forks without exec).
///
/// ```
/// #[global_allocator]
/// static HEAP: taskfold::SharedHeap = taskfold::SharedHeap;
/// # fn main() {}
/// ```
pub use taskfold_transports::shm::SharedHeap;
pub use taskfold_transports::tcp::MasterAddr;

/// Re-export of rkyv, so that user reducers derive with the same version.
pub use rkyv;

/// What an application that reduces needs, in one `use taskfold::prelude::*`:
/// the runtime and its options, the future, the reducer trait (with the
/// error its folds return) and the built-in reducers, and the errors.
pub mod prelude {
    pub use crate::{
        Broadcastable, Completion, Durability, FoldError, InPlace, LocalCluster, Max, Min, Prod,
        Reduce, ReduceError, ReduceFuture, ReducerBody, Runtime, SpreadFuture, Sum,
    };
}

/// Why a runtime could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A setting's value is refused (the error names the variable).
    #[error(transparent)]
    Settings(#[from] taskfold_core::settings::SettingsError),
    /// This process's rank or size is unknown or invalid.
    #[error("cannot tell this process's rank: {0}")]
    Identity(String),
    /// The master's address is missing or invalid.
    #[error("cannot find the master: {0}")]
    Master(String),
    /// The transport could not start (master unreachable, refused, …).
    #[error(transparent)]
    Transport(#[from] taskfold_transports::TransportError),
    /// A runtime thread could not be started.
    #[error("cannot start a runtime thread: {0}")]
    Thread(std::io::Error),
    /// This rank's replica directory could not be made, or what is at its
    /// path is not a private directory of this user (see the book's
    /// Security chapter).
    #[error("replica directory: {0}")]
    ReplicaDir(std::io::Error),
    /// This process replaces a rank that finished its work in the job
    /// before its process died (see the book's chapter Surviving failures
    /// of the application): nothing waits for it, and it should end as a
    /// rank that finished does (exit code 0).
    #[error("this replacement has nothing to do: its rank finished its work in this job")]
    RankFinished,
    /// This process was one of the job's spares (`TASKFOLD_SPARES`) and
    /// the job ended without needing it (see the book's chapter Surviving
    /// failures of the application): it should end as a rank that
    /// finished does (exit code 0).
    #[error("this spare was not needed: the job ended")]
    Spare,
}

impl StartError {
    /// The start error of a transport that could not start: a replacement
    /// refused because its rank finished is [`StartError::RankFinished`].
    pub(crate) fn of_transport(e: taskfold_transports::TransportError) -> StartError {
        match e {
            taskfold_transports::TransportError::Refused(r)
                if r.contains(taskfold_transports::RANK_FINISHED) =>
            {
                StartError::RankFinished
            }
            e => StartError::Transport(e),
        }
    }
}
