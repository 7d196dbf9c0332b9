//! The runtime's tunables ([`Config`]) and the choices they make
//! ([`Durability`], [`Completion`]).

#[cfg(feature = "test-hooks")]
use super::hooks::Hook;
use super::values::Named;
use std::path::PathBuf;
use std::time::Duration;

/// Tunables of one rank's runtime. Every field has a default suited to a
/// small shared node; [`super::Settings::from_pairs`] reads overrides from
/// `TASKFOLD_*` variables (the book's Configuration chapter lists them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Threads that fold and serialise contributions (`TASKFOLD_FOLD_THREADS`,
    /// default 1). They are the runtime's own: the application's threads are
    /// never borrowed.
    pub fold_threads: usize,
    /// How long `shutdown` waits for the other ranks to finalize
    /// (`TASKFOLD_FINALIZE_TIMEOUT_MS`, default 120 s). A rank whose master
    /// is lost does not wait: its shutdown fails at once with `MasterLost`.
    pub finalize_timeout: Duration,
    /// Tasks remembered in the master's task log (default 100,000).
    pub task_log_limit: usize,
    /// How often the master pings every rank, and every other rank checks
    /// that it hears the master (`TASKFOLD_PING_MS`, 250 ms).
    pub ping_period: Duration,
    /// A rank silent for this long is declared failed by the master, and
    /// a master silent for this long is declared lost by the others
    /// (`TASKFOLD_FAILURE_TIMEOUT_MS`, 3 s; see [`crate::watch`]).
    pub failure_timeout: Duration,
    /// Where replicas are kept on disk (`TASKFOLD_REPLICA_DIR`; default a
    /// per-process directory under the system's temporary directory).
    pub replica_dir: Option<PathBuf>,
    /// Most bytes of buddy replicas one rank keeps (`TASKFOLD_REPLICA_LIMIT`,
    /// default 4 GiB); offers beyond it are refused.
    pub replica_limit: u64,
    /// Most reductions live at once (`TASKFOLD_MAX_REDUCTIONS`, default
    /// 65,536): on this rank, a reduction beyond it is refused at once
    /// with [`crate::ReduceError::TooManyReductions`]; at the master, a
    /// join that would open one more fails that reduction with the same
    /// error (the live ones go on). It bounds what a peer can make the
    /// master hold (see the book's Security chapter, Bounded peers).
    pub max_reductions: usize,
    /// Default durability of reductions (`TASKFOLD_DURABILITY=sync|async|off`).
    pub durability: Durability,
    /// When a member other than the root gets its future back, unless the
    /// reduction says (the runtime's `Reduce::completion`;
    /// `TASKFOLD_COMPLETION=result|contributed`, default `result`).
    pub completion: Completion,
    /// Most bytes of free large buffers kept for reuse
    /// (`TASKFOLD_BUFFER_POOL`, default 256 MiB; 0 keeps none). Recycled
    /// buffers spare the kernel mapping and zeroing fresh pages for every
    /// serialised value and receive buffer (see [`crate::pool`]). The
    /// pool is per process: with several runtimes in one process, the last
    /// one started sets it.
    pub buffer_pool: u64,
    /// Whether the pool may also keep as many bytes as this process had in
    /// flight in reductions at once, when that is more than
    /// [`Config::buffer_pool`] (default: yes, unless `TASKFOLD_BUFFER_POOL`
    /// is set: an explicit bound is a bound). Many concurrent reductions
    /// need about two buffers each (an original kept for recovery, and the
    /// value folded beside it): with this, the next batch finds them again
    /// instead of faulting in fresh pages, and the pool never keeps more
    /// than the process has shown it uses at once (and a quarter more:
    /// buffers are a little larger than the data they hold).
    pub buffer_pool_follows_peak: bool,
    /// Whether buffers are made ahead when more reductions are in flight
    /// at once than ever before (`TASKFOLD_POOL_PREFILL=off` turns it off;
    /// default on): about two per reduction, on a thread of the runtime's
    /// own, within the pool's bound, so that the folds of a larger batch
    /// than the last find their buffers instead of faulting fresh pages
    /// in (see [`crate::pool::reserve`]). The memory is what the pool
    /// may keep anyway; made ahead, it is held from the first such batch.
    pub buffer_pool_prefill: bool,
    /// Whether the master posts released barriers and completed
    /// reductions on a notice board in shared memory, where the
    /// application threads of the ranks on its node wait for them
    /// (`TASKFOLD_NOTICE_BOARD=off` turns it off; default on). The message
    /// still follows; the board wakes the application thread at once
    /// instead of after the transport's and the actors' threads (see
    /// `taskfold_transports::board`). It is the master's setting that
    /// decides whether there is a board; a rank with it off still maps it
    /// if the master has one.
    pub notice_board: bool,
    /// Contributions up to this many bytes are gathered
    /// (`TASKFOLD_GATHER_MAX`, a size; `0` turns it off; default
    /// [`DEFAULT_GATHER_MAX`]): the root reads the ready data of every
    /// member of its node in place, in one task, and a pair's receiver on
    /// any other node the ready data of its node, instead of the members
    /// folding two by two through the master (see the book's Architecture
    /// chapter, "Small contributions"). It is the master's setting that
    /// counts.
    pub gather_max: u64,
    /// Which rank takes over if the master dies (`TASKFOLD_STANDBY=auto|on|off`,
    /// default `auto`; see [`Standby`] and the book's Fault tolerance
    /// chapter, A master that dies).
    pub standby: Standby,
    /// Where and how often checkpoints are written
    /// (`TASKFOLD_CHECKPOINT_*`, see [`super::CheckpointConfig`]).
    pub checkpoint: super::CheckpointConfig,
    /// Replacements of dead ranks and the way back (`TASKFOLD_RESPAWN`,
    /// `TASKFOLD_RESPAWN_WAIT_MS`, `TASKFOLD_RESTART`; see
    /// [`super::RespawnConfig`]).
    pub respawn: super::RespawnConfig,
    /// The logger the runtime installs on stderr when the application has
    /// installed no `tracing` subscriber of its own (`TASKFOLD_LOG`,
    /// default `warn`: a rank declared failed is never silent; `off`: no
    /// logger).
    pub log: LogLevel,
    /// Test hooks (`TASKFOLD_TEST_HOOK`), see [`super::hooks`]: in builds
    /// with the cargo feature `test-hooks` only.
    #[cfg(feature = "test-hooks")]
    pub hooks: Vec<Hook>,
}

