//! [`Builder`]: a [`Runtime`] from explicit settings, the environment's, or
//! the environment's with some of them changed.

use crate::config::{Config, Durability, Settings};
use crate::runtime::Runtime;
use crate::StartError;
use std::net::IpAddr;
use std::sync::Arc;
use taskfold_core::auth::JobKey;
use taskfold_core::id::stable_hash;
use taskfold_core::settings::{KeySource, TransportSettings};
use taskfold_transports::select;
use taskfold_transports::tcp::spare::Parking;
use taskfold_transports::tcp::{MasterAddr, TcpConfig};
use taskfold_transports::{Transport, TransportError};

impl Runtime {
    /// A builder for explicit settings (see [`Builder`]).
    pub fn builder() -> Builder {
        Builder::default()
    }
}

/// A change to the settings, applied in order at [`Builder::build`].
type Edit = Box<dyn FnOnce(&mut Settings) + Send>;

/// Builds a [`Runtime`] from explicit settings.
///
/// Without [`Builder::settings`], it starts from the environment's
/// ([`Settings::from_env`]; a bad value is an error of [`Builder::build`]);
/// the other setters change what they name on top of either. Rank, size
/// and master not given are the settings' (the launcher's variables).
#[derive(Default)]
pub struct Builder {
    settings: Option<Settings>,
    edits: Vec<Edit>,
    transport: Option<Arc<dyn Transport>>,
    rank: Option<u32>,
    size: Option<u32>,
    master: Option<MasterAddr>,
    job: Option<u64>,
}

impl Builder {
    /// Every setting (the environment is not read).
    pub fn settings(mut self, s: Settings) -> Self {
        self.settings = Some(s);
        self
    }
    /// Changes the settings with `f` (after [`Builder::settings`] or the
    /// environment's, and after the setters called before it).
    pub fn edit(mut self, f: impl FnOnce(&mut Settings) + Send + 'static) -> Self {
        self.edits.push(Box::new(f));
        self
    }
    /// The runtime's tunables.
    pub fn config(self, c: Config) -> Self {
        self.edit(move |s| s.runtime = c)
    }
    /// The default durability of reductions ([`Config::durability`]).
    pub fn durability(self, d: Durability) -> Self {
        self.edit(move |s| s.runtime.durability = d)
    }
    /// Who takes over when the master dies ([`Config::standby`]).
    pub fn standby(self, policy: crate::Standby) -> Self {
        self.edit(move |s| s.runtime.standby = policy)
    }
    /// Where and how often checkpoints are written ([`Config::checkpoint`]).
    pub fn checkpoint(self, c: crate::config::CheckpointConfig) -> Self {
        self.edit(move |s| s.runtime.checkpoint = c)
    }
    /// Threads that fold ([`Config::fold_threads`]).
    pub fn fold_threads(self, n: usize) -> Self {
        self.edit(move |s| s.runtime.fold_threads = n)
    }
    /// Which transport, and how it runs (unless [`Builder::transport`]
    /// gives one).
    pub fn transport_settings(self, t: TransportSettings) -> Self {
        self.edit(move |s| s.transport = t)
    }
    /// Threads of the TCP transport's own ([`TransportSettings::tcp_threads`]).
    pub fn tcp_threads(self, n: usize) -> Self {
        self.edit(move |s| s.transport.tcp_threads = Some(n))
    }
    /// The address this rank listens on and is reached at
    /// ([`TransportSettings::bind_host`]).
    pub fn bind_host(self, ip: IpAddr) -> Self {
        self.edit(move |s| s.transport.bind_host = Some(ip))
    }
    /// Runs over an existing transport (rank and size come from it).
    pub fn transport(mut self, t: Arc<dyn Transport>) -> Self {
        self.transport = Some(t);
        self
    }
    /// This process's rank (TCP).
    pub fn rank(mut self, r: u32) -> Self {
        self.rank = Some(r);
        self
    }
    /// Ranks in the job (TCP).
    pub fn size(mut self, n: u32) -> Self {
        self.size = Some(n);
        self
    }
    /// Where the master listens, or the rendezvous file (TCP).
    pub fn master(mut self, m: MasterAddr) -> Self {
        self.master = Some(m);
        self
    }
    /// The job's id: ranks of other jobs are refused (TCP).
    pub fn job(mut self, j: impl AsRef<str>) -> Self {
        self.job = Some(stable_hash(j.as_ref()));
        self
    }
    /// The job's key, which every connection proves (TCP, libfabric; as
    /// `TASKFOLD_JOB_KEY` would give it). Without a key, a runtime over a
    /// network transport does not start, unless the settings ask for the
    /// insecure mode (`TASKFOLD_INSECURE`).
    pub fn job_key(self, key: JobKey) -> Self {
        self.edit(move |s| s.launch.key = Some(KeySource::Value(key)))
    }

