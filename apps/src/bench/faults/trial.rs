//! One job of the experiment: a calibration, or a trial that SIGKILLs its
//! victim at a chosen delay after the victim's `reduce` call.

use super::rank::now_s;
use super::report::{Outcome, Phase, TrialEnd};
use super::{FaultArgs, Plan};
use crate::launcher::{self, Launch};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A small deterministic generator for the kill instants (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    /// A uniform draw in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The job of `plan` in `mode`, its ranks' files in `dir`.
pub fn job(
    args: &FaultArgs,
    plan: &Plan,
    mode: &str,
    dir: &Path,
    calibrate: Option<u32>,
) -> Launch {
    let exe = std::env::current_exe().unwrap_or_else(|_| "taskfold".into());
    let mut a: Vec<std::ffi::OsString> = vec![
        "bench-fault-rank".into(),
        "--size".into(),
        args.size.to_string().into(),
        "--root".into(),
        plan.root.to_string().into(),
        "--dir".into(),
        dir.as_os_str().into(),
        "--timeout".into(),
        args.timeout.as_secs().max(1).to_string().into(),
        "--warmup".into(),
        args.warmup.to_string().into(),
    ];
    if let Some(n) = calibrate {
        a.extend(["--calibrate".into(), n.to_string().into()]);
    }
    let mut env = vec![
        ("TASKFOLD_DURABILITY".to_string(), mode.to_string()),
        ("TASKFOLD_STANDBY".to_string(), args.standby.clone()),
    ];
    if std::env::var_os("RUST_LOG").is_none() {
        // Every trial kills a rank: the survivors' warnings are expected,
        // and go to the trial's log, kept if it was not recovered.
        env.push(("RUST_LOG".into(), "taskfold=info,warn".into()));
    }
    Launch {
        ranks: args.np,
        program: exe.into_os_string(),
        args: a,
        timeout: Some(args.timeout + Duration::from_secs(30)),
        env,
        log: Some(dir.join("ranks.log")),
        respawn: 0,
    }
}

/// Trial `trial`: one job whose victim is SIGKILLed `delay` seconds after
/// its `reduce` call; the outcome is read at the plan's observer.
pub fn run_trial(
    args: &FaultArgs,
    plan: &Plan,
    mode: &str,
    dir: &Path,
    trial: u32,
    delay: f64,
) -> TrialEnd {
    let tdir = dir.join(format!("trial-{trial}"));
    let _ = std::fs::create_dir_all(&tdir);
    let launch = job(args, plan, mode, &tdir, None);
    let nodes = super::node_spec(args);
    let runner = std::thread::spawn(move || launcher::run_on(&launch, nodes.as_ref()));
    let kill = trial_kill(&tdir, plan, delay, || runner.is_finished());
    let _ = runner.join();
    let (outcome, outcome_at, error) = read_outcome(&tdir, plan);
    let log = (outcome != Outcome::Recovered)
        .then(|| keep_log(&tdir, mode, plan, trial))
        .flatten();
    let _ = std::fs::remove_dir_all(&tdir);
    TrialEnd {
        phase: kill.map_or(Phase::NotKilled, |k| k.phase),
        outcome,
        kill_delay_s: kill.map_or(0.0, |k| k.delay),
        error,
        kill_at: kill.map(|k| k.at),
        outcome_at,
        log,
    }
}

/// The outcome at the observer, when it came, and its typed error if any.
/// With the root the victim, the observer's `completed` (the runtime told
/// it the root held the result) counts as recovered unless the root wrote
/// it got a wrong one.
fn read_outcome(tdir: &Path, plan: &Plan) -> (Outcome, Option<f64>, String) {
    let read = |rank: u32| std::fs::read_to_string(tdir.join(format!("outcome-{rank}")));
    let text = read(plan.observer).unwrap_or_default();
    let mut words = text.split_whitespace();
    let kind = words.next().unwrap_or("hang");
    let at = words.next().and_then(|w| w.parse::<f64>().ok());
    let error = words.collect::<Vec<_>>().join(" ");
    let outcome = match kind {
        "recovered" => Outcome::Recovered,
        "wrong" => Outcome::Wrong,
        "error" => Outcome::Error,
        "completed" if plan.observer != plan.root => {
            let root = read(plan.root).unwrap_or_default();
            if root.starts_with("wrong") {
                Outcome::Wrong
            } else {
                Outcome::Recovered
            }
        }
        "completed" => Outcome::Wrong,
        _ => Outcome::Hang,
    };
    (outcome, at, error)
}

/// The kill of a trial.
#[derive(Clone, Copy)]
struct Kill {
    /// Wall-clock second of the SIGKILL.
    at: f64,
    /// Seconds from the victim's `reduce` call to the SIGKILL.
    delay: f64,
    /// Whether every victim's join had gone out (checked just before the
    /// signal: a join that leaves in between counts as before).
    phase: Phase,
}

/// Waits for the victim's `reduce` call, then until `delay` seconds after
/// it, and SIGKILLs every victim of `plan`.
fn trial_kill(dir: &Path, plan: &Plan, delay: f64, ended: impl Fn() -> bool) -> Option<Kill> {
    let rank = plan.victim;
    let called = dir.join(format!("called-{rank}"));
    let pid_file = |r: u32| dir.join(format!("rank-{r}.pid"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(called.exists() && plan.victims.iter().all(|&r| pid_file(r).exists())) {
        if Instant::now() > deadline || ended() {
            return None; // the job never got there (it failed to start, or ended)
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let pids: Vec<i32> = plan
        .victims
        .iter()
        .filter_map(|&r| {
            std::fs::read_to_string(pid_file(r))
                .ok()?
                .trim()
                .parse()
                .ok()
        })
        .collect();
    let called_at: f64 = std::fs::read_to_string(&called).ok()?.trim().parse().ok()?;
    let wait = called_at + delay - now_s();
    if wait > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(wait));
    }
    let safe = plan
        .victims
        .iter()
        .all(|v| dir.join(format!("safe-{v}")).exists());
    for pid in pids.into_iter().filter_map(rustix::process::Pid::from_raw) {
        // The job may already be over: nothing to kill then.
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
    let at = now_s();
    Some(Kill {
        at,
        delay: at - called_at,
        phase: if safe || ended() {
            Phase::AfterSafe
        } else {
            Phase::BeforeSafe
        },
    })
}

/// Keeps the ranks' output of a trial that was not recovered, for a look
/// at what happened:
/// `<temp>/taskfold-faults-<pid>-kept/<mode>-<victim>-trial-<n>.log` (the
/// trials' directories are removed). Says where.
fn keep_log(tdir: &Path, mode: &str, plan: &Plan, trial: u32) -> Option<PathBuf> {
    let kept = std::env::temp_dir().join(format!("taskfold-faults-{}-kept", std::process::id()));
    let name = format!("{mode}-{}", plan.name);
    let to = kept.join(format!("{name}-trial-{trial}.log"));
    let copied =
        std::fs::create_dir_all(&kept).and_then(|()| std::fs::copy(tdir.join("ranks.log"), &to));
    match copied {
        Ok(_) => {
            eprintln!(
                "bench faults: {name}: trial {trial} was not recovered; its ranks' output: {}",
                to.display()
            );
            Some(to)
        }
        Err(e) => {
            eprintln!("bench faults: {name}: trial {trial}: cannot keep its ranks' output: {e}");
            None
        }
    }
}