/// The default of [`Config::gather_max`]: below it, a task costs its
/// messages, not its bytes (the book's Benchmarks chapter has the
/// measurement).
pub const DEFAULT_GATHER_MAX: u64 = 256 << 10;

/// The default of [`Config::max_reductions`].
pub const DEFAULT_MAX_REDUCTIONS: usize = 65_536;

/// The largest [`Config::max_reductions`] a setting accepts.
pub const MAX_MAX_REDUCTIONS: u64 = 1 << 24;

impl Default for Config {
    fn default() -> Self {
        Config {
            fold_threads: 1,
            finalize_timeout: Duration::from_secs(120),
            task_log_limit: 100_000,
            ping_period: Duration::from_millis(250),
            failure_timeout: Duration::from_secs(3),
            replica_dir: None,
            replica_limit: 4 << 30,
            max_reductions: DEFAULT_MAX_REDUCTIONS,
            durability: Durability::Async,
            completion: Completion::Result,
            buffer_pool: crate::pool::DEFAULT_LIMIT as u64,
            buffer_pool_follows_peak: true,
            buffer_pool_prefill: true,
            notice_board: true,
            gather_max: DEFAULT_GATHER_MAX,
            standby: Standby::Auto,
            checkpoint: super::CheckpointConfig::default(),
            respawn: super::RespawnConfig::default(),
            log: LogLevel::Warn,
            #[cfg(feature = "test-hooks")]
            hooks: Vec::new(),
        }
    }
}

