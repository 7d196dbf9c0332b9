//! `taskfold bench faults`: the failure-injection experiment.
//!
//! For each durability mode: a calibration job measures the mean duration
//! `t` of one reduction of `S` bytes on `p` ranks; then `R` trials each run
//! `--warmup` reductions to completion (default 1, as in a long run: ranks
//! then know whether their buddies are on their node) and one more, and
//! SIGKILL the chosen rank (never the root, never the master) at a
//! uniformly random instant in `[0, t]` after that rank announced its
//! contribution to the last one. The root records whether it got the correct
//! result, a typed error, or nothing within the timeout (a hang), and when.

use crate::launcher::{self, Launch};
use crate::sizes::{human, parse_size};
use clap::{Args, ValueEnum};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use taskfold::{Reduce, Runtime, Sum};
use taskfold_benches::stats::median;

/// Which durability modes to run.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Modes {
    /// Synchronous then asynchronous.
    Both,
    /// Synchronous only.
    Sync,
    /// Asynchronous only.
    Async,
}

/// Options of `bench faults`.
#[derive(Args, Debug)]
pub struct FaultArgs {
    /// Ranks.
    #[arg(long, default_value_t = 8)]
    pub np: u32,
    /// Bytes per contribution.
    #[arg(long, default_value = "8M", value_parser = parse_size)]
    pub size: usize,
    /// Trials per durability mode.
    #[arg(long, default_value_t = 100)]
    pub trials: u32,
    /// The rank to kill (not the root, not rank 0).
    #[arg(long, default_value_t = 1)]
    pub kill_rank: u32,
    /// The root of the reductions (not the killed rank).
    #[arg(long, default_value_t = 0)]
    pub root: u32,
    /// Durability modes.
    #[arg(long, value_enum, default_value_t = Modes::Both)]
    pub durability: Modes,
    /// Seconds the root waits for an outcome before calling it a hang.
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
    /// Seed of the kill instants.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Reductions every trial runs to completion before the one whose
    /// rank is killed, as in a long run: after one, each rank knows
    /// whether its buddy is on its node (and then writes no disk copy,
    /// its buddy holding a view of its memory). 0 measures a job's first
    /// reduction, which always writes its disk copies.
    #[arg(long, default_value_t = 1)]
    pub warmup: u32,
    /// Also write the figures here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

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
    /// Reductions run to completion first (see [`FaultArgs::warmup`]).
    #[arg(long, default_value_t = 0)]
    warmup: u32,
}

/// The figures of one durability mode.
#[derive(Serialize, Debug, Default)]
pub struct FaultReport {
    /// `"sync"` or `"async"`.
    pub durability: String,
    /// Ranks.
    pub np: u32,
    /// Bytes per contribution.
    pub size: usize,
    /// Mean duration of one reduction without failure (the kill window).
    pub t_mean_s: f64,
    /// Trials run.
    pub trials: u32,
    /// Correct result at the root.
    pub recovered: u32,
    /// Of those, the reduction had already completed when the kill came.
    pub completed_before_kill: u32,
    /// Typed error at the root.
    pub typed_errors: u32,
    /// Wrong result at the root (must be 0).
    pub wrong_results: u32,
    /// No outcome within the timeout (must be 0).
    pub hangs: u32,
    /// Median seconds from the kill to the root's outcome, over trials
    /// whose outcome came after the kill.
    pub median_kill_to_result_s: f64,
    /// The typed errors seen, one per trial that ended with one.
    pub errors: Vec<String>,
    /// Every trial: when the kill came (seconds after the rank announced
    /// its contribution) and how the trial ended.
    pub per_trial: Vec<TrialRecord>,
}

