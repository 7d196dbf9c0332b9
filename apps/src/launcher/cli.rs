//! `taskfold run`'s command line: its options, MPI's `-np` spelling, the
//! renamed `--nodes`, and the exit code of each way a job ends (the
//! book's Launching chapter has the table).

use super::{NodeSpec, Verdict};
use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

/// Examples of `taskfold run --help`.
const EXAMPLES: &str = "\
Examples:
  taskfold run -n 4 -- target/release/psdm
  taskfold run -np 4 --timeout 10m -- ./my_app --steps 100
  taskfold run -n 4 --respawn 2 -- ./my_app
  taskfold run -n 6 --spares 2 -- ./my_app      (4 working ranks, 2 spares)
  sudo taskfold run --sim-nodes 2 -n 4 --link-rate 1gbit -- ./my_app

Exit codes: 0 every rank exited 0, or the job survived the ranks it lost to
signals; 1 the job failed (a rank exited with a non-zero code, or a loss it
could not survive); 2 the job could not be run (bad options or settings, a
program that cannot start, no simulated nodes) or was stopped by SIGINT or
SIGTERM; 124 the --timeout was reached.";

/// Options of `taskfold run`.
#[derive(clap::Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct RunArgs {
    /// Number of ranks (`-np N` too, as `mpiexec` spells it).
    #[arg(short = 'n', long = "np", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub ranks: u32,
    /// Stop every rank after this long, with its unit (`90s`, `10m`); the
    /// launcher then exits 124.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub timeout: Option<Duration>,
    /// Spread the ranks over N nodes simulated on this machine, each with
    /// its own network and /dev/shm (namespaces; needs root).
    #[arg(long = "sim-nodes", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(super::nodes::MAX_NODES)))]
    pub sim_nodes: Option<u32>,
    /// Renamed `--sim-nodes`.
    #[arg(long = "nodes", value_name = "N", hide = true, value_parser = renamed_nodes)]
    pub old_nodes: Option<String>,
    /// Limit each simulated node's link to this rate, both ways
    /// (`100mbit`, `1gbit`, `125mbps`).
    #[arg(long, requires = "sim_nodes")]
    pub link_rate: Option<super::nodes::LinkRate>,
    /// Start again, at most N times in all, a rank killed by a signal
    /// (the master's too, once a standby took over): same rank, next
    /// incarnation (`TASKFOLD_INCARNATION`), on the same node. Reductions
    /// that need its lost contribution wait for the replacement.
    #[arg(long, value_name = "N", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=1_048_576))]
    pub respawn: u32,
    /// Keep the last S of the -n processes as spares
    /// (`TASKFOLD_SPARES`): out of the application's view (it sees -n
    /// minus S ranks) until a rank dies, when one takes its place as its
    /// next incarnation. The way back under every launcher; instead of
    /// --respawn.
    #[arg(long, value_name = "S", default_value_t = 0, conflicts_with = "respawn",
          value_parser = clap::value_parser!(u32).range(0..=1_048_576))]
    pub spares: u32,
    /// The program and its arguments.
    #[arg(trailing_var_arg = true, required = true, allow_hyphen_values = true)]
    pub program: Vec<OsString>,
}

/// A command-line duration: a number with its unit.
pub fn duration(v: &str) -> Result<Duration, String> {
    taskfold_core::settings::values::parse_duration_arg(v)
}

/// The value parser of an option renamed `new`, whose old name ended in
/// `-{unit}`: always refused, with the new spelling.
pub fn renamed(
    new: &'static str,
    unit: &'static str,
) -> impl Fn(&str) -> Result<String, String> + Clone + Send + Sync + 'static {
    move |v| {
        Err(format!(
            "renamed {new}, which takes a unit: {new} {v}{unit}"
        ))
    }
}

/// `--nodes` is refused, naming its new name.
pub fn renamed_nodes(v: &str) -> Result<String, String> {
    Err(format!(
        "--nodes was renamed --sim-nodes (the nodes are simulated on this machine): \
         use --sim-nodes {v}"
    ))
}

/// The options of `run` that take a value (a `-np` after one of them is
/// its value, not the option).
const TAKES_VALUE: [&str; 8] = [
    "-n",
    "--np",
    "--timeout",
    "--sim-nodes",
    "--nodes",
    "--link-rate",
    "--respawn",
    "--spares",
];

/// The command line with MPI's `-np N` (or `-np=N`) among `taskfold
/// run`'s options read as `--np N`; the program's own arguments, after
/// the first word that is no option of `run` (or after `--`), are left
/// as they are.
pub fn mpi_style(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    let mut value_next = false;
    let mut done = false;
    for arg in args {
        let text = arg.to_str().unwrap_or("");
        if done || out.is_empty() {
        } else if out.len() == 1 {
            // Only `taskfold run` has `-np`.
            done = text != "run";
        } else if value_next {
            value_next = false;
        } else if text == "--" || !text.starts_with('-') {
            done = true;
        } else if text == "-np" {
            out.push("--np".into());
            value_next = true;
            continue;
        } else if let Some(n) = text.strip_prefix("-np=") {
            out.push(format!("--np={n}").into());
            continue;
        } else {
            value_next = TAKES_VALUE.contains(&text);
        }
        out.push(arg);
    }
    out
}

/// Runs `taskfold run`: the job, then one verdict line; its exit code.
pub fn main(a: RunArgs) -> ExitCode {
    let nodes = a.sim_nodes.map(|nodes| NodeSpec {
        nodes,
        link_rate: a.link_rate,
    });
    let launch = super::Launch {
        ranks: a.ranks,
        program: a.program[0].clone(),
        args: a.program[1..].to_vec(),
        timeout: a.timeout,
        env: match a.spares {
            0 => Vec::new(),
            s => vec![("TASKFOLD_SPARES".to_string(), s.to_string())],
        },
        log: None,
        respawn: a.respawn,
    };
    match super::run_on(&launch, nodes.as_ref()) {
        Ok(exits) => {
            let verdict = Verdict::of(&exits);
            eprintln!("taskfold run: {}", verdict.line(&exits));
            ExitCode::from(verdict.exit_code())
        }
        Err(e) => {
            eprintln!("taskfold run: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn np_is_read_as_n_among_runs_options_only() {
        let got = mpi_style(words(&[
            "taskfold", "run", "-np", "4", "--", "a", "-np", "2",
        ]));
        assert_eq!(
            got,
            words(&["taskfold", "run", "--np", "4", "--", "a", "-np", "2"])
        );
        let got = mpi_style(words(&[
            "taskfold",
            "run",
            "--timeout",
            "9s",
            "-np=3",
            "app",
            "-np",
        ]));
        assert_eq!(
            got,
            words(&["taskfold", "run", "--timeout", "9s", "--np=3", "app", "-np"])
        );
        // Not `run`: untouched.
        let other = words(&["taskfold", "bench", "faults", "-np", "4"]);
        assert_eq!(mpi_style(other.clone()), other);
        // The value of an option is not an option.
        let got = mpi_style(words(&["taskfold", "run", "-n", "2", "./prog", "-np"]));
        assert_eq!(got, words(&["taskfold", "run", "-n", "2", "./prog", "-np"]));
    }
}
