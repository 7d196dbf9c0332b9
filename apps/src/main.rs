//! `taskfold`: launch ranks, run the demo, run benchmarks.

use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

mod bench;

/// Large blocks (contributions, receive buffers) in shared memory, so that
/// ranks on one node fold each other's data in place.
#[global_allocator]
static HEAP: taskfold::SharedHeap = taskfold::SharedHeap;
mod demo;
mod launcher;
mod observe;
mod sizes;

#[derive(Parser)]
#[command(
    name = "taskfold",
    version,
    about = "Fault-tolerant, task-parallel distributed reductions"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start N ranks of PROGRAM on this machine and watch them.
    Run {
        /// Number of ranks.
        #[arg(short = 'n', long = "np", value_parser = clap::value_parser!(u32).range(1..=4096))]
        ranks: u32,
        /// Kill every rank after this many seconds.
        #[arg(long)]
        timeout: Option<u64>,
        /// Spread the ranks over this many nodes simulated on this machine
        /// (network and mount namespaces; needs root).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(launcher::nodes::MAX_NODES)))]
        nodes: Option<u32>,
        /// Limit each simulated node's link to this rate, both ways
        /// (`100mbit`, `1gbit`, `125mbps`).
        #[arg(long, requires = "nodes")]
        link_rate: Option<launcher::nodes::LinkRate>,
        /// Start again, at most N times in all, a rank (not the master)
        /// killed by a signal: same rank, next incarnation
        /// (`TASKFOLD_INCARNATION`), on the same node. Reductions that need
        /// its lost contribution wait for the replacement.
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1_048_576))]
        respawn: u32,
        /// The program and its arguments.
        #[arg(trailing_var_arg = true, required = true, allow_hyphen_values = true)]
        program: Vec<OsString>,
    },
    /// Run the demo: ranks computing while reducing a stream of f32 arrays.
    Demo(demo::DemoArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::BenchCmd),
    /// (internal) one rank of the demo.
    #[command(hide = true)]
    DemoRank(demo::DemoArgs),
    /// (internal) one rank of a benchmark.
    #[command(hide = true)]
    BenchRank(bench::reduce::RankArgs),
    /// (internal) one rank of the failure-injection experiment.
    #[command(hide = true)]
    BenchFaultRank(bench::faults::FaultRankArgs),
    /// (internal) one rank of `bench compare`.
    #[command(hide = true)]
    CompareRank(bench::compare::rank::CompareRankArgs),
    /// (internal) one rank of `bench chaos`.
    #[command(hide = true)]
    BenchChaosRank(bench::chaos::ChaosRankArgs),
    /// (internal) one background-load process of `bench compare`.
    #[command(hide = true)]
    BenchLoad(bench::compare::LoadArgs),
}

fn main() -> ExitCode {
    observe::init_logging();
    let cli = Cli::parse();
    match cli.command {
        Cmd::Run {
            ranks,
            timeout,
            nodes,
            link_rate,
            respawn,
            program,
        } => {
            let nodes = nodes.map(|nodes| launcher::NodeSpec { nodes, link_rate });
            let launch = launcher::Launch {
                ranks,
                program: program[0].clone(),
                args: program[1..].to_vec(),
                timeout: timeout.map(Duration::from_secs),
                env: Vec::new(),
                log: None,
                respawn,
            };
            match launcher::run_on(&launch, nodes.as_ref()) {
                Ok(exits) => match launcher::Verdict::of(&exits) {
                    launcher::Verdict::Clean => ExitCode::SUCCESS,
                    launcher::Verdict::Survived(lost) => {
                        let replaced: Vec<u32> = exits
                            .iter()
                            .filter(|e| e.replaced)
                            .map(|e| e.rank)
                            .collect();
                        eprintln!(
                            "taskfold run: the job survived the loss of rank(s) {lost:?} \
                             (replaced: {replaced:?}): every other process exited 0"
                        );
                        ExitCode::SUCCESS
                    }
                    launcher::Verdict::Failed => {
                        for e in exits.iter().filter(|e| !e.success()) {
                            eprintln!("taskfold run: rank {} {}", e.rank, e.describe());
                        }
                        ExitCode::from(1)
                    }
                },
                Err(e) => {
                    eprintln!("taskfold run: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Demo(args) => demo::launch(args),
        Cmd::DemoRank(args) => demo::rank_main(args),
        Cmd::Bench(cmd) => bench::main(cmd),
        Cmd::BenchRank(args) => bench::reduce::rank_main(args),
        Cmd::BenchFaultRank(args) => bench::faults::rank_main(args),
        Cmd::CompareRank(args) => bench::compare::rank::rank_main(args),
        Cmd::BenchLoad(args) => bench::compare::load_main(args),
        Cmd::BenchChaosRank(args) => bench::chaos::rank_main(args),
    }
}
