//! The launcher's key-value store (PMI): which one a rank may bootstrap
//! through, and how the ranks of a job find their master, in order of
//! precedence ([`discovery`]).
//!
//! 1. `TASKFOLD_MASTER=host:port`: rank 0 binds it, the others connect.
//! 2. `TASKFOLD_RENDEZVOUS=/path`: rank 0 writes the address it bound
//!    there, the others read it.
//! 3. The launcher's key-value store, unless `TASKFOLD_PMI=off`: rank 0
//!    puts the address it bound, every rank meets at a fence, the others
//!    get it. `TASKFOLD_PMI=auto` (the default) takes PMIx when the
//!    launcher serves it (`PMIX_NAMESPACE` is set: Open MPI's `mpirun`,
//!    Slurm's `srun --mpi=pmix`), else the PMI-1 wire protocol on the
//!    socket `PMI_FD` names (MPICH's Hydra `mpiexec`, Slurm's
//!    `srun --mpi=pmi2`); `pmi1`, `pmi2` and `pmix` ask for one.
//!
//! Explicit variables come first, so a job that names its master (or runs
//! under `taskfold run`, which sets a rendezvous file) never touches the
//! store, even when a launcher around it offers one.

use super::values::Named;
use super::{Launch, SettingsError};
use std::ffi::OsStr;
use std::path::Path;

/// `TASKFOLD_PMI`: whether, and through which protocol, a rank uses the
/// launcher's key-value store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PmiChoice {
    /// PMIx if the launcher serves it, else PMI-1 on `PMI_FD` if set.
    #[default]
    Auto,
    /// Never: the master must be named (`TASKFOLD_MASTER`,
    /// `TASKFOLD_RENDEZVOUS`).
    Off,
    /// The PMI-1 wire protocol on `PMI_FD` (no library needed).
    Pmi1,
    /// PMI-2 through the launcher's `libpmi2` (cargo feature `pmi2`).
    Pmi2,
    /// PMIx through `libpmix` (cargo feature `pmix`).
    Pmix,
}

impl Named for PmiChoice {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("auto", PmiChoice::Auto),
        ("off", PmiChoice::Off),
        ("pmi1", PmiChoice::Pmi1),
        ("pmi2", PmiChoice::Pmi2),
        ("pmix", PmiChoice::Pmix),
    ];
    const EXPECTED: &'static str = "auto, off, pmi1, pmi2 or pmix";
}

/// What the launcher's variables offer, as it set them (checked when
/// used, by [`discovery`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreOffer {
    /// `PMI_FD`: the socket to the launcher's PMI server (Hydra, Slurm's
    /// `pmi2` plugin).
    pub pmi_fd: Option<String>,
    /// `PMIX_NAMESPACE`: the job's namespace at the PMIx server that
    /// serves this process.
    pub pmix_namespace: Option<String>,
}

/// The launcher's variables that [`StoreOffer`] reads.
pub const OFFER_VARS: [&str; 2] = ["PMI_FD", "PMIX_NAMESPACE"];

/// A protocol to the launcher's store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// The PMI-1 wire protocol on this file descriptor.
    Pmi1 {
        /// `PMI_FD`.
        fd: i32,
    },
    /// PMI-2 through `libpmi2` (which finds `PMI_FD` itself).
    Pmi2,
    /// PMIx through `libpmix`.
    Pmix,
}

impl Protocol {
    /// Its name, as `TASKFOLD_PMI` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Pmi1 { .. } => "pmi1",
            Protocol::Pmi2 => "pmi2",
            Protocol::Pmix => "pmix",
        }
    }
}

