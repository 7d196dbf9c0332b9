//! Finding this process's place in the job from its settings' [`Launch`]
//! part (parsed from the environment by `Settings::from_env`).
//!
//! | launcher | rank | size |
//! | --- | --- | --- |
//! | `taskfold run` | `TASKFOLD_RANK` | `TASKFOLD_SIZE` |
//! | MPICH `mpiexec` (Hydra) | `PMI_RANK` | `PMI_SIZE` |
//! | Open MPI `mpirun` | `OMPI_COMM_WORLD_RANK` | `OMPI_COMM_WORLD_SIZE` |
//! | Slurm `srun` | `SLURM_PROCID` | `SLURM_NTASKS` |
//!
//! The master is found, in this order, through `TASKFOLD_MASTER`
//! (`host:port`, bound by rank 0), `TASKFOLD_RENDEZVOUS` (a file on a
//! shared file system where rank 0 writes the address it bound), or the
//! launcher's key-value store (PMI, unless `TASKFOLD_PMI=off`: rank 0 puts
//! the address it bound; see [`taskfold_transports::pmi`]).
//! `TASKFOLD_JOB` names the job (any text); by default the master's
//! address, the rendezvous path or the store's name for the job does, so
//! two jobs never mistake each other's ranks for their own. The job's key
//! (`TASKFOLD_JOB_KEY`, `TASKFOLD_JOB_KEY_FILE`; through the store, a
//! fresh one rank 0 puts there when the ranks have none) is what keeps
//! out every other process: it is found when the transport starts
//! (`taskfold_transports::auth::job_auth`).

use crate::StartError;
use std::net::ToSocketAddrs;
use std::sync::Arc;
use std::time::Duration;
use taskfold_core::auth::JobKey;
use taskfold_core::id::stable_hash;
pub use taskfold_core::settings::pmi::discovery;
use taskfold_core::settings::pmi::NO_MASTER;
pub use taskfold_core::settings::{Discovery, Identity, Launch, Protocol};
use taskfold_transports::pmi::StoreMaster;
use taskfold_transports::tcp::MasterAddr;

/// This process's rank and size, or an error saying how to launch it.
pub fn identity(launch: &Launch) -> Result<Identity, StartError> {
    launch.identity.ok_or_else(|| {
        StartError::Identity(
            "no rank in the environment: launch with `taskfold run`, `mpiexec`, `mpirun` or \
             `srun`, or set TASKFOLD_RANK and TASKFOLD_SIZE"
                .into(),
        )
    })
}

/// The master's address (resolving `TASKFOLD_MASTER`'s host name) and the
/// job's id, when a variable names the master. Through the launcher's
/// store, the master is found only as the runtime starts: an error says
/// so (see [`find_master`]).
pub fn master(launch: &Launch) -> Result<(MasterAddr, u64), StartError> {
    let addr = match discovery(launch)? {
        Discovery::Master(m) => {
            let addr = m
                .to_socket_addrs()
                .map_err(|e| StartError::Master(format!("TASKFOLD_MASTER={m:?}: {e}")))?
                .next()
                .ok_or_else(|| {
                    StartError::Master(format!("TASKFOLD_MASTER={m:?} resolves to nothing"))
                })?;
            MasterAddr::Addr(addr)
        }
        Discovery::Rendezvous(p) => MasterAddr::Rendezvous(p.to_path_buf()),
        Discovery::Store(p) => {
            return Err(StartError::Master(format!(
                "the master is in the launcher's key-value store ({}), found as the runtime \
                 starts",
                p.name()
            )))
        }
        Discovery::Nothing => return Err(StartError::Master(NO_MASTER.into())),
    };
    Ok((addr, job_id(launch)))
}

/// How long a rank waits at a fence of the launcher's store: the TCP
/// transport's connect timeout (`TcpConfig::connect_timeout`'s default),
/// within which every rank must register with the master too.
pub const STORE_TIMEOUT: Duration = Duration::from_secs(30);

/// Where rank `rank` finds its master: [`master`]'s answer when a variable
/// names it, else the launcher's key-value store, through which this rank
/// also gets the job's key if it has none of its own (`Some` then).
/// Through the store, the job's name is `TASKFOLD_JOB`, else the store's
/// (`pmi:` and its name for the job). Blocks at the store's first fence,
/// at most `timeout`.
pub fn find_master(
    launch: &Launch,
    rank: u32,
    timeout: Duration,
) -> Result<(MasterAddr, u64, Option<JobKey>), StartError> {
    let protocol = match discovery(launch)? {
        Discovery::Store(p) => p,
        _ => return master(launch).map(|(m, job)| (m, job, None)),
    };
    let store = StoreMaster::open(protocol, rank, timeout)?;
    let key = store.share_key(launch.key.is_some())?;
    let name = launch
        .job
        .clone()
        .unwrap_or_else(|| format!("pmi:{}", store.job_name()));
    tracing::debug!(rank, protocol = store.protocol(), job = %name, "bootstrap through the launcher's store");
    Ok((MasterAddr::Store(Arc::new(store)), stable_hash(&name), key))
}

/// The job's id: the hash of its name ([`Launch::job_name`]; 0 without
/// one).
pub fn job_id(launch: &Launch) -> u64 {
    launch.job_name().map_or(0, |name| stable_hash(&name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskfold_core::settings::Settings;

    fn launch(pairs: &[(&str, &str)]) -> Launch {
        Settings::from_pairs(pairs.iter().copied())
            .expect("valid settings")
            .launch
    }

    #[test]
    fn identities() {
        let id = identity(&launch(&[("PMI_RANK", "2"), ("PMI_SIZE", "4")])).unwrap();
        assert_eq!((id.rank, id.size, id.launcher), (2, 4, "mpich"));
        let e = identity(&launch(&[])).unwrap_err().to_string();
        assert!(e.contains("taskfold run"), "{e}");
    }

    #[test]
    fn master_and_job() {
        let (a, j1) = master(&launch(&[("TASKFOLD_MASTER", "127.0.0.1:7000")])).unwrap();
        assert!(matches!(a, MasterAddr::Addr(_)));
        let (_, j2) = master(&launch(&[
            ("TASKFOLD_MASTER", "127.0.0.1:7000"),
            ("TASKFOLD_JOB", "x"),
        ]))
        .unwrap();
        assert_ne!(j1, j2);
        let (r, _) = master(&launch(&[("TASKFOLD_RENDEZVOUS", "/tmp/r")])).unwrap();
        assert!(matches!(r, MasterAddr::Rendezvous(_)));
        let e = master(&launch(&[])).unwrap_err().to_string();
        assert!(e.contains(NO_MASTER), "{e}");
        let hydra = [("PMI_RANK", "1"), ("PMI_SIZE", "2"), ("PMI_FD", "9")];
        let e = master(&launch(&hydra)).unwrap_err().to_string();
        assert!(e.contains("launcher's key-value store (pmi1)"), "{e}");
        // A variable that names the master comes first.
        let mut named = hydra.to_vec();
        named.push(("TASKFOLD_MASTER", "127.0.0.1:7000"));
        assert!(matches!(
            master(&launch(&named)).unwrap().0,
            MasterAddr::Addr(_)
        ));
    }
}
