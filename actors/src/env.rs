//! Finding this process's place in the job from its environment.
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
//! two jobs never mistake each other's ranks for their own.

use crate::StartError;
use std::net::ToSocketAddrs;
use taskfold_core::id::stable_hash;
use taskfold_transports::tcp::MasterAddr;

/// Rank and size of this process, and which launcher told us.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// This rank.
    pub rank: u32,
    /// Ranks in the job.
    pub size: u32,
    /// Which variables gave them (`"taskfold"`, `"mpich"`, `"openmpi"`, `"slurm"`).
    pub launcher: &'static str,
}

const SOURCES: [(&str, &str, &str); 4] = [
    ("TASKFOLD_RANK", "TASKFOLD_SIZE", "taskfold"),
    ("PMI_RANK", "PMI_SIZE", "mpich"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "openmpi"),
    ("SLURM_PROCID", "SLURM_NTASKS", "slurm"),
];

/// Reads the identity with `get` (the environment, in practice).
pub fn identity_with(get: impl Fn(&str) -> Option<String>) -> Result<Identity, StartError> {
    for (rank_var, size_var, launcher) in SOURCES {
        let (Some(rank), Some(size)) = (get(rank_var), get(size_var)) else {
            continue;
        };
        let parse = |var: &str, v: &str| {
            v.trim()
                .parse::<u32>()
                .map_err(|_| StartError::Identity(format!("{var}={v:?} is not a number")))
        };
        let rank = parse(rank_var, &rank)?;
        let size = parse(size_var, &size)?;
        if size == 0 || rank >= size {
            return Err(StartError::Identity(format!(
                "{rank_var}={rank} is not a rank of a job of {size_var}={size}"
            )));
        }
        return Ok(Identity {
            rank,
            size,
            launcher,
        });
    }
    Err(StartError::Identity(
        "no rank in the environment: launch with `taskfold run`, `mpiexec`, `mpirun` or `srun`, \
         or set TASKFOLD_RANK and TASKFOLD_SIZE"
            .into(),
    ))
}

/// Reads the master's address and the job id with `get`.
pub fn master_with(get: impl Fn(&str) -> Option<String>) -> Result<(MasterAddr, u64), StartError> {
    let (addr, name) = if let Some(m) = get("TASKFOLD_MASTER") {
        let addr = m
            .to_socket_addrs()
            .map_err(|e| StartError::Master(format!("TASKFOLD_MASTER={m:?}: {e}")))?
            .next()
            .ok_or_else(|| {
                StartError::Master(format!("TASKFOLD_MASTER={m:?} resolves to nothing"))
            })?;
        (MasterAddr::Addr(addr), m)
    } else if let Some(p) = get("TASKFOLD_RENDEZVOUS") {
        (MasterAddr::Rendezvous(p.clone().into()), p)
    } else {
        return Err(StartError::Master(
            "set TASKFOLD_MASTER=host:port or TASKFOLD_RENDEZVOUS=/shared/path".into(),
        ));
    };
    let job = stable_hash(&get("TASKFOLD_JOB").unwrap_or(name));
    Ok((addr, job))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn every_launcher() {
        let id = identity_with(env(&[("PMI_RANK", "2"), ("PMI_SIZE", "4")])).unwrap();
        assert_eq!((id.rank, id.size, id.launcher), (2, 4, "mpich"));
        let id = identity_with(env(&[
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "8"),
        ]))
        .unwrap();
        assert_eq!(id.launcher, "openmpi");
        let id = identity_with(env(&[("SLURM_PROCID", "3"), ("SLURM_NTASKS", "4")])).unwrap();
        assert_eq!(id.launcher, "slurm");
        let id = identity_with(env(&[
            ("TASKFOLD_RANK", "1"),
            ("TASKFOLD_SIZE", "2"),
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "9"),
        ]))
        .unwrap();
        assert_eq!((id.rank, id.launcher), (1, "taskfold"));
    }

    #[test]
    fn bad_identities() {
        assert!(identity_with(env(&[])).is_err());
        assert!(identity_with(env(&[("PMI_RANK", "4"), ("PMI_SIZE", "4")])).is_err());
        assert!(identity_with(env(&[("PMI_RANK", "x"), ("PMI_SIZE", "4")])).is_err());
        assert!(identity_with(env(&[("PMI_RANK", "0"), ("PMI_SIZE", "0")])).is_err());
    }

    #[test]
    fn master_and_job() {
        let (a, j1) = master_with(env(&[("TASKFOLD_MASTER", "127.0.0.1:7000")])).unwrap();
        assert!(matches!(a, MasterAddr::Addr(_)));
        let (_, j2) = master_with(env(&[
            ("TASKFOLD_MASTER", "127.0.0.1:7000"),
            ("TASKFOLD_JOB", "x"),
        ]))
        .unwrap();
        assert_ne!(j1, j2);
        let (r, _) = master_with(env(&[("TASKFOLD_RENDEZVOUS", "/tmp/r")])).unwrap();
        assert!(matches!(r, MasterAddr::Rendezvous(_)));
        assert!(master_with(env(&[])).is_err());
        assert!(master_with(env(&[("TASKFOLD_MASTER", "not an address")])).is_err());
    }
}
