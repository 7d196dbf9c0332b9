//! A rank program for the tests of respawned ranks: every rank issues
//! `--reductions` sum reductions to `--root` (rank 0 unless said), one
//! every `--pace-ms`, while
//! the test kills a rank; the launcher starts a replacement, which redoes
//! its reductions from its newest checkpoint (`--checkpoint-every`), or
//! from the first. The root checks every result exactly: each rank's
//! contribution counted once. A replaced root gets the results of the
//! reductions it redoes back from their kept copies.
//!
//! With `--allreduce` every step is an allreduce instead, checked exactly
//! on every rank; a replacement that redoes one that finished under its
//! dead process gets `ResultLost` (printed `result-lost I`, counted lost).
//!
//! Every rank prints `lifecycle L` when it starts (`resumed at S` if it
//! restored a checkpoint), then per reduction `ok I` (the root, exact),
//! `done I`, `lost I [RANKS]` or `WRONG I` / `unexpected I`, its failure
//! events (`event E`), `lifecycle-end L` and a tally `rank R: K ok, L
//! lost, W wrong, U unexpected`. It exits 0 unless something was wrong or
//! unexpected.

use clap::Parser;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Duration;
use taskfold::{Entry, Lifecycle, Reduce, ReduceError, ReduceFuture, Runtime, SpreadFuture, Sum};

#[derive(Parser)]
struct Args {
    /// Reductions per rank.
    #[arg(long, default_value_t = 40)]
    reductions: u32,
    /// Values per contribution.
    #[arg(long, default_value_t = 4096)]
    len: usize,
    /// Pause between two reductions, in milliseconds.
    #[arg(long, default_value_t = 25)]
    pace_ms: u64,
    /// Reductions in flight at once, at most.
    #[arg(long, default_value_t = 4)]
    window: usize,
    /// Checkpoint the next reduction to do every this many (0: never).
    #[arg(long, default_value_t = 0)]
    checkpoint_every: u32,
    /// The root of every reduction.
    #[arg(long, default_value_t = 0)]
    root: u32,
    /// Where `rank-N.pid` files are written.
    #[arg(long)]
    pid_dir: Option<PathBuf>,
    /// Contributions change with each global rollback (its generation:
    /// the runs of the entry point before this one, plus the process's
    /// incarnation — one kill at most): a result that mixes data of two
    /// generations is wrong.
    #[arg(long)]
    by_generation: bool,
    /// Once its entry point returned, a rank writes `rank-R.done` in the
    /// pid directory and waits this long before it shuts down (as an
    /// application that writes its output): a death meanwhile finds it
    /// past its entry point, not yet finalized.
    #[arg(long, default_value_t = 0)]
    linger_ms: u64,
    /// Every step an allreduce: the sum on every rank.
    #[arg(long)]
    allreduce: bool,
}

/// A step in flight: a reduction to the root, or an allreduce.
enum Step {
    Reduce(ReduceFuture<Sum<f64>>),
    All(SpreadFuture<Sum<f64>>),
}

impl Step {
    fn start(rt: &Runtime, args: &Args, v: Sum<f64>, opts: Reduce) -> Result<Step, ReduceError> {
        Ok(match args.allreduce {
            true => Step::All(rt.allreduce(v, opts)?),
            false => Step::Reduce(rt.reduce(v, opts)?),
        })
    }

    /// The outcome, within `d`: `None` at a reduction's member.
    fn wait(&mut self, d: Duration) -> Result<Option<Sum<f64>>, ReduceError> {
        match self {
            Step::Reduce(f) => f.wait_timeout(d),
            Step::All(f) => f.wait_timeout(d).map(Some),
        }
    }
}

/// Rank `rank`'s contribution to reduction `i` in generation `gen` (small
/// integers: exact).
fn value(rank: u32, i: u32, gen: u32) -> f64 {
    f64::from((rank + 1) * (i % 89 + 1) * (1 + 1000 * gen))
}

/// The generation of this process's `run`-th run (from 1).
fn generation(rt: &Runtime, args: &Args, run: u32) -> u32 {
    let incarnation = match rt.lifecycle() {
        Lifecycle::Restarted { incarnation } => incarnation,
        _ => 0,
    };
    match args.by_generation {
        true => run - 1 + incarnation,
        false => 0,
    }
}

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
        Err(e @ (taskfold::StartError::RankFinished | taskfold::StartError::Spare)) => {
            eprintln!("tf_respawn: {e}");
            std::process::exit(0);
        }
        Err(e) => {
            eprintln!("tf_respawn: cannot start: {e}");
            std::process::exit(3);
        }
    };
    let rank = rt.rank();
    println!("lifecycle {:?}", rt.lifecycle());
    if let Some(dir) = &args.pid_dir {
        let tmp = dir.join(format!(".rank-{rank}.pid"));
        std::fs::write(&tmp, std::process::id().to_string()).unwrap();
        std::fs::rename(tmp, dir.join(format!("rank-{rank}.pid"))).unwrap();
    }
    // The re-init entry point: a global restart runs it again.
    let mut runs = 0;
    let tally = match rt.run_reinit(|rt, entry| {
        runs += 1;
        run(rt, &args, entry, generation(rt, &args, runs))
    }) {
        Ok(t) => t,
        Err(e) => {
            println!("unexpected run: {e}");
            Tally {
                unexpected: 1,
                ..Tally::default()
            }
        }
    };
    if let Some(dir) = args.pid_dir.as_ref().filter(|_| args.linger_ms > 0) {
        let _ = std::fs::write(dir.join(format!("rank-{rank}.done")), b"");
        std::thread::sleep(Duration::from_millis(args.linger_ms));
    }
    for ev in rt.recovery_events().try_iter() {
        println!("event {ev:?}");
    }
    println!("lifecycle-end {:?}", rt.lifecycle());
    println!(
        "rank {rank}: {} ok, {} lost, {} wrong, {} unexpected",
        tally.ok, tally.lost, tally.wrong, tally.unexpected
    );
    let _ = rt.shutdown();
    std::process::exit(i32::from(tally.wrong + tally.unexpected > 0));
}

