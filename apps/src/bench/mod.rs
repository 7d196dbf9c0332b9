//! `taskfold bench ...`: benchmark harness. Figures are medians, with a
//! baseline measured in the same run; report ratios, not absolute times.

pub mod capi;
pub mod chaos;
pub mod checkpoint;
pub mod compare;
pub mod faults;
pub mod recovery;
pub mod reduce;
pub mod scale;
pub mod sim;
pub mod transports;

use clap::Subcommand;
use std::process::ExitCode;

/// Examples of `taskfold bench --help`.
pub const EXAMPLES: &str = "\
Examples:
  taskfold bench reduce --np 4,8 --size 128K,2M --json out.json
  taskfold bench faults --np 8 --size 8M --trials 100
  taskfold bench compare --out compare/
  taskfold bench recovery --out recovery/ --np 4 --trials 10
  taskfold bench checkpoint --size 4M,16M
  taskfold bench transports
  taskfold bench sim --ranks 256,65536 --size 8,1M
  taskfold bench scale --ranks 256 --nodes 16 --base 16

Run `taskfold bench <benchmark> --help` for each one's options.";

/// The benchmarks.
#[derive(Subcommand)]
pub enum BenchCmd {
    /// Median time per reduction (max over ranks) next to a memcpy of the
    /// same bytes.
    Reduce(reduce::BenchArgs),
    /// Failure injection: SIGKILL a worker, the root, the master or a node
    /// at a random instant of a reduction, and count the outcomes.
    Faults(faults::FaultArgs),
    /// Transports against each other: latency, get throughput, reduction
    /// time (TCP and libfabric, ratios to TCP).
    Transports(transports::TransportArgs),
    /// taskfold against MPI_Reduce (Open MPI, MPICH) with quiet ranks, a
    /// slow rank, staggered arrivals, background load and concurrent
    /// reductions: JSON, a Markdown report of ratios, and SVG plots.
    Compare(compare::CompareArgs),
    /// psdm with one rank SIGKILLed: time to solution without failure,
    /// with checkpoint/restart, and with the runtime's global and local
    /// restart; JSON, a Markdown report and an SVG plot.
    Recovery(recovery::RecoveryArgs),
    /// Multilevel checkpoints: L3 encoding throughput per core, and the
    /// retrieval of a rank whose node and partner's node were lost,
    /// aware of the failure against FTI-style probing.
    Checkpoint(checkpoint::CheckpointArgs),
    /// Failure campaigns: K kills per trial (workers, replacements, the
    /// master, nodes, spares; at any instant, during an admission, a
    /// restore or a rollback) over a job that reduces and checkpoints
    /// every step; counts the trials that end exact, in a typed error,
    /// wrong, or hung.
    Chaos(chaos::ChaosArgs),
    /// The C API against the Rust API: `bench reduce`'s Rust ranks and
    /// its C variant (`apps/c/bench_reduce.c`) in alternating jobs of one
    /// run, and their ratio.
    Capi(capi::CapiArgs),
    /// The master's scheduling code driven by simulated ranks, links and
    /// folds (α–β–γ model), up to tens of thousands of ranks: ready-first
    /// flat and by node against binomial and k-nomial trees.
    Sim(sim::SimArgs),
    /// Many ranks on simulated nodes against few on one node, in one run:
    /// the time per small reduction, its ratio against a target, and the
    /// CPU each repetition costs (needs root, for the nodes).
    Scale(scale::ScaleArgs),
}

/// Runs a benchmark.
pub fn main(cmd: BenchCmd) -> ExitCode {
    match cmd {
        BenchCmd::Reduce(a) => reduce::main(a),
        BenchCmd::Faults(a) => faults::main(a),
        BenchCmd::Transports(a) => transports::main(a),
        BenchCmd::Compare(a) => compare::main(a),
        BenchCmd::Recovery(a) => recovery::main(a),
        BenchCmd::Checkpoint(a) => checkpoint::main(a),
        BenchCmd::Chaos(a) => chaos::main(a),
        BenchCmd::Capi(a) => capi::main(a),
        BenchCmd::Sim(a) => sim::main(a),
        BenchCmd::Scale(a) => scale::main(a),
    }
}