/// When a reduction's buddy replica must exist: the trade between what a
/// failure can cost and what every reduction costs (see the book's Fault
/// tolerance chapter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// The replica is stored concurrently with the reduction (default):
    /// the announcement waits only for the rank's disk copy, but a rank
    /// that dies before its replica left it ends the reduction with an
    /// error, unless that disk copy can be read. With a buddy on the rank's
    /// node that maps its shared heap (after the first reduction), there is
    /// no disk copy and no offer: the buddy's mapping of the rank's buffer
    /// is the copy (a standing copy), the announcement counts at once, and
    /// if the rank dies the master offers the original to the buddy on its
    /// behalf, holding the reduction until the buddy answers.
    ///
    /// `reduce` returns at once. The durability window runs until the
    /// announcement went out naming the disk copy, written, or the standing
    /// copy (`ReduceFuture::is_safe`, `wait_safe`): a rank that dies inside
    /// it leaves the right result if the master finds a copy, else
    /// `ReduceError::RanksLost` naming it on every survivor, never a hang
    /// or a wrong result. The disk copy survives the process, not its node.
    #[default]
    Async,
    /// A rank announces its contribution only after its buddy acknowledged
    /// the replica: every single failure of a non-root rank is recovered,
    /// at the cost of one transfer of the contribution before the first task
    /// (on one node, the buddy maps the rank's disk copy, or views the
    /// rank's buffer in its shared heap, instead: one message each way).
    ///
    /// `reduce` itself blocks until the contribution is safe (the buddy
    /// acknowledged its copy and the announcement naming it went out; the
    /// disk copy if the buddy refused; at once for the root), or the
    /// reduction ended: when it returns, this process may die and nothing
    /// of its contribution is lost. The wait is bounded by
    /// [`Config::finalize_timeout`], past which `reduce` fails with
    /// `ReduceError::Timeout`.
    Sync,
    /// No copies at all: nothing is written to disk or sent to a buddy, so
    /// a reduction costs only its tasks. A rank that dies before its
    /// contribution was folded ends the reduction with
    /// [`crate::ReduceError::RanksLost`] naming it (later reductions go on
    /// over the survivors). For runs that would rather redo a lost
    /// reduction than pay for its copies. `reduce` returns at once; the
    /// contribution is safe only once its data was folded in and released,
    /// or the reduction ended.
    Off,
}

impl Named for Durability {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("async", Durability::Async),
        ("sync", Durability::Sync),
        ("off", Durability::Off),
        ("none", Durability::Off),
    ];
    const EXPECTED: &'static str = "sync, async or off";
}

/// Whether a standby master takes over when the master dies, and which
/// rank it is ([`crate::failover::standby_of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Standby {
    /// The lowest live rank on another node than rank 0's (the job's first
    /// master; see `Membership::standby`), if the job spans several nodes
    /// (default); on one node, none: a node's death takes both, so the job
    /// ends with `MasterLost` instead.
    #[default]
    Auto,
    /// As `Auto`, and on one node the lowest live rank after the master:
    /// a master process that dies alone is survived.
    On,
    /// None: the master's death ends every rank's waits with `MasterLost`.
    Off,
}

impl Named for Standby {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("auto", Standby::Auto),
        ("on", Standby::On),
        ("off", Standby::Off),
    ];
    const EXPECTED: &'static str = "auto, on or off";
}

/// When the future of a member other than the root completes.
///
/// At the root nothing changes: its future completes with the result, or
/// with the reduction's error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Completion {
    /// Once the root holds the result (`Ok(None)`), or with the reduction's
    /// error: every member learns how the reduction ended (default). Costs
    /// one notice from the master to every member after the root's last
    /// fold, on the way to every member's future.
    #[default]
    Result,
    /// As soon as this member's data was folded in by another member
    /// (`Ok(None)`), as `MPI_Reduce` returns on a rank other than the root
    /// once its send buffer is free. The runtime keeps the member's
    /// original until the reduction ends everywhere, for recovery, so a
    /// later failure of any rank is recovered as with [`Completion::Result`];
    /// but a failure that cannot be recovered is reported at the root (and
    /// at members still waiting) only, not to a member whose future has
    /// completed. Until the reduction ends everywhere its id stays taken
    /// on this rank: calling `reduce` again with the same id before then is
    /// refused with [`crate::ReduceError::DuplicateId`] (ids numbered by the
    /// runtime never collide). Costs one message from the master per
    /// member whose single contribution was folded (the default sends none
    /// for those).
    Contributed,
}

impl Named for Completion {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("result", Completion::Result),
        ("contributed", Completion::Contributed),
    ];
    const EXPECTED: &'static str = "result or contributed";
}

/// The level of the logger the runtime installs when the application has
/// none ([`Config::log`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogLevel {
    /// No logger.
    Off,
    /// Errors only.
    Error,
    /// Warnings and errors (default).
    #[default]
    Warn,
    /// Also the runtime's notable events.
    Info,
    /// Also its details.
    Debug,
}

impl Named for LogLevel {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("warn", LogLevel::Warn),
        ("off", LogLevel::Off),
        ("error", LogLevel::Error),
        ("info", LogLevel::Info),
        ("debug", LogLevel::Debug),
    ];
    const EXPECTED: &'static str = "off, error, warn, info or debug";
}
