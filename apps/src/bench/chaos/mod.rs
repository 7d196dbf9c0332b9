//! `taskfold bench chaos`: failure campaigns over a real job, as a long
//! job on a busy cluster meets them.
//!
//! Every trial launches a job of its own (`bench-chaos-rank`: a sum to
//! one root, or with `--collective allreduce` on every rank, and a
//! checkpoint every step, its re-init entry point the runtime's) and
//! kills `--kills K` times, each kill a victim and an instant drawn from
//! the lists given:
//!
//! - victims: `worker` (a live rank that runs no master), `replacement`
//!   (the newest process that replaced a dead one), `master` (the rank
//!   running the master: a standby takes over), `node` (every process of
//!   a simulated node, `--sim-nodes`), `spare` (a spare waiting to be
//!   needed, `--spares`);
//! - instants: `any` (uniform over the failure-free run), `admission` (a
//!   replacement as soon as its process exists, while it is being let
//!   in), `restore` (a replacement as it restores its checkpoint),
//!   `rollback` (under global restart, a rank while the job rolls back:
//!   before, during or after the ranks meet at their entry point).
//!
//! The job is given exactly the replacements its kills need (`--respawn`
//! of the launcher, or as many spares): every trial stays within its
//! budget, so each must end exact — every step's result at the root (every
//! rank, for an allreduce) equal to the failure-free sum, and the
//! launcher's verdict a success. A trial
//! that ends otherwise is counted as a typed error (a rank's reduction
//! ended with an error), wrong (a result that is not the sum), or a hang
//! (not over within its time limit; its processes are killed).
//!
//! The failure-free time to solution is measured first, in the same run
//! (`--reference` trials): the kills' instants are drawn over it, and
//! every trial's time to solution is reported against its median.

mod plan;
pub mod rank;
mod report;
mod trial;
mod watch;

pub use rank::{rank_main, ChaosRankArgs};

use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

/// How the job comes back from a replacement.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Restart {
    /// Only the replacement restores and redoes (`TASKFOLD_RESTART=local`).
    Local,
    /// Every rank returns to its entry point (`TASKFOLD_RESTART=global`).
    Global,
}

impl Restart {
    /// Its name, as `TASKFOLD_RESTART` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Restart::Local => "local",
            Restart::Global => "global",
        }
    }
}

/// Whom a kill strikes.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Victim {
    /// A live rank that runs no master.
    Worker,
    /// The newest replacement process.
    Replacement,
    /// The rank that runs the master.
    Master,
    /// Every process of one simulated node.
    Node,
    /// A spare waiting to be needed.
    Spare,
}

/// When a kill strikes.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Instant {
    /// Uniform over the failure-free run.
    Any,
    /// A replacement while it is being let in.
    Admission,
    /// A replacement while it restores.
    Restore,
    /// During a global rollback.
    Rollback,
}

/// What every step of the job is.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Collective {
    /// A sum to the root, checked there.
    Reduce,
    /// An allreduce: the sum on every rank, checked on each.
    Allreduce,
}

/// Who starts the ranks.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LaunchBy {
    /// `taskfold run` (in this process).
    Taskfold,
    /// MPICH's `mpiexec` (`-disable-auto-cleanup`), with spares.
    Mpiexec,
}