/// One run from the entry point: the reductions from where this process
/// resumes to the last. A rollback ends it with `ReduceError::Reinit`.
fn run(rt: &Runtime, args: &Args, entry: Entry, gen: u32) -> Result<Tally, ReduceError> {
    println!("entry {entry:?}");
    let start = match entry.resume {
        Some(v) => agreed(rt, v),
        None => resume_point(rt, args),
    };
    let mut tally = Tally::default();
    let mut live: VecDeque<(u32, Step)> = VecDeque::new();
    for i in start..args.reductions {
        let opts = Reduce::root(args.root).id(format!("rs-{i}"));
        let v = Sum(vec![value(rt.rank(), i, gen); args.len]);
        live.push_back((i, Step::start(rt, args, v, opts)?));
        std::thread::sleep(Duration::from_millis(args.pace_ms));
        while live.len() > args.window {
            let (i, f) = live.pop_front().expect("not empty");
            settle(rt, (i, gen), f, &mut tally, args.root)?;
            checkpoint(rt, args, i + 1);
        }
    }
    for (i, f) in live {
        settle(rt, (i, gen), f, &mut tally, args.root)?;
    }
    Ok(tally)
}

/// Where every rank resumes after a global restart: version `v`, the
/// newest every rank holds.
fn agreed(rt: &Runtime, v: u64) -> u32 {
    match rt.checkpoints().restore_upto::<u32>(Some(v)) {
        Ok(Some((version, next))) => {
            println!("resumed at {next} (version {version}, agreed)");
            next
        }
        other => {
            println!("unexpected restore of version {v}: {other:?}");
            0
        }
    }
}

/// Where this process starts: a replacement from its newest checkpoint
/// (every reduction before it had completed), else the first.
fn resume_point(rt: &Runtime, args: &Args) -> u32 {
    if args.checkpoint_every == 0 || !matches!(rt.lifecycle(), Lifecycle::Restarted { .. }) {
        return 0;
    }
    match rt.checkpoints().restore::<u32>() {
        Ok(Some((version, next))) => {
            println!("resumed at {next} (version {version})");
            next
        }
        Ok(None) => 0,
        Err(e) => {
            println!("unexpected restore: {e}");
            0
        }
    }
}

/// Checkpoints `next` (every reduction before it completed) when due.
fn checkpoint(rt: &Runtime, args: &Args, next: u32) {
    if args.checkpoint_every > 0 && next.is_multiple_of(args.checkpoint_every) {
        let written = rt.checkpoints().save(u64::from(next), &next).wait();
        if let Err(e) = written {
            println!("unexpected checkpoint: {e}");
        }
    }
}

/// Waits for reduction `i` and checks it; a rollback is returned.
fn settle(
    rt: &Runtime,
    (i, gen): (u32, u32),
    mut f: Step,
    t: &mut Tally,
    root: u32,
) -> Result<(), ReduceError> {
    let all: f64 = (0..rt.size()).map(|r| value(r, i, gen)).sum();
    let member = rt.rank() != root && matches!(f, Step::Reduce(_));
    match f.wait(Duration::from_secs(120)) {
        Ok(Some(sum)) if sum.0.iter().all(|&x| x == all) => {
            t.ok += 1;
            println!("ok {i}");
        }
        Ok(Some(sum)) => {
            t.wrong += 1;
            let bad = sum.0.iter().find(|&&x| x != all);
            println!("WRONG {i}: {bad:?} instead of {all}");
        }
        Ok(None) if member => {
            t.ok += 1;
            println!("done {i}");
        }
        Err(ReduceError::ResultLost { .. }) if !member => {
            t.lost += 1;
            println!("result-lost {i}");
        }
        Err(ReduceError::RanksLost { ranks, .. }) => {
            t.lost += 1;
            println!("lost {i} {ranks:?}");
        }
        Err(e @ ReduceError::Reinit { .. }) => {
            println!("rollback at {i}: {e}");
            return Err(e);
        }
        other => {
            t.unexpected += 1;
            println!("unexpected {i}: {other:?}");
        }
    }
    Ok(())
}
