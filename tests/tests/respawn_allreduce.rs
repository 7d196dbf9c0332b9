//! Allreduce steps under `taskfold run --respawn` (the book's chapter
//! Surviving failures of the application, Allreduce and broadcast), with
//! real processes: a member, rank 2, is SIGKILLed at an instant drawn over
//! the whole run and replaced.
//!
//! - Local restart: the replacement redoes every step from the first (no
//!   checkpoints). A step whose value every live member held before the
//!   replacement asked ends there with `ResultLost` (the holders let the
//!   value go), never a hang and never a wrong value; every other step is
//!   exact on every rank, the replacement's included.
//! - Global restart: every rank comes back to its entry point and redoes
//!   its steps with contributions of a new generation; every step of the
//!   last run is exact on every rank (a redone allreduce is a spread of
//!   its own, never the finished one of the same id).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use taskfold_tests::{drawn_instant, signal, taskfold_bin, text, wait_bounded, Signal};

/// Steps per rank, and the pause between two: the run's length.
const STEPS: u32 = 60;
const PACE_MS: u64 = 25;
/// The root of every step, and the victim (neither the root nor the
/// master's rank).
const ROOT: u32 = 1;
const VICTIM: u32 = 2;

fn tf_respawn() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tf_respawn"))
}

/// A job of 4 ranks of `tf_respawn --allreduce`, one replacement allowed.
fn job(pids: &Path, ckpt: &Path, restart: &str) -> Command {
    let mut cmd = Command::new(taskfold_bin());
    let (n, pace) = (STEPS.to_string(), PACE_MS.to_string());
    cmd.args([
        "run",
        "-n",
        "4",
        "--respawn",
        "1",
        "--timeout",
        "240s",
        "--",
    ])
    .arg(tf_respawn())
    .args(["--allreduce", "--len", "1024"])
    .args(["--reductions", &n, "--pace-ms", &pace, "--pid-dir"])
    .arg(pids)
    .args(["--root", &ROOT.to_string()])
    .env("TASKFOLD_CHECKPOINT_DIR", ckpt)
    .env("TASKFOLD_FAILURE_TIMEOUT_MS", "2000")
    .env("TASKFOLD_RESTART", restart)
    .env_remove("TASKFOLD_DURABILITY")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    // Under global restart every rank's contributions change with each
    // rollback: a result mixing two generations is wrong.
    if restart == "global" {
        cmd.arg("--by-generation");
    }
    cmd
}

/// Runs `cmd` and SIGKILLs the victim `at` after it started; the output
/// and whether the kill landed while it ran.
fn run_killed(mut cmd: Command, pids: &Path, at: Duration) -> (Output, bool) {
    let child = cmd.spawn().expect("taskfold run");
    let file = pids.join(format!("rank-{VICTIM}.pid"));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut pid = None;
    while pid.is_none() && Instant::now() < deadline {
        pid = std::fs::read_to_string(&file)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok());
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(at);
    let landed = pid.is_some_and(|p| signal(p, Signal::KILL).is_ok());
    (wait_bounded(child, Duration::from_secs(300)), landed)
}

/// The steps the replacement of the victim found exact, and those that
/// ended there with `ResultLost` (its lines follow `lifecycle Restarted`).
fn replacement_steps(t: &str) -> (BTreeSet<u32>, BTreeSet<u32>) {
    let (mut ok, mut lost) = (BTreeSet::new(), BTreeSet::new());
    let prefix = format!("[{VICTIM}] ");
    let mut restarted = false;
    for line in t.lines().filter_map(|l| l.strip_prefix(&prefix)) {
        restarted |= line.starts_with("lifecycle Restarted");
        let step = |p: &str| line.strip_prefix(p).and_then(|i| i.parse::<u32>().ok());
        match (restarted, step("ok "), step("result-lost ")) {
            (true, Some(i), _) => ok.insert(i),
            (true, _, Some(i)) => lost.insert(i),
            _ => false,
        };
    }
    (ok, lost)
}

/// Runs trials of `restart` until `want` kills landed (at most 8 trials);
/// hands each landed trial's output to `check`.
fn landed_trials(restart: &str, want: u32, mut check: impl FnMut(&str)) {
    let mut landed = 0;
    for trial in 0..8u64 {
        if landed == want {
            break;
        }
        let dir = tempfile::tempdir().unwrap();
        let (pids, ckpt) = (dir.path().join("pids"), dir.path().join("ckpt"));
        std::fs::create_dir(&pids).unwrap();
        let at = drawn_instant(trial + 700, Duration::from_millis(PACE_MS) * STEPS);
        let (out, ok) = run_killed(job(&pids, &ckpt, restart), &pids, at);
        let t = text(&out);
        if !ok || !t.contains("started again (incarnation") {
            eprintln!("{restart}, trial {trial}: the kill at {at:?} did not land:\n{t}");
            continue;
        }
        landed += 1;
        assert!(
            out.status.success(),
            "{restart}: exit {:?}:\n{t}",
            out.status
        );
        assert!(!t.contains("WRONG") && !t.contains("unexpected "), "{t}");
        for r in [0, 1, 3] {
            let tally = format!("[{r}] rank {r}: {STEPS} ok, 0 lost, 0 wrong, 0 unexpected");
            assert!(t.contains(&tally), "{restart}: {tally}:\n{t}");
        }
        check(&t);
    }
    assert_eq!(landed, want, "{restart}: kills landed while the victim ran");
}

#[test]
fn a_replaced_member_redoing_finished_allreduces_gets_result_lost_never_a_hang() {
    let mut lost_seen = 0;
    landed_trials("local", 3, |t| {
        let (ok, lost) = replacement_steps(t);
        // Every step, redone from the first: exact, or its value gone.
        assert!(ok.is_disjoint(&lost), "{t}");
        let all: BTreeSet<u32> = ok.union(&lost).copied().collect();
        assert_eq!(all, (0..STEPS).collect(), "{t}");
        // The last step cannot have finished before the kill: paced at
        // PACE_MS, the dead process had not joined it at any instant drawn
        // (all within the paced span, the window ahead of it), and its
        // reduction waited for the replacement's join.
        assert!(ok.contains(&(STEPS - 1)), "{t}");
        lost_seen += lost.len();
    });
    assert!(
        lost_seen > 0,
        "some redone steps had finished before the kill"
    );
}

#[test]
fn under_global_restart_every_rank_redoes_its_allreduces_exactly() {
    landed_trials("global", 2, |t| {
        let tally = format!("[{VICTIM}] rank {VICTIM}: {STEPS} ok, 0 lost, 0 wrong, 0 unexpected");
        assert!(t.contains(&tally), "{tally}:\n{t}");
        for r in [0, 1, 3] {
            let back = format!("[{r}] lifecycle-end Reinited");
            assert!(t.contains(&back), "rank {r} rolled back:\n{t}");
        }
    });
}
