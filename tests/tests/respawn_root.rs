//! A replaced root gets its results back (the book's chapter Surviving
//! failures of the application, A replaced root), with real processes
//! under `taskfold run --respawn`: the root of every reduction, rank 1, is
//! SIGKILLed at an instant drawn over the whole run, with the default
//! durability and local restart; its replacement redoes its reductions
//! (from the first, or from its newest checkpoint) and checks every result
//! exactly, those that had completed under its dead process included.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use taskfold_tests::{drawn_instant, signal, taskfold_bin, text, wait_bounded, Signal};

/// Reductions per rank, and the pause between two: the run's length.
const REDUCTIONS: u32 = 80;
const PACE_MS: u64 = 25;
/// The root of every reduction, and the victim.
const ROOT: u32 = 1;

fn tf_respawn() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tf_respawn"))
}

/// A job of 4 ranks of `tf_respawn`, root `ROOT`, `respawn` replacements
/// allowed; `every`: checkpoint every this many reductions (0: never).
fn job(pids: &Path, ckpt: &Path, every: u32, respawn: u32) -> Command {
    let mut cmd = Command::new(taskfold_bin());
    let (n, pace) = (REDUCTIONS.to_string(), PACE_MS.to_string());
    let respawn = respawn.to_string();
    cmd.args([
        "run",
        "-n",
        "4",
        "--respawn",
        &respawn,
        "--timeout",
        "240s",
        "--",
    ])
    .arg(tf_respawn())
    .args(["--reductions", &n, "--pace-ms", &pace, "--pid-dir"])
    .arg(pids)
    .args(["--root", &ROOT.to_string()])
    .args(["--checkpoint-every", &every.to_string()])
    .env("TASKFOLD_CHECKPOINT_DIR", ckpt)
    .env("TASKFOLD_FAILURE_TIMEOUT_MS", "2000")
    .env_remove("TASKFOLD_DURABILITY")
    .env_remove("TASKFOLD_RESTART")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    cmd
}

