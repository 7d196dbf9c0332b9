//! `taskfold bench compare --out DIR`: taskfold against MPI_Reduce /
//! MPI_Ireduce of Open MPI and MPICH, side by side in one run, in the
//! source paper's scenarios (the book's Benchmarks chapter says how to read
//! the report):
//!
//! - a. `quiet`: p in `--np`, every size;
//! - b. `slow-half`, `slow-20ms`: rank 2 busy-spins D before contributing,
//!   D = 50% of the quiet time, and D = 20 ms;
//! - c. `stagger`: seeded delays in [0, J], J = the quiet time, with tails;
//! - d. `load`: one migration-kernel process per core beside the ranks;
//! - e. `concurrent`: K reductions of `--concurrent-size` at once;
//! - f. the master's messages and bytes per second (from the quiet runs).
//!
//! The quiet time that sets D and J is Open MPI's median at the same
//! (p, size) (else MPICH's, else taskfold's), so both sides see the same
//! delays. Writes `compare.json`, `report.md` and SVG plots into DIR.

mod harness;
mod load;
mod plots;
pub mod rank;
mod run;
mod scenarios;

pub use load::{main as load_main, LoadArgs};

use crate::sizes::parse_size;
use clap::Args;
use harness::Harness;
use std::path::PathBuf;
use std::process::ExitCode;
use taskfold_benches::mpi::{self, Mpi};
use taskfold_benches::report::Report;
use taskfold_core::settings::Named;

/// Options of `bench compare`.
#[derive(Args, Debug, Clone)]
#[command(
    after_help = "Examples:\n  taskfold bench compare --out compare/\n  taskfold bench compare --out quick/ --np 2,4 --size 512K --scenarios quiet,slow --reps 3"
)]
pub struct CompareArgs {
    /// Directory for compare.json, report.md and the plots.
    #[arg(long)]
    pub out: PathBuf,
    /// The collective measured on both sides: `reduce` (taskfold's
    /// `reduce` against `MPI_Reduce`/`MPI_Ireduce`), `allreduce`
    /// (`allreduce` against `MPI_Allreduce`/`MPI_Iallreduce`) or
    /// `broadcast` (`broadcast` from the root against
    /// `MPI_Bcast`/`MPI_Ibcast`).
    #[arg(long, default_value = "reduce", value_parser = ["reduce", "allreduce", "broadcast"])]
    pub collective: String,
    /// Rank counts of the quiet scenario.
    #[arg(long, value_delimiter = ',', default_value = "2,4,8")]
    pub np: Vec<u32>,
    /// Rank count of the other scenarios.
    #[arg(long, default_value_t = 8)]
    pub np_interference: u32,
    /// Contribution sizes (bytes of f32; K, M, G suffixes).
    #[arg(long, value_delimiter = ',', default_value = "128K,512K,2M,8M,32M", value_parser = parse_size)]
    pub size: Vec<usize>,
    /// Concurrent reductions of scenario e.
    #[arg(long, value_delimiter = ',', default_value = "4,8,16,28")]
    pub k: Vec<u32>,
    /// Contribution size of scenario e.
    #[arg(long, default_value = "8M", value_parser = parse_size)]
    pub concurrent_size: usize,
    /// Scenarios to run.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "quiet,slow,stagger,load,concurrent"
    )]
    pub scenarios: Vec<String>,
    /// taskfold's durability configurations to measure (`async`, `sync`,
    /// `off`); the first one is the side the targets are judged on.
    #[arg(long, value_delimiter = ',', default_value = "async,off")]
    pub durability: Vec<String>,
    /// When taskfold's futures of ranks other than the root complete, one
    /// side per value and durability: `result` (once the root holds it,
    /// the default) or `contributed` (once the rank's data was folded in,
    /// as MPI_Reduce returns on a rank other than the root). The first is
    /// the side the targets are judged on.
    #[arg(long, value_delimiter = ',', default_value = "result")]
    pub completion: Vec<String>,
    /// `TASKFOLD_INTEGRITY` of taskfold's sides (`off`, `mac`), one side
    /// per value: `--integrity off,mac` measures the cost of sealing
    /// every frame against the same build in the same run. The first is
    /// the side the targets are judged on.
    #[arg(long, value_delimiter = ',', default_value = "off")]
    pub integrity: Vec<String>,
    /// Baselines to run, if installed.
    #[arg(long, value_delimiter = ',', default_value = "openmpi,mpich")]
    pub mpi: Vec<String>,
    /// Timed repetitions per point.
    #[arg(long, default_value_t = 10)]
    pub reps: u32,
    /// Timed repetitions per point of scenario e. Each rank's buffer pool
    /// grows over the first repetitions of many concurrent reductions (to
    /// the most buffers the rank needs at once), so fewer repetitions
    /// measure that growth as much as the reductions.
    #[arg(long, default_value_t = 15)]
    pub reps_concurrent: u32,
    /// Untimed repetitions first.
    #[arg(long, default_value_t = 2)]
    pub warmup: u32,
    /// Seed of the staggered arrivals.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Run every scenario's sizes one after the other in one job per side,
    /// instead of each size in a job of its own (an MPI job that ran smaller
    /// sizes first is slower, so this compares against a slower baseline:
    /// see the book's Benchmarks chapter).
    #[arg(long)]
    pub sizes_in_one_job: bool,
    /// Kill a run (one side, one scenario) after this long, with its unit.
    #[arg(long, value_name = "DURATION", default_value = "30m",
          value_parser = crate::launcher::cli::duration)]
    pub timeout: std::time::Duration,
}