    /// Starts the runtime. Over TCP this blocks until every rank registered
    /// with the master (bounded by the transport's connect timeout).
    ///
    /// Over a network transport, the job's key comes from the settings
    /// (`TASKFOLD_JOB_KEY`, `TASKFOLD_JOB_KEY_FILE`, [`Builder::job_key`]);
    /// without one the start fails with an error naming those variables,
    /// unless `TASKFOLD_INSECURE` asks to run unauthenticated.
    pub fn build(self) -> Result<Runtime, StartError> {
        // Before the bootstrap: no rank of this job can have written a
        // replica file yet (the master's stale-file guard relies on it).
        let epoch = std::time::SystemTime::now();
        let mut settings = match self.settings {
            Some(s) => s,
            None => Settings::from_env()?,
        };
        for edit in self.edits {
            edit(&mut settings);
        }
        // Before the first warning (an unknown variable, an insecure job).
        crate::logger::install_default(settings.runtime.log);
        // Checkpoints are stamped with the job's name unless they are
        // given one of their own.
        if settings.runtime.checkpoint.job.is_none() {
            settings.runtime.checkpoint.job = settings.launch.job_name();
        }
        // Under `taskfold run` the launcher warned, once for the job.
        for name in settings.unknown.iter().filter(|_| !settings.unknown_warned) {
            let hint = match taskfold_core::settings::sources::closest(name) {
                Some(close) => format!(" (did you mean {close}?)"),
                None => String::new(),
            };
            tracing::warn!("{name} is set but is no taskfold setting{hint}; ignored");
        }
        let transport = match self.transport {
            Some(t) => t,
            None => {
                let place = Place {
                    rank: self.rank,
                    size: self.size,
                    master: self.master,
                    job: self.job,
                };
                place.start_transport(&mut settings)?
            }
        };
        Runtime::start_at(transport, settings.runtime, epoch)
    }
}

/// Rank, size, master and job given to the builder (the settings' where
/// not).
struct Place {
    rank: Option<u32>,
    size: Option<u32>,
    master: Option<MasterAddr>,
    job: Option<u64>,
}

