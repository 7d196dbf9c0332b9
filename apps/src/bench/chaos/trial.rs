//! One trial of `bench chaos`: launch the job, strike its kills, read how
//! it ended.

use super::plan::{self, Plan, Rng};
use super::report::{Outcome, Report, TrialEnd};
use super::watch::{self, Job};
use super::{ChaosArgs, Collective, LaunchBy, Restart};
use crate::launcher::{self, Launch, NodeSpec};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use taskfold_benches::stats::median;

/// The experiment: its options, this program, a scratch directory.
pub struct Bench {
    args: ChaosArgs,
    exe: PathBuf,
    work: PathBuf,
    keep: PathBuf,
}

impl Bench {
    /// The experiment of `args`.
    pub fn new(args: &ChaosArgs) -> Result<Bench, String> {
        let exe = std::env::current_exe().map_err(|e| format!("this program: {e}"))?;
        let work = std::env::temp_dir().join(format!("taskfold-chaos-{}", std::process::id()));
        std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
        let keep = args
            .keep
            .clone()
            .unwrap_or_else(|| work.with_extension("kept"));
        if args.launcher == LaunchBy::Mpiexec && mpiexec().is_none() {
            return Err("MPICH's mpiexec is not installed (apt-get install mpich)".into());
        }
        Ok(Bench {
            args: args.clone(),
            exe,
            work,
            keep,
        })
    }