/// How the ranks of this job find the master (see the [module
/// documentation](self) for the order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Discovery<'a> {
    /// `TASKFOLD_MASTER`.
    Master(&'a str),
    /// `TASKFOLD_RENDEZVOUS`.
    Rendezvous(&'a Path),
    /// The launcher's key-value store, through this protocol.
    Store(Protocol),
    /// Nothing names the master and no store is offered (or
    /// `TASKFOLD_PMI=off`).
    Nothing,
}

/// How to launch so that a rank finds its master (for errors).
pub const NO_MASTER: &str = "nothing tells this rank where the master is: set \
     TASKFOLD_MASTER=host:port or TASKFOLD_RENDEZVOUS=/shared/path, or launch under a \
     key-value store (with TASKFOLD_PMI unset or auto): MPICH's mpiexec, Slurm's srun \
     --mpi=pmi2 or --mpi=pmix (srun --mpi=list), or Open MPI's mpirun (PMIx)";

/// How this job's ranks find the master; an error names the variable at
/// fault (`TASKFOLD_PMI` asking for a store the launcher does not offer,
/// a `PMI_FD` that is no number).
pub fn discovery(launch: &Launch) -> Result<Discovery<'_>, SettingsError> {
    if let Some(m) = &launch.master {
        return Ok(Discovery::Master(m));
    }
    if let Some(p) = &launch.rendezvous {
        return Ok(Discovery::Rendezvous(p));
    }
    let offer = &launch.offer;
    let fd = || -> Result<Option<i32>, SettingsError> {
        let Some(v) = &offer.pmi_fd else {
            return Ok(None);
        };
        let fd = super::values::parse_u64(v)
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| SettingsError::new("PMI_FD", OsStr::new(v), "a file descriptor"))?;
        Ok(Some(fd))
    };
    let missing = |choice: &str, what: &str| {
        let expected = format!("a store the launcher offers, but {what}");
        SettingsError::new("TASKFOLD_PMI", OsStr::new(choice), &expected)
    };
    let protocol = match launch.pmi {
        PmiChoice::Off => None,
        PmiChoice::Auto if offer.pmix_namespace.is_some() => Some(Protocol::Pmix),
        PmiChoice::Auto => fd()?.map(|fd| Protocol::Pmi1 { fd }),
        PmiChoice::Pmix => match offer.pmix_namespace {
            Some(_) => Some(Protocol::Pmix),
            None => return Err(missing("pmix", "PMIX_NAMESPACE is unset (no PMIx server)")),
        },
        PmiChoice::Pmi1 | PmiChoice::Pmi2 => {
            let name = launch.pmi.name();
            match fd()? {
                Some(fd) if launch.pmi == PmiChoice::Pmi1 => Some(Protocol::Pmi1 { fd }),
                Some(_) => Some(Protocol::Pmi2),
                None => return Err(missing(name, "PMI_FD is unset (no PMI server)")),
            }
        }
    };
    Ok(protocol.map_or(Discovery::Nothing, Discovery::Store))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Settings;

    fn launch(pairs: &[(&str, &str)]) -> Launch {
        Settings::from_pairs(pairs.iter().copied())
            .expect("valid settings")
            .launch
    }

    fn found(pairs: &[(&str, &str)]) -> Discovery<'static> {
        let l = Box::leak(Box::new(launch(pairs)));
        discovery(l).expect("a discovery")
    }

    const HYDRA: &[(&str, &str)] = &[("PMI_RANK", "1"), ("PMI_SIZE", "4"), ("PMI_FD", "7")];
    const PMIX: (&str, &str) = ("PMIX_NAMESPACE", "slurm.pmix.3.0");

    #[test]
    fn explicit_variables_come_before_any_store() {
        let mut pairs = HYDRA.to_vec();
        pairs.push(PMIX);
        pairs.push(("TASKFOLD_RENDEZVOUS", "/shared/r"));
        assert_eq!(found(&pairs), Discovery::Rendezvous(Path::new("/shared/r")));
        pairs.push(("TASKFOLD_MASTER", "node1:7000"));
        assert_eq!(found(&pairs), Discovery::Master("node1:7000"));
    }

    #[test]
    fn auto_takes_pmix_then_pmi1_then_nothing() {
        let mut pairs = HYDRA.to_vec();
        assert_eq!(found(&pairs), Discovery::Store(Protocol::Pmi1 { fd: 7 }));
        pairs.push(PMIX);
        assert_eq!(found(&pairs), Discovery::Store(Protocol::Pmix));
        assert_eq!(found(&[PMIX]), Discovery::Store(Protocol::Pmix));
        assert_eq!(
            found(&[("PMI_RANK", "0"), ("PMI_SIZE", "1")]),
            Discovery::Nothing
        );
        pairs.push(("TASKFOLD_PMI", "off"));
        assert_eq!(found(&pairs), Discovery::Nothing);
    }

    #[test]
    fn a_chosen_protocol_is_taken_if_offered() {
        let mut pairs = HYDRA.to_vec();
        pairs.push(PMIX);
        for (choice, want) in [
            ("pmi1", Protocol::Pmi1 { fd: 7 }),
            ("PMI2", Protocol::Pmi2),
            ("pmix", Protocol::Pmix),
        ] {
            let mut p = pairs.clone();
            p.push(("TASKFOLD_PMI", choice));
            assert_eq!(found(&p), Discovery::Store(want));
        }
    }

    #[test]
    fn a_store_not_offered_or_a_bad_fd_names_the_variable() {
        let l = launch(&[("TASKFOLD_PMI", "pmix"), ("PMI_FD", "7")]);
        let e = discovery(&l).unwrap_err();
        assert_eq!(e.name, "TASKFOLD_PMI");
        assert!(e.to_string().contains("PMIX_NAMESPACE is unset"), "{e}");
        let l = launch(&[("TASKFOLD_PMI", "pmi2"), PMIX]);
        let e = discovery(&l).unwrap_err();
        assert!(e.to_string().contains("PMI_FD is unset"), "{e}");
        let l = launch(&[("PMI_FD", "seven")]);
        let e = discovery(&l).unwrap_err();
        assert_eq!((e.name.as_str(), e.value.as_str()), ("PMI_FD", "seven"));
        let e = Settings::from_pairs([("TASKFOLD_PMI", "pmi3")]).unwrap_err();
        assert_eq!(e.name, "TASKFOLD_PMI");
        assert!(
            e.to_string().contains("auto, off, pmi1, pmi2 or pmix"),
            "{e}"
        );
    }
}
