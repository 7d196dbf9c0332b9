//! `taskfold demo`: ranks that compute while reducing a stream of `f32`
//! arrays, every result checked at its root against the sequential fold.

use crate::launcher::{self, Launch};
use crate::sizes::{human, parse_size};
use clap::Args;
use std::collections::VecDeque;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use taskfold::{Reduce, ReduceFuture, Runtime, Sum};

/// Options of the demo.
#[derive(Args, Clone, Debug)]
#[command(
    after_help = "Examples:\n  taskfold demo\n  taskfold demo -n 8 --reductions 200 --size 4M"
)]
pub struct DemoArgs {
    /// Ranks to start.
    #[arg(short = 'n', long = "np", default_value_t = 4)]
    pub ranks: u32,
    /// Reductions to run.
    #[arg(long, default_value_t = 64)]
    pub reductions: u32,
    /// Bytes per contribution.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub size: usize,
    /// Reductions in flight at once per rank.
    #[arg(long, default_value_t = 8)]
    pub in_flight: usize,
}

/// Re-runs this binary as `N` demo ranks under the launcher.
pub fn launch(args: DemoArgs) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("taskfold demo: cannot find this program: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "taskfold demo: {} ranks, {} reductions of {} f32 arrays, up to {} in flight",
        args.ranks,
        args.reductions,
        human(args.size as f64),
        args.in_flight
    );
    let launch = Launch {
        ranks: args.ranks,
        program: exe.into_os_string(),
        args: vec![
            "demo-rank".into(),
            "--np".into(),
            args.ranks.to_string().into(),
            "--reductions".into(),
            args.reductions.to_string().into(),
            "--size".into(),
            args.size.to_string().into(),
            "--in-flight".into(),
            args.in_flight.to_string().into(),
        ],
        timeout: Some(Duration::from_secs(1800)),
        env: Vec::new(),
        log: None,
        respawn: 0,
    };
    match launcher::run(&launch) {
        Ok(exits) if exits.iter().all(|e| e.success()) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            eprintln!("taskfold demo: {e}");
            ExitCode::from(2)
        }
    }
}

/// A rank's partial result of step `step`: the "synthetic computation"
/// (one `sin` per element, a few milliseconds per MiB).
fn compute(rank: u32, step: u32, n: usize) -> Vec<f32> {
    let phase = rank as f32 * 0.37 + step as f32 * 0.11;
    (0..n).map(|i| (i as f32 * 1e-3 + phase).sin()).collect()
}

struct Pending {
    step: u32,
    root: u32,
    future: ReduceFuture<Sum<f32>>,
}

#[derive(Default)]
struct Tally {
    checked: u64,
    wrong: u64,
    failed: u64,
    done: u32,
    wait: Duration,
}

impl Tally {
    fn settle(&mut self, p: Pending, rank: u32, size: u32, n: usize) {
        let t = Instant::now();
        let res = p.future.get();
        self.wait += t.elapsed();
        self.done += 1;
        match res {
            Ok(Some(sum)) => {
                self.checked += 1;
                // The sequential fold, in rank order.
                let mut want = compute(0, p.step, n);
                for r in 1..size {
                    for (w, x) in want.iter_mut().zip(compute(r, p.step, n)) {
                        *w += x;
                    }
                }
                // Reassociating `size` terms of magnitude <= 1 moves an f32
                // sum by at most ~size * 2^-23 * size; 1e-4 absolute is far
                // above that and far below any lost contribution.
                let ok =
                    sum.0.len() == n && sum.0.iter().zip(&want).all(|(a, b)| (a - b).abs() <= 1e-4);
                if !ok {
                    self.wrong += 1;
                    eprintln!("reduction demo-{} (root {}): WRONG RESULT", p.step, p.root);
                }
            }
            Ok(None) => {}
            Err(e) => {
                self.failed += 1;
                eprintln!("reduction demo-{}: {e}", p.step);
            }
        }
        let _ = rank;
    }
}

