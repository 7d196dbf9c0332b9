//! Where this process is in its job: rank and size (from whichever launcher
//! started it), the master's address, the job's name and where its key
//! comes from.
//!
//! | launcher | rank | size |
//! | --- | --- | --- |
//! | `taskfold run` | `TASKFOLD_RANK` | `TASKFOLD_SIZE` |
//! | MPICH `mpiexec` (Hydra) | `PMI_RANK` | `PMI_SIZE` |
//! | Open MPI `mpirun` | `OMPI_COMM_WORLD_RANK` | `OMPI_COMM_WORLD_SIZE` |
//! | Slurm `srun` | `SLURM_PROCID` | `SLURM_NTASKS` |
//!
//! The first launcher of this table whose two variables are both set gives
//! the identity; `TASKFOLD_RANK` without `TASKFOLD_SIZE` (or the reverse)
//! is an error. How the ranks find the master (a variable, or the
//! launcher's key-value store) is [`super::pmi::discovery`].

use super::SettingsError;
use crate::auth::JobKey;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

/// Rank and size of this process, and which launcher told us.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// This rank.
    pub rank: u32,
    /// Ranks in the job.
    pub size: u32,
    /// Which variables gave them (`"taskfold"`, `"mpich"`, `"openmpi"`,
    /// `"slurm"`).
    pub launcher: &'static str,
}

/// The launchers' variables: `(rank, size, launcher)`, first match wins.
pub const SOURCES: [(&str, &str, &str); 4] = [
    ("TASKFOLD_RANK", "TASKFOLD_SIZE", "taskfold"),
    ("PMI_RANK", "PMI_SIZE", "mpich"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "openmpi"),
    ("SLURM_PROCID", "SLURM_NTASKS", "slurm"),
];

/// This process's place in its job, as the launcher described it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Launch {
    /// Rank and size (`None`: no launcher set them; a runtime started
    /// from the environment then refuses to start).
    pub identity: Option<Identity>,
    /// The master's `host:port` (`TASKFOLD_MASTER`; rank 0 binds it).
    /// Resolved when the runtime starts. Takes precedence over
    /// [`Launch::rendezvous`].
    pub master: Option<String>,
    /// A file on a file system every rank sees, where rank 0 writes the
    /// address it bound (`TASKFOLD_RENDEZVOUS`).
    pub rendezvous: Option<PathBuf>,
    /// The job's name (`TASKFOLD_JOB`, any text; default the master's
    /// address or the rendezvous path): ranks of another job are refused.
    pub job: Option<String>,
    /// Where the job's key comes from (`TASKFOLD_JOB_KEY` or
    /// `TASKFOLD_JOB_KEY_FILE`; `taskfold run` gives its ranks one). A
    /// rank over a network transport without one does not start, unless
    /// [`Launch::insecure`].
    pub key: Option<KeySource>,
    /// `TASKFOLD_INSECURE`: without a key, run anyway, unauthenticated
    /// (warned about). No effect when there is a key.
    pub insecure: bool,
    /// `TASKFOLD_INCARNATION`: 0 for a rank started with the job, `k` for
    /// the `k`-th replacement of its rank (`taskfold run --respawn` sets
    /// it). A replacement registers with the master as such, and the
    /// runtime tells the application it was restarted.
    pub incarnation: u32,
    /// `TASKFOLD_INTEGRITY=mac`: every frame after the handshake carries a
    /// MAC under a key derived from that handshake, with implicit
    /// sequence numbers (see the book's Security chapter); `off` (the
    /// default): the handshake alone. Every rank of a job must agree.
    pub integrity: bool,
    /// `TASKFOLD_PMI`: whether, and through which protocol, the ranks find
    /// the master (and, without a key of their own, the job's key) in the
    /// launcher's key-value store when no variable names the master (see
    /// [`super::pmi`]).
    pub pmi: super::pmi::PmiChoice,
    /// The key-value store the launcher offers (`PMI_FD`,
    /// `PMIX_NAMESPACE`).
    pub offer: super::pmi::StoreOffer,
}

