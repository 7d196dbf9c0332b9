//! `taskfold bench faults`: the failure-injection experiment, as an
//! application meets it.
//!
//! For each durability mode and each victim (a worker, the root, the
//! master): a calibration job measures the mean duration `t` of a whole
//! reduction of `S` bytes on `p` ranks, from the slowest-starting rank's
//! `reduce` call to the root's result. Then `R` trials each run
//! `--warmup` reductions to completion (default 1, as in a long run: ranks
//! then know whether their buddies are on their node) and one more, and
//! SIGKILL the victim at a uniformly random instant in `[0, t]` after the
//! victim's `reduce` call: before its contribution is safe as well as
//! after. Each trial records that phase (safe: the victim's future said
//! its contribution survives the victim's death, `ReduceFuture::is_safe`)
//! and its outcome at a
//! surviving rank: the correct result, a typed error, a wrong result, or
//! nothing within the timeout (a hang).

mod rank;
mod report;
mod trial;

pub use rank::{rank_main, FaultRankArgs};
pub use report::FaultReport;

use crate::sizes::parse_size;
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use trial::Rng;

/// Which durability modes to run.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Modes {
    /// Synchronous then asynchronous.
    Both,
    /// Synchronous only.
    Sync,
    /// Asynchronous only.
    Async,
}

/// Which rank a trial kills.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Victim {
    /// `--kill-rank`: neither the root nor rank 0.
    Worker,
    /// The root (rank 1 if `--root` is 0, so that the master survives):
    /// the outcome is read at rank 0.
    Root,
    /// Rank 0, where the master runs (the root is then rank 1 if `--root`
    /// is 0): the outcome is read at the root. With a standby
    /// (`--standby`, or `--sim-nodes` 2 or more), it takes over.
    Master,
    /// Every rank of `--kill-rank`'s node (`--sim-nodes` 2 or more; that node
    /// must hold neither rank 0 nor the root), at one instant.
    Node,
}

/// Options of `bench faults`.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  taskfold bench faults --np 8 --size 8M --trials 100 --json faults.json\n  taskfold bench faults --np 4 --kill worker,root,master --durability sync\n  sudo taskfold bench faults --sim-nodes 4 --np 8 --root 1 --kill-rank 2 --kill worker,node,master"
)]
pub struct FaultArgs {
    /// Ranks.
    #[arg(long, default_value_t = 8)]
    pub np: u32,
    /// Bytes per contribution.
    #[arg(long, default_value = "8M", value_parser = parse_size)]
    pub size: usize,
    /// Trials per durability mode and victim.
    #[arg(long, default_value_t = 100)]
    pub trials: u32,
    /// The ranks killed, one set of trials each (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "worker")]
    pub kill: Vec<Victim>,
    /// The rank killed with `--kill worker` (not the root, not rank 0).
    #[arg(long, default_value_t = 1)]
    pub kill_rank: u32,
    /// The root of the reductions (not the killed rank).
    #[arg(long, default_value_t = 0)]
    pub root: u32,
    /// Durability modes.
    #[arg(long, value_enum, default_value_t = Modes::Both)]
    pub durability: Modes,
    /// How long a survivor waits for an outcome before calling it a hang,
    /// with its unit.
    #[arg(long, value_name = "DURATION", default_value = "30s",
          value_parser = crate::launcher::cli::duration)]
    pub timeout: Duration,
    /// Seed of the kill instants.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Reductions every trial runs to completion before the one whose
    /// rank is killed, as in a long run: after one, each rank knows
    /// whether its buddy is on its node (and then writes no disk copy,
    /// its buddy holding a view of its memory). 0 measures a job's first
    /// reduction, which always writes its disk copies.
    #[arg(long, default_value_t = 1)]
    pub warmup: u32,
    /// Run every job over this many simulated nodes (`taskfold run
    /// --sim-nodes`; needs root).
    #[arg(long = "sim-nodes", value_name = "N")]
    pub nodes: Option<u32>,
    /// Renamed `--sim-nodes`.
    #[arg(long = "nodes", value_name = "N", hide = true, value_parser = crate::launcher::cli::renamed_nodes)]
    pub old_nodes: Option<String>,
    /// Who takes over when the master dies (`TASKFOLD_STANDBY`): `auto`
    /// (a rank on another node, with `--sim-nodes`), `on` (also on one node)
    /// or `off`.
    #[arg(long, default_value = "auto", value_parser = ["auto", "on", "off"])]
    pub standby: String,
    /// Also write the figures here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Who is killed, who is the root, and where the outcome is read.
#[derive(Clone, Debug)]
pub struct Plan {
    /// `worker`, `root`, `master` or `node`.
    pub name: &'static str,
    /// The killed rank whose `reduce` call times the kill.
    pub victim: u32,
    /// Every rank killed at that instant (`victim` and, for a node, the
    /// others of its node).
    pub victims: Vec<u32>,
    /// The root of the reductions.
    pub root: u32,
    /// The surviving rank whose outcome counts.
    pub observer: u32,
}