impl Place {
    /// Starts the transport the settings choose (TCP, or libfabric with
    /// `TASKFOLD_TRANSPORT=libfabric`).
    fn start_transport(self, settings: &mut Settings) -> Result<Arc<dyn Transport>, StartError> {
        let launch = &settings.launch;
        let (rank, size) = match (self.rank, self.size) {
            (Some(r), Some(s)) => (r, s),
            (r, s) => {
                let id = crate::env::identity(launch)?;
                (r.unwrap_or(id.rank), s.unwrap_or(id.size))
            }
        };
        if rank >= size {
            return Err(StartError::Identity(format!(
                "rank {rank} is not below size {size}"
            )));
        }
        // A key from the launcher's store, when the ranks have none.
        let (master, job, stored) = match self.master {
            Some(m) => {
                let named = launch.job.as_deref().map(stable_hash);
                (m, self.job.or(named).unwrap_or(0), None)
            }
            None => {
                let (m, j, key) = crate::env::find_master(launch, rank, crate::env::STORE_TIMEOUT)?;
                (m, self.job.unwrap_or(j), key)
            }
        };
        let auth = match stored {
            Some(key) => taskfold_core::auth::JobAuth::Key(key),
            None => taskfold_transports::auth::job_auth(launch)?,
        };
        let (rank, size) = spare_or_rank(settings, (rank, size), (&master, job, &auth))?;
        let mut tcp = tcp_config(rank, size, job, master);
        tcp.auth = auth;
        tcp.incarnation = settings.launch.incarnation;
        tcp.integrity = settings.launch.integrity;
        // A first process only: a replacement that hosts the start again
        // is not held.
        tcp.table_hold = (tcp.incarnation == 0)
            .then(|| crate::hooks::table_hold(&crate::hooks::of(&settings.runtime), rank))
            .flatten();
        select::start(&settings.transport, tcp).map_err(StartError::of_transport)
    }
}

/// This process's rank and the job's working size, with
/// `TASKFOLD_SPARES` counted: the last spares of the `size` processes
/// started are kept out of the application's view, and one of them
/// (`rank` among the processes) waits here, parked with the master, until
/// it is given a dead rank to take (its incarnation goes into
/// `settings`) or the job ends ([`StartError::Spare`]).
fn spare_or_rank(
    settings: &mut Settings,
    (rank, size): (u32, u32),
    (master, job, auth): (&MasterAddr, u64, &taskfold_core::auth::JobAuth),
) -> Result<(u32, u32), StartError> {
    let spares = settings.runtime.respawn.spares;
    if spares == 0 {
        return Ok((rank, size));
    }
    if spares >= size {
        return Err(StartError::Identity(format!(
            "TASKFOLD_SPARES={spares} leaves no rank to work: the job has {size} processes"
        )));
    }
    let working = size - spares;
    // A first process of rank 0 that comes after a spare took its rank
    // (no rendezvous file had come) is a spare now.
    let superseded = rank == 0
        && settings.launch.incarnation == 0
        && !taskfold_transports::tcp::spare::hosts_start(master, job);
    if superseded {
        tracing::warn!("a spare took rank 0 before this process came: it waits as a spare");
    } else if rank < working {
        return Ok((rank, working));
    }
    let cfg = taskfold_transports::tcp::spare::SpareConfig {
        job,
        size: working,
        slot: rank,
        master: master.clone(),
        auth: auth.clone(),
        connect_timeout: TcpConfig::new(0, working, job, master.clone()).connect_timeout,
    };
    tracing::info!(
        slot = rank,
        working,
        "this process is a spare: it waits to be needed"
    );
    match taskfold_transports::tcp::spare::park(&cfg) {
        Ok(Parking::Assigned { rank, incarnation }) => {
            tracing::warn!(
                slot = cfg.slot,
                rank,
                incarnation,
                "this spare takes a dead rank's place"
            );
            settings.launch.incarnation = incarnation;
            Ok((rank, working))
        }
        Ok(Parking::Dismissed) => Err(StartError::Spare),
        Err(TransportError::Refused(r)) if r.contains(taskfold_transports::RANK_FINISHED) => {
            Err(StartError::Spare)
        }
        Err(e) => Err(StartError::Transport(e)),
    }
}

/// The TCP transport of a runtime: run on the actors' own thread
/// (`threads: 0`, unless `TASKFOLD_TCP_THREADS` says otherwise), so that an
/// incoming frame wakes that one thread, not a transport thread that then
/// wakes it: quiet reductions of many ranks on few cores get faster (see
/// the book's Transports chapter).
fn tcp_config(rank: u32, size: u32, job: u64, master: MasterAddr) -> TcpConfig {
    TcpConfig {
        threads: 0,
        ..TcpConfig::new(rank, size, job, master)
    }
}