/// The pid in `rank-R.pid`, within `limit`.
fn pid_of(dir: &Path, rank: u32, limit: Duration) -> Option<i32> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let read = std::fs::read_to_string(dir.join(format!("rank-{rank}.pid")));
        if let Some(pid) = read.ok().and_then(|s| s.trim().parse().ok()) {
            return Some(pid);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// Runs `cmd`, SIGKILLs `victims` together `at` after they started; its
/// output and whether every kill landed while its victim ran.
fn run_with_kill(cmd: Command, pids: &Path, victims: &[u32], at: Duration) -> (Output, bool) {
    let kills: Vec<(u32, Duration)> = victims
        .iter()
        .enumerate()
        .map(|(i, &v)| (v, if i == 0 { at } else { Duration::ZERO }))
        .collect();
    run_with_kills(cmd, pids, &kills)
}

/// Runs `cmd` and SIGKILLs each victim of `kills` after its pause (from
/// the start, then from the kill before); its output and whether every
/// kill landed while its victim ran.
fn run_with_kills(mut cmd: Command, pids: &Path, kills: &[(u32, Duration)]) -> (Output, bool) {
    let child = cmd.spawn().expect("taskfold run");
    let found: Vec<Option<i32>> = kills
        .iter()
        .map(|&(v, _)| pid_of(pids, v, Duration::from_secs(60)))
        .collect();
    let mut landed = true;
    for (&(_, pause), pid) in kills.iter().zip(found) {
        std::thread::sleep(pause);
        landed &= pid.is_some_and(|pid| signal(pid, Signal::KILL).is_ok());
    }
    (wait_bounded(child, Duration::from_secs(300)), landed)
}

/// The reductions the root found exact, per process of the root (the
/// launcher prefixes each line with its rank; the replacement's lines
/// follow its `lifecycle Restarted`).
fn exact_at_root(t: &str) -> (BTreeSet<u32>, BTreeSet<u32>) {
    let (mut dead, mut replacement) = (BTreeSet::new(), BTreeSet::new());
    let prefix = format!("[{ROOT}] ");
    let mut restarted = false;
    for line in t.lines().filter_map(|l| l.strip_prefix(&prefix)) {
        if line.starts_with("lifecycle Restarted") {
            restarted = true;
        }
        if let Some(i) = line.strip_prefix("ok ").and_then(|i| i.parse().ok()) {
            match restarted {
                false => dead.insert(i),
                true => replacement.insert(i),
            };
        }
    }
    (dead, replacement)
}

#[test]
fn a_root_killed_at_any_instant_gets_back_every_result_it_redoes() {
    let (mut landed, mut redone_kept) = (0, 0usize);
    for trial in 0..8u64 {
        if landed == 3 {
            break;
        }
        let dir = tempfile::tempdir().unwrap();
        let (pids, ckpt) = (dir.path().join("pids"), dir.path().join("ckpt"));
        std::fs::create_dir(&pids).unwrap();
        // Without checkpoints the replacement redoes every reduction (every
        // completed one from its kept result); with them, from its newest.
        let every = [0, 10][trial as usize % 2];
        let at = drawn_instant(trial + 300, Duration::from_millis(PACE_MS) * REDUCTIONS);
        let (out, ok) = run_with_kill(job(&pids, &ckpt, every, 1), &pids, &[ROOT], at);
        let t = text(&out);
        if !ok || !t.contains("started again (incarnation") {
            eprintln!("trial {trial}: the kill at {at:?} did not land:\n{t}");
            continue;
        }
        landed += 1;
        assert!(out.status.success(), "exit {:?}:\n{t}", out.status);
        assert!(!t.contains("WRONG") && !t.contains("unexpected "), "{t}");
        assert!(
            t.contains(&format!(
                "[{ROOT}] lifecycle Restarted {{ incarnation: 1 }}"
            )),
            "{t}"
        );
        // The replacement redid from where it resumed, every result exact.
        let resumed: u32 = t
            .lines()
            .find_map(|l| l.strip_prefix(&format!("[{ROOT}] resumed at ")))
            .map_or(0, |r| r.split(' ').next().unwrap().parse().unwrap());
        let tally = format!(
            "[{ROOT}] rank {ROOT}: {} ok, 0 lost, 0 wrong, 0 unexpected",
            REDUCTIONS - resumed
        );
        assert!(t.contains(&tally), "{tally}:\n{t}");
        // Every reduction was found exact at the root, by one process or
        // the other; those both did completed under the dead one and came
        // back from their kept copies.
        let (dead, replacement) = exact_at_root(&t);
        let all: BTreeSet<u32> = dead.union(&replacement).copied().collect();
        assert_eq!(all, (0..REDUCTIONS).collect(), "{t}");
        redone_kept += dead.intersection(&replacement).count();
    }
    assert_eq!(landed, 3, "three kills landed while the root ran");
    assert!(
        redone_kept > 0,
        "some redone reductions had completed under the dead root"
    );
}

/// The root and the buddy that keeps its results, killed together. The
/// job may replace two ranks, so each result got a second copy at once,
/// made by the buddy on its own buddy (`Config::second_result_copies`):
/// the root's replacement gets every result that had completed under
/// its dead process back from it, exact, and never a wrong result.
/// (With one copy, as with one replacement allowed, those replays end in
/// `ResultLost`: `taskfold_core::results` and the master's tests.)
#[test]
fn a_root_killed_with_its_results_holder_gets_every_result_from_the_second_copy() {
    let dir = tempfile::tempdir().unwrap();
    let (pids, ckpt) = (dir.path().join("pids"), dir.path().join("ckpt"));
    std::fs::create_dir(&pids).unwrap();
    // Rank 2 is the root's buddy (the next rank, all on one node).
    let at = Duration::from_millis(PACE_MS) * (REDUCTIONS / 2);
    let (out, ok) = run_with_kill(job(&pids, &ckpt, 0, 2), &pids, &[ROOT, 2], at);
    let t = text(&out);
    assert!(ok, "both kills landed:\n{t}");
    assert!(out.status.success(), "exit {:?}:\n{t}", out.status);
    assert!(!t.contains("WRONG") && !t.contains("unexpected "), "{t}");
    let (dead, replacement) = exact_at_root(&t);
    assert_eq!(replacement, (0..REDUCTIONS).collect(), "{t}");
    assert!(!dead.is_empty(), "results completed under the dead root");
}

/// The buddy that keeps the root's results dies first: the live root
/// copies them again to its next buddy, so that its own death later costs
/// nothing — its replacement gets every result back, exact.
#[test]
fn a_root_killed_after_its_results_holder_gets_every_result_back() {
    let dir = tempfile::tempdir().unwrap();
    let (pids, ckpt) = (dir.path().join("pids"), dir.path().join("ckpt"));
    std::fs::create_dir(&pids).unwrap();
    let step = Duration::from_millis(PACE_MS);
    let kills = [
        (2, step * (REDUCTIONS / 4)),
        (ROOT, step * (REDUCTIONS / 4)),
    ];
    let mut cmd = job(&pids, &ckpt, 0, 2);
    cmd.env("RUST_LOG", "warn,taskfold::worker::results=info");
    let (out, ok) = run_with_kills(cmd, &pids, &kills);
    let t = text(&out);
    assert!(
        ok && t.contains("started again (incarnation"),
        "both kills landed:\n{t}"
    );
    assert!(out.status.success(), "exit {:?}:\n{t}", out.status);
    assert!(!t.contains("WRONG") && !t.contains("unexpected "), "{t}");
    assert!(t.contains("copied again to a new buddy"), "{t}");
    let (dead, replacement) = exact_at_root(&t);
    assert_eq!(replacement, (0..REDUCTIONS).collect(), "{t}");
    assert!(!dead.is_empty(), "results completed under the dead root");
}
