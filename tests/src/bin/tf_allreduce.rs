//! A rank program for the multi-process allreduce tests: one allreduce of
//! an `f32` sum rooted at `--root`, checked exact on every rank, then one
//! broadcast from the same root, checked too; prints each outcome.
//!
//! Contributions are small integers, so every sum is exact in `f32` and
//! a lost or doubled contribution is always detected.
//!
//! With `--late R`, rank R takes its allreduce value only once the root
//! has taken its own, waited for every other rank to take theirs, and then
//! filled every free buffer of the value's size with NaN (`root.churned`):
//! a value kept as a view of the root's memory must be unchanged by it.
//! With `--in-place` the contributions are `InPlace` arrays, whose value
//! a member reads where it lies (a view of the root's memory on its
//! node): every rank takes its value at once, the root fills every free
//! buffer of the value's size with NaN once all have, and only then does
//! each rank check the value it kept (and say whether it is still read
//! in place: `shared: true`); the same for a `broadcast_in_place` of the
//! root's array, taken before the churn too. With `--check-after F` the root does not
//! churn, and the ranks check once `F` exists: the test kills the root
//! before, so a value read in place is read from a dead process's pages.
//! At the end each rank prints how many spread values it kept as a view
//! of a same-node holder's memory (`spread views: N`).

use clap::Parser;
use metrics_util::debugging::DebuggingRecorder;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use taskfold::{metrics as names, InPlace, Reduce, Runtime, Sum};

/// Values lie in the shared heap (unless `TASKFOLD_SHARED_HEAP=0`): a
/// member on the root's node fetches a view of the root's memory.
#[global_allocator]
static HEAP: taskfold::SharedHeap = taskfold::SharedHeap;

#[derive(Parser)]
struct Args {
    /// Elements per contribution.
    #[arg(long, default_value_t = 1 << 18)]
    len: usize,
    /// Root of the allreduce and the broadcast.
    #[arg(long, default_value_t = 1)]
    root: u32,
    /// Where `rank-N.pid` files are written, and `rank-N.got` once this
    /// rank's allreduce ended.
    #[arg(long)]
    pid_dir: PathBuf,
    /// This rank takes its allreduce value only after the root churned
    /// its free buffers (see the module's doc).
    #[arg(long)]
    late: Option<u32>,
    /// Contributions are `InPlace` arrays (see the module's doc).
    #[arg(long)]
    in_place: bool,
    /// With `--in-place`: the root does not churn; each rank checks its
    /// value once this file exists (the test kills the root first).
    #[arg(long)]
    check_after: Option<PathBuf>,
}

fn value(rank: u32, i: usize) -> f32 {
    ((i % 1021) as u32 + rank * 3) as f32
}