impl Plan {
    /// The plan of `victim` under `args`, or why it cannot be.
    pub fn new(args: &FaultArgs, victim: Victim) -> Result<Plan, String> {
        // The root must not be the master when either is the victim:
        // each is then killed alone.
        let not_master = if args.root == 0 { 1 } else { args.root };
        let one = |name, victim, root, observer| Plan {
            name,
            victim,
            victims: vec![victim],
            root,
            observer,
        };
        let plan = match victim {
            Victim::Worker => one("worker", args.kill_rank, args.root, args.root),
            Victim::Root => one("root", not_master, not_master, 0),
            Victim::Master => one("master", 0, not_master, not_master),
            Victim::Node => node_plan(args)?,
        };
        if args.np < 3 || args.root >= args.np {
            return Err("--np must be at least 3, and --root below it".into());
        }
        if victim == Victim::Worker && (plan.victim == 0 || plan.victim == plan.root) {
            return Err("--kill-rank must be a rank other than 0 and the root".into());
        }
        if plan.victim >= args.np {
            return Err("--kill-rank must be below --np".into());
        }
        Ok(plan)
    }
}

/// The plan of `--kill node`: every rank on `--kill-rank`'s node.
fn node_plan(args: &FaultArgs) -> Result<Plan, String> {
    let nodes = args
        .nodes
        .filter(|&n| n >= 2)
        .ok_or("--kill node needs --sim-nodes 2 or more")?;
    let spec = crate::launcher::NodeSpec {
        nodes,
        link_rate: None,
    };
    let node = |r: u32| spec.node_of(r, args.np);
    let own = node(args.kill_rank);
    let victims: Vec<u32> = (0..args.np).filter(|&r| node(r) == own).collect();
    if victims.contains(&0) || victims.contains(&args.root) {
        return Err(format!(
            "--kill node: rank {}'s node holds rank 0 or the root; choose another --kill-rank",
            args.kill_rank
        ));
    }
    Ok(Plan {
        name: "node",
        victim: args.kill_rank,
        victims,
        root: args.root,
        observer: args.root,
    })
}

/// Runs the experiment.
pub fn main(args: FaultArgs) -> ExitCode {
    let plans: Result<Vec<Plan>, String> = args.kill.iter().map(|&v| Plan::new(&args, v)).collect();
    let plans = match plans {
        Ok(p) => p,
        Err(e) => {
            eprintln!("bench faults: {e}");
            return ExitCode::from(2);
        }
    };
    let modes: &[&str] = match args.durability {
        Modes::Both => &["sync", "async"],
        Modes::Sync => &["sync"],
        Modes::Async => &["async"],
    };
    let mut reports = Vec::new();
    let mut rng = Rng(args.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    for &mode in modes {
        for plan in &plans {
            match run_mode(&args, plan, mode, &mut rng) {
                Ok(report) => reports.push(report),
                Err(code) => return code,
            }
        }
    }
    println!(
        "bench faults: {} ranks, {} per contribution; counts by phase are \
         recovered/typed errors/wrong/hangs",
        args.np,
        crate::sizes::human(args.size as f64)
    );
    for r in &reports {
        println!("{}", r.line());
    }
    if let Some(path) = &args.json {
        if let Err(e) = std::fs::write(
            path,
            serde_json::to_vec_pretty(&reports).unwrap_or_default(),
        ) {
            eprintln!("bench faults: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if reports.iter().any(|r| r.all.wrong > 0 || r.all.hangs > 0) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// One durability mode and victim: calibrates the kill window, then runs
/// the trials.
fn run_mode(
    args: &FaultArgs,
    plan: &Plan,
    mode: &str,
    rng: &mut Rng,
) -> Result<FaultReport, ExitCode> {
    let dir = std::env::temp_dir().join(format!(
        "taskfold-faults-{}-{mode}-{}",
        std::process::id(),
        plan.name
    ));
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("bench faults: {e}");
        return Err(ExitCode::from(2));
    }
    let cal = trial::job(args, plan, mode, &dir, Some(5));
    let read = |_| std::fs::read_to_string(dir.join("calibration"));
    let t = match crate::launcher::run_on(&cal, node_spec(args).as_ref()).map(read) {
        Ok(Ok(s)) => s.trim().parse::<f64>().unwrap_or(f64::NAN),
        other => {
            eprintln!("bench faults: calibration failed: {other:?}");
            return Err(ExitCode::from(1));
        }
    };
    let mut report = FaultReport {
        durability: mode.into(),
        victim: plan.name.into(),
        victim_rank: plan.victim,
        victims: plan.victims.clone(),
        nodes: args.nodes.unwrap_or(1),
        standby: args.standby.clone(),
        failure_timeout_s: failure_timeout().as_secs_f64(),
        root: plan.root,
        observer: plan.observer,
        np: args.np,
        size: args.size,
        t_whole_s: t,
        ..Default::default()
    };
    for n in 0..args.trials {
        let delay = t * rng.unit();
        report.add(trial::run_trial(args, plan, mode, &dir, n, delay));
        if (n + 1) % 10 == 0 || n + 1 == args.trials {
            eprintln!(
                "bench faults: {mode} {}: {}/{} trials",
                plan.name,
                n + 1,
                args.trials
            );
        }
    }
    report.finish();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(report)
}

/// The simulated nodes every job runs over, if any.
pub(super) fn node_spec(args: &FaultArgs) -> Option<crate::launcher::NodeSpec> {
    args.nodes.map(|nodes| crate::launcher::NodeSpec {
        nodes,
        link_rate: None,
    })
}

/// The failure-detection timeout the ranks run with (this environment's,
/// as they inherit it).
fn failure_timeout() -> std::time::Duration {
    taskfold::Settings::from_env()
        .map(|s| s.runtime.failure_timeout)
        .unwrap_or_else(|_| taskfold::Config::default().failure_timeout)
}
