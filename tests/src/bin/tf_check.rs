//! A rank program for the multi-process tests: issues concurrent `f32` sum
//! reductions, checks every result at the root exactly, and reports.
//!
//! Contributions are small integers, so every sum is exact in `f32` and
//! a lost or doubled contribution is always detected.

use clap::Parser;
use metrics_util::debugging::{DebuggingRecorder, Snapshotter};
use std::path::PathBuf;
use std::time::Duration;
use taskfold::{metrics as names, InPlace, Reduce, ReduceError, ReduceFuture, Runtime, Sum};

/// Ranks on one node read each other's contributions in place (unless
/// `TASKFOLD_SHARED_HEAP=0`): the fault tests kill ranks on that path.
#[global_allocator]
static HEAP: taskfold::SharedHeap = taskfold::SharedHeap;

#[derive(Parser)]
struct Args {
    /// Bytes per contribution.
    #[arg(long, default_value_t = 1 << 20)]
    size: usize,
    /// Concurrent reductions.
    #[arg(long, default_value_t = 4)]
    reductions: u32,
    /// Root of every reduction.
    #[arg(long, default_value_t = 1)]
    root: u32,
    /// This rank stops itself (SIGSTOP) before contributing; the test
    /// resumes it. Its pid goes to `--pid-dir`.
    #[arg(long)]
    stop_rank: Option<u32>,
    /// Where `rank-N.pid` files are written, and `rank-N.done` once all
    /// of this rank's reductions ended (before the shutdown barrier).
    #[arg(long)]
    pid_dir: Option<PathBuf>,
    /// Rank 0 writes the master's task log here (JSON).
    #[arg(long)]
    task_log: Option<PathBuf>,
    /// This rank contributes one element too many; every rank must then
    /// see a mismatch error.
    #[arg(long)]
    mismatch_rank: Option<u32>,
    /// This rank exits with code 7 before contributing; every other rank
    /// must then see its contribution reported lost.
    #[arg(long)]
    exit_rank: Option<u32>,
    /// Ranks that wait before contributing: `RANK,RANK:MILLISECONDS`,
    /// several groups separated by `/` (`1:500/0:1000`).
    #[arg(long)]
    delay: Option<String>,
    /// Failures that end reductions with `RanksLost`/`RootLost` are expected.
    #[arg(long)]
    allow_lost: bool,
    /// This rank contributes, then stops itself (SIGSTOP) until resumed; it
    /// expects to have been fenced meanwhile.
    #[arg(long)]
    stop_after_join: Option<u32>,
    /// Contributions are `InPlace` arrays (the root too holds its value in
    /// wire form) instead of `Sum(Vec<f32>)`.
    #[arg(long)]
    in_place: bool,
    /// Every rank first takes part in reductions (`warmup-N`, not hooked,
    /// not counted) until every original but the root's went with a
    /// standing copy: ranks then know which of their buddies are on their
    /// node and view their heap, as in a long run (see `warm_up`).
    #[arg(long)]
    warmup: bool,
    /// The test kills (or stops) rank 0 while the reductions are in
    /// flight: rank 0 contributes nothing and waits; every other rank
    /// expects `MasterLost` from each reduction (odd ones through `get`),
    /// from a later reduction, a barrier and its shutdown, and prints
    /// when each came (milliseconds since the Unix epoch).
    #[arg(long)]
    master_dies: bool,
    /// This rank joins no reduction: it finalizes at once (after its
    /// `--delay`). Every other rank expects each reduction, and one
    /// started after that, to fail with `RanksLost` naming it, and prints
    /// how long each took.
    #[arg(long)]
    skip_rank: Option<u32>,
    /// This rank SIGKILLs itself as soon as its `reduce` calls returned
    /// (with `--wait-safe`, once each future also said its contribution
    /// is safe).
    #[arg(long)]
    kill_after_reduce: Option<u32>,
    /// With `--kill-after-reduce`: wait for `wait_safe` first.
    #[arg(long)]
    wait_safe: bool,
}

