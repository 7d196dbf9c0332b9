//! `taskfold bench reduce --np N --size S`: the median time of one `f32`
//! sum reduction (each repetition's time is the maximum over ranks of
//! "call `reduce` → outcome known", after a barrier), next to the median
//! time of a `memcpy` of the same bytes measured by rank 0 in the same run.
//! Results are verified at the root outside the timed region.
//!
//! With `--respawn-cost P` it also measures what allowing replacements
//! costs (`--respawn 1`: every root keeps its result at its buddy for a
//! replacement root, see the book's chapter Surviving failures of the
//! application): per rank count, `P` pairs of jobs, one without and one
//! with, interleaved; the ratio per size is the median of the with-runs'
//! medians over the without-runs'.

use crate::launcher::{self, Launch};
use crate::sizes::{human, parse_size};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use taskfold::{InPlace, Max, Reduce, Runtime, Sum};
use taskfold_benches::baseline::memcpy_median;
use taskfold_benches::stats::median;
use taskfold_benches::Figure;

/// Options of `bench reduce`.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  taskfold bench reduce\n  taskfold bench reduce --np 4,8 --size 128K,2M,32M --json out.json"
)]
pub struct BenchArgs {
    /// Rank counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4,8")]
    pub np: Vec<u32>,
    /// Contribution sizes, comma-separated (K, M, G suffixes).
    #[arg(long, value_delimiter = ',', default_value = "128K,512K,2M,8M,32M", value_parser = parse_size)]
    pub size: Vec<usize>,
    /// Timed repetitions per size.
    #[arg(long, default_value_t = 10)]
    pub reps: u32,
    /// Untimed repetitions first.
    #[arg(long, default_value_t = 2)]
    pub warmup: u32,
    /// Reductions of the first size before any size is measured (default:
    /// 6 per rank, plus 2): a job's first reductions are slower until its
    /// links, mappings, pooled buffers and the master's speed estimates
    /// are in place (without them the first size measured looked several
    /// times slower than the next, whatever its size; see the book's
    /// Benchmarks). Their median is printed apart, as what a job's first
    /// reductions cost.
    #[arg(long)]
    pub job_warmup: Option<u32>,
    /// Also write the figures to this JSON file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// How contributions are built: `in-place` (`InPlace<Sum<f32>>`, filled
    /// in its wire form, like an MPI send buffer) or `vec` (`Sum(Vec<f32>)`,
    /// serialised when the reduction starts).
    #[arg(long, value_enum, default_value_t = Values::InPlace)]
    pub values: Values,
    /// Also measure the cost of allowing a replacement (`--respawn 1`,
    /// under which roots keep their results): this many interleaved pairs
    /// of jobs without and with it per rank count (0: not measured).
    #[arg(long, default_value_t = 0)]
    pub respawn_cost: u32,
    /// Every rank writes a checkpoint after each reduction, outside the
    /// timed region (as an application that checkpoints every step: the
    /// root then releases the results it kept).
    #[arg(long)]
    pub checkpoint_each: bool,
}

/// How `bench reduce` builds contributions.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Values {
    /// `InPlace<Sum<f32>>`.
    InPlace,
    /// `Sum(Vec<f32>)`.
    Vec,
}

/// Options of one benchmark rank (internal).
#[derive(Args, Debug)]
pub struct RankArgs {
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<usize>,
    #[arg(long)]
    reps: u32,
    #[arg(long)]
    warmup: u32,
    /// Reductions of the first size before any is measured (default: 6
    /// per rank, plus 2).
    #[arg(long)]
    job_warmup: Option<u32>,
    /// Rank 0 writes its figures here.
    #[arg(long)]
    out: PathBuf,
    /// How contributions are built.
    #[arg(long, value_enum)]
    values: Values,
    /// Checkpoint after each reduction, untimed.
    #[arg(long)]
    checkpoint_each: bool,
}