/// One trial of the experiment.
#[derive(Serialize, Debug, Default)]
pub struct TrialRecord {
    /// Seconds between the rank's announcement and its SIGKILL.
    pub kill_delay_s: f64,
    /// `recovered`, `error`, `wrong` or `hang`.
    pub outcome: String,
    /// The ranks' output, kept for a trial that was not recovered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<PathBuf>,
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A small deterministic generator for the kill instants (xorshift64*).
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn job(
    args: &FaultArgs,
    mode: &str,
    dir: &Path,
    calibrate: Option<u32>,
    hooks: Option<String>,
) -> Launch {
    let exe = std::env::current_exe().unwrap_or_else(|_| "taskfold".into());
    let mut a: Vec<std::ffi::OsString> = vec![
        "bench-fault-rank".into(),
        "--size".into(),
        args.size.to_string().into(),
        "--root".into(),
        args.root.to_string().into(),
        "--dir".into(),
        dir.as_os_str().into(),
        "--timeout".into(),
        args.timeout.to_string().into(),
        "--warmup".into(),
        args.warmup.to_string().into(),
    ];
    if let Some(n) = calibrate {
        a.extend(["--calibrate".into(), n.to_string().into()]);
    }
    let mut env = vec![("TASKFOLD_DURABILITY".to_string(), mode.to_string())];
    if std::env::var_os("RUST_LOG").is_none() {
        // Every trial kills a rank: the survivors' warnings are expected,
        // and go to the trial's log, kept if it was not recovered.
        env.push(("RUST_LOG".into(), "taskfold=info,warn".into()));
    }
    if let Some(h) = hooks {
        env.push(("TASKFOLD_TEST_HOOK".into(), h));
    }
    Launch {
        ranks: args.np,
        program: exe.into_os_string(),
        args: a,
        timeout: Some(Duration::from_secs(args.timeout + 30)),
        env,
        log: Some(dir.join("ranks.log")),
    }
}

/// Runs the experiment.
pub fn main(args: FaultArgs) -> ExitCode {
    if args.kill_rank == 0
        || args.kill_rank == args.root
        || args.kill_rank >= args.np
        || args.root >= args.np
    {
        eprintln!("bench faults: --kill-rank must be a rank other than 0 and the root, below --np");
        return ExitCode::from(2);
    }
    let modes: &[&str] = match args.durability {
        Modes::Both => &["sync", "async"],
        Modes::Sync => &["sync"],
        Modes::Async => &["async"],
    };
    let mut reports = Vec::new();
    let mut rng = Rng(args.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    for &mode in modes {
        match run_mode(&args, mode, &mut rng) {
            Ok(report) => reports.push(report),
            Err(code) => return code,
        }
    }
    for r in &reports {
        print_report(r);
    }
    if let Some(path) = &args.json {
        if let Err(e) = std::fs::write(
            path,
            serde_json::to_vec_pretty(&reports).unwrap_or_default(),
        ) {
            eprintln!("bench faults: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    let bad = reports.iter().any(|r| r.wrong_results > 0 || r.hangs > 0);
    if bad {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// One durability mode: calibrates the kill window, then runs the trials.
fn run_mode(args: &FaultArgs, mode: &str, rng: &mut Rng) -> Result<FaultReport, ExitCode> {
    let dir = std::env::temp_dir().join(format!("taskfold-faults-{}-{mode}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("bench faults: {e}");
        return Err(ExitCode::from(2));
    }
    let cal = job(args, mode, &dir, Some(5), None);
    let t = match launcher::run(&cal).map(|_| std::fs::read_to_string(dir.join("calibration"))) {
        Ok(Ok(s)) => s.trim().parse::<f64>().unwrap_or(f64::NAN),
        other => {
            eprintln!("bench faults: calibration failed: {other:?}");
            return Err(ExitCode::from(1));
        }
    };
    let mut report = FaultReport {
        durability: mode.into(),
        np: args.np,
        size: args.size,
        t_mean_s: t,
        ..Default::default()
    };
    let mut delays = Vec::new();
    for trial in 0..args.trials {
        let end = run_trial(args, mode, &dir, trial, t, rng);
        if let Some(d) = report.add(end) {
            delays.push(d);
        }
        if (trial + 1) % 10 == 0 || trial + 1 == args.trials {
            eprintln!("bench faults: {mode}: {}/{} trials", trial + 1, args.trials);
        }
    }
    report.median_kill_to_result_s = median(&mut delays);
    report.trials = report.trials_run();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(report)
}

/// How one trial ended, as the root saw it.
struct TrialEnd {
    record: TrialRecord,
    /// The typed error, for a trial that ended with one.
    error: String,
    /// When the kill came and when the root's outcome did (seconds on the
    /// same clock), if they did.
    kill_at: Option<f64>,
    outcome_at: Option<f64>,
}

impl FaultReport {
    /// Counts `end`; returns the seconds from the kill to the root's
    /// outcome if the outcome came after the kill.
    fn add(&mut self, end: TrialEnd) -> Option<f64> {
        let kind = end.record.outcome.as_str();
        match kind {
            "recovered" => self.recovered += 1,
            "error" => {
                self.typed_errors += 1;
                self.errors.push(end.error);
            }
            "wrong" => self.wrong_results += 1,
            _ => self.hangs += 1,
        }
        let after = match (end.kill_at, end.outcome_at) {
            (Some(k), Some(w)) if w >= k => Some(w - k),
            // The result came first (or the job ended before the kill).
            _ if kind == "recovered" => {
                self.completed_before_kill += 1;
                None
            }
            _ => None,
        };
        self.per_trial.push(end.record);
        after
    }
}

/// Trial `trial` of `mode`: one job whose `--kill-rank` is SIGKILLed at a
/// random instant in `[0, t]` after it announced its contribution.
fn run_trial(
    args: &FaultArgs,
    mode: &str,
    dir: &Path,
    trial: u32,
    t: f64,
    rng: &mut Rng,
) -> TrialEnd {
    let tdir = dir.join(format!("trial-{trial}"));
    let _ = std::fs::create_dir_all(&tdir);
    let hooks = format!("{}:joined:fault:{}", args.kill_rank, tdir.display());
    let launch = job(args, mode, &tdir, None, Some(hooks));
    let runner = std::thread::spawn(move || launcher::run(&launch));
    let delay = t * rng.unit();
    let kill_at = trial_kill(&tdir, args.kill_rank, delay, || runner.is_finished());
    let _ = runner.join();
    let outcome = std::fs::read_to_string(tdir.join("outcome")).unwrap_or_default();
    let mut words = outcome.split_whitespace();
    let (kind, when) = (
        words.next().unwrap_or("hang"),
        words.next().and_then(|w| w.parse::<f64>().ok()),
    );
    let log = (kind != "recovered")
        .then(|| keep_log(&tdir, mode, trial))
        .flatten();
    let end = TrialEnd {
        record: TrialRecord {
            kill_delay_s: delay,
            outcome: kind.to_string(),
            log,
        },
        error: words.collect::<Vec<_>>().join(" "),
        kill_at,
        outcome_at: when,
    };
    let _ = std::fs::remove_dir_all(&tdir);
    end
}

/// Prints one mode's figures.
fn print_report(r: &FaultReport) {
    println!(
        "durability {:>5}: {} trials of {} on {} ranks (t = {:.1} ms): {} recovered ({} had completed before the kill), \
         {} typed errors, {} wrong results, {} hangs; median kill → result {:.1} ms",
        r.durability,
        r.trials_run(),
        human(r.size as f64),
        r.np,
        r.t_mean_s * 1e3,
        r.recovered,
        r.completed_before_kill,
        r.typed_errors,
        r.wrong_results,
        r.hangs,
        r.median_kill_to_result_s * 1e3
    );
}

/// Keeps the ranks' output of a trial that was not recovered, for a look
/// at what happened: `<temp>/taskfold-faults-<pid>-kept/<mode>-trial-<n>.log`
/// (the trials' directories are removed). Says where.
fn keep_log(tdir: &Path, mode: &str, trial: u32) -> Option<PathBuf> {
    let kept = std::env::temp_dir().join(format!("taskfold-faults-{}-kept", std::process::id()));
    let to = kept.join(format!("{mode}-trial-{trial}.log"));
    let copied =
        std::fs::create_dir_all(&kept).and_then(|()| std::fs::copy(tdir.join("ranks.log"), &to));
    match copied {
        Ok(_) => {
            eprintln!(
                "bench faults: {mode}: trial {trial} was not recovered; its ranks' output: {}",
                to.display()
            );
            Some(to)
        }
        Err(e) => {
            eprintln!("bench faults: {mode}: trial {trial}: cannot keep its ranks' output: {e}");
            None
        }
    }
}

impl FaultReport {
    fn trials_run(&self) -> u32 {
        self.recovered + self.typed_errors + self.wrong_results + self.hangs
    }
}

/// Waits for the rank to announce its contribution, waits `delay` seconds,
/// SIGKILLs it; returns the wall-clock instant of the kill.
fn trial_kill(dir: &Path, rank: u32, delay: f64, ended: impl Fn() -> bool) -> Option<f64> {
    let marker = dir.join(format!("held-{rank}-joined"));
    let pid_file = dir.join(format!("rank-{rank}.pid"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(marker.exists() && pid_file.exists()) {
        if Instant::now() > deadline || ended() {
            return None; // the job never got there (it failed to start, or ended)
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .ok()?
        .trim()
        .parse()
        .ok()?;
    std::thread::sleep(Duration::from_secs_f64(delay.max(0.0)));
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        // The job may already be over: nothing to kill then.
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
    Some(now_s())
}

fn value(rank: u32, i: usize) -> f32 {
    ((i % 1021) as u32 + rank * 3) as f32
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
    let timeout = Duration::from_secs(args.timeout);
    if let Some(reps) = args.calibrate {
        let mut times = Vec::new();
        for rep in 0..reps {
            let v = Sum(data.clone());
            let _ = rt.barrier();
            let t = Instant::now();
            let _ = rt
                .reduce(v, Reduce::root(args.root).id(format!("cal-{rep}")))
                .map(|mut f| f.wait_timeout(timeout));
            times.push(t.elapsed().as_secs_f64());
        }
        let maxed = rt
            .reduce(taskfold::Max(times), Reduce::root(0).id("cal-times"))
            .and_then(|f| f.get());
        if let Ok(Some(taskfold::Max(t))) = maxed {
            let mean = t.iter().sum::<f64>() / t.len().max(1) as f64;
            let _ = std::fs::write(args.dir.join("calibration"), mean.to_string());
        }
        let _ = rt.shutdown();
        return ExitCode::SUCCESS;
    }
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
    let res = rt
        .reduce(Sum(data), Reduce::root(args.root).id("fault"))
        .map(|mut f| f.wait_timeout(timeout));
    if rank == args.root {
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
            Ok(Err(taskfold::ReduceError::Timeout(_))) => format!("hang {}", now_s()),
            Ok(Err(e)) | Err(e) => format!("error {} {e}", now_s()),
            Ok(Ok(None)) => format!("wrong {}", now_s()),
        };
        let _ = std::fs::write(args.dir.join("outcome"), outcome);
    }
    let _ = rt.shutdown();
    ExitCode::SUCCESS
}
