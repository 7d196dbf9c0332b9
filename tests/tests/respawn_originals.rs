//! A replaced member without durability (the book's chapter Surviving
//! failures of the application, Local restart): with replacements
//! allowed, a death ends no reduction, so when a member dies holding
//! other members' originals folded into its data, the master has each
//! live member fold its own original in again. Without durability no
//! copy of it exists but the member's own: each keeps it, in memory, until
//! the reduction ends. Real processes under `taskfold run --respawn 1`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;
use taskfold_tests::faults::{held, release};
use taskfold_tests::{signal, taskfold_bin, text, wait_bounded, wait_for_pid, Signal};

/// The root's join of `rs-5` is held: ranks 1 and 2 join it, and one of
/// them folds the other's data into its own. Then `victim` is killed, and
/// the root let go. Of the two victims one holds both originals when it
/// dies; the other had given its data away (its replacement's join stands
/// in for it).
fn killed_while_the_root_waits(victim: u32) {
    let dir = tempfile::tempdir().unwrap();
    let (d, pids) = (dir.path(), dir.path().join("pids"));
    std::fs::create_dir(&pids).unwrap();
    let child = Command::new(taskfold_bin())
        .args([
            "run",
            "-n",
            "3",
            "--respawn",
            "1",
            "--timeout",
            "150s",
            "--",
        ])
        .arg(PathBuf::from(env!("CARGO_BIN_EXE_tf_respawn")))
        .args(["--reductions", "10", "--pace-ms", "20", "--pid-dir"])
        .arg(&pids)
        .env(
            "TASKFOLD_TEST_HOOK",
            format!("0:before-join:rs-5:{}", d.display()),
        )
        .env("TASKFOLD_DURABILITY", "off")
        .env("TASKFOLD_FAILURE_TIMEOUT_MS", "2000")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the job");
    held(d, &[0], "before-join");
    // Ranks 1 and 2 join and fold meanwhile (a few milliseconds).
    std::thread::sleep(Duration::from_millis(500));
    let pid = wait_for_pid(
        &pids.join(format!("rank-{victim}.pid")),
        Duration::from_secs(30),
    );
    signal(pid, Signal::KILL).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    release(d, 0, "before-join");
    let out = wait_bounded(child, Duration::from_secs(200));
    let t = text(&out);
    assert!(
        out.status.success(),
        "victim {victim}: exit {:?}:\n{t}",
        out.status
    );
    assert!(
        t.contains("started again (incarnation 1"),
        "victim {victim} was replaced:\n{t}"
    );
    assert!(
        t.contains("[0] rank 0: 10 ok, 0 lost, 0 wrong, 0 unexpected"),
        "victim {victim}:\n{t}"
    );
}

#[test]
fn a_member_that_died_holding_anothers_original_costs_nothing() {
    for victim in [1, 2] {
        killed_while_the_root_waits(victim);
    }
}
