//! One rank of the failure-injection experiment (`taskfold
//! bench-fault-rank`, started by the launcher).
//!
//! Files it writes in `--dir`, read by the experiment: `rank-R.pid` (its
//! process id), `called-R` (the wall-clock second at which it is about to
//! call `reduce` for the reduction that is hit, written by rename so that
//! a reader never sees it half-written), `safe-R` (written once that
//! reduction's future says its contribution is safe, `is_safe`: it
//! survives this rank's death), `outcome-R` (how that reduction
//! ended here: `recovered T`, `wrong T`, `completed T` on a rank other
//! than the root, `hang T` or `error T MESSAGE`, `T` the wall-clock second
//! of the outcome) and, in a calibration job, `calibration` (the root's
//! mean duration of a whole reduction, in seconds).

use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use taskfold::{Reduce, Runtime, Sum};

/// Options of one rank of the experiment (internal).
#[derive(Args, Debug)]
pub struct FaultRankArgs {
    #[arg(long)]
    size: usize,
    #[arg(long)]
    root: u32,
    #[arg(long)]
    dir: PathBuf,
    /// Calibrate: run this many reductions and report their mean time.
    #[arg(long)]
    calibrate: Option<u32>,
    #[arg(long)]
    timeout: u64,
    /// Reductions run to completion first (see `bench faults --warmup`).
    #[arg(long, default_value_t = 0)]
    warmup: u32,
}

/// Seconds since the Unix epoch: the clock every process of a trial
/// shares, on one machine.
pub fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn value(rank: u32, i: usize) -> f32 {
    ((i % 1021) as u32 + rank * 3) as f32
}

/// Writes `text` to `path` through a rename, so that a reader polling for
/// `path` never reads it half-written.
fn write_whole(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

/// Calibration: `--warmup` untimed reductions (as a trial runs them),
/// then `reps` timed ones; the root writes the mean time from the
/// slowest-starting rank's `reduce` call to the root's result.
fn calibrate(rt: &Runtime, args: &FaultRankArgs, data: &[f32], reps: u32) {
    let timeout = Duration::from_secs(args.timeout);
    for w in 0..args.warmup {
        let _ = rt
            .reduce(
                Sum(data.to_vec()),
                Reduce::root(args.root).id(format!("cal-warmup-{w}")),
            )
            .map(|mut f| f.wait_timeout(timeout));
    }
    let (mut starts, mut ends) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        let v = Sum(data.to_vec());
        let _ = rt.barrier();
        starts.push(now_s());
        let _ = rt
            .reduce(v, Reduce::root(args.root).id(format!("cal-{rep}")))
            .map(|mut f| f.wait_timeout(timeout));
        ends.push(now_s());
    }
    let latest = rt
        .reduce(
            taskfold::Max(starts),
            Reduce::root(args.root).id("cal-starts"),
        )
        .and_then(|f| f.get());
    if let Ok(Some(taskfold::Max(starts))) = latest {
        let whole: Vec<f64> = ends.iter().zip(&starts).map(|(e, s)| e - s).collect();
        let mean = whole.iter().sum::<f64>() / whole.len().max(1) as f64;
        let _ = std::fs::write(args.dir.join("calibration"), mean.to_string());
    }
}

/// One rank of the experiment.
pub fn rank_main(args: FaultRankArgs) -> ExitCode {
    let rt = match Runtime::from_env() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("fault rank: {e}");
            return ExitCode::from(3);
        }
    };
    let (rank, size) = (rt.rank(), rt.size());
    let n = (args.size / 4).max(1);
    let data: Vec<f32> = (0..n).map(|i| value(rank, i)).collect();
    if let Some(reps) = args.calibrate {
        calibrate(&rt, &args, &data, reps);
        let _ = rt.shutdown();
        return ExitCode::SUCCESS;
    }
    let timeout = Duration::from_secs(args.timeout);
    let _ = std::fs::write(
        args.dir.join(format!("rank-{rank}.pid")),
        std::process::id().to_string(),
    );
    for w in 0..args.warmup {
        let done = rt
            .reduce(
                Sum(data.clone()),
                Reduce::root(args.root).id(format!("warmup-{w}")),
            )
            .map(|mut f| f.wait_timeout(timeout));
        if !matches!(done, Ok(Ok(_))) {
            eprintln!("fault rank {rank}: the warm-up reduction failed: {done:?}");
        }
    }
    let _ = rt.barrier();
    write_whole(
        &args.dir.join(format!("called-{rank}")),
        &now_s().to_string(),
    );
    let res = rt
        .reduce(Sum(data), Reduce::root(args.root).id("fault"))
        .map(|mut f| {
            // The instant the contribution is safe, for the experiment to
            // tell a kill before it from one after (it returns at the
            // latest when the reduction ends).
            if f.wait_safe_timeout(timeout).is_ok() {
                let _ = std::fs::write(args.dir.join(format!("safe-{rank}")), b"");
            }
            f.wait_timeout(timeout)
        });
    let outcome = match res {
        Ok(Ok(Some(sum))) => {
            let ok = sum.0.len() == n
                && sum
                    .0
                    .iter()
                    .enumerate()
                    .all(|(i, &x)| x == (0..size).map(|r| value(r, i)).sum::<f32>());
            format!("{} {}", if ok { "recovered" } else { "wrong" }, now_s())
        }
        Ok(Ok(None)) if rank != args.root => format!("completed {}", now_s()),
        Ok(Ok(None)) => format!("wrong {}", now_s()),
        Ok(Err(taskfold::ReduceError::Timeout(_))) => format!("hang {}", now_s()),
        Ok(Err(e)) | Err(e) => format!("error {} {e}", now_s()),
    };
    write_whole(&args.dir.join(format!("outcome-{rank}")), &outcome);
    let _ = rt.shutdown();
    ExitCode::SUCCESS
}
