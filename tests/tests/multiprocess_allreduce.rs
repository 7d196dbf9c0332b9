//! Allreduce across real processes over TCP, a rank SIGKILLed at an exact
//! instant (test hooks hold it there): every survivor ends with the exact
//! result, or every one with the same typed error (the book's
//! Architecture chapter, "Allreduce and broadcast"). The ranks share one
//! node and their values lie in the shared heap: a member keeps a view of
//! the root's memory, read exact however late, even after the root died.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use taskfold_tests::faults::{held, release};
use taskfold_tests::{signal, taskfold_bin, text, wait_bounded, wait_for_pid, Signal};

const LIMIT: Duration = Duration::from_secs(180);

fn start(dir: &Path, hooks: &str) -> Child {
    start_with(dir, hooks, &[])
}

fn start_with(dir: &Path, hooks: &str, args: &[&str]) -> Child {
    command(dir, hooks, args).spawn().expect("start the job")
}

fn command(dir: &Path, hooks: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(taskfold_bin());
    if !hooks.is_empty() {
        cmd.env("TASKFOLD_TEST_HOOK", hooks);
    }
    cmd.args(["run", "-n", "4", "--timeout", "150s", "--"])
        .arg(PathBuf::from(env!("CARGO_BIN_EXE_tf_allreduce")))
        .arg("--pid-dir")
        .arg(dir)
        .args(args)
        .env("TASKFOLD_DURABILITY", "sync")
        .env("TASKFOLD_REPLICA_DIR", dir.join("replicas"))
        .env("TASKFOLD_FAILURE_TIMEOUT_MS", "1500")
        .env("TASKFOLD_PING_MS", "100")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn kill(dir: &Path, rank: u32) {
    let pid = wait_for_pid(
        &dir.join(format!("rank-{rank}.pid")),
        Duration::from_secs(30),
    );
    signal(pid, Signal::KILL).unwrap();
}

fn wait_file(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        assert!(Instant::now() < deadline, "{} never came", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The root is killed holding the only copy of the result: every survivor
/// gets the same typed error, none the result.
#[test]
fn sigkill_of_the_root_holding_the_only_copy() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let child = start(d, &format!("1:before-share:ar:{}", d.display()));
    held(d, &[1], "before-share");
    kill(d, 1);
    let t = text(&wait_bounded(child, LIMIT));
    for r in [0, 2, 3] {
        let line = format!("[{r}] allreduce: error: reduction \"ar\" lost its root, rank 1");
        assert!(t.contains(&line), "{t}");
    }
    for r in [0, 2, 3] {
        assert!(!t.contains(&format!("[{r}] allreduce: ok")), "{t}");
    }
}

/// Rank 3 is held before its fetch; ranks 0 and 2 got the result; the
/// root is killed: rank 3 fetches from a survivor. The broadcast that
/// follows, from the dead root, reaches every survivor alike (from ranks
/// that got it before the root died) or fails alike on every one.
#[test]
fn sigkill_of_the_root_while_a_member_fetches() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let child = start(d, &format!("3:before-spread-get:ar:{}", d.display()));
    held(d, &[3], "before-spread-get");
    wait_file(&d.join("rank-0.got"));
    wait_file(&d.join("rank-2.got"));
    kill(d, 1);
    release(d, 3, "before-spread-get");
    let t = text(&wait_bounded(child, LIMIT));
    for r in [0, 2, 3] {
        assert!(
            t.contains(&format!("[{r}] allreduce: ok, exact: true")),
            "{t}"
        );
    }
    let got = |r: u32| t.contains(&format!("[{r}] broadcast: ok: from 1"));
    let lost = |r: u32| {
        t.contains(&format!(
            "[{r}] broadcast: error: reduction \"bc\" lost its root, rank 1"
        ))
    };
    assert!(
        [0, 2, 3].iter().all(|&r| got(r)) || [0, 2, 3].iter().all(|&r| lost(r)),
        "{t}"
    );
}

/// No failure: every rank has the exact sum, then the broadcast value.
/// Every member read the sum where the root holds it, one view each (the
/// broadcast's few bytes are streamed, not lent).
#[test]
fn every_process_gets_the_result_and_the_broadcast() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = wait_bounded(start(d, ""), LIMIT);
    let t = text(&out);
    for r in 0..4 {
        assert!(
            t.contains(&format!("[{r}] allreduce: ok, exact: true")),
            "{t}"
        );
        assert!(t.contains(&format!("[{r}] broadcast: ok: from 1")), "{t}");
        let views = if r == 1 { 0 } else { 1 };
        assert!(t.contains(&format!("[{r}] spread views: {views}")), "{t}");
    }
    assert!(out.status.success(), "{t}");
}

