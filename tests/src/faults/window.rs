//! The durability window (the book's Fault tolerance chapter, The
//! durability window): a rank SIGKILLs itself right after its `reduce`
//! returned. With synchronous durability `reduce` returns only once the
//! contribution is safe, so every trial ends with the correct result at
//! the root; with asynchronous durability the kill falls inside the
//! window, and every trial ends with the correct result or a typed error,
//! never a hang.

use super::{Job, LIMIT};
use crate::{text, wait_bounded};
use std::process::{Command, Output, Stdio};

/// Ranks of each job; the last one kills itself.
const RANKS: u32 = 6;

/// Runs one job of [`RANKS`] ranks, root 0, two reductions, in which rank
/// `RANKS - 1` SIGKILLs itself as soon as `reduce` returned.
fn trial(job: &Job, durability: &str, extra: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let killer = (RANKS - 1).to_string();
    let mut cmd = Command::new(&job.taskfold);
    cmd.args(["run", "-n", &RANKS.to_string(), "--timeout", "150s", "--"])
        .arg(&job.tf_check)
        .args(["--size", "1048576", "--root", "0", "--reductions", "2"])
        .args(["--kill-after-reduce", &killer])
        .args(extra)
        .env("TASKFOLD_DURABILITY", durability)
        .env("TASKFOLD_REPLICA_DIR", d.join("replicas"))
        .env("TASKFOLD_FAILURE_TIMEOUT_MS", "1500")
        .env("TASKFOLD_PING_MS", "100")
        .envs(job.env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    wait_bounded(cmd.spawn().expect("start the job"), LIMIT)
}

/// The killed rank died by its own SIGKILL, and every survivor ended both
/// reductions as `tf_check` expects (exact sums at the root; with
/// `--allow-lost`, a typed `RanksLost` counts too).
fn survivors_all_ok(out: &Output) -> String {
    let t = text(out);
    let dead = RANKS - 1;
    assert!(
        t.contains(&format!("rank {dead} killed by signal 9")),
        "{t}"
    );
    for r in 0..dead {
        assert!(
            t.contains(&format!("[{r}] rank {r}: 2 ok, 0 failed")),
            "rank {r}:\n{t}"
        );
    }
    t
}

/// Synchronous durability: rank 5 of 6 SIGKILLs itself as soon as its
/// `reduce` returned, which is once its contributions were safe: five
/// trials out of five end with the exact sums at the root, none with an
/// error.
pub fn killed_once_sync_reduce_returned(job: &Job) {
    for n in 0..5 {
        // Without `--allow-lost` any error is a failure in `tf_check`.
        let out = trial(job, "sync", &[]);
        let t = survivors_all_ok(&out);
        assert!(!t.contains("expected error"), "trial {n}:\n{t}");
    }
}

/// Asynchronous durability: the same kill falls inside the window (its
/// buddy's copy may not be made yet, its join may not have left): each
/// trial ends with the exact sums or with `RanksLost` naming it, on every
/// survivor, within the job's bound.
pub fn killed_inside_the_async_window(job: &Job) {
    for n in 0..3 {
        let out = trial(job, "async", &["--allow-lost"]);
        let t = survivors_all_ok(&out);
        for l in t.lines().filter(|l| l.contains("expected error")) {
            assert!(l.contains("ranks [5]"), "trial {n}: {l}\n{t}");
        }
    }
}
