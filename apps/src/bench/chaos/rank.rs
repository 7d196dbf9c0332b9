//! One rank of `bench chaos` (`taskfold bench-chaos-rank`, started by the
//! launcher): a job that reduces and checkpoints every step, its re-init
//! entry point the runtime's ([`Runtime::run_reinit`]).
//!
//! Step `i` is a sum of `--len` values of [`value`] to `--root`, id
//! `c<i>` (with `--allreduce`, an allreduce: the sum on every rank); at
//! most `--window` steps are in flight; once step `i` settled here, this
//! rank checkpoints `i + 1` (the next step to do). A
//! replacement restores its newest checkpoint (local restart) or the
//! version every rank agreed (global restart) and redoes its steps from
//! there under the same ids.
//!
//! The files this rank writes in `--dir` tell the experiment where it is
//! (each written whole, by a rename, or appended a line at a time):
//!
//! - `proc-R-I` (before the runtime starts; `spare-L` for a spare, `L` its
//!   launcher rank): its process id — a replacement is being let in from
//!   then until `live-R-I` appears;
//! - `live-R-I`: its process id, once it is in the job;
//! - `restore-R-I`: it is about to restore a checkpoint;
//! - `unwind-R-I-E`: it unwound for the global restart of epoch `E` (it
//!   meets the others at its entry point now); `resumed-R-I-N`: it runs
//!   its entry point again (its `N`-th run), after the meeting;
//! - `ok` (the root, appended): `ok I` for every step whose result was
//!   exact, `wrong I` for one that was not; with `--allreduce` every rank
//!   appends `ok I R` (`wrong I R`), and a replacement under local restart
//!   whose redone step had finished without it `lost I R` (the
//!   documented [`ReduceError::ResultLost`]: the others' results do not
//!   wait for a replacement, and a member's is not kept for it);
//! - `errors` (appended): `R I ERROR` for a step that ended in an error.
//!
//! Exit code: 0 if this rank saw nothing wrong and no error, 1 otherwise.

use clap::Args;
use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use taskfold::{
    Entry, Lifecycle, Reduce, ReduceError, ReduceFuture, Runtime, SpreadFuture, StartError, Sum,
};

/// Options of one rank of the experiment (internal).
#[derive(Args, Debug, Clone)]
pub struct ChaosRankArgs {
    /// Steps of the job.
    #[arg(long)]
    pub steps: u32,
    /// Values per contribution (f64).
    #[arg(long)]
    pub len: usize,
    /// The root of every step.
    #[arg(long)]
    pub root: u32,
    /// Pause per step, in milliseconds (the job's computation).
    #[arg(long)]
    pub pace_ms: u64,
    /// Steps in flight at once, at most.
    #[arg(long, default_value_t = 2)]
    pub window: usize,
    /// Where the marker files go.
    #[arg(long)]
    pub dir: PathBuf,
    /// Longest wait for one step, in seconds.
    #[arg(long, default_value_t = 120)]
    pub step_timeout: u64,
    /// Every step an allreduce: the sum on every rank, checked on each.
    #[arg(long)]
    pub allreduce: bool,
}

/// One step in flight.
enum Step {
    /// A reduction to the root.
    Reduce(ReduceFuture<Sum<f64>>),
    /// An allreduce.
    All(SpreadFuture<Sum<f64>>),
}

impl Step {
    /// Starts step `i`'s collective with this rank's contribution.
    fn start(rt: &Runtime, args: &ChaosRankArgs, i: u32) -> Result<Step, ReduceError> {
        let opts = Reduce::root(args.root).id(format!("c{i}"));
        let v = Sum(vec![value(rt.rank(), i); args.len]);
        match args.allreduce {
            false => rt.reduce(v, opts).map(Step::Reduce),
            true => rt.allreduce(v, opts).map(Step::All),
        }
    }

    /// Waits at most `d`; the value if this rank gets one.
    fn wait(&mut self, d: Duration) -> Result<Option<Sum<f64>>, ReduceError> {
        match self {
            Step::Reduce(f) => f.wait_timeout(d),
            Step::All(f) => f.wait_timeout(d).map(Some),
        }
    }
}

