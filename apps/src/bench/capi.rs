//! `taskfold bench capi --program BENCH_REDUCE`: the C API against the
//! Rust API in one run. Rounds alternate a job of `bench reduce`'s Rust
//! ranks (`InPlace<Sum<f32>>`) with a job of the C program
//! `apps/c/bench_reduce.c` (a `tf_buf` reduced with `tf_ireduce_buf`),
//! same rank count, sizes and repetitions; each side's figure is the
//! median over rounds of its jobs' medians, and the report gives C / Rust
//! (target: at most 1.05).

use crate::launcher::{self, Launch};
use crate::sizes::{human, parse_size};
use clap::Args;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use taskfold_benches::stats::median;
use taskfold_benches::Figure;

/// Options of `bench capi`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  taskfold bench capi\n  taskfold bench capi --json capi.json")]
pub struct CapiArgs {
    /// The C benchmark program (`apps/c/bench_reduce.c`, built against
    /// libtaskfold; see the book's chapter Embedding from C and Fortran).
    #[arg(long)]
    pub program: PathBuf,
    /// Ranks.
    #[arg(long, default_value_t = 8)]
    pub np: u32,
    /// Contribution sizes, comma-separated (K, M, G suffixes).
    #[arg(long, value_delimiter = ',', default_value = "2M,8M", value_parser = parse_size)]
    pub size: Vec<usize>,
    /// Timed repetitions per size and job.
    #[arg(long, default_value_t = 10)]
    pub reps: u32,
    /// Untimed repetitions first.
    #[arg(long, default_value_t = 2)]
    pub warmup: u32,
    /// Rounds (one Rust job and one C job each, alternating).
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Also write the figures to this JSON file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Makes the C program's copy of the result fault fresh pages in at
    /// every repetition, as the Rust ranks' copy from the shared heap
    /// does (by default glibc reuses them, as in any C program).
    #[arg(long)]
    pub c_fresh_pages: bool,
}

/// One side's figure at one size.
#[derive(serde::Serialize, Debug)]
struct Side {
    /// Median over rounds of each job's median, seconds.
    median_s: f64,
    /// Each round's median, seconds.
    rounds_s: Vec<f64>,
}

/// The comparison at one size.
#[derive(serde::Serialize, Debug)]
struct Row {
    np: u32,
    size: usize,
    rust: Side,
    c: Side,
    /// `c.median_s / rust.median_s`.
    ratio: f64,
}

/// One job of `program args` on `np` ranks; rank 0's figures.
fn job(
    np: u32,
    program: OsString,
    mut args: Vec<OsString>,
    tag: &str,
) -> Result<Vec<Figure>, String> {
    let out = std::env::temp_dir().join(format!("taskfold-capi-{tag}-{}.json", std::process::id()));
    args.extend(["--out".into(), out.clone().into_os_string()]);
    let launch = Launch {
        ranks: np,
        program,
        args,
        timeout: Some(Duration::from_secs(3600)),
        env: Vec::new(),
        log: None,
        respawn: 0,
    };
    match launcher::run(&launch) {
        Ok(exits) if exits.iter().all(|e| e.success()) => {}
        Ok(_) => return Err(format!("a rank of the {tag} job failed")),
        Err(e) => return Err(format!("{tag} job: {e}")),
    }
    let figures = std::fs::read(&out)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice::<Vec<Figure>>(&b).map_err(|e| e.to_string()))
        .map_err(|e| format!("rank 0 of the {tag} job wrote no figures: {e}"));
    let _ = std::fs::remove_file(&out);
    figures
}

fn side(rounds_s: Vec<f64>) -> Side {
    let mut sorted = rounds_s.clone();
    let m = median(&mut sorted);
    Side {
        median_s: m,
        rounds_s,
    }
}

/// Runs the comparison and prints the table.
pub fn main(args: CapiArgs) -> ExitCode {
    let (rust, c) = match rounds(&args) {
        Ok(x) => x,
        Err((code, e)) => {
            eprintln!("bench capi: {e}");
            return ExitCode::from(code);
        }
    };
    let rows: Vec<Row> = args
        .size
        .iter()
        .zip(rust.into_iter().zip(c))
        .map(|(&size, (r, c))| {
            let (rust, c) = (side(r), side(c));
            Row {
                np: args.np,
                size,
                ratio: c.median_s / rust.median_s,
                rust,
                c,
            }
        })
        .collect();
    print_rows(&rows);
    if let Some(path) = &args.json {
        if let Err(e) = std::fs::write(path, serde_json::to_vec_pretty(&rows).unwrap_or_default()) {
            eprintln!("bench capi: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}

/// Per size, the medians of every round: the Rust program's, the C
/// program's (the two alternate within a round). An error: the exit code
/// and why.
#[allow(clippy::type_complexity)]
fn rounds(args: &CapiArgs) -> Result<(Vec<Vec<f64>>, Vec<Vec<f64>>), (u8, String)> {
    let exe = std::env::current_exe().map_err(|e| (2, e.to_string()))?;
    let sizes: Vec<String> = args.size.iter().map(|s| s.to_string()).collect();
    let common: Vec<OsString> = vec![
        "--sizes".into(),
        sizes.join(",").into(),
        "--reps".into(),
        args.reps.to_string().into(),
        "--warmup".into(),
        args.warmup.to_string().into(),
    ];
    let mut rust = vec![Vec::new(); args.size.len()];
    let mut c = vec![Vec::new(); args.size.len()];
    for round in 0..args.rounds.max(1) {
        let mut rust_args: Vec<OsString> = vec!["bench-rank".into()];
        rust_args.extend(common.iter().cloned());
        rust_args.extend(["--values".into(), "in-place".into()]);
        let jobs = [
            (exe.clone().into_os_string(), rust_args, "rust", &mut rust),
            (
                args.program.clone().into_os_string(),
                common.clone(),
                "c",
                &mut c,
            ),
        ];
        for (program, job_args, tag, into) in jobs {
            let figs = job(args.np, program, job_args, tag)
                .map_err(|e| (1, format!("round {round}: {e}")))?;
            if figs.len() != args.size.len() {
                return Err((
                    1,
                    format!(
                        "round {round}: {tag} figures for {} sizes, not {}",
                        figs.len(),
                        args.size.len()
                    ),
                ));
            }
            for (i, f) in figs.iter().enumerate() {
                into[i].push(f.median_s);
            }
        }
    }
    Ok((rust, c))
}

/// The table of `rows`, on standard output.
fn print_rows(rows: &[Row]) {
    println!(
        "{:>4} {:>10} {:>12} {:>12} {:>8} {:>8}",
        "np", "size", "rust", "c api", "c/rust", "<=1.05"
    );
    for r in rows {
        println!(
            "{:>4} {:>10} {:>10.3}ms {:>10.3}ms {:>8.3} {:>8}",
            r.np,
            human(r.size as f64),
            r.rust.median_s * 1e3,
            r.c.median_s * 1e3,
            r.ratio,
            if r.ratio <= 1.05 { "yes" } else { "no" }
        );
    }
}