/// Where the job key comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// The key itself (`TASKFOLD_JOB_KEY`).
    Value(JobKey),
    /// A file holding it (`TASKFOLD_JOB_KEY_FILE`), read when the
    /// transport starts; it must be readable by its owner alone.
    File(PathBuf),
}

/// Why a rank without a key does not start: names the variables that give
/// one, and the one that does without.
pub const MISSING_KEY: &str = "this job has no key: set TASKFOLD_JOB_KEY_FILE to a file only \
     you can read, or TASKFOLD_JOB_KEY, holding 64 hexadecimal digits (e.g. from `openssl rand \
     -hex 32`), the same for every rank (`taskfold run` makes one for its ranks); or set \
     TASKFOLD_INSECURE=1 to run without one, open to any process that reaches the job's ports";

impl Launch {
    /// The job's name: [`Launch::job`], else the master's address, else
    /// the rendezvous path (`None` if there is neither).
    pub fn job_name(&self) -> Option<String> {
        self.job
            .clone()
            .or_else(|| self.master.clone())
            .or_else(|| {
                self.rendezvous
                    .as_ref()
                    .map(|p| p.to_string_lossy().into_owned())
            })
    }
}

/// What `TASKFOLD_MASTER` accepts (for error messages).
pub const MASTER_EXPECTED: &str = "host:port (e.g. node1:7000 or 10.0.0.5:7000)";

/// Whether `v` has the shape `host:port` (the host is resolved later).
pub fn valid_master(v: &str) -> bool {
    v.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty() && !host.contains(char::is_whitespace) && port.parse::<u16>().is_ok()
    })
}

/// The identity the launchers' variables in `vars` give (`None`: none of
/// them are set).
pub fn identity(vars: &BTreeMap<String, OsString>) -> Result<Option<Identity>, SettingsError> {
    let get = |name: &str| vars.get(name).filter(|v| !super::is_blank(v));
    for (rank_var, size_var, launcher) in SOURCES {
        let (rank, size) = match (get(rank_var), get(size_var)) {
            (Some(r), Some(s)) => (r, s),
            (Some(v), None) if launcher == "taskfold" => {
                return Err(SettingsError::new(
                    rank_var,
                    v,
                    "set together with TASKFOLD_SIZE",
                ))
            }
            (None, Some(v)) if launcher == "taskfold" => {
                return Err(SettingsError::new(
                    size_var,
                    v,
                    "set together with TASKFOLD_RANK",
                ))
            }
            _ => continue,
        };
        let number = |var: &str, v: &OsString| {
            v.to_str()
                .and_then(super::values::parse_u64)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| SettingsError::new(var, v, "a whole number"))
        };
        let (r, s) = (number(rank_var, rank)?, number(size_var, size)?);
        if s == 0 {
            return Err(SettingsError::new(size_var, size, "at least 1"));
        }
        if s as usize > crate::rankset::MAX_POSITIONS {
            let expected = format!("at most {} ranks", crate::rankset::MAX_POSITIONS);
            return Err(SettingsError::new(size_var, size, &expected));
        }
        if r >= s {
            let expected = format!("a rank below {size_var}={s}");
            return Err(SettingsError::new(rank_var, rank, &expected));
        }
        return Ok(Some(Identity {
            rank: r,
            size: s,
            launcher,
        }));
    }
    Ok(None)
}

/// The variables that give `id` back (those of its launcher).
pub fn identity_pairs(id: &Identity) -> [(&'static str, OsString); 2] {
    let (rank_var, size_var, _) = SOURCES
        .into_iter()
        .find(|s| s.2 == id.launcher)
        .unwrap_or(SOURCES[0]);
    [
        (rank_var, id.rank.to_string().into()),
        (size_var, id.size.to_string().into()),
    ]
}