/// One rank of the demo.
pub fn rank_main(args: DemoArgs) -> ExitCode {
    let started = taskfold::Settings::from_env()
        .map_err(taskfold::StartError::from)
        .and_then(|s| {
            let metrics = s.metrics_addr;
            Runtime::from_settings(s).map(|rt| (rt, metrics))
        });
    let (rt, metrics) = match started {
        Ok(started) => started,
        Err(e) => {
            eprintln!("demo rank: {e}");
            return ExitCode::from(3);
        }
    };
    crate::observe::init_metrics(rt.rank(), metrics);
    let rank = rt.rank();
    let n = (args.size / 4).max(1);
    let started = Instant::now();
    let (tally, compute_time) = reduce_all(&rt, &args, n);
    let elapsed = started.elapsed();
    // Gather every root's verdicts with one more reduction.
    let verdict = rt
        .reduce(
            Sum(vec![tally.checked, tally.wrong, tally.failed]),
            Reduce::root(0).id("demo-verdict"),
        )
        .and_then(|f| f.get());
    let mut code = if tally.wrong + tally.failed == 0 {
        0
    } else {
        1
    };
    if rank == 0 {
        match verdict {
            Ok(Some(Sum(v))) => {
                if v[1] + v[2] > 0 {
                    code = 1;
                }
                summary(
                    &rt,
                    &args,
                    v[0],
                    v[1],
                    v[2],
                    elapsed,
                    compute_time,
                    tally.wait,
                );
            }
            other => {
                eprintln!("demo: could not gather the verdicts: {other:?}");
                code = 1;
            }
        }
    }
    if let Err(e) = rt.shutdown() {
        eprintln!("shutdown: {e}");
    }
    ExitCode::from(code)
}

/// Computes and starts `args.reductions` reductions of `n` values, at most
/// `args.in_flight` waiting at once, and settles every one; returns the
/// tally and the time spent computing.
fn reduce_all(rt: &Runtime, args: &DemoArgs, n: usize) -> (Tally, Duration) {
    let (rank, size) = (rt.rank(), rt.size());
    let mut compute_time = Duration::ZERO;
    let mut tally = Tally::default();
    let mut pending: VecDeque<Pending> = VecDeque::new();
    for step in 0..args.reductions {
        let t = Instant::now();
        let v = compute(rank, step, n);
        compute_time += t.elapsed();
        let root = step % size;
        match rt.reduce(Sum(v), Reduce::root(root).id(format!("demo-{step}"))) {
            Ok(future) => pending.push_back(Pending { step, root, future }),
            Err(e) => {
                eprintln!("demo-{step}: {e}");
                tally.failed += 1;
            }
        }
        // Keep computing while reductions run; settle what is done, and
        // wait only when too many are in flight.
        while pending.front().is_some_and(|p| p.future.is_done()) || pending.len() > args.in_flight
        {
            let p = pending.pop_front().expect("non-empty");
            tally.settle(p, rank, size, n);
            progress(rank, &tally, args);
        }
    }
    while let Some(p) = pending.pop_front() {
        tally.settle(p, rank, size, n);
        progress(rank, &tally, args);
    }
    (tally, compute_time)
}

/// Rank 0 tells the launcher's progress bar how far the demo is.
fn progress(rank: u32, tally: &Tally, args: &DemoArgs) {
    if rank == 0 {
        println!(
            "@taskfold-progress {} {} reductions",
            tally.done, args.reductions
        );
    }
}

#[allow(clippy::too_many_arguments)]
fn summary(
    rt: &Runtime,
    args: &DemoArgs,
    checked: u64,
    wrong: u64,
    failed: u64,
    elapsed: Duration,
    compute: Duration,
    wait: Duration,
) {
    let size = rt.size();
    let bytes = args.reductions as f64 * args.size as f64 * size as f64;
    println!("--- taskfold demo summary ---");
    println!(
        "reductions: {} ({} results checked at their roots, {} wrong, {} failed)",
        args.reductions, checked, wrong, failed
    );
    println!(
        "bytes reduced: {} in {:.2} s = {}/s",
        human(bytes),
        elapsed.as_secs_f64(),
        human(bytes / elapsed.as_secs_f64())
    );
    println!(
        "rank 0 time: computing {:.2} s, waiting on reductions {:.2} s ({:.0}% of its run)",
        compute.as_secs_f64(),
        wait.as_secs_f64(),
        100.0 * wait.as_secs_f64() / elapsed.as_secs_f64()
    );
    if let Some(stats) = rt.master_stats() {
        let counts: Vec<String> = stats
            .tasks_per_rank
            .iter()
            .enumerate()
            .map(|(r, c)| format!("rank {r}: {c}"))
            .collect();
        println!(
            "tasks per rank (the tree is built at run time): {}",
            counts.join(", ")
        );
        println!(
            "master: {} messages in, {} out, {} in, {} out",
            stats.msgs_in,
            stats.msgs_out,
            human(stats.bytes_in as f64),
            human(stats.bytes_out as f64)
        );
    }
    println!(
        "{}",
        if wrong + failed == 0 {
            "demo: OK"
        } else {
            "demo: FAILED"
        }
    );
}