/// Runs the benchmark for every rank count and prints the table.
pub fn main(args: BenchArgs) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::from(2);
        }
    };
    let mut figures = Vec::new();
    let mut costs = Vec::new();
    for &np in &args.np {
        match job(&exe, &args, np, 0) {
            Ok(f) => figures.extend(f),
            Err(code) => return code,
        }
        if args.respawn_cost > 0 {
            match respawn_cost(&exe, &args, np) {
                Ok(c) => costs.extend(c),
                Err(code) => return code,
            }
        }
    }
    println!(
        "{:>4} {:>10} {:>12} {:>12} {:>12} {:>10}",
        "np", "size", "median", "GiB/s", "memcpy", "ratio"
    );
    for f in &figures {
        println!(
            "{:>4} {:>10} {:>10.3}ms {:>12.2} {:>10.3}ms {:>10.1}",
            f.np,
            human(f.size as f64),
            f.median_s * 1e3,
            f.size as f64 / f.median_s / (1u64 << 30) as f64,
            f.memcpy_median_s * 1e3,
            f.ratio_to_memcpy
        );
    }
    print_costs(&costs);
    if let Some(path) = &args.json {
        let json = match costs.is_empty() {
            true => serde_json::to_vec_pretty(&figures),
            false => serde_json::to_vec_pretty(&serde_json::json!({
                "figures": figures,
                "respawn_cost": costs,
            })),
        };
        if let Err(e) = std::fs::write(path, json.unwrap_or_default()) {
            eprintln!("bench: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}

/// One job of `np` ranks running every size, allowed `respawn`
/// replacements: rank 0's figures.
fn job(
    exe: &std::path::Path,
    args: &BenchArgs,
    np: u32,
    respawn: u32,
) -> Result<Vec<Figure>, ExitCode> {
    let out = std::env::temp_dir().join(format!(
        "taskfold-bench-{}-{np}-{respawn}.json",
        std::process::id()
    ));
    let sizes: Vec<String> = args.size.iter().map(|s| s.to_string()).collect();
    let values = match args.values {
        Values::InPlace => "in-place",
        Values::Vec => "vec",
    };
    let launch = Launch {
        ranks: np,
        program: exe.as_os_str().to_owned(),
        args: vec![
            "bench-rank".into(),
            "--sizes".into(),
            sizes.join(",").into(),
            "--reps".into(),
            args.reps.to_string().into(),
            "--warmup".into(),
            args.warmup.to_string().into(),
            "--out".into(),
            out.clone().into_os_string(),
            "--values".into(),
            values.into(),
        ]
        .into_iter()
        .chain(args.checkpoint_each.then(|| "--checkpoint-each".into()))
        .chain(
            args.job_warmup
                .into_iter()
                .flat_map(|n| ["--job-warmup".into(), n.to_string().into()]),
        )
        .collect(),
        timeout: Some(Duration::from_secs(3600)),
        env: Vec::new(),
        log: None,
        respawn,
    };
    match launcher::run(&launch) {
        Ok(exits) if exits.iter().all(|e| e.success()) => {}
        Ok(_) => return Err(ExitCode::from(1)),
        Err(e) => {
            eprintln!("bench: {e}");
            return Err(ExitCode::from(2));
        }
    }
    let figures = match std::fs::read(&out).map(|b| serde_json::from_slice::<Vec<Figure>>(&b)) {
        Ok(Ok(f)) => f,
        other => {
            eprintln!("bench: rank 0 wrote no figures: {other:?}");
            return Err(ExitCode::from(1));
        }
    };
    let _ = std::fs::remove_file(&out);
    Ok(figures)
}

/// What allowing a replacement costs one size of one rank count.
#[derive(Debug, serde::Serialize)]
pub struct RespawnCost {
    /// Ranks.
    pub np: u32,
    /// Bytes per contribution.
    pub size: usize,
    /// Median over the pairs of the median seconds without replacements.
    pub without_s: f64,
    /// The same with `--respawn 1`.
    pub with_s: f64,
    /// `with_s / without_s`.
    pub ratio: f64,
    /// Pairs of jobs, interleaved.
    pub pairs: u32,
}

/// `args.respawn_cost` pairs of jobs of `np` ranks, without and with a
/// replacement allowed, interleaved.
fn respawn_cost(
    exe: &std::path::Path,
    args: &BenchArgs,
    np: u32,
) -> Result<Vec<RespawnCost>, ExitCode> {
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..args.respawn_cost {
        without.push(job(exe, args, np, 0)?);
        with.push(job(exe, args, np, 1)?);
    }
    let at = |runs: &[Vec<Figure>], size: usize| {
        let mut m: Vec<f64> = runs
            .iter()
            .flat_map(|r| r.iter().filter(|f| f.size == size).map(|f| f.median_s))
            .collect();
        median(&mut m)
    };
    Ok(args
        .size
        .iter()
        .map(|&size| {
            let (without_s, with_s) = (at(&without, size), at(&with, size));
            RespawnCost {
                np,
                size,
                without_s,
                with_s,
                ratio: with_s / without_s,
                pairs: args.respawn_cost,
            }
        })
        .collect())
}

fn print_costs(costs: &[RespawnCost]) {
    if costs.is_empty() {
        return;
    }
    println!(
        "\nreplacements allowed (--respawn 1; roots keep their results), {} interleaved pairs:",
        costs[0].pairs
    );
    println!(
        "{:>4} {:>10} {:>12} {:>12} {:>8}",
        "np", "size", "without", "with", "ratio"
    );
    for c in costs {
        println!(
            "{:>4} {:>10} {:>10.3}ms {:>10.3}ms {:>8.3}",
            c.np,
            human(c.size as f64),
            c.without_s * 1e3,
            c.with_s * 1e3,
            c.ratio
        );
    }
}

/// One rank of the benchmark.
pub fn rank_main(args: RankArgs) -> ExitCode {
    let rt = match Runtime::from_env() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bench rank: {e}");
            return ExitCode::from(3);
        }
    };
    let (rank, size) = (rt.rank(), rt.size());
    let root = if size > 1 { 1 } else { 0 };
    let mut figures = Vec::new();
    let mut code = 0;
    if let Err(code) = job_warmup(&rt, &args, root) {
        return code;
    }
    for &bytes in &args.sizes {
        let (times, last) =
            match timed_reps(&rt, &args, bytes, root, (args.warmup, args.reps, "bench")) {
                Ok(done) => done,
                Err(code) => return code,
            };
        if let Some(v) = last {
            if v.iter().any(|&x| x != size as f32) {
                eprintln!("WRONG RESULT for {bytes} bytes");
                code = 1;
            }
        }
        let maxed = rt
            .reduce(
                Max(times),
                Reduce::root(0).id(format!("bench-times-{bytes}")),
            )
            .and_then(|f| f.get());
        if rank == 0 {
            let Ok(Some(Max(mut t))) = maxed else {
                eprintln!("could not gather times: {maxed:?}");
                return ExitCode::from(1);
            };
            let med = median(&mut t);
            let mc = memcpy_median(bytes, args.reps);
            figures.push(Figure {
                np: size,
                size: bytes,
                median_s: med,
                min_s: t.first().copied().unwrap_or(f64::NAN),
                max_s: t.last().copied().unwrap_or(f64::NAN),
                memcpy_median_s: mc,
                ratio_to_memcpy: med / mc,
                reps: args.reps,
            });
        }
    }
    if rank == 0 {
        if let Err(e) = std::fs::write(&args.out, serde_json::to_vec(&figures).unwrap_or_default())
        {
            eprintln!("cannot write {}: {e}", args.out.display());
            code = 1;
        }
    }
    if let Err(e) = rt.shutdown() {
        eprintln!("shutdown: {e}");
    }
    ExitCode::from(code)
}

/// The job's first reductions, of the first size, before any size is
/// measured (`--job-warmup`); rank 0 prints their median, as this rank
/// timed them.
fn job_warmup(rt: &Runtime, args: &RankArgs, root: u32) -> Result<(), ExitCode> {
    let n = args.job_warmup.unwrap_or(6 * rt.size() + 2);
    let Some(&bytes) = args.sizes.first().filter(|_| n > 0) else {
        return Ok(());
    };
    let (mut times, _) = timed_reps(rt, args, bytes, root, (0, n, "warmup"))?;
    if rt.rank() == 0 {
        let first: Vec<f64> = times.iter().take(5).map(|t| t * 1e3).collect();
        println!(
            "bench rank: the job's first {n} reductions of {bytes} B: median {:.3} ms at rank 0 (the first five: {first:.3?} ms)",
            median(&mut times) * 1e3,
        );
    }
    Ok(())
}

/// The warm-up and timed reductions of `bytes` per rank (`(warmup, reps,
/// tag)`, the tag naming their ids): this rank's time of each timed one,
/// and the last result (at the root).
fn timed_reps(
    rt: &Runtime,
    args: &RankArgs,
    bytes: usize,
    root: u32,
    (warmup, reps, tag): (u32, u32, &str),
) -> Result<(Vec<f64>, Option<Vec<f32>>), ExitCode> {
    let data = vec![1.0f32; (bytes / 4).max(1)];
    let mut times = Vec::new();
    let mut last = None;
    for rep in 0..warmup + reps {
        // Built before the clock starts, like an MPI send buffer.
        let value = match args.values {
            Values::InPlace => Ok(InPlace::<Sum<f32>>::from_slice(&data)),
            Values::Vec => Err(Sum(data.clone())),
        };
        if let Err(e) = rt.barrier() {
            eprintln!("barrier: {e}");
            return Err(ExitCode::from(1));
        }
        let t = Instant::now();
        let id = format!("{tag}-{bytes}-{rep}");
        let res = match value {
            Ok(v) => rt
                .reduce(v, Reduce::root(root).id(id))
                .and_then(|f| f.get())
                .map(|r| r.map(|v| v.to_vec())),
            Err(v) => rt
                .reduce(v, Reduce::root(root).id(id))
                .and_then(|f| f.get())
                .map(|r| r.map(|v| v.0)),
        };
        let dt = t.elapsed().as_secs_f64();
        match res {
            Ok(r) => last = r,
            Err(e) => {
                eprintln!("reduction failed: {e}");
                return Err(ExitCode::from(1));
            }
        }
        if rep >= warmup {
            times.push(dt);
        }
        if args.checkpoint_each {
            // Versions go upwards over every size.
            static VERSION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
            let version = VERSION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if let Err(e) = rt.checkpoints().save(version, &version).wait() {
                eprintln!("checkpoint: {e}");
                return Err(ExitCode::from(1));
            }
        }
    }
    Ok((times, last))
}
