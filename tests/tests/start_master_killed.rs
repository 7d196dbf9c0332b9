//! The master killed while it hands out the job's table (the book's
//! chapter Surviving failures of the application, The master at the
//! start): some ranks have the table, the others are still registering.
//! Every rank must end in the same job — the ones without the table read
//! it where the master kept it, rank 0's replacement waits for the
//! standby rather than hosting a second start — and the job ends exact.
//! Real processes under `taskfold run --respawn 1`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use taskfold_tests::faults::held;
use taskfold_tests::{signal, taskfold_bin, text, wait_bounded, Signal};

/// The process id the master's hold wrote into its marker.
fn held_pid(dir: &Path) -> i32 {
    let marker = dir.join("held-0-table");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let read = std::fs::read_to_string(&marker).unwrap_or_default();
        if let Ok(pid) = read.trim().parse() {
            return pid;
        }
        assert!(Instant::now() < deadline, "no pid in {}", marker.display());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Four ranks; the master is killed once `after` of the three others have
/// the table.
fn killed_after(after: u32) {
    let dir = tempfile::tempdir().unwrap();
    let (d, pids) = (dir.path(), dir.path().join("pids"));
    std::fs::create_dir(&pids).unwrap();
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
        .args(["--reductions", "10", "--pace-ms", "20", "--pid-dir"])
        .arg(&pids)
        .env(
            "TASKFOLD_TEST_HOOK",
            format!("0:table:{after}:{}", d.display()),
        )
        .env("TASKFOLD_STANDBY", "on")
        .env("RUST_LOG", "warn")
        .env("TASKFOLD_FAILURE_TIMEOUT_MS", "2000")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the job");
    held(d, &[0], "table");
    signal(held_pid(d), Signal::KILL).unwrap();
    let out = wait_bounded(child, Duration::from_secs(200));
    let t = text(&out);
    assert!(
        out.status.success(),
        "after {after}: exit {:?}:\n{t}",
        out.status
    );
    assert!(
        t.contains("joining by the table it wrote"),
        "after {after}: a rank without the table read it:\n{t}"
    );
    assert!(
        t.contains("[0] rank 0: 10 ok, 0 lost, 0 wrong, 0 unexpected"),
        "after {after}:\n{t}"
    );
}

#[test]
fn a_master_killed_while_it_hands_out_the_table_costs_nothing() {
    for after in [0, 1, 2] {
        killed_after(after);
    }
}
