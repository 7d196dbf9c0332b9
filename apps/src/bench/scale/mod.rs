//! `taskfold bench scale`: many ranks on simulated nodes against few on
//! one node, in one run. Each round runs `bench reduce`'s rank program
//! (`InPlace<Sum<f32>>`, one size) in a job of `--base` ranks on one node
//! and in a job of `--ranks` ranks spread over `--nodes` simulated nodes
//! (`taskfold run --sim-nodes`: network and mount namespaces, so root),
//! alternating; the figure is the median time per reduction of each job
//! (each repetition: the slowest rank), and the report judges their ratio
//! against `--target` (issue 35: 256 ranks on 16 nodes within 3 × 16 ranks
//! of one node).
//!
//! On a machine with fewer cores than ranks the time says little about a
//! cluster's: every rank is a process that wakes for every reduction. So
//! each job runs twice, with `--reps` repetitions and with one, and the
//! difference of the CPU time the two jobs used (every rank's, user and
//! system, from `/proc/self/stat`'s waited-for children, counted in clock
//! ticks: 10 ms a job) over `--reps - 1` gives the CPU each repetition (a
//! reduction and a barrier) costs: what grows with the ranks.
//!
//! Two yardsticks run in the same rounds if asked (`yardstick`): an MPI's
//! `MPI_Reduce` on the same numbers of ranks (`--mpi`, all on this node)
//! and the floor of any reduction here (`--floor`, processes in a tree of
//! pipes), each with its own ratio.
//!
//! # Layout
//!
//! - this file: the options, the rounds, taskfold's jobs and the report;
//! - `yardstick`: the MPI's jobs and the floor's.

mod yardstick;

use crate::launcher::{self, Launch, NodeSpec};
use crate::sizes::{human, parse_size};
use clap::Args;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use taskfold_benches::stats::median;
use taskfold_benches::Figure;
use yardstick::{median_ratio, Yard, Yardsticks};

/// Options of `bench scale`.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  taskfold bench scale\n  taskfold bench scale --ranks 64 --nodes 4 --base 16 --rounds 3 --json scale.json"
)]
pub struct ScaleArgs {
    /// Ranks of the large job.
    #[arg(long, default_value_t = 256)]
    pub ranks: u32,
    /// Simulated nodes the large job's ranks are spread over.
    #[arg(long, default_value_t = 16)]
    pub nodes: u32,
    /// Ranks of the baseline job, on one node.
    #[arg(long, default_value_t = 16)]
    pub base: u32,
    /// Bytes per contribution (K, M, G suffixes).
    #[arg(long, default_value = "8", value_parser = parse_size)]
    pub size: usize,
    /// Timed repetitions per job (at least 2).
    #[arg(long, default_value_t = 40)]
    pub reps: u32,
    /// Rounds (a baseline job and a large job each, alternating).
    #[arg(long, default_value_t = 2)]
    pub rounds: u32,
    /// The ratio of the large job's median to the baseline's that meets
    /// the target.
    #[arg(long, default_value_t = 3.0)]
    pub target: f64,
    /// Also write the figures to this JSON file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also run this MPI's `MPI_Reduce` (`openmpi` or `mpich`) on the
    /// same numbers of ranks, all on this node, in every round.
    #[arg(long)]
    pub mpi: Option<String>,
    /// Also run the floor of any reduction here (a binomial tree of
    /// processes joined by pipes) on the same numbers of ranks.
    #[arg(long)]
    pub floor: bool,
}

/// One job's figures.
#[derive(serde::Serialize, Debug, Clone, Copy)]
pub struct JobFigures {
    /// Median seconds per reduction (each repetition: the slowest rank).
    pub median_s: f64,
    /// CPU seconds (every rank, user and system) per repetition: the
    /// difference between this job and the same job of one repetition.
    pub cpu_per_rep_s: f64,
}

/// One round.
#[derive(serde::Serialize, Debug)]
pub struct Round {
    /// The baseline job (`base` ranks, one node).
    pub base: JobFigures,
    /// The large job (`ranks` ranks on `nodes` nodes).
    pub scaled: JobFigures,
    /// `scaled.median_s / base.median_s`.
    pub ratio: f64,
    /// The MPI's figures (`--mpi`).
    pub mpi: Option<Yard>,
    /// The floor's figures (`--floor`).
    pub floor: Option<Yard>,
}