/// Rank `rank`'s contribution to step `i` (small integers: sums are exact).
pub fn value(rank: u32, i: u32) -> f64 {
    f64::from((rank + 1) * (i % 97 + 1))
}

/// Writes `text` to `dir/name` through a rename (never read half-written).
fn mark(dir: &Path, name: &str, text: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, dir.join(name));
    }
}

/// Appends one line to `dir/name` (one `write` of the whole line, in
/// append mode: lines of several processes do not interleave).
fn append(dir: &Path, name: &str, line: &str) {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(name));
    if let Ok(mut f) = file {
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

/// This process's rank and incarnation as its launcher said, before the
/// runtime starts (`None` for a spare, whose rank comes later).
fn launched_as() -> (Option<u32>, u32) {
    let var = |n: &str| std::env::var(n).ok().and_then(|v| v.parse::<u32>().ok());
    let inc = var("TASKFOLD_INCARNATION").unwrap_or(0);
    let rank = var("TASKFOLD_RANK").or_else(|| var("PMI_RANK"));
    let size = var("TASKFOLD_SIZE").or_else(|| var("PMI_SIZE"));
    let spares = var("TASKFOLD_SPARES").unwrap_or(0);
    match (rank, size) {
        (Some(r), Some(s)) if r + spares >= s => (None, inc),
        (r, _) => (r, inc),
    }
}

/// Runs one rank.
pub fn rank_main(args: ChaosRankArgs) -> ExitCode {
    let pid = std::process::id().to_string();
    match launched_as() {
        (Some(r), inc) => mark(&args.dir, &format!("proc-{r}-{inc}"), &pid),
        (None, _) => {
            let l = std::env::var("TASKFOLD_RANK")
                .or_else(|_| std::env::var("PMI_RANK"))
                .unwrap_or_default();
            mark(&args.dir, &format!("spare-{l}"), &pid);
        }
    }
    let rt = match Runtime::from_env() {
        Ok(rt) => rt,
        Err(StartError::RankFinished) | Err(StartError::Spare) => return ExitCode::SUCCESS,
        Err(e) => {
            append(&args.dir, "errors", &format!("- - cannot start: {e}"));
            eprintln!("bench-chaos-rank: cannot start: {e}");
            return ExitCode::from(3);
        }
    };
    let me = format!("{}-{}", rt.rank(), incarnation(&rt));
    mark(&args.dir, &format!("live-{me}"), &pid);
    let mut runs = 0u32;
    let outcome = rt.run_reinit(|rt, entry| {
        runs += 1;
        run(rt, &args, &me, entry, runs)
    });
    let ok = match outcome {
        Ok(clean) => clean,
        Err(e) => {
            append(&args.dir, "errors", &format!("{} - {e}", rt.rank()));
            false
        }
    };
    let _ = rt.shutdown();
    match ok {
        true => ExitCode::SUCCESS,
        false => ExitCode::from(1),
    }
}

fn incarnation(rt: &Runtime) -> u32 {
    match rt.lifecycle() {
        Lifecycle::Restarted { incarnation } => incarnation,
        _ => 0,
    }
}

/// One run from the entry point; `Ok(false)` if a step ended in an error
/// or a wrong result. A rollback ends it with `ReduceError::Reinit`.
fn run(
    rt: &Runtime,
    args: &ChaosRankArgs,
    me: &str,
    entry: Entry,
    nth: u32,
) -> Result<bool, ReduceError> {
    if nth > 1 {
        mark(&args.dir, &format!("resumed-{me}-{nth}"), "");
    }
    let Some(start) = resume_point(rt, args, me, entry) else {
        // The version every rank agreed to resume from cannot be read
        // here: this rank leaves, and the others' steps end in a typed
        // error rather than wait for it.
        return Ok(false);
    };
    append(
        &args.dir,
        "notes",
        &format!(
            "{me} run {nth} from step {start} (resume {:?})",
            entry.resume
        ),
    );
    let mut clean = true;
    let mut master = None;
    let mut live: VecDeque<(u32, Step)> = VecDeque::new();
    for i in start..args.steps {
        let f = Step::start(rt, args, i).map_err(|e| unwound(args, me, e))?;
        live.push_back((i, f));
        if master != Some(rt.master()) {
            master = Some(rt.master());
            mark(&args.dir, "master", &rt.master().to_string());
        }
        std::thread::sleep(Duration::from_millis(args.pace_ms));
        rt.check_reinit().map_err(|e| unwound(args, me, e))?;
        while live.len() > args.window {
            let (i, f) = live.pop_front().expect("not empty");
            clean &= settle(rt, args, me, i, f)?;
            // The write starts at once; this rank does not wait for it.
            drop(rt.checkpoints().save(u64::from(i) + 1, &(i + 1)));
        }
    }
    for (i, f) in live {
        clean &= settle(rt, args, me, i, f)?;
    }
    Ok(clean)
}

/// Marks that this rank unwinds for a global restart, and hands the error
/// back.
fn unwound(args: &ChaosRankArgs, me: &str, e: ReduceError) -> ReduceError {
    if let ReduceError::Reinit { epoch } = &e {
        mark(&args.dir, &format!("unwind-{me}-{epoch}"), "");
    }
    e
}

/// Where this run starts: the agreed version (global restart), a
/// replacement's newest checkpoint (local restart), else step 0; `None`
/// if the agreed version cannot be read (every rank must start from it).
fn resume_point(rt: &Runtime, args: &ChaosRankArgs, me: &str, entry: Entry) -> Option<u32> {
    let restarted = matches!(rt.lifecycle(), Lifecycle::Restarted { .. });
    let global = global_restart();
    let restored = match entry.resume {
        Some(v) => {
            mark(&args.dir, &format!("restore-{me}"), "");
            rt.checkpoints().restore_upto::<u32>(Some(v))
        }
        None if restarted && !global => {
            mark(&args.dir, &format!("restore-{me}"), "");
            rt.checkpoints().restore::<u32>()
        }
        None => return Some(0),
    };
    match (restored, entry.resume) {
        (Ok(Some((v, next))), Some(agreed)) if v == agreed => Some(next),
        (Ok(Some((_, next))), None) => Some(next),
        // A replacement with nothing to restore redoes its steps from the
        // first: slower, never wrong.
        (Ok(None), None) => Some(0),
        (other, agreed) => {
            let what = format!("{me} cannot restore version {agreed:?}: {other:?}");
            append(&args.dir, "errors", &what);
            match agreed {
                Some(_) => None,
                None => Some(0),
            }
        }
    }
}

/// Waits for step `i` and checks it at the root (with `--allreduce`, on
/// every rank); a rollback is returned.
fn settle(
    rt: &Runtime,
    args: &ChaosRankArgs,
    me: &str,
    i: u32,
    mut f: Step,
) -> Result<bool, ReduceError> {
    let all: f64 = (0..rt.size()).map(|r| value(r, i)).sum();
    // With an allreduce every rank says which rank it is.
    let who = match args.allreduce {
        true => format!(" {}", rt.rank()),
        false => String::new(),
    };
    match f.wait(Duration::from_secs(args.step_timeout)) {
        Ok(Some(sum)) if sum.0.len() == args.len && sum.0.iter().all(|&x| x == all) => {
            append(&args.dir, "ok", &format!("ok {i}{who}"));
            Ok(true)
        }
        Ok(Some(sum)) => {
            let bad = sum.0.iter().find(|&&x| x != all).copied();
            append(&args.dir, "ok", &format!("wrong {i}{who} {bad:?} != {all}"));
            Ok(false)
        }
        Ok(None) => Ok(true),
        Err(e @ ReduceError::Reinit { .. }) => Err(unwound(args, me, e)),
        Err(ReduceError::ResultLost { .. }) if args.allreduce && redoes_alone(rt) => {
            append(&args.dir, "ok", &format!("lost {i}{who}"));
            Ok(true)
        }
        Err(e) => {
            append(&args.dir, "errors", &format!("{} {i} {e}", rt.rank()));
            Ok(false)
        }
    }
}

/// Whether this process is a replacement that redoes its steps alone
/// (local restart): an allreduce it redoes may have finished without it.
fn redoes_alone(rt: &Runtime) -> bool {
    matches!(rt.lifecycle(), Lifecycle::Restarted { .. }) && !global_restart()
}

/// Whether the job comes back from a replacement by a global restart.
fn global_restart() -> bool {
    std::env::var("TASKFOLD_RESTART").is_ok_and(|v| v == "global")
}
