//! Global restart after ranks returned from their entry point (the
//! book's chapter Surviving failures of the application, Global
//! restart): a rank whose `run_reinit` returned has left for good, so a
//! death after it rolls nothing back. Real processes under `taskfold run
//! --respawn 1`, `TASKFOLD_RESTART=global`: every rank finishes its
//! reductions, then lingers before its shutdown (as an application that
//! writes its output); rank 2 is SIGKILLed then. Its replacement redoes
//! its last reductions from its checkpoint, answered as completed; had
//! the job rolled back, the others, past their entry point, could not
//! redo theirs, and the replacement's reductions would end without them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use taskfold_tests::{signal, taskfold_bin, text, wait_bounded, wait_for_pid, Signal};

const RANKS: u32 = 4;
const REDUCTIONS: u32 = 30;

fn tf_respawn() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tf_respawn"))
}

/// Whether every rank of the job wrote its `rank-R.done`, waiting at most
/// `limit`.
fn all_done(dir: &Path, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if (0..RANKS).all(|r| dir.join(format!("rank-{r}.done")).exists()) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

#[test]
fn a_death_after_every_rank_left_its_entry_point_rolls_nothing_back() {
    let dir = tempfile::tempdir().unwrap();
    let (ckpt, pids) = (dir.path().join("ckpt"), dir.path().join("pids"));
    std::fs::create_dir(&pids).unwrap();
    let mut cmd = Command::new(taskfold_bin());
    cmd.args([
        "run",
        "-n",
        &RANKS.to_string(),
        "--respawn",
        "1",
        "--timeout",
        "120s",
        "--",
    ])
    .arg(tf_respawn())
    .args(["--reductions", &REDUCTIONS.to_string(), "--pace-ms", "10"])
    .args([
        "--checkpoint-every",
        "1",
        "--linger-ms",
        "3000",
        "--pid-dir",
    ])
    .arg(&pids)
    .env("TASKFOLD_CHECKPOINT_DIR", &ckpt)
    .env("TASKFOLD_RESTART", "global")
    .env("TASKFOLD_FAILURE_TIMEOUT_MS", "1000")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let child = cmd.spawn().expect("taskfold run");
    let victim = wait_for_pid(&pids.join("rank-2.pid"), Duration::from_secs(60));
    let done = all_done(&pids, Duration::from_secs(60));
    let killed = done && signal(victim, Signal::KILL).is_ok();
    let out = wait_bounded(child, Duration::from_secs(180));
    let t = text(&out);
    assert!(
        killed,
        "every rank finished, and rank 2 was killed while it lingered:\n{t}"
    );
    assert!(out.status.success(), "exit {:?}:\n{t}", out.status);
    assert!(
        !t.contains("the job rolls back"),
        "no rollback after the leaves:\n{t}"
    );
    // Every rank's tally, the replacement's too (the killed process died
    // before it printed its own): nothing lost, wrong or unexpected.
    for r in 0..RANKS {
        let line = format!("] rank {r}: ");
        let tallies: Vec<&str> = t.lines().filter(|l| l.contains(&line)).collect();
        assert_eq!(tallies.len(), 1, "rank {r}'s tally:\n{t}");
        assert!(
            tallies[0].ends_with(" 0 lost, 0 wrong, 0 unexpected"),
            "rank {r}: {}\n{t}",
            tallies[0]
        );
    }
    let root = format!("[0] rank 0: {REDUCTIONS} ok, 0 lost, 0 wrong, 0 unexpected");
    assert!(t.contains(&root), "{t}");
    assert!(
        t.contains("[2] lifecycle Restarted"),
        "rank 2 was replaced:\n{t}"
    );
}