/// Waits (bounded) until `path` exists.
fn wait_file(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        assert!(Instant::now() < deadline, "{} never came", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The root, its own value taken: once every rank but `late` took theirs
/// (and the spread's holders had time to let the value go), fills every
/// free buffer near the value's size with NaN, then says so.
fn churn(args: &Args, size: u32, late: u32) {
    for r in (0..size).filter(|&r| r != late && r != args.root) {
        wait_file(&args.pid_dir.join(format!("rank-{r}.got")));
    }
    std::thread::sleep(Duration::from_millis(300));
    // Requests from a little below the value's encoding to a little above
    // take every free buffer a recycled encoding could be among.
    let mut taken = Vec::new();
    for len in args.len.saturating_sub(8)..=args.len + 8 {
        for _ in 0..8 {
            let mut b = InPlace::<Sum<f32>>::zeroed(len);
            b.as_mut_slice().fill(f32::NAN);
            taken.push(b);
        }
    }
    drop(taken);
    std::fs::write(args.pid_dir.join("root.churned"), b"").unwrap();
}

/// `--in-place`: the allreduce of `InPlace` arrays, each value checked
/// only after the root reused its free buffers.
fn in_place(rt: Runtime, args: &Args, mine: &[f32]) {
    let (rank, size) = (rt.rank(), rt.size());
    let mut f = rt
        .allreduce(
            InPlace::<Sum<f32>>::from_slice(mine),
            Reduce::root(args.root).id("ar"),
        )
        .expect("allreduce");
    let got = f.wait_timeout(Duration::from_secs(120));
    let sent = (rank == args.root).then(|| InPlace::<Sum<f32>>::from_slice(mine));
    let mut b = rt
        .broadcast_in_place(sent, Reduce::root(args.root).id("bc"))
        .expect("broadcast");
    let bgot = b.wait_timeout(Duration::from_secs(120));
    std::fs::write(args.pid_dir.join(format!("rank-{rank}.got")), b"").unwrap();
    match &args.check_after {
        Some(path) => wait_file(path),
        None => {
            if rank == args.root && got.is_ok() {
                churn(args, size, u32::MAX);
            }
            wait_file(&args.pid_dir.join("root.churned"));
        }
    }
    match got {
        Ok(sum) => {
            let exact = sum.len() == args.len
                && sum
                    .as_slice()
                    .iter()
                    .enumerate()
                    .all(|(i, v)| *v == (0..size).map(|r| value(r, i)).sum::<f32>());
            let shared = sum.is_shared();
            println!("[{rank}] allreduce: ok, exact: {exact}, shared: {shared}");
        }
        Err(e) => println!("[{rank}] allreduce: error: {e}"),
    }
    match bgot {
        Ok(v) => {
            let exact = v.len() == args.len
                && v.as_slice()
                    .iter()
                    .enumerate()
                    .all(|(i, x)| *x == value(args.root, i));
            let shared = v.is_shared();
            println!("[{rank}] broadcast: ok, exact: {exact}, shared: {shared}");
        }
        Err(e) => println!("[{rank}] broadcast: error: {e}"),
    }
    if let Err(e) = rt.shutdown() {
        println!("[{rank}] shutdown: {e}");
    }
}

fn main() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    recorder.install().expect("the only recorder");
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let rt = match Runtime::from_env() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tf_allreduce: cannot start: {e}");
            std::process::exit(3);
        }
    };
    let (rank, size) = (rt.rank(), rt.size());
    let pid = std::process::id().to_string();
    std::fs::write(args.pid_dir.join(format!("rank-{rank}.pid")), pid).unwrap();
    let mine: Vec<f32> = (0..args.len).map(|i| value(rank, i)).collect();
    if args.in_place {
        in_place(rt, &args, &mine);
        return;
    }
    let f = rt
        .allreduce(Sum(mine), Reduce::root(args.root).id("ar"))
        .expect("allreduce");
    let limit = Duration::from_secs(120);
    let mut f = f;
    if args.late == Some(rank) {
        wait_file(&args.pid_dir.join("root.churned"));
    }
    let ok = match f.wait_timeout(limit) {
        Ok(sum) => {
            let exact = sum.0.len() == args.len
                && sum
                    .0
                    .iter()
                    .enumerate()
                    .all(|(i, v)| *v == (0..size).map(|r| value(r, i)).sum::<f32>());
            println!("[{rank}] allreduce: ok, exact: {exact}");
            true
        }
        Err(e) => {
            println!("[{rank}] allreduce: error: {e}");
            false
        }
    };
    std::fs::write(args.pid_dir.join(format!("rank-{rank}.got")), b"").unwrap();
    if let Some(late) = args.late.filter(|_| rank == args.root && ok) {
        churn(&args, size, late);
    }
    if ok {
        let v = (rank == args.root).then(|| format!("from {}", args.root));
        let b = rt.broadcast(v, Reduce::root(args.root).id("bc"));
        match b.expect("broadcast").wait_timeout(limit) {
            Ok(s) => println!("[{rank}] broadcast: ok: {s}"),
            Err(e) => println!("[{rank}] broadcast: error: {e}"),
        }
    }
    let views = taskfold_tests::counter(&snap, names::SPREAD_VALUES_VIEWED);
    println!("[{rank}] spread views: {views}");
    if let Err(e) = rt.shutdown() {
        println!("[{rank}] shutdown: {e}");
    }
}
