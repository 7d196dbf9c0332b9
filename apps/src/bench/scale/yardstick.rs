//! The yardsticks of `bench scale`, measured in the same rounds as
//! taskfold's jobs: an MPI's `MPI_Reduce` (`--mpi`, `bench compare`'s
//! driver, every rank on this node: the most favourable place for it) and
//! the floor of any reduction here (`--floor`, a binomial tree of
//! processes joined by pipes). Each gives its own ratio of the large job
//! to the baseline job; on a machine with fewer cores than ranks they
//! show how much of taskfold's ratio the machine itself imposes.

use super::ScaleArgs;
use std::path::Path;
use std::time::Duration;
use taskfold_benches::floor::Floor;
use taskfold_benches::mpi::{self, Mpi};
use taskfold_benches::stats::median;

/// One yardstick's figures in one round.
#[derive(serde::Serialize, Debug, Clone, Copy)]
pub struct Yard {
    /// Median seconds per reduction with `base` ranks.
    pub base_s: f64,
    /// Median seconds per reduction with `ranks` ranks.
    pub scaled_s: f64,
    /// `scaled_s / base_s`.
    pub ratio: f64,
}

impl Yard {
    fn new(base_s: f64, scaled_s: f64) -> Yard {
        Yard {
            base_s,
            scaled_s,
            ratio: scaled_s / base_s,
        }
    }
}

/// The yardsticks asked for, built once.
pub struct Yardsticks {
    mpi: Option<Mpi>,
    floor: Option<Floor>,
}

/// The limit of one MPI job: 256 ranks take about a minute to start here.
const MPI_LIMIT: Duration = Duration::from_secs(1200);

impl Yardsticks {
    /// Finds and builds what `args` asks for, in `dir`; an error names
    /// what is missing or failed.
    pub fn build(args: &ScaleArgs, dir: &Path) -> Result<Yardsticks, String> {
        let mpi = match args.mpi.as_deref() {
            None => None,
            Some(name) => {
                let (found, missing) = mpi::detect();
                let mut m = found.into_iter().find(|m| m.name == name).ok_or_else(|| {
                    let why = missing.iter().find(|w| w.starts_with(name));
                    format!(
                        "--mpi {name}: {}",
                        why.map_or("expected openmpi or mpich", |w| w.as_str())
                    )
                })?;
                m.build(&dir.join(name)).map_err(|e| e.to_string())?;
                Some(m)
            }
        };
        let floor = if args.floor {
            Some(Floor::build(&dir.join("floor")).map_err(|e| e.to_string())?)
        } else {
            None
        };
        Ok(Yardsticks { mpi, floor })
    }

    /// The MPI's figures of this round, if asked for: its driver on
    /// `base`, then on `ranks` processes, quiet, rooted at rank 0.
    pub fn mpi(&self, args: &ScaleArgs) -> Result<Option<Yard>, String> {
        let Some(m) = &self.mpi else { return Ok(None) };
        let run = |np: u32| -> Result<f64, String> {
            let rank_args: Vec<String> = [
                "--scenario",
                "quiet",
                "--sizes",
                &args.size.to_string(),
                "--reps",
                &args.reps.to_string(),
                "--warmup",
                "3",
                "--root",
                "0",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let samples = m
                .run(np, &rank_args, MPI_LIMIT)
                .map_err(|e| e.to_string())?;
            let mut times = samples
                .into_iter()
                .next()
                .map(|s| s.times_s)
                .unwrap_or_default();
            if times.is_empty() {
                return Err(format!("{}: no times on {np} ranks", m.name));
            }
            Ok(median(&mut times))
        };
        Ok(Some(Yard::new(run(args.base)?, run(args.ranks)?)))
    }

    /// The floor's figures of this round, if asked for.
    pub fn floor(&self, args: &ScaleArgs) -> Result<Option<Yard>, String> {
        let Some(f) = &self.floor else {
            return Ok(None);
        };
        let reps = args.reps.max(100);
        let run = |np: u32| {
            f.run(np, reps, args.size)
                .map(|x| x.median_s)
                .map_err(|e| e.to_string())
        };
        Ok(Some(Yard::new(run(args.base)?, run(args.ranks)?)))
    }

    /// The name of the MPI, if one was asked for.
    pub fn mpi_name(&self) -> Option<&'static str> {
        self.mpi.as_ref().map(|m| m.name)
    }
}

/// The median over rounds of one yardstick's ratio, if it ran.
pub fn median_ratio<'a>(yards: impl Iterator<Item = Option<&'a Yard>>) -> Option<f64> {
    let mut ratios: Vec<f64> = yards.flatten().map(|y| y.ratio).collect();
    (!ratios.is_empty()).then(|| median(&mut ratios))
}
