//! `taskfold bench recovery --out DIR`: how long a psdm job takes to a
//! solution when one of its ranks is SIGKILLed, by way of recovery (the
//! book's Benchmarks chapter says how to read the report).
//!
//! Every trial is a psdm job launched with `taskfold run` as child
//! processes, with checkpoints on (`TASKFOLD_CHECKPOINT_DIR` fresh per
//! trial). The `none` trials run first: their median time to solution is
//! the failure-free length `T`, and their checksum the reference. Every
//! other trial SIGKILLs one random rank other than the root at a uniform
//! random instant in `[0, T]` after the launch. The modes:
//!
//! - `none`: no failure;
//! - `restart`: checkpoint/restart: the kill tears the whole job down (its
//!   other ranks SIGKILLed too) and the job is launched again under the
//!   same `TASKFOLD_CHECKPOINT_JOB`, resuming from the newest version
//!   every rank holds; the time to solution counts both launches;
//! - `global`, `local`: the job runs with `taskfold run --respawn 1` and
//!   `TASKFOLD_RESTART=global|local` (the runtime replaces the dead
//!   process); a mode whose jobs fail is reported with its error, never
//!   left out. For `local` each trial also gets a lower bound: `T` plus
//!   the dead rank's work since its last checkpoint, its respawn and its
//!   restore (from the `@psdm-checkpoint` and `@psdm-resumed` lines that
//!   psdm prints when asked, with `--markers`, as every trial asks).
//!
//! Writes `recovery.json` (every trial), `report.md` (medians per mode)
//! and `recovery.svg` (time to solution against the kill instant) into
//! DIR. Exits 1 if a trial ended without the failure-free checksum.

pub mod report;
mod trial;

use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

/// How a trial fails and recovers.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// No failure: the reference.
    None,
    /// The whole job torn down at the kill and launched again, resuming
    /// from its checkpoints.
    Restart,
    /// `--respawn 1`, `TASKFOLD_RESTART=global`.
    Global,
    /// `--respawn 1`, `TASKFOLD_RESTART=local`.
    Local,
}

impl Mode {
    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Mode::None => "none",
            Mode::Restart => "restart",
            Mode::Global => "global",
            Mode::Local => "local",
        }
    }

    /// Whether the runtime replaces the dead process (`--respawn 1`).
    pub fn respawns(self) -> bool {
        matches!(self, Mode::Global | Mode::Local)
    }
}

/// Options of `bench recovery`.
#[derive(Args, Debug, Clone)]
#[command(
    after_help = "Examples:\n  taskfold bench recovery --out recovery/\n  taskfold bench recovery --out quick/ --np 3 --trials 2 --modes none,local -- --nx 200 --nz 100"
)]
pub struct RecoveryArgs {
    /// Directory for recovery.json, report.md and recovery.svg.
    #[arg(long)]
    pub out: PathBuf,
    /// Ranks of the psdm job.
    #[arg(long, default_value_t = 4)]
    pub np: u32,
    /// Trials per mode.
    #[arg(long, default_value_t = 10)]
    pub trials: u32,
    /// Modes to run (`none` always runs first: it sets the kill window
    /// and the reference checksum).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "none,restart,global,local"
    )]
    pub modes: Vec<Mode>,
    /// Seed of the victims and kill instants.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The psdm binary (default: `psdm` beside this program, as
    /// `cargo build --release -p taskfold-psdm` leaves it).
    #[arg(long)]
    pub psdm: Option<PathBuf>,
    /// How long one launch may take before it is stopped (`taskfold run
    /// --timeout`), with its unit.
    #[arg(long, value_name = "DURATION", default_value = "5m",
          value_parser = crate::launcher::cli::duration)]
    pub timeout: std::time::Duration,
    /// psdm's options (after `--`; its default job if none); `--out` is
    /// set per trial.
    #[arg(last = true)]
    pub psdm_args: Vec<String>,
}

/// Runs the benchmark.
pub fn main(args: RecoveryArgs) -> ExitCode {
    let psdm = args.psdm.clone().unwrap_or_else(trial::psdm_beside_us);
    if !psdm.exists() {
        eprintln!(
            "bench recovery: {} not found: build it (cargo build --release -p taskfold-psdm) or \
             give --psdm",
            psdm.display()
        );
        return ExitCode::from(2);
    }
    if args.np < 2 || args.trials == 0 {
        eprintln!("bench recovery: --np must be at least 2 and --trials at least 1");
        return ExitCode::from(2);
    }
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        eprintln!("bench recovery: {}: {e}", args.out.display());
        return ExitCode::from(2);
    }
    let bench = trial::Bench::new(&args, psdm);
    let report = match bench.run_all() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("bench recovery: {e}");
            return ExitCode::from(1);
        }
    };
    for line in report.lines() {
        println!("{line}");
    }
    match report.write(&args.out) {
        Ok(()) => println!("bench recovery: report in {}", args.out.display()),
        Err(e) => {
            eprintln!("bench recovery: cannot write the report: {e}");
            return ExitCode::from(2);
        }
    }
    if report.all_exact() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
