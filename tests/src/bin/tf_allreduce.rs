//! A rank program for the multi-process allreduce tests: one allreduce of
//! an `f32` sum rooted at `--root`, checked exact on every rank, then one
//! broadcast from the same root, checked too; prints each outcome.
//!
//! Contributions are small integers, so every sum is exact in `f32` and
//! a lost or doubled contribution is always detected.

use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;
use taskfold::{Reduce, Runtime, Sum};

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
}

fn value(rank: u32, i: usize) -> f32 {
    ((i % 1021) as u32 + rank * 3) as f32
}

fn main() {
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
    let f = rt
        .allreduce(Sum(mine), Reduce::root(args.root).id("ar"))
        .expect("allreduce");
    let limit = Duration::from_secs(120);
    let mut f = f;
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
    if ok {
        let v = (rank == args.root).then(|| format!("from {}", args.root));
        let b = rt.broadcast(v, Reduce::root(args.root).id("bc"));
        match b.expect("broadcast").wait_timeout(limit) {
            Ok(s) => println!("[{rank}] broadcast: ok: {s}"),
            Err(e) => println!("[{rank}] broadcast: error: {e}"),
        }
    }
    if let Err(e) = rt.shutdown() {
        println!("[{rank}] shutdown: {e}");
    }
}
