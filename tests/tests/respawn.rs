//! Respawned ranks (the book's chapter Surviving failures of the
//! application), with real processes under `taskfold run --respawn`: a
//! rank SIGKILLed at an instant drawn over the whole run is replaced, and
//! its replacement redoes its reductions (from the first, or from its
//! newest checkpoint); rank 0 checks every result exactly. Durability is
//! off, so no copy of a lost contribution exists: only the replacement's
//! join can complete a reduction that needed it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use taskfold_tests::{drawn_instant, signal, taskfold_bin, text, wait_bounded, Signal};

/// Reductions per rank, and the pause between two: the run's length.
const REDUCTIONS: u32 = 80;
const PACE_MS: u64 = 25;

fn tf_respawn() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tf_respawn"))
}

/// A job of 4 ranks of `tf_respawn` allowed `respawn` replacements.
fn job(respawn: u32, pids: &Path, extra: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(taskfold_bin());
    let respawn = respawn.to_string();
    let (n, pace) = (REDUCTIONS.to_string(), PACE_MS.to_string());
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
    .args(extra)
    .env("TASKFOLD_DURABILITY", "off")
    .env("TASKFOLD_FAILURE_TIMEOUT_MS", "2000")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// The pid in `rank-R.pid` once it is not `old`, within `limit`.
fn pid_of(dir: &Path, rank: u32, old: Option<i32>, limit: Duration) -> Option<i32> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let read = std::fs::read_to_string(dir.join(format!("rank-{rank}.pid")));
        if let Some(pid) = read.ok().and_then(|s| s.trim().parse().ok()) {
            if Some(pid) != old {
                return Some(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// Runs a job and SIGKILLs `victim` at each of `kills` (the next one once
/// a replacement runs); returns its output and whether every kill landed
/// while the victim ran.
fn run_with_kills(mut cmd: Command, dir: &Path, victim: u32, kills: &[Duration]) -> (Output, bool) {
    let child = cmd.spawn().expect("taskfold run");
    let mut old = None;
    let mut landed = true;
    for &at in kills {
        let Some(pid) = pid_of(dir, victim, old, Duration::from_secs(60)) else {
            landed = false;
            break;
        };
        std::thread::sleep(at);
        landed &= signal(pid, Signal::KILL).is_ok();
        old = Some(pid);
    }
    (wait_bounded(child, Duration::from_secs(300)), landed)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The run's length, without failures.
fn span() -> Duration {
    ms(PACE_MS * u64::from(REDUCTIONS))
}

/// Rank 0's tally line.
fn tally(t: &str) -> &str {
    t.lines()
        .find(|l| l.starts_with("[0] rank 0:"))
        .unwrap_or_else(|| panic!("no tally of rank 0 in:\n{t}"))
}

/// Every reduction exact at rank 0, and nothing wrong anywhere.
fn assert_exact(out: &Output) {
    let t = text(out);
    assert!(out.status.success(), "exit {:?}:\n{t}", out.status);
    let all = format!("[0] rank 0: {REDUCTIONS} ok, 0 lost, 0 wrong, 0 unexpected");
    assert_eq!(tally(&t), all, "\n{t}");
    assert!(!t.contains("WRONG") && !t.contains("unexpected "), "{t}");
}

#[test]
fn a_rank_killed_at_any_instant_is_replaced_and_every_reduction_is_exact() {
    let mut landed = 0;
    for trial in 0..8u64 {
        if landed == 3 {
            break;
        }
        let dir = tempfile::tempdir().unwrap();
        let at = drawn_instant(trial, span());
        let victim = 1 + (trial % 3) as u32;
        let (out, ok) = run_with_kills(job(1, dir.path(), &[], &[]), dir.path(), victim, &[at]);
        let t = text(&out);
        if !ok || !t.contains("started again (incarnation") {
            eprintln!("trial {trial}: the kill at {at:?} did not land:\n{t}");
            continue; // the victim had ended before the kill: drawn again
        }
        landed += 1;
        assert_exact(&out);
        let restarted = format!("[{victim}] lifecycle Restarted {{ incarnation: 1 }}");
        assert!(t.contains(&restarted), "{t}");
        for r in (0..4).filter(|&r| r != victim) {
            let reinited = format!("[{r}] lifecycle-end Reinited {{ replaced: 1 }}");
            assert!(t.contains(&reinited), "rank {r}:\n{t}");
            let event = format!("[{r}] event Respawned {{ rank: {victim}, incarnation: 1 }}");
            assert!(t.contains(&event), "rank {r}:\n{t}");
        }
        assert!(t.contains("(replaced: "), "{t}");
    }
    assert_eq!(landed, 3, "three kills landed while the victim ran");
}

#[test]
fn a_replacement_resumes_from_its_newest_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ckpt");
    let pids = dir.path().join("pids");
    std::fs::create_dir(&pids).unwrap();
    let env = [("TASKFOLD_CHECKPOINT_DIR", ckpt.to_str().unwrap())];
    let cmd = job(1, &pids, &["--checkpoint-every", "10"], &env);
    // Late in the run: some checkpoints were written.
    let (out, ok) = run_with_kills(cmd, &pids, 2, &[span().mul_f64(0.7)]);
    assert!(ok, "the kill landed:\n{}", text(&out));
    assert_exact(&out);
    let t = text(&out);
    let resumed = t
        .lines()
        .find_map(|l| l.strip_prefix("[2] resumed at "))
        .unwrap_or_else(|| panic!("the replacement did not restore:\n{t}"));
    let next: u32 = resumed.split(' ').next().unwrap().parse().unwrap();
    assert!(next >= 10 && next.is_multiple_of(10), "{resumed}");
    // It redid only what its checkpoint did not hold.
    let redone = format!("[2] rank 2: {} ok, 0 lost", REDUCTIONS - next);
    assert!(t.contains(&redone), "{t}");
}

#[test]
fn a_replacement_killed_in_turn_is_replaced_again() {
    let dir = tempfile::tempdir().unwrap();
    let kills = [span() / 4, span() / 4];
    let (out, ok) = run_with_kills(job(2, dir.path(), &[], &[]), dir.path(), 3, &kills);
    assert!(ok, "both kills landed:\n{}", text(&out));
    assert_exact(&out);
    let t = text(&out);
    assert!(
        t.contains("[3] lifecycle Restarted { incarnation: 2 }"),
        "{t}"
    );
    assert!(
        t.contains("[1] lifecycle-end Reinited { replaced: 2 }"),
        "{t}"
    );
}

#[test]
fn without_a_replacement_left_the_lost_contributions_end_in_ranks_lost() {
    for respawn in [0, 1] {
        let dir = tempfile::tempdir().unwrap();
        // With one replacement, the replacement is killed too.
        let kills = vec![span() / 4; respawn as usize + 1];
        let env = [("TASKFOLD_RESPAWN_WAIT_MS", "3000")];
        let (out, ok) = run_with_kills(job(respawn, dir.path(), &[], &env), dir.path(), 2, &kills);
        let t = text(&out);
        assert!(ok, "the kills landed:\n{t}");
        let line = tally(&t);
        assert!(!line.contains(" 0 lost"), "respawn {respawn}: {line}\n{t}");
        assert!(line.ends_with(" 0 wrong, 0 unexpected"), "{line}\n{t}");
        assert!(t.contains("[0] lost "), "{t}");
        assert_eq!(
            t.matches("started again (incarnation").count(),
            respawn as usize,
            "{t}"
        );
    }
}

/// Under global restart every rank comes back to its entry point and all
/// resume from one version: the newest every rank holds.
#[test]
fn global_restart_resumes_every_rank_from_the_newest_common_checkpoint() {
    for (trial, every) in [(0u64, "10"), (1, "0")] {
        let dir = tempfile::tempdir().unwrap();
        let ckpt = dir.path().join("ckpt");
        let pids = dir.path().join("pids");
        std::fs::create_dir(&pids).unwrap();
        let env = [
            ("TASKFOLD_CHECKPOINT_DIR", ckpt.to_str().unwrap()),
            ("TASKFOLD_RESTART", "global"),
        ];
        let cmd = job(1, &pids, &["--checkpoint-every", every], &env);
        let at = span().mul_f64(0.3) + drawn_instant(trial + 100, span().mul_f64(0.5));
        let (out, ok) = run_with_kills(cmd, &pids, 1 + trial as u32, &[at]);
        let t = text(&out);
        assert!(ok && out.status.success(), "{t}");
        // One agreed version, the same on every rank (none: from the start).
        let resumed: Vec<&str> = t
            .lines()
            .filter_map(|l| l.split_once("] resumed at ").map(|(_, r)| r))
            .collect();
        let next: u32 = match every {
            "0" => {
                assert!(resumed.is_empty(), "{t}");
                0
            }
            _ => {
                assert_eq!(resumed.len(), 4, "{t}");
                assert!(resumed
                    .iter()
                    .all(|r| *r == resumed[0] && r.ends_with("agreed)")));
                resumed[0].split(' ').next().unwrap().parse().unwrap()
            }
        };
        let entries = t.matches("entry Entry { lifecycle: Reinited").count();
        assert_eq!(
            entries, 3,
            "every survivor came back to its entry point:\n{t}"
        );
        let all = format!(
            "[0] rank 0: {} ok, 0 lost, 0 wrong, 0 unexpected",
            REDUCTIONS - next
        );
        assert_eq!(tally(&t), all, "\n{t}");
    }
}
