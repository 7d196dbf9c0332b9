//! `taskfold bench ...`: benchmark harness. Figures are medians, with a
//! baseline measured in the same run; report ratios, not absolute times.

pub mod reduce;

use clap::Subcommand;
use std::process::ExitCode;

/// The benchmarks.
#[derive(Subcommand)]
pub enum BenchCmd {
    /// Median time per reduction (max over ranks) next to a memcpy of the
    /// same bytes.
    Reduce(reduce::BenchArgs),
}

/// Runs a benchmark.
pub fn main(cmd: BenchCmd) -> ExitCode {
    match cmd {
        BenchCmd::Reduce(a) => reduce::main(a),
    }
}
