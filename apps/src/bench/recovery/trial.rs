//! One trial of `bench recovery`: launch psdm with `taskfold run`, SIGKILL
//! a rank at the drawn instant, recover as the mode says, and read what
//! the job printed.

use super::report::{Report, Trial};
use super::{Mode, RecoveryArgs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use taskfold_core::settings::values::format_duration;

/// A small deterministic generator of the victims and kill instants
/// (xorshift64*).
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

/// The `psdm` binary beside this program (`target/release/psdm` next to
/// `target/release/taskfold`).
pub fn psdm_beside_us() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|_| "taskfold".into());
    exe.with_file_name(format!("psdm{}", std::env::consts::EXE_SUFFIX))
}

/// Milliseconds since the Unix epoch (psdm stamps its lines with it).
pub fn unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1e3)
        .unwrap_or(0.0)
}

/// The experiment: its options, the psdm binary, a scratch directory.
pub struct Bench {
    args: RecoveryArgs,
    psdm: PathBuf,
    work: PathBuf,
}

/// A kill to make: when (seconds after the launch) and whom.
#[derive(Clone, Copy, Debug)]
pub struct Kill {
    /// Seconds after the first launch.
    pub at: f64,
    /// The rank.
    pub victim: u32,
}

impl Bench {
    /// The experiment of `args`, with `psdm`.
    pub fn new(args: &RecoveryArgs, psdm: PathBuf) -> Bench {
        let work = args.out.join(format!("work-{}", std::process::id()));
        Bench {
            args: args.clone(),
            psdm,
            work,
        }
    }

    /// Every mode's trials, `none` first.
    pub fn run_all(&self) -> Result<Report, String> {
        let mut report = Report::new(self.args.np, self.args.psdm_args.clone());
        let mut rng = Rng(self.args.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let none_trials = if self.args.modes.contains(&Mode::None) {
            self.args.trials
        } else {
            1
        };
        for n in 0..none_trials {
            let t = self.trial(Mode::None, n, None);
            eprintln!(
                "bench recovery: none {}/{none_trials}: {}",
                n + 1,
                t.short()
            );
            report.push(t);
        }
        report.set_reference()?;
        let window = report.failure_free_s;
        // One drawn kill per trial number, the same for every mode, and the
        // modes in turn: their medians compare the same failures under the
        // same load.
        let kills: Vec<Kill> = (0..self.args.trials)
            .map(|_| Kill {
                at: window * rng.unit(),
                victim: self.victim(&mut rng),
            })
            .collect();
        for (n, kill) in (0..self.args.trials).zip(kills) {
            for &mode in self.args.modes.iter().filter(|&&m| m != Mode::None) {
                let t = self.trial(mode, n, Some(kill));
                eprintln!(
                    "bench recovery: {} {}/{}: {}",
                    mode.name(),
                    n + 1,
                    self.args.trials,
                    t.short()
                );
                report.push(t);
            }
        }
        report.finish();
        let _ = std::fs::remove_dir_all(&self.work);
        Ok(report)
    }

    /// A random rank other than psdm's root (`--root`, 0 by default).
    fn victim(&self, rng: &mut Rng) -> u32 {
        let root = root_of(&self.args.psdm_args);
        let others: Vec<u32> = (0..self.args.np).filter(|&r| r != root).collect();
        others[((rng.unit() * others.len() as f64) as usize).min(others.len() - 1)]
    }

    /// One trial of `mode`, killing as `kill` says.
    fn trial(&self, mode: Mode, n: u32, kill: Option<Kill>) -> Trial {
        let dir = self.work.join(format!("{}-{n}", mode.name()));
        let mut t = Trial::new(mode, n, kill);
        if let Err(e) = make_private_dir(&dir.join("ckpt")) {
            t.error = Some(format!("{}: {e}", dir.display()));
            return t;
        }
        t.first_launch_unix_ms = unix_ms();
        let began = Instant::now();
        let mut logs = vec![dir.join("launch-1.log")];
        let mut ended = None;
        let result = self.launch(mode, &dir, &logs[0]).and_then(|child| {
            t.kill_unix_ms = kill.and_then(|k| self.kill_at(&child, k, began));
            if t.kill_unix_ms.is_none() || mode != Mode::Restart {
                return self.wait(child);
            }
            // The job torn down: its ranks gone, it is launched again at
            // once (the old launcher ends on its own meanwhile).
            tear_down(child.id());
            logs.push(dir.join("launch-2.log"));
            let again = self.launch(mode, &dir, &logs[1]).and_then(|c| self.wait(c));
            ended = Some(Instant::now());
            let _ = self.wait(child);
            again
        });
        let ended = ended.unwrap_or_else(Instant::now);
        t.time_to_solution_s = ended.duration_since(began).as_secs_f64();
        t.launches = logs.len() as u32;
        match result {
            Ok(ok) => t.exit_ok = ok,
            Err(e) => t.error = Some(e),
        }
        t.read_logs(&logs);
        if !t.exit_ok || t.checksum.is_none() {
            t.keep_log(&logs, &self.args.out);
        }
        let _ = std::fs::remove_dir_all(&dir);
        t
    }

    /// Starts `taskfold run` for `mode`, its output into `log`.
    fn launch(&self, mode: Mode, dir: &Path, log: &Path) -> Result<Child, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let file = std::fs::File::create(log).map_err(|e| e.to_string())?;
        let err = file.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(exe);
        cmd.args(["run", "-n", &self.args.np.to_string()])
            .args(["--timeout", &format_duration(self.args.timeout)]);
        if mode.respawns() {
            cmd.args(["--respawn", "1"]);
            cmd.env("TASKFOLD_RESTART", mode.name());
        }
        cmd.arg("--")
            .arg(&self.psdm)
            .args(&self.args.psdm_args)
            // The `@psdm-checkpoint` and `@psdm-resumed` lines the report
            // reads (psdm is quiet without it).
            .arg("--markers")
            .arg("--out")
            .arg(dir.join("image.png"))
            .env("TASKFOLD_CHECKPOINT_DIR", dir.join("ckpt"))
            .env(
                "TASKFOLD_CHECKPOINT_JOB",
                format!("recovery-{}", dir.display()),
            )
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err);
        cmd.spawn()
            .map_err(|e| format!("cannot start taskfold run: {e}"))
    }

    /// Waits for a launch to end (bounded by its timeout and a margin);
    /// whether it exited 0.
    fn wait(&self, mut child: Child) -> Result<bool, String> {
        let limit = self.args.timeout + Duration::from_secs(30);
        let began = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Ok(status.success()),
                Ok(None) if began.elapsed() > limit => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("taskfold run did not end within {limit:?}"));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// Sleeps until `kill.at` after `began`, then SIGKILLs the victim's
    /// process; the instant (Unix ms), or `None` if the job was over.
    fn kill_at(&self, child: &Child, kill: Kill, began: Instant) -> Option<f64> {
        let at = began + Duration::from_secs_f64(kill.at);
        let mut pid = None;
        while Instant::now() < at {
            if pid.is_none() {
                pid = rank_pid(child.id(), kill.victim);
            }
            std::thread::sleep(Duration::from_millis(2).min(at - Instant::now().min(at)));
        }
        // A victim not started yet at the instant is killed once it is
        // (at most 10 s later); a job already over has none.
        let deadline = Instant::now() + Duration::from_secs(10);
        while pid.is_none() && Instant::now() < deadline && !children(child.id()).is_empty() {
            pid = rank_pid(child.id(), kill.victim);
            std::thread::sleep(Duration::from_millis(1));
        }
        let p = rustix::process::Pid::from_raw(pid?)?;
        rustix::process::kill_process(p, rustix::process::Signal::KILL).ok()?;
        Some(unix_ms())
    }
}

