//! `taskfold`: launch ranks, run the demo, run benchmarks.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod bench;
mod config;

/// Large blocks (contributions, receive buffers) in shared memory, so that
/// ranks on one node fold each other's data in place.
#[global_allocator]
static HEAP: taskfold::SharedHeap = taskfold::SharedHeap;
mod demo;
mod launcher;
mod observe;
mod sizes;

/// Examples of `taskfold --help`.
const EXAMPLES: &str = "\
Examples:
  taskfold run -n 4 -- target/release/psdm     start 4 ranks of a program
  taskfold config                              every setting in effect, and where from
  taskfold demo -n 4                           ranks computing while they reduce
  taskfold bench reduce --np 4 --size 2M       time a reduction against a memcpy

Run `taskfold help <command>` for a command's options and examples.";

#[derive(Parser)]
#[command(
    name = "taskfold",
    version,
    about = "Fault-tolerant, task-parallel distributed reductions",
    after_help = EXAMPLES
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start N ranks of PROGRAM on this machine and watch them.
    Run(launcher::cli::RunArgs),
    /// Run one rank's PROGRAM under a guard that turns a death by a signal
    /// into an exit code, so that MPICH's mpiexec lets the other ranks
    /// (and the spares) live on.
    Guard(launcher::guard::GuardArgs),
    /// Print every setting in effect, and where it comes from.
    Config(config::ConfigArgs),
    /// Run the demo: ranks computing while reducing a stream of f32 arrays.
    Demo(demo::DemoArgs),
    /// Benchmarks: each reports ratios to a baseline measured in the same
    /// run.
    #[command(subcommand, after_help = bench::EXAMPLES)]
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
    let cli = Cli::parse_from(launcher::cli::mpi_style(std::env::args_os()));
    match cli.command {
        Cmd::Run(args) => launcher::cli::main(args),
        Cmd::Guard(args) => launcher::guard::main(args),
        Cmd::Config(args) => config::main(args),
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every command a user can call has examples in its help: the
    /// `taskfold` command, and each visible subcommand, down the tree.
    #[test]
    fn every_visible_command_has_examples() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            let help = cmd
                .get_after_help()
                .map(|h| h.to_string())
                .unwrap_or_default();
            if !help.contains("Examples:") {
                missing.push(path.to_string());
            }
            for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
                if sub.get_name() != "help" {
                    walk(sub, &format!("{path} {}", sub.get_name()), missing);
                }
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "taskfold", &mut missing);
        assert!(missing.is_empty(), "no examples in the help of {missing:?}");
    }
}
