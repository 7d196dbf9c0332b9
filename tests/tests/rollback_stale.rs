//! A global rollback while work of a reduction is on its way back (the
//! book's chapter Surviving failures of the application, Global restart):
//! the job redoes the reduction under its id, and nothing of the old one —
//! a fetch, a fold, a serialisation — may reach the new one, whose tasks
//! are numbered from 0 again. Real processes under `taskfold run`; every
//! contribution changes with the rollback (`tf_respawn --by-generation`),
//! so a result that mixes the two is wrong, and the root checks each one.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use taskfold_tests::faults::{held, release};
use taskfold_tests::{signal, taskfold_bin, text, wait_bounded, wait_for_pid, Signal};

/// Waits (at most a minute) for `path` to exist.
fn appears(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The root's work on reduction `rs-5` is held at `point` (before its
/// fetch, or with its data fetched and the fold not started) while rank
/// 3 is killed: the job rolls back, and the held work is let go only once
/// the root joined `rs-5` again. It is the old generation's: started or
/// folded into the new reduction, it would make the root's result wrong
/// (or the reduction never end). A held fold is caught every time (its
/// data differs); a held fetch only when the two generations' tasks of
/// that id differ (without the check, one run of two failed).
fn held_across_a_global_rollback(point: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (d, pids) = (dir.path(), dir.path().join("pids"));
    std::fs::create_dir(&pids).unwrap();
    let hooks = format!("0:{point}:rs-5:{0};0:joined:rs-5:{0}", d.display());
    let child = Command::new(taskfold_bin())
        .args([
            "run",
            "-n",
            "4",
            "--respawn",
            "1",
            "--timeout",
            "150s",
            "--",
        ])
        .arg(PathBuf::from(env!("CARGO_BIN_EXE_tf_respawn")))
        .args(["--reductions", "12", "--pace-ms", "20", "--by-generation"])
        .arg("--pid-dir")
        .arg(&pids)
        .env("TASKFOLD_TEST_HOOK", hooks)
        .env("TASKFOLD_RESTART", "global")
        .env("TASKFOLD_DURABILITY", "off")
        .env("TASKFOLD_FAILURE_TIMEOUT_MS", "2000")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the job");
    held(d, &[0], point);
    // The mark of the first join goes; the second (after the rollback)
    // says the redone reduction is live at the root.
    let joined = d.join("held-0-joined");
    std::fs::remove_file(&joined).unwrap();
    let victim = wait_for_pid(&pids.join("rank-3.pid"), Duration::from_secs(30));
    signal(victim, Signal::KILL).unwrap();
    appears(&joined);
    release(d, 0, point);
    let out = wait_bounded(child, Duration::from_secs(200));
    let t = text(&out);
    assert!(out.status.success(), "exit {:?}:\n{t}", out.status);
    assert!(t.contains("lifecycle: Reinited"), "no rollback:\n{t}");
    assert!(!t.contains("WRONG") && !t.contains("unexpected "), "{t}");
    // Every reduction exact at the root, in the generation it ended in.
    assert!(t.contains("[0] rank 0: 12 ok, 0 lost, 0 wrong"), "{t}");
}

#[test]
fn a_fold_held_across_a_global_rollback_does_not_reach_the_redone_reduction() {
    held_across_a_global_rollback("before-fold");
}

#[test]
fn a_fetch_held_across_a_global_rollback_does_not_start_in_the_redone_reduction() {
    held_across_a_global_rollback("before-get");
}
