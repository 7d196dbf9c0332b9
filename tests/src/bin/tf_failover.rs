//! A rank program for the tests of a master that dies with a standby (or
//! of a node that dies): every rank issues `--reductions` sum reductions,
//! one every `--pace-ms`, while the test kills ranks at a random instant;
//! the root checks every result exactly.
//!
//! Each victim prints `safe I` once its contribution to reduction `I` is
//! safe (synchronous durability: when `reduce` returned). Every survivor
//! prints, per reduction, `ok I` (the root, exact), `done I`, `lost I
//! [RANKS]` (a typed loss) or `WRONG I` / `unexpected I`; then one more
//! reduction over the ranks that are left (`final ok over [..]`), and its
//! tally `rank R: K ok, L lost, 0 wrong, 0 unexpected`. It exits 0 unless
//! something was wrong or unexpected.

use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;
use taskfold::{Reduce, ReduceError, ReduceFuture, Runtime, Sum};

#[derive(Parser)]
struct Args {
    /// Reductions per rank.
    #[arg(long, default_value_t = 30)]
    reductions: u32,
    /// Bytes per contribution.
    #[arg(long, default_value_t = 1 << 16)]
    size: usize,
    /// Root of every reduction (not a victim).
    #[arg(long, default_value_t = 1)]
    root: u32,
    /// Pause between two reductions, in milliseconds.
    #[arg(long, default_value_t = 20)]
    pace_ms: u64,
    /// Where `rank-N.pid` files are written.
    #[arg(long)]
    pid_dir: Option<PathBuf>,
}

/// Rank `rank`'s contribution to reduction `i` (small integers: every sum
/// is exact in `f32`).
fn value(rank: u32, i: u32) -> f32 {
    ((rank + 1) * (i % 97 + 1)) as f32
}

/// What a survivor saw of its reductions.
#[derive(Default)]
struct Tally {
    ok: u32,
    lost: u32,
    wrong: u32,
    unexpected: u32,
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    let rt = match Runtime::from_env() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tf_failover: cannot start: {e}");
            std::process::exit(3);
        }
    };
    let rank = rt.rank();
    if let Some(dir) = &args.pid_dir {
        let pid = std::process::id().to_string();
        std::fs::write(dir.join(format!("rank-{rank}.pid")), pid).unwrap();
    }
    let n = (args.size / 4).max(1);
    let mut futures = Vec::new();
    for i in 0..args.reductions {
        let opts = Reduce::root(args.root).id(format!("fo-{i}"));
        let f = rt
            .reduce(Sum(vec![value(rank, i); n]), opts)
            .expect("reduce");
        if f.wait_safe_timeout(Duration::from_secs(60)).is_ok() {
            println!("safe {i}");
        }
        futures.push((i, f));
        std::thread::sleep(Duration::from_millis(args.pace_ms));
    }
    let mut tally = Tally::default();
    for (i, f) in futures {
        settle(&rt, &args, i, f, &mut tally);
    }
    final_reduction(&rt, &args, &mut tally);
    println!(
        "rank {rank}: {} ok, {} lost, {} wrong, {} unexpected",
        tally.ok, tally.lost, tally.wrong, tally.unexpected
    );
    let _ = rt.shutdown();
    std::process::exit(if tally.wrong + tally.unexpected == 0 {
        0
    } else {
        1
    });
}

/// Waits for reduction `i` and checks it.
fn settle(rt: &Runtime, args: &Args, i: u32, mut f: ReduceFuture<Sum<f32>>, t: &mut Tally) {
    let all: f32 = (0..rt.size()).map(|r| value(r, i)).sum();
    match f.wait_timeout(Duration::from_secs(90)) {
        Ok(Some(sum)) if sum.0.iter().all(|&x| x == all) => {
            t.ok += 1;
            println!("ok {i}");
        }
        Ok(Some(sum)) => {
            t.wrong += 1;
            let bad = sum.0.iter().find(|&&x| x != all);
            println!("WRONG {i}: {bad:?} instead of {all}");
        }
        Ok(None) if rt.rank() != args.root => {
            t.ok += 1;
            println!("done {i}");
        }
        Err(ReduceError::RanksLost { ranks, .. }) => {
            t.lost += 1;
            println!("lost {i} {ranks:?}");
        }
        other => {
            t.unexpected += 1;
            println!("unexpected {i}: {other:?}");
        }
    }
}

/// One more reduction over every rank still there: over the whole job
/// first, then without the ranks each failure named.
fn final_reduction(rt: &Runtime, args: &Args, t: &mut Tally) {
    let mut group: Vec<u32> = (0..rt.size()).collect();
    for attempt in 0..rt.size() {
        let opts = Reduce::root(args.root)
            .group(group.clone())
            .id(format!("fo-final-{attempt}"));
        let mut f = rt
            .reduce(Sum(vec![rt.rank() as f32 + 1.0]), opts)
            .expect("reduce");
        match f.wait_timeout(Duration::from_secs(90)) {
            Err(ReduceError::RanksLost { ranks, .. }) => {
                group.retain(|r| !ranks.contains(r));
            }
            Ok(Some(sum)) => {
                let want: f32 = group.iter().map(|&r| r as f32 + 1.0).sum();
                if sum.0 == [want] {
                    println!("final ok over {group:?}");
                } else {
                    t.wrong += 1;
                    println!("WRONG final: {:?} instead of {want}", sum.0);
                }
                return;
            }
            Ok(None) => {
                println!("final ok over {group:?}");
                return;
            }
            Err(e) => {
                t.unexpected += 1;
                println!("unexpected final: {e}");
                return;
            }
        }
    }
}