/// A reduction of either kind of contribution.
enum Pending {
    Vec(ReduceFuture<Sum<f32>>),
    InPlace(ReduceFuture<InPlace<Sum<f32>>>),
}

impl Pending {
    /// The root's sum, as a vector.
    fn wait(&mut self, limit: Duration) -> Result<Option<Vec<f32>>, ReduceError> {
        match self {
            Pending::Vec(f) => f.wait_timeout(limit).map(|r| r.map(|s| s.0)),
            Pending::InPlace(f) => f
                .wait_timeout(limit)
                .map(|r| r.map(|s| s.as_slice().to_vec())),
        }
    }
}

impl Pending {
    /// Blocks until the contribution survives this rank's death.
    fn wait_safe(&self) {
        match self {
            Pending::Vec(f) => f.wait_safe(),
            Pending::InPlace(f) => f.wait_safe(),
        }
    }
}

fn delayed(spec: &Option<String>, rank: u32) -> Option<Duration> {
    spec.as_deref()?.split('/').find_map(|group| {
        let (ranks, ms) = group.split_once(':')?;
        ranks
            .split(',')
            .any(|r| r.trim().parse() == Ok(rank))
            .then(|| Duration::from_millis(ms.trim().parse().unwrap_or(0)))
    })
}

/// Stops this process with SIGSTOP (the test resumes it, or not).
fn stop_myself() {
    let me = rustix::process::getpid();
    if let Err(e) = rustix::process::kill_process(me, rustix::process::Signal::STOP) {
        eprintln!("could not stop myself: {e}");
    }
}

/// Warm-up rounds at most (a reduction and an allreduce each).
const WARMUP_ROUNDS: u32 = 40;

/// Reduces until every rank other than the root has made a reduction with
/// no disk copy of its original, its buddy (on its node) viewing it in its
/// heap: a standing copy, as in a long run. The buddy's answer that makes
/// it so is not ordered with the reduction's end (with asynchronous
/// durability no join waits for it), so that a fixed number of rounds, or
/// a pause, would only make it likely. The runtime counts such originals
/// (`taskfold_originals_in_memory_total`, read from `snap`); every rank
/// learns that all are ready by an allreduce, and so stops after the same
/// round.
fn warm_up(rt: &Runtime, args: &Args, snap: &Snapshotter) {
    let (rank, size) = (rt.rank(), rt.size());
    for round in 0..WARMUP_ROUNDS {
        let v: Vec<f32> = (0..args.size / 4).map(|i| value(rank, 0, i)).collect();
        let opts = Reduce::root(args.root).id(format!("warmup-{round}"));
        let got = if args.in_place {
            let v = InPlace::<Sum<f32>>::from_slice(&v);
            Pending::InPlace(rt.reduce(v, opts).expect("reduce")).wait(Duration::from_secs(120))
        } else {
            Pending::Vec(rt.reduce(Sum(v), opts).expect("reduce")).wait(Duration::from_secs(120))
        };
        if let Err(e) = got {
            eprintln!("warm-up reduction: error: {e}");
            std::process::exit(1);
        }
        let standing = taskfold_tests::counter(snap, names::ORIGINALS_IN_MEMORY) > 0;
        let ready = f32::from(u8::from(rank == args.root || standing));
        let opts = Reduce::root(args.root).id(format!("warmup-ready-{round}"));
        let all = rt
            .allreduce(Sum(vec![ready]), opts)
            .and_then(|mut f| f.wait_timeout(Duration::from_secs(120)));
        match all {
            Ok(Sum(n)) if n.first() == Some(&(size as f32)) => return,
            Ok(_) => {}
            Err(e) => {
                eprintln!("warm-up allreduce: error: {e}");
                std::process::exit(1);
            }
        }
    }
    eprintln!("warm-up: not every original had a standing copy after {WARMUP_ROUNDS} rounds");
    std::process::exit(1);
}