/// The report's name for taskfold under `durability`, `completion` and
/// `integrity`: `taskfold` for the defaults, else what differs from them.
/// The first taskfold configuration asked for (durability, completion,
/// integrity): the one the targets are judged on.
fn first_configuration(a: &CompareArgs) -> (&str, &str, &str) {
    (
        a.durability.first().map_or("async", |d| d.as_str()),
        a.completion.first().map_or("result", |c| c.as_str()),
        a.integrity.first().map_or("off", |i| i.as_str()),
    )
}

fn side_name(durability: &str, completion: &str, integrity: &str) -> String {
    let mut differs = Vec::new();
    if durability != "async" {
        differs.push(format!("durability {durability}"));
    }
    if completion != "result" {
        differs.push(format!("completion {completion}"));
    }
    if integrity != "off" {
        differs.push(format!("integrity {integrity}"));
    }
    if differs.is_empty() {
        "taskfold".into()
    } else {
        format!("taskfold ({})", differs.join(", "))
    }
}

/// Runs the comparison and writes the report.
pub fn main(a: CompareArgs) -> ExitCode {
    match compare(&a) {
        Ok(report) => {
            println!(
                "{}",
                report.markdown().split("\n## a.").next().unwrap_or("")
            );
            println!("report: {}", a.out.join("report.md").display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench compare: {e}");
            ExitCode::from(1)
        }
    }
}

fn compare(a: &CompareArgs) -> Result<Report, String> {
    // The ranks inherit this environment: what it sets is what they run.
    let settings = taskfold::Settings::from_env().map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let (mpis, missing) = build_mpis(a);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    check_sides(a)?;
    let first = {
        let (d, c, i) = first_configuration(a);
        side_name(d, c, i)
    };
    let mut h = Harness {
        exe: exe.clone(),
        mpis,
        report: Report {
            invocation: std::env::args().collect::<Vec<_>>().join(" "),
            against: match a.collective.as_str() {
                "allreduce" => "MPI_Allreduce",
                "broadcast" => "MPI_Bcast",
                _ => "MPI_Reduce",
            }
            .into(),
            missing,
            notes: notes(a, &settings, cores),
            ..Report::default()
        },
        step: 0,
    };
    h.scenarios(a, &first, &exe, cores)?;
    h.plots(&a.out, a);
    let json = serde_json::to_vec_pretty(&h.report).map_err(|e| e.to_string())?;
    std::fs::write(a.out.join("compare.json"), json).map_err(|e| format!("compare.json: {e}"))?;
    std::fs::write(a.out.join("report.md"), h.report.markdown())
        .map_err(|e| format!("report.md: {e}"))?;
    Ok(h.report)
}

/// The MPIs asked for (`--mpi`) that are installed, their drivers built
/// into `OUT/mpi`; and why the others are not measured.
fn build_mpis(a: &CompareArgs) -> (Vec<Mpi>, Vec<String>) {
    let (found, mut missing) = mpi::detect();
    let mut mpis = Vec::new();
    for mut m in found
        .into_iter()
        .filter(|m| a.mpi.iter().any(|x| x == m.name))
    {
        match m.build(&a.out.join("mpi")) {
            Ok(_) => mpis.push(m),
            Err(e) => missing.push(e.to_string()),
        }
    }
    (mpis, missing)
}

/// Refuses a `--durability` or `--completion` taskfold does not know.
fn check_sides(a: &CompareArgs) -> Result<(), String> {
    for d in &a.durability {
        if !matches!(d.as_str(), "async" | "sync" | "off") {
            return Err(format!("--durability {d}: expected async, sync or off"));
        }
    }
    for c in &a.completion {
        if !matches!(c.as_str(), "result" | "contributed") {
            return Err(format!("--completion {c}: expected result or contributed"));
        }
    }
    for i in &a.integrity {
        if !matches!(i.as_str(), "off" | "mac") {
            return Err(format!("--integrity {i}: expected off or mac"));
        }
    }
    Ok(())
}

/// The report's notes on how the run was made.
fn notes(a: &CompareArgs, settings: &taskfold::Settings, cores: usize) -> Vec<String> {
    vec![
        format!("{cores} cores; root 1; f32 sum; {} timed repetitions after {} warm-up ({} for scenario e)", a.reps, a.warmup, a.reps_concurrent),
        format!(
            "taskfold: `taskfold` is the default durability (async: a disk copy and a buddy copy of every contribution, or, with the buddy on the same node, the original kept in memory where the buddy maps it); `taskfold (durability off)` makes no copies, like MPI; contributions are `InPlace<Sum<f32>>` arrays filled before the clock starts, like MPI's send buffers (each repetition's right before it, between two barriers, so that no rank copies data while another rank's clock runs); transport {}{}",
            settings.transport.kind.name(),
            same_node_gets(settings)
        ),
        "taskfold's futures of ranks other than the root complete once the root holds the result (the default completion), or, on the sides named `completion contributed`, once their data was folded in, as MPI_Reduce returns on a rank other than the root once its send buffer is free".into(),
        "D and J are Open MPI's quiet median at the same p and size (else MPICH's, else taskfold's)".into(),
        if a.sizes_in_one_job {
            "scenarios a-d run their sizes one after the other in one job per side (--sizes-in-one-job); scenario e runs each K in a job of its own, on every side".into()
        } else {
            "every size and every K runs in a job of its own, on every side".into()
        },
    ]
}

/// How same-node gets move data in the ranks this harness starts (its own
/// binary: the shared heap is installed unless the settings turn it off).
fn same_node_gets(settings: &taskfold::Settings) -> &'static str {
    if !settings.transport.tcp_loans {
        " (same-node loans off)"
    } else if !settings.shared_heap {
        " (same-node gets by cross-memory attach)"
    } else {
        " (same-node gets read in place from the owner's shared heap)"
    }
}
