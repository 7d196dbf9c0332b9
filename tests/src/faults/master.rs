//! The scenarios of a lost master and of a rank that left (the book's
//! Fault tolerance chapter, A master that dies; A rank that left, or was
//! fenced), under `taskfold run` like the others of `faults`.

use super::{state, Job, LIMIT, SYNC_ROOT_1};
use crate::{signal, text, wait_bounded, wait_for_pid, Signal};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

/// Milliseconds since the Unix epoch (as `tf_check --master-dies` prints).
fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// The 1.5 s failure timeout of every scenario, one ping period (100 ms)
/// and 3 s for a busy machine: how long after the master's death (or
/// stop) a surviving rank may take to end everything with `MasterLost`.
const MASTER_LOST_BOUND: Duration = Duration::from_millis(1500 + 100 + 3000);

/// Starts a `--master-dies` job and returns once ranks 1–3 started their
/// four reductions and their joins reached the master.
fn master_dies_job(job: &Job, d: &Path) -> Child {
    let child = job.start_with(d, "", 4, &["--master-dies"], &SYNC_ROOT_1);
    for r in 1..4 {
        wait_for_pid(&d.join(format!("rank-{r}.pid")), Duration::from_secs(30));
        let marker = d.join(format!("rank-{r}.reduced"));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !marker.exists() {
            assert!(Instant::now() < deadline, "rank {r} did not reduce");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    child
}

/// Every survivor ended its four reductions (two through `get`), a later
/// reduction, a barrier and its shutdown with `MasterLost` naming
/// `reason`, each within [`MASTER_LOST_BOUND`] of `since`, and exited by
/// itself with nothing unexpected.
fn master_lost_everywhere(t: &str, since: u128, reason: &str) {
    for r in 1..4 {
        let prefix = format!("[{r}] ");
        let lost: Vec<&str> = t
            .lines()
            .filter(|l| l.starts_with(&prefix) && l.contains(": master lost at "))
            .collect();
        assert_eq!(lost.len(), 7, "rank {r}:\n{t}");
        for l in lost {
            let at: u128 = l
                .split(": master lost at ")
                .nth(1)
                .and_then(|rest| rest.split(':').next())
                .and_then(|ms| ms.parse().ok())
                .unwrap_or_else(|| panic!("no time in {l:?}"));
            let after = at.saturating_sub(since);
            assert!(
                after <= MASTER_LOST_BOUND.as_millis(),
                "rank {r} took {after} ms: {l}\n{t}"
            );
            assert!(l.contains(reason), "{l}");
        }
        assert!(t.contains(&format!("[{r}] rank {r}: 0 unexpected")), "{t}");
    }
}

/// Rank 0 (the master) is SIGKILLed while four reductions are in flight:
/// every other rank sees its link to the master break and ends them, and
/// everything it asks of the master later, with `MasterLost`; `taskfold
/// run` says the master died, exits non-zero, and leaves no rank running.
pub fn master_killed(job: &Job) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let child = master_dies_job(job, d);
    let pid0 = wait_for_pid(&d.join("rank-0.pid"), Duration::from_secs(5));
    let killed = now_ms();
    let at = Instant::now();
    signal(pid0, Signal::KILL).unwrap();
    let out = wait_bounded(child, LIMIT);
    let took = at.elapsed();
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("taskfold run: rank 0 killed by signal 9 (SIGKILL); the master died and no standby takes over: ending the job"),
        "{t}"
    );
    master_lost_everywhere(&t, killed, "went down");
    assert!(
        took < MASTER_LOST_BOUND + Duration::from_secs(5),
        "the job ended {took:?} after the master's death:\n{t}"
    );
    for r in 0..4 {
        let pid = wait_for_pid(&d.join(format!("rank-{r}.pid")), Duration::from_secs(1));
        assert_eq!(state(pid), '?', "rank {r} (pid {pid}) still runs");
    }
}

/// Rank 0 is SIGSTOPped while four reductions are in flight: its links
/// stay up, but it stops pinging; every other rank declares it lost after
/// the failure timeout and ends everything with `MasterLost`, then exits
/// by itself. Killed afterwards, rank 0 ends the job.
pub fn master_stopped(job: &Job) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let child = master_dies_job(job, d);
    let pid0 = wait_for_pid(&d.join("rank-0.pid"), Duration::from_secs(5));
    let stopped = now_ms();
    signal(pid0, Signal::STOP).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    for r in 1..4 {
        let pid = wait_for_pid(&d.join(format!("rank-{r}.pid")), Duration::from_secs(1));
        while state(pid) != '?' && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let ended = Instant::now() < deadline;
    signal(pid0, Signal::KILL).unwrap();
    let out = wait_bounded(child, LIMIT);
    let t = text(&out);
    assert!(ended, "ranks 1-3 did not end without their master:\n{t}");
    assert!(!out.status.success(), "{t}");
    master_lost_everywhere(&t, stopped, "no ping from the master");
}

/// Rank 3 finalizes (after 1 s) without joining the two reductions ranks
/// 0–2 started: they end at once on every member with `RanksLost`
/// naming rank 3 — far sooner than their own 120 s wait — and a
/// reduction started after it left fails at once too. Then every rank
/// finalizes and the job ends cleanly.
pub fn rank_left_without_joining(job: &Job) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let child = job.start(d, "", 2, &["--skip-rank", "3", "--delay", "3:1000"]);
    let out = wait_bounded(child, LIMIT);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let ms = |l: &str| -> u64 {
        l.rsplit("after ")
            .next()
            .and_then(|x| x.trim_end_matches(" ms").parse().ok())
            .unwrap_or_else(|| panic!("no time in {l:?}"))
    };
    for r in 0..3 {
        for k in 0..2 {
            let head = format!("[{r}] reduction {k}: lost ranks [3] after ");
            let l = t
                .lines()
                .find(|l| l.starts_with(&head))
                .unwrap_or_else(|| panic!("rank {r}, reduction {k}:\n{t}"));
            assert!(ms(l) < 10_000, "{l}\n{t}");
        }
        let head = format!("[{r}] later reduction: lost ranks [3] after ");
        let l = t
            .lines()
            .find(|l| l.starts_with(&head))
            .unwrap_or_else(|| panic!("rank {r}, later reduction:\n{t}"));
        assert!(ms(l) < 3_000, "{l}\n{t}");
        assert!(
            t.contains(&format!("[{r}] rank {r}: 2 ok, 0 failed")),
            "{t}"
        );
    }
    assert!(t.contains("[3] rank 3: left without joining"), "{t}");
}