fn value(rank: u32, k: u32, i: usize) -> f32 {
    ((i % 1021) as u32 + rank * 3 + k) as f32
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    // Installed before the runtime starts, so that its counters come here.
    let standing = args.warmup.then(|| {
        let recorder = DebuggingRecorder::new();
        let snap = recorder.snapshotter();
        recorder.install().expect("the only recorder");
        snap
    });
    let rt = match Runtime::from_env() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tf_check: cannot start: {e}");
            std::process::exit(3);
        }
    };
    let (rank, size) = (rt.rank(), rt.size());
    if let Some(dir) = &args.pid_dir {
        std::fs::write(
            dir.join(format!("rank-{rank}.pid")),
            std::process::id().to_string(),
        )
        .unwrap();
    }
    if args.stop_rank == Some(rank) {
        stop_myself();
    }
    if args.exit_rank == Some(rank) {
        std::process::exit(7);
    }
    if let Some(standing) = &standing {
        warm_up(&rt, &args, standing);
    }
    if let Some(d) = delayed(&args.delay, rank) {
        std::thread::sleep(d);
    }
    if args.master_dies {
        master_dies(rt, &args);
    }
    if args.skip_rank == Some(rank) {
        let t = std::time::Instant::now();
        let r = rt.shutdown();
        println!(
            "rank {rank}: left without joining; shutdown after {} ms: {r:?}",
            t.elapsed().as_millis()
        );
        std::process::exit(if r.is_ok() { 0 } else { 1 });
    }
    let n = args.size / 4;
    let started = std::time::Instant::now();
    let futures: Vec<_> = (0..args.reductions)
        .map(|k| {
            let len = if args.mismatch_rank == Some(rank) {
                n + 1
            } else {
                n
            };
            let v: Vec<f32> = (0..len).map(|i| value(rank, k, i)).collect();
            let opts = Reduce::root(args.root).id(format!("check-{k}"));
            if args.in_place {
                let v = InPlace::<Sum<f32>>::from_slice(&v);
                Pending::InPlace(rt.reduce(v, opts).expect("reduce"))
            } else {
                Pending::Vec(rt.reduce(Sum(v), opts).expect("reduce"))
            }
        })
        .collect();
    if args.kill_after_reduce == Some(rank) {
        if args.wait_safe {
            futures.iter().for_each(Pending::wait_safe);
        }
        let me = rustix::process::getpid();
        let _ = rustix::process::kill_process(me, rustix::process::Signal::KILL);
    }
    if args.stop_after_join == Some(rank) {
        // Let the joins leave, then stop; the test resumes us after the
        // failure timeout, when we must have been fenced.
        std::thread::sleep(Duration::from_millis(300));
        stop_myself();
    }
    let mut ok = 0;
    let mut failed = 0;
    for (k, mut f) in futures.into_iter().enumerate() {
        match f.wait(Duration::from_secs(120)) {
            Ok(Some(sum)) => {
                let want = |i: usize| (0..size).map(|r| value(r, k as u32, i)).sum::<f32>();
                let bad = sum
                    .iter()
                    .enumerate()
                    .filter(|(i, &x)| x != want(*i))
                    .count();
                if bad == 0 && sum.len() == n {
                    ok += 1;
                } else {
                    eprintln!("reduction {k}: {bad} wrong elements");
                    failed += 1;
                }
            }
            Ok(None) => ok += 1,
            Err(e @ ReduceError::Mismatched { .. }) if args.mismatch_rank.is_some() => {
                println!("reduction {k}: expected error: {e}");
                ok += 1;
            }
            Err(e @ (ReduceError::RanksLost { .. } | ReduceError::RootLost { .. }))
                if args.allow_lost =>
            {
                println!("reduction {k}: expected error: {e}");
                ok += 1;
            }
            Err(ReduceError::Fenced) if args.stop_after_join == Some(rank) => {
                println!("reduction {k}: fenced");
                ok += 1;
            }
            Err(ReduceError::RanksLost { ranks, .. })
                if args.skip_rank.is_some_and(|r| ranks == [r]) =>
            {
                println!(
                    "reduction {k}: lost ranks {ranks:?} after {} ms",
                    started.elapsed().as_millis()
                );
                ok += 1;
            }
            Err(ReduceError::RanksLost { ranks, .. })
                if args.exit_rank.is_some_and(|r| ranks.contains(&r)) =>
            {
                println!("reduction {k}: expected error: lost ranks {ranks:?}");
                ok += 1;
            }
            Err(e) => {
                eprintln!("reduction {k}: error: {e}");
                failed += 1;
            }
        }
    }
    if let Some(skipped) = args.skip_rank {
        // Started after the others' reductions ended: the skipped rank
        // had left by then.
        let t = std::time::Instant::now();
        let opts = Reduce::root(args.root).id("after-it-left");
        match rt.reduce(Sum(vec![1.0f32; 4]), opts).expect("reduce").get() {
            Err(ReduceError::RanksLost { ranks, .. }) if ranks == [skipped] => println!(
                "later reduction: lost ranks {ranks:?} after {} ms",
                t.elapsed().as_millis()
            ),
            other => {
                eprintln!("later reduction: expected RanksLost naming {skipped}: {other:?}");
                failed += 1;
            }
        }
    }
    if let Some(dir) = &args.pid_dir {
        std::fs::write(dir.join(format!("rank-{rank}.done")), ok.to_string()).unwrap();
    }
    if rank == 0 {
        if let (Some(path), Some(stats)) = (&args.task_log, rt.master_stats()) {
            std::fs::write(path, serde_json::to_vec_pretty(&stats).unwrap()).unwrap();
        }
    }
    println!("rank {rank}: {ok} ok, {failed} failed");
    println!(
        "rank {rank}: read {} bytes in place",
        taskfold_transports::same_node::mapped_bytes()
    );
    println!(
        "rank {rank}: folded {} pieces as they arrived",
        taskfold::pieces::pieces_folded()
    );
    if let Err(e) = rt.shutdown() {
        if args.stop_after_join != Some(rank) {
            eprintln!("shutdown: {e}");
        }
    }
    std::process::exit(if failed == 0 { 0 } else { 1 });
}