    /// The reference trials, then every campaign.
    pub fn run_all(&self) -> Report {
        let mut reference = Vec::new();
        for n in 0..self.args.reference {
            let end = self.trial(Restart::Local, None, Duration::from_secs(60), n);
            eprintln!(
                "bench chaos: failure-free {}/{}: {:.2} s, {:?}",
                n + 1,
                self.args.reference,
                end.seconds,
                end.outcome
            );
            reference.push(end);
        }
        let mut times: Vec<f64> = reference.iter().map(|t| t.seconds).collect();
        let t0 = Duration::from_secs_f64(median(&mut times).max(0.1));
        let mut report = Report::new(&self.args, t0.as_secs_f64(), reference);
        let mut rng = Rng::new(self.args.seed);
        for &k in &self.args.kills {
            for &restart in &self.args.restart {
                for n in 0..self.args.trials {
                    let plan = plan::draw(&self.args, restart, k, &mut rng);
                    let end = self.trial(restart, Some(&plan), t0, n);
                    eprintln!(
                        "bench chaos: {k} kill(s), {}: {}/{}: {:?} in {:.2} s, {:?}",
                        restart.name(),
                        n + 1,
                        self.args.trials,
                        end.outcome,
                        end.seconds,
                        end.struck
                            .iter()
                            .map(|s| s.whom.join("+"))
                            .collect::<Vec<_>>()
                    );
                    report.add(k, restart, end);
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.work);
        report
    }

    /// One trial under `restart` with `plan`'s kills (none: failure-free),
    /// the failure-free time to solution being `t0`.
    fn trial(&self, restart: Restart, plan: Option<&Plan>, t0: Duration, n: u32) -> TrialEnd {
        let dir = self.work.join(format!("trial-{}-{n}", restart.name()));
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(e) = std::fs::create_dir_all(&dir) {
            return TrialEnd::failed(format!("{}: {e}", dir.display()));
        }
        let kills = plan.map_or(0, |p| p.kills.len() as u64);
        let limit = t0 * 4 + Duration::from_secs(30 + 10 * kills);
        let spares = match (plan, self.args.with_spares()) {
            (Some(p), true) => p.spares(),
            _ => 0,
        };
        let launched = Instant::now();
        let running = self.launch(restart, plan, spares, &dir, limit);
        let over = || running.is_finished();
        let job = Job {
            dir: &dir,
            np: self.args.np,
            slots: self.args.np + spares,
            nodes: self.args.sim_nodes.unwrap_or(0),
            launched,
            reference: t0,
            over: &over,
        };
        let mut struck = Vec::new();
        let mut rng = Rng::new(self.args.seed ^ u64::from(n) << 20 ^ kills);
        let mut before = BTreeSet::new();
        for kill in plan.map(|p| p.kills.as_slice()).unwrap_or_default() {
            if let Some(s) = watch::strike(&job, kill, &before, &mut rng) {
                struck.push(s);
            }
            before = watch::look(&dir).names;
        }
        let verdict = running
            .join()
            .unwrap_or_else(|_| Err("the launcher panicked".into()));
        let seconds = launched.elapsed().as_secs_f64();
        let hung = launched.elapsed() >= limit;
        let ranks = match self.args.collective {
            Collective::Reduce => None,
            Collective::Allreduce => Some(self.args.np),
        };
        let outcome = judge(&dir, self.args.steps, ranks, verdict.as_ref().err(), hung);
        let lost = results(&dir)
            .lines()
            .filter(|l| l.starts_with("lost "))
            .count() as u32;
        let log = (outcome != Outcome::Exact)
            .then(|| {
                let name = format!(
                    "{}-{}k-{n}-{}.log",
                    restart.name(),
                    kills,
                    std::process::id()
                );
                watch::keep_log(&dir, &self.keep.join(name))
            })
            .flatten();
        let _ = std::fs::remove_dir_all(&dir);
        TrialEnd {
            plan: plan.cloned(),
            struck,
            outcome,
            lost,
            seconds,
            error: verdict.err(),
            log,
        }
    }

    /// Launches the job in a thread of its own, which returns the
    /// launcher's verdict (`Err` with why it failed).
    fn launch(
        &self,
        restart: Restart,
        plan: Option<&Plan>,
        spares: u32,
        dir: &Path,
        limit: Duration,
    ) -> std::thread::JoinHandle<Result<(), String>> {
        let a = &self.args;
        let mut rank_args: Vec<String> = vec![
            "bench-chaos-rank".into(),
            "--steps".into(),
            a.steps.to_string(),
            "--len".into(),
            a.len.to_string(),
            "--root".into(),
            a.root.to_string(),
            "--pace-ms".into(),
            a.pace_ms.to_string(),
            "--dir".into(),
        ];
        rank_args.push(dir.to_string_lossy().into_owned());
        if a.collective == Collective::Allreduce {
            rank_args.push("--allreduce".into());
        }
        let standby = match a.sim_nodes {
            Some(_) => "auto",
            None => "on",
        };
        let mut env: Vec<(String, String)> = vec![
            ("TASKFOLD_RESTART".into(), restart.name().into()),
            ("TASKFOLD_STANDBY".into(), standby.into()),
            (
                "TASKFOLD_FAILURE_TIMEOUT_MS".into(),
                a.failure_timeout_ms.to_string(),
            ),
            ("TASKFOLD_SPARES".into(), spares.to_string()),
        ];
        if std::env::var_os("RUST_LOG").is_none() {
            env.push(("RUST_LOG".into(), "taskfold=info,warn".into()));
        }
        let respawn = match (plan, a.with_spares()) {
            (Some(p), false) => p.deaths,
            _ => 0,
        };
        let slots = a.np + spares;
        match a.launcher {
            LaunchBy::Taskfold => {
                let launch = Launch {
                    ranks: slots,
                    program: self.exe.clone().into_os_string(),
                    args: rank_args.into_iter().map(Into::into).collect(),
                    timeout: Some(limit),
                    env,
                    log: Some(dir.join("ranks.log")),
                    respawn,
                };
                let nodes = a.sim_nodes.map(|nodes| NodeSpec {
                    nodes,
                    link_rate: None,
                });
                let exits_log = dir.join("exits");
                std::thread::spawn(move || {
                    let exits =
                        launcher::run_on(&launch, nodes.as_ref()).map_err(|e| e.to_string())?;
                    let text: String = exits
                        .iter()
                        .map(|e| format!("rank {}.{} {}\n", e.rank, e.incarnation, e.describe()))
                        .collect();
                    let _ = std::fs::write(&exits_log, text);
                    match launcher::Verdict::of(&exits) {
                        launcher::Verdict::Failed(why) => Err(why),
                        launcher::Verdict::TimedOut => Err("time limit reached".into()),
                        _ => Ok(()),
                    }
                })
            }
            LaunchBy::Mpiexec => {
                let cmd = self.mpiexec_job(slots, rank_args, env, dir);
                let log = dir.join("ranks.log");
                std::thread::spawn(move || run_mpiexec(cmd, &log, limit))
            }
        }
    }

    /// The `mpiexec` command of a job of `slots` processes.
    fn mpiexec_job(
        &self,
        slots: u32,
        rank_args: Vec<String>,
        env: Vec<(String, String)>,
        dir: &Path,
    ) -> Command {
        let mut cmd = Command::new(mpiexec().unwrap_or_else(|| "mpiexec".into()));
        cmd.args([
            "-n",
            &slots.to_string(),
            "-disable-auto-cleanup",
            "-prepend-rank",
        ])
        // Each rank under a guard: a rank killed by a signal is then an
        // exit code to hydra, which lets the others and the spares live.
        .arg(&self.exe)
        .args(["guard", "--"])
        .arg(&self.exe)
        .args(rank_args)
        .env("TASKFOLD_RENDEZVOUS", dir.join("master.addr"))
        .env("TASKFOLD_JOB", format!("chaos-{}", dir.display()))
        .env("TASKFOLD_CHECKPOINT_DIR", dir.join("checkpoints"))
        .env("TASKFOLD_REPLICA_DIR", dir.join("replicas"))
        .envs(env);
        if let Ok(key) = taskfold_transports::auth::fresh_key() {
            cmd.env("TASKFOLD_JOB_KEY", key.to_hex());
        }
        cmd
    }
}

/// MPICH's `mpiexec`, if installed.
fn mpiexec() -> Option<PathBuf> {
    ["mpiexec.hydra", "mpiexec.mpich"].iter().find_map(|name| {
        std::env::var_os("PATH")?
            .to_str()?
            .split(':')
            .map(|d| Path::new(d).join(name))
            .find(|p| p.exists())
    })
}

/// Runs an `mpiexec` job, its output into `log`, killed past `limit`.
/// Its exit status says little of the ranks (some are killed on
/// purpose): the ranks' markers are judged instead.
fn run_mpiexec(mut cmd: Command, log: &Path, limit: Duration) -> Result<(), String> {
    let out = std::fs::File::create(log).map_err(|e| e.to_string())?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let mut child = cmd
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("mpiexec: {e}"))?;
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return Ok(()),
            Ok(None) if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("time limit reached".into());
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// What the ranks appended to `ok`.
fn results(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("ok")).unwrap_or_default()
}

/// How a trial ended: from the root's results (with `ranks`, an
/// allreduce's: every rank's), the errors the ranks wrote, the launcher's
/// verdict and whether it ran out of time.
fn judge(
    dir: &Path,
    steps: u32,
    ranks: Option<u32>,
    failed: Option<&String>,
    hung: bool,
) -> Outcome {
    let ok = results(dir);
    if ok.lines().any(|l| l.starts_with("wrong")) {
        return Outcome::Wrong;
    }
    if hung {
        return Outcome::Hang;
    }
    let errors = std::fs::read_to_string(dir.join("errors")).unwrap_or_default();
    match (
        every_step(&ok, steps, ranks),
        errors.trim().is_empty(),
        failed,
    ) {
        (true, true, None) => Outcome::Exact,
        _ => Outcome::TypedError,
    }
}

/// Whether `ok` has every step: `ok I` lines of the root, or with `ranks`
/// an `ok I R` (or a replacement's `lost I R`) of every rank `R`.
fn every_step(ok: &str, steps: u32, ranks: Option<u32>) -> bool {
    let seen: BTreeSet<(u32, u32)> = ok
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let kept = matches!(w.next()?, "ok" | "lost");
            let step = w.next()?.parse().ok()?;
            let rank = w.next().map_or(Some(0), |r| r.parse().ok())?;
            kept.then_some((step, rank))
        })
        .collect();
    let ranks = ranks.unwrap_or(1);
    (0..steps).all(|i| (0..ranks).all(|r| seen.contains(&(i, r))))
}

#[cfg(test)]
mod tests {
    use super::every_step;

    #[test]
    fn every_step_of_every_rank_is_needed() {
        assert!(every_step("ok 0\nok 1\n", 2, None));
        assert!(!every_step("ok 0\n", 2, None));
        let all = "ok 0 0\nok 0 1\nlost 1 0\nok 1 1\n";
        assert!(every_step(all, 2, Some(2)));
        assert!(!every_step("ok 0 0\nok 0 1\nok 1 1\n", 2, Some(2)));
        assert!(!every_step("ok 0 0\nwrong 0 1\n", 1, Some(2)));
    }
}
