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
//! The master is found through `TASKFOLD_MASTER` (`host:port`, bound by
//! rank 0) or `TASKFOLD_RENDEZVOUS` (a file on a shared file system where
//! rank 0 writes the address it bound). `TASKFOLD_JOB` names the job (any
//! text); by default the master's address or the rendezvous path does, so
//! two jobs never mistake each other's ranks for their own. The job's key
//! (`TASKFOLD_JOB_KEY`, `TASKFOLD_JOB_KEY_FILE`) is what keeps out every
//! other process: it is found when the transport starts
//! (`taskfold_transports::auth::job_auth`).

use crate::StartError;
use std::net::ToSocketAddrs;
use taskfold_core::id::stable_hash;
pub use taskfold_core::settings::{Identity, Launch};
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
/// job's id.
pub fn master(launch: &Launch) -> Result<(MasterAddr, u64), StartError> {
    let addr = if let Some(m) = &launch.master {
        let addr = m
            .to_socket_addrs()
            .map_err(|e| StartError::Master(format!("TASKFOLD_MASTER={m:?}: {e}")))?
            .next()
            .ok_or_else(|| {
                StartError::Master(format!("TASKFOLD_MASTER={m:?} resolves to nothing"))
            })?;
        MasterAddr::Addr(addr)
    } else if let Some(p) = &launch.rendezvous {
        MasterAddr::Rendezvous(p.clone())
    } else {
        return Err(StartError::Master(
            "set TASKFOLD_MASTER=host:port or TASKFOLD_RENDEZVOUS=/shared/path".into(),
        ));
    };
    Ok((addr, job_id(launch)))
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
        assert!(master(&launch(&[])).is_err());
    }
}