/// Milliseconds since the Unix epoch (the test compares them with the
/// instant it killed the master).
fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// `--master-dies`: rank 0 waits to be killed; the others check that
/// everything that needs the master ends with `MasterLost`, then exit
/// (0 if it all did).
fn master_dies(rt: Runtime, args: &Args) -> ! {
    let rank = rt.rank();
    if rank == 0 {
        std::thread::sleep(Duration::from_secs(600));
        std::process::exit(2);
    }
    let futures: Vec<_> = (0..args.reductions)
        .map(|k| {
            let opts = Reduce::root(args.root).id(format!("check-{k}"));
            rt.reduce(Sum(vec![rank as f32; 1024]), opts)
                .expect("reduce")
        })
        .collect();
    if let Some(dir) = &args.pid_dir {
        std::fs::write(dir.join(format!("rank-{rank}.reduced")), b"").unwrap();
    }
    let mut failed = 0;
    let mut expect = |what: &str, r: Result<(), ReduceError>| match r {
        Err(ReduceError::MasterLost(why)) => {
            println!("{what}: master lost at {}: {why}", now_ms())
        }
        other => {
            eprintln!("{what}: expected MasterLost: {other:?}");
            failed += 1;
        }
    };
    for (k, mut f) in futures.into_iter().enumerate() {
        let r = if k % 2 == 1 {
            f.get().map(|_| ())
        } else {
            f.wait_timeout(Duration::from_secs(120)).map(|_| ())
        };
        expect(&format!("reduction {k}"), r);
    }
    let late = rt.reduce(Sum(vec![0.0f32; 4]), Reduce::root(args.root).id("late"));
    expect("later reduction", late.and_then(|f| f.get()).map(|_| ()));
    expect("barrier", rt.barrier());
    expect("shutdown", rt.shutdown());
    println!("rank {rank}: {failed} unexpected");
    std::process::exit(if failed == 0 { 0 } else { 1 });
}
