//! `psdm`: one rank of the migration (under `taskfold run`, `mpiexec` or
//! `srun`), or `--local N` ranks in this process.

use clap::Parser;
use std::process::ExitCode;
use taskfold_psdm::app;
use taskfold_psdm::job::{Job, JobArgs};

/// Large blocks (the image, contributions) in shared memory, so that ranks
/// on one node fold each other's data in place.
#[global_allocator]
static HEAP: taskfold::SharedHeap = taskfold::SharedHeap;

/// Examples of `psdm --help`.
const EXAMPLES: &str = "\
Examples:
  taskfold run -n 4 -- psdm                          the default job
  taskfold run -n 4 -- psdm --nx 400 --nz 200 -v     a smaller image; every rank reports
  psdm --local 4                                     4 ranks as threads of this process
  TASKFOLD_RENDEZVOUS=$PWD/master.addr TASKFOLD_JOB_KEY_FILE=~/.taskfold-job.key \\
    mpiexec -n 4 psdm";

/// Kirchhoff pre-stack depth migration on taskfold.
#[derive(Parser)]
#[command(name = "psdm", version, about, after_help = EXAMPLES)]
struct Cli {
    #[command(flatten)]
    job: JobArgs,
    /// Run N ranks in this process (threads over the loopback) instead of
    /// joining a job started by a launcher.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    local: Option<u32>,
}

fn main() -> ExitCode {
    taskfold_psdm::observe::init_logging();
    let cli = Cli::parse();
    let job = match Job::new(cli.job) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("psdm: {e}");
            return ExitCode::from(2);
        }
    };
    // Every TASKFOLD_* variable, parsed once.
    let settings = match taskfold::Settings::from_env() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("psdm: cannot start: {e}");
            return ExitCode::from(3);
        }
    };
    match cli.local {
        Some(n) => app::run_local(n, &job, &settings),
        None => app::run_launched(&job, settings),
    }
}