/// Rank 3 takes its value only after every other rank took theirs and the
/// root then filled every free buffer of the value's size with NaN: the
/// view it kept of the root's memory was lent, so the root's buffer was
/// not among them, and the value is exact.
#[test]
fn a_value_taken_late_is_exact_after_the_root_reused_its_free_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = wait_bounded(start_with(d, "", &["--late", "3"]), LIMIT);
    let t = text(&out);
    assert!(d.join("root.churned").exists(), "{t}");
    for r in 0..4 {
        assert!(
            t.contains(&format!("[{r}] allreduce: ok, exact: true")),
            "{t}"
        );
    }
    assert!(t.contains("[3] spread views: 1"), "{t}");
    assert!(out.status.success(), "{t}");
}

/// `InPlace` arrays: every rank takes its allreduce value and its
/// `broadcast_in_place` value at once, as values read where they lie (the
/// root's buffers, lent to its node's members; the root's own too), and
/// checks them only after the root filled every free buffer of their size
/// with NaN: exact, so the root's buffers stayed lent while the values
/// lived. It fails if a member's loan goes
/// back when the value is taken instead of when it is dropped.
#[test]
fn in_place_values_read_where_they_lie_outlive_the_roots_reuse() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = wait_bounded(start_with(d, "", &["--in-place"]), LIMIT);
    let t = text(&out);
    assert!(d.join("root.churned").exists(), "{t}");
    for r in 0..4 {
        for what in ["allreduce", "broadcast"] {
            let line = format!("[{r}] {what}: ok, exact: true, shared: true");
            assert!(t.contains(&line), "{t}");
        }
    }
    assert!(out.status.success(), "{t}");
}

/// `InPlace` arrays: every rank takes its allreduce and broadcast values
/// (views of the root's memory on this node), then the root is SIGKILLed,
/// and only then do the others check their values: exact and still read in place, from the
/// dead root's pages, which their mappings keep.
#[test]
fn in_place_values_read_where_they_lie_outlive_the_root() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let check = d.join("check");
    let args = ["--in-place", "--check-after", check.to_str().unwrap()];
    let child = start_with(d, "", &args);
    for r in 0..4 {
        wait_file(&d.join(format!("rank-{r}.got")));
    }
    kill(d, 1);
    std::fs::write(&check, b"").unwrap();
    let out = wait_bounded(child, LIMIT);
    let t = text(&out);
    for r in [0, 2, 3] {
        for what in ["allreduce", "broadcast"] {
            let line = format!("[{r}] {what}: ok, exact: true, shared: true");
            assert!(t.contains(&line), "{t}");
        }
    }
    assert!(
        !t.contains("[1] allreduce:"),
        "the root was killed first: {t}"
    );
}

/// Rank 3 is held before its fetch; ranks 1 (the root) and 2 got the
/// result; the master (rank 0) is SIGKILLed and the standby (rank 1)
/// takes over: it rebuilds the spread from every rank's report, and rank
/// 3 fetches the exact result. The broadcast that follows runs under the
/// standby and reaches every survivor.
#[test]
fn sigkill_of_the_master_while_a_member_fetches() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let hooks = format!("3:before-spread-get:ar:{}", d.display());
    let child = command(d, &hooks, &[])
        .env("TASKFOLD_STANDBY", "on")
        .spawn()
        .expect("start the job");
    held(d, &[3], "before-spread-get");
    wait_file(&d.join("rank-1.got"));
    wait_file(&d.join("rank-2.got"));
    kill(d, 0);
    std::thread::sleep(Duration::from_millis(500));
    release(d, 3, "before-spread-get");
    let out = wait_bounded(child, LIMIT);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    for r in [1, 2, 3] {
        let ok = format!("[{r}] allreduce: ok, exact: true");
        assert!(t.contains(&ok), "{t}");
        assert!(t.contains(&format!("[{r}] broadcast: ok: from 1")), "{t}");
    }
}