/// Options of `bench chaos`.
#[derive(Args, Debug, Clone)]
#[command(
    after_help = "Examples:\n  taskfold bench chaos --kills 1,2,3 --restart local,global --trials 200 --json chaos.json\n  taskfold bench chaos --spares --kills 2 --victims worker,spare --trials 20\n  sudo taskfold bench chaos --sim-nodes 4 --victims node,worker --trials 100\n  taskfold bench chaos --collective allreduce --kills 1,2 --restart local,global --trials 50"
)]
pub struct ChaosArgs {
    /// Ranks the application works with (spares come on top).
    #[arg(long, default_value_t = 6)]
    pub np: u32,
    /// Trials per number of kills and restart mode.
    #[arg(long, default_value_t = 20)]
    pub trials: u32,
    /// Kills per trial (comma-separated: one campaign each).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub kills: Vec<u32>,
    /// Restart modes (comma-separated: one campaign each).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "local")]
    pub restart: Vec<Restart>,
    /// Victims to draw from (those that do not apply to a job are left
    /// out: `node` without `--sim-nodes`, `spare` without `--spares`).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "worker,replacement,master,node,spare"
    )]
    pub victims: Vec<Victim>,
    /// Instants to draw from (`rollback` only under global restart).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "any,admission,restore,rollback"
    )]
    pub instants: Vec<Instant>,
    /// Replace the dead by spares (the last ranks of the job, as many as
    /// the kills need) instead of the launcher's respawn.
    #[arg(long)]
    pub spares: bool,
    /// Spread the ranks over this many simulated nodes (needs root).
    #[arg(long)]
    pub sim_nodes: Option<u32>,
    /// Who starts the ranks (`mpiexec` implies `--spares`).
    #[arg(long, value_enum, default_value_t = LaunchBy::Taskfold)]
    pub launcher: LaunchBy,
    /// Steps of the job.
    #[arg(long, default_value_t = 60)]
    pub steps: u32,
    /// What every step is: a reduction to `--root`, or an allreduce (every
    /// rank checks the sum; under local restart a replacement's redone
    /// step may end in the documented `ResultLost`, counted apart).
    #[arg(long, value_enum, default_value_t = Collective::Reduce)]
    pub collective: Collective,
    /// Values (f64) per contribution.
    #[arg(long, default_value_t = 16_384)]
    pub len: usize,
    /// The root of every step.
    #[arg(long, default_value_t = 1)]
    pub root: u32,
    /// Pause per step, in milliseconds (the job's computation).
    #[arg(long, default_value_t = 20)]
    pub pace_ms: u64,
    /// Failure-free trials measured first.
    #[arg(long, default_value_t = 3)]
    pub reference: u32,
    /// Seed of the victims and instants.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where the JSON report goes.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Where the ranks' output of every trial that is not exact is kept
    /// (default: a directory under the system's temporary one).
    #[arg(long)]
    pub keep: Option<PathBuf>,
    /// The failure timeout of the job, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub failure_timeout_ms: u64,
}

impl ChaosArgs {
    /// Whether spares replace the dead.
    pub fn with_spares(&self) -> bool {
        self.spares || self.launcher == LaunchBy::Mpiexec
    }
}

/// Runs the campaigns.
pub fn main(args: ChaosArgs) -> ExitCode {
    if let Err(e) = check(&args) {
        eprintln!("bench chaos: {e}");
        return ExitCode::from(2);
    }
    let bench = match trial::Bench::new(&args) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("bench chaos: {e}");
            return ExitCode::from(2);
        }
    };
    let report = bench.run_all();
    for line in report.lines() {
        println!("{line}");
    }
    if let Some(path) = &args.json {
        if let Err(e) = report.write_json(path) {
            eprintln!("bench chaos: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    match report.all_exact() {
        true => ExitCode::SUCCESS,
        false => ExitCode::from(1),
    }
}

/// Refuses options that cannot make a campaign.
fn check(args: &ChaosArgs) -> Result<(), String> {
    if args.np < 3 {
        return Err("--np must be at least 3".into());
    }
    if args.root >= args.np {
        return Err(format!(
            "--root {} is not a rank of --np {}",
            args.root, args.np
        ));
    }
    if args.kills.contains(&0) || args.kills.is_empty() {
        return Err("--kills must be at least 1".into());
    }
    if args.trials == 0 || args.reference == 0 || args.steps < 4 {
        return Err("--trials and --reference must be at least 1, --steps at least 4".into());
    }
    if let Some(n) = args.sim_nodes {
        if n < 2 || n > args.np {
            return Err(format!("--sim-nodes {n}: 2 to --np nodes"));
        }
        if args.launcher == LaunchBy::Mpiexec {
            return Err("--sim-nodes runs under taskfold run only".into());
        }
    }
    Ok(())
}