/// The run.
#[derive(serde::Serialize, Debug)]
pub struct ScaleReport {
    /// Ranks of the large job.
    pub ranks: u32,
    /// Its simulated nodes.
    pub nodes: u32,
    /// Ranks of the baseline job.
    pub base: u32,
    /// Bytes per contribution.
    pub size: usize,
    /// Timed repetitions per job.
    pub reps: u32,
    /// Every round.
    pub rounds: Vec<Round>,
    /// Median over rounds of the ratio.
    pub ratio: f64,
    /// The target ratio.
    pub target: f64,
    /// `ratio <= target`.
    pub met: bool,
    /// The MPI's name (`--mpi`).
    pub mpi: Option<&'static str>,
    /// Median over rounds of the MPI's ratio.
    pub mpi_ratio: Option<f64>,
    /// Median over rounds of the floor's ratio (`--floor`).
    pub floor_ratio: Option<f64>,
}

/// Runs the rounds and prints the report.
pub fn main(args: ScaleArgs) -> ExitCode {
    if args.reps < 2 {
        eprintln!("bench scale: --reps {}: expected at least 2", args.reps);
        return ExitCode::from(2);
    }
    let dir = std::env::temp_dir().join(format!("taskfold-scale-{}", std::process::id()));
    let yards = match Yardsticks::build(&args, &dir) {
        Ok(y) => y,
        Err(e) => {
            eprintln!("bench scale: {e}");
            let _ = std::fs::remove_dir_all(&dir);
            return ExitCode::from(2);
        }
    };
    let rounds = match run_rounds(&args, &yards) {
        Ok(r) => r,
        Err((code, e)) => {
            eprintln!("bench scale: {e}");
            let _ = std::fs::remove_dir_all(&dir);
            return ExitCode::from(code);
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    let mut ratios: Vec<f64> = rounds.iter().map(|r| r.ratio).collect();
    let ratio = median(&mut ratios);
    let report = ScaleReport {
        ranks: args.ranks,
        nodes: args.nodes,
        base: args.base,
        size: args.size,
        reps: args.reps,
        mpi: yards.mpi_name(),
        mpi_ratio: median_ratio(rounds.iter().map(|r| r.mpi.as_ref())),
        floor_ratio: median_ratio(rounds.iter().map(|r| r.floor.as_ref())),
        rounds,
        ratio,
        target: args.target,
        met: ratio <= args.target,
    };
    print_report(&report);
    if let Some(path) = &args.json {
        if let Err(e) = std::fs::write(path, serde_json::to_vec_pretty(&report).unwrap_or_default())
        {
            eprintln!("bench scale: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}

/// Every round: taskfold's jobs, then the yardsticks'. An error: the exit
/// code and why.
fn run_rounds(args: &ScaleArgs, yards: &Yardsticks) -> Result<Vec<Round>, (u8, String)> {
    let mut rounds = Vec::new();
    for round in 0..args.rounds.max(1) {
        let in_round = |(c, e): (u8, String)| (c, format!("round {round}: {e}"));
        let (base_short, scaled_short) = job_pair(args, 1).map_err(in_round)?;
        let (base, scaled) = job_pair(args, args.reps).map_err(in_round)?;
        let per_rep = |long: Job, short: Job| JobFigures {
            median_s: long.median_s,
            cpu_per_rep_s: (long.cpu_s - short.cpu_s) / f64::from(args.reps - 1),
        };
        let (base, scaled) = (per_rep(base, base_short), per_rep(scaled, scaled_short));
        rounds.push(Round {
            ratio: scaled.median_s / base.median_s,
            base,
            scaled,
            mpi: yards.mpi(args).map_err(|e| in_round((2, e)))?,
            floor: yards.floor(args).map_err(|e| in_round((2, e)))?,
        });
    }
    Ok(rounds)
}

/// What one job gave: rank 0's median, and the CPU every rank used.
#[derive(Clone, Copy)]
struct Job {
    median_s: f64,
    cpu_s: f64,
}

/// The baseline job, then the large one, of `reps` repetitions each. An
/// error: the exit code and why.
fn job_pair(args: &ScaleArgs, reps: u32) -> Result<(Job, Job), (u8, String)> {
    let base = job(args, args.base, None, reps)?;
    let spec = NodeSpec {
        nodes: args.nodes,
        link_rate: None,
    };
    let scaled = job(args, args.ranks, Some(&spec), reps)?;
    Ok((base, scaled))
}

/// One job of `bench reduce`'s rank program on `np` ranks, on `nodes` if
/// given.
fn job(
    args: &ScaleArgs,
    np: u32,
    nodes: Option<&NodeSpec>,
    reps: u32,
) -> Result<Job, (u8, String)> {
    let exe = std::env::current_exe().map_err(|e| (2, e.to_string()))?;
    let tag = format!("{np}-{}", nodes.map_or(1, |n| n.nodes));
    let out =
        std::env::temp_dir().join(format!("taskfold-scale-{tag}-{}.json", std::process::id()));
    let rank_args: Vec<OsString> = vec![
        "bench-rank".into(),
        "--sizes".into(),
        args.size.to_string().into(),
        "--reps".into(),
        reps.to_string().into(),
        "--warmup".into(),
        "1".into(),
        "--job-warmup".into(),
        "2".into(),
        "--values".into(),
        "in-place".into(),
        "--out".into(),
        out.clone().into_os_string(),
    ];
    let launch = Launch {
        ranks: np,
        program: exe.into_os_string(),
        args: rank_args,
        timeout: Some(Duration::from_secs(1800)),
        env: Vec::new(),
        log: None,
        respawn: 0,
    };
    let before = children_cpu_s().map_err(|e| (2, e))?;
    let ran = launcher::run_on(&launch, nodes);
    let cpu_s = children_cpu_s().map_err(|e| (2, e))? - before;
    match ran {
        Ok(exits) if exits.iter().all(|e| e.success()) => {}
        Ok(_) => return Err((1, format!("a rank of the job of {tag} failed"))),
        Err(e) => return Err((2, format!("the job of {tag}: {e}"))),
    }
    let figures = std::fs::read(&out)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice::<Vec<Figure>>(&b).map_err(|e| e.to_string()));
    let _ = std::fs::remove_file(&out);
    match figures.as_deref() {
        Ok([f]) => Ok(Job {
            median_s: f.median_s,
            cpu_s,
        }),
        Ok(other) => Err((
            1,
            format!("the job of {tag}: {} figures, not 1", other.len()),
        )),
        Err(e) => Err((
            1,
            format!("rank 0 of the job of {tag} wrote no figures: {e}"),
        )),
    }
}

/// CPU seconds (user and system) of this process's children that ended
/// and were waited for, and of theirs (`cutime` and `cstime` of
/// `/proc/self/stat`).
fn children_cpu_s() -> Result<f64, String> {
    let stat =
        std::fs::read_to_string("/proc/self/stat").map_err(|e| format!("/proc/self/stat: {e}"))?;
    // After the command's closing parenthesis: state is field 3, cutime
    // and cstime fields 16 and 17.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<f64>().ok());
    match (ticks(16), ticks(17)) {
        (Some(u), Some(s)) => Ok((u + s) / rustix::param::clock_ticks_per_second() as f64),
        _ => Err("/proc/self/stat: no cutime and cstime".into()),
    }
}

/// The report, on standard output.
fn print_report(r: &ScaleReport) {
    println!(
        "{} per contribution, {} repetitions per job; {} ranks of one node against {} ranks on {} simulated nodes",
        human(r.size as f64),
        r.reps,
        r.base,
        r.ranks,
        r.nodes
    );
    println!(
        "{:>5} {:>12} {:>12} {:>8} {:>14} {:>14}",
        "round", "base", "scaled", "ratio", "base CPU/rep", "scaled CPU/rep"
    );
    for (i, x) in r.rounds.iter().enumerate() {
        println!(
            "{:>5} {:>10.3}ms {:>10.3}ms {:>8.1} {:>12.3}ms {:>12.3}ms",
            i,
            x.base.median_s * 1e3,
            x.scaled.median_s * 1e3,
            x.ratio,
            x.base.cpu_per_rep_s * 1e3,
            x.scaled.cpu_per_rep_s * 1e3
        );
    }
    let yards = [
        (
            r.mpi.unwrap_or("mpi"),
            r.mpi_ratio,
            r.rounds.iter().map(|x| x.mpi).collect::<Vec<_>>(),
        ),
        (
            "floor",
            r.floor_ratio,
            r.rounds.iter().map(|x| x.floor).collect(),
        ),
    ];
    for (name, ratio, per_round) in &yards {
        let Some(ratio) = ratio else { continue };
        for (i, y) in per_round.iter().enumerate() {
            if let Some(y) = y {
                println!(
                    "{:>5} {:>10.3}ms {:>10.3}ms {:>8.1} ({name}, {} and {} ranks of this node)",
                    i,
                    y.base_s * 1e3,
                    y.scaled_s * 1e3,
                    y.ratio,
                    r.base,
                    r.ranks
                );
            }
        }
        println!("{name}: median ratio {ratio:.1}");
    }
    println!(
        "target: {} ranks on {} nodes within {} x {} ranks of one node: median ratio {:.1}, met: {}",
        r.ranks,
        r.nodes,
        r.target,
        r.base,
        r.ratio,
        if r.met { "yes" } else { "no" }
    );
}