/// `--root` among psdm's options, 0 if not given.
pub fn root_of(args: &[String]) -> u32 {
    args.iter()
        .position(|a| a == "--root")
        .and_then(|i| args.get(i + 1))
        .or_else(|| {
            args.iter()
                .find_map(|a| a.strip_prefix("--root=").map(|_| a))
        })
        .and_then(|v| v.trim_start_matches("--root=").parse().ok())
        .unwrap_or(0)
}

/// Makes `dir` (and its parents), the last one private (mode 0700), as
/// the checkpoint store wants its directories.
fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// SIGKILLs every rank of the launcher `launcher` and waits (at most 10 s)
/// until none is left: the job is torn down as a scheduler would.
fn tear_down(launcher: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = children(launcher);
        if left.is_empty() || Instant::now() > deadline {
            return;
        }
        for pid in left {
            if let Some(p) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The live child processes of `parent`.
fn children(parent: u32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // pid (comm) state ppid ...: the comm may hold spaces.
            let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
            let state = rest.next()?;
            let ppid: u32 = rest.next()?.parse().ok()?;
            (ppid == parent && state != "Z").then_some(pid)
        })
        .collect()
}

/// The process of `rank` among the children of `launcher` (found by the
/// `TASKFOLD_RANK` the launcher gave it).
fn rank_pid(launcher: u32, rank: u32) -> Option<i32> {
    let want = format!("TASKFOLD_RANK={rank}");
    children(launcher).into_iter().find(|pid| {
        std::fs::read(format!("/proc/{pid}/environ"))
            .map(|env| env.split(|&b| b == 0).any(|v| v == want.as_bytes()))
            .unwrap_or(false)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_among_psdm_options() {
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(root_of(&s(&[])), 0);
        assert_eq!(root_of(&s(&["--nx", "10", "--root", "2"])), 2);
        assert_eq!(root_of(&s(&["--root=3"])), 3);
    }
}
