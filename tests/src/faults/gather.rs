//! The scenarios of a small reduction's gathering (the book's
//! Architecture chapter, "Small contributions"): the root's first task
//! takes rank 0's 8-byte contribution and is held until ranks 2 and 3
//! joined; its second gathers both (2 its provider, 3 read in place
//! beside it), and a rank dies at each instant of that task.

use super::{
    held, hooks, kill, recovered, release, root_lost_everywhere, Job, Setup, LIMIT, SYNC_ROOT_1,
};
use crate::{text, wait_bounded};
use std::path::Path;
use std::process::Child;
use std::time::Duration;

/// Root 1, 8 bytes, asynchronous durability (a buddy on the node views
/// each original where it lies), the master's decisions logged.
const SMALL: Setup = Setup {
    durability: "async",
    size: 8,
    env: &[("RUST_LOG", "taskfold::master::drive=debug,warn")],
    ..SYNC_ROOT_1
};

/// A job whose root (rank 1) is held at `point` of its gathering task
/// (see the module's scenario); returns once it is.
fn start(job: &Job, d: &Path, point: &str, extra: &[&str]) -> Child {
    let hooks = [
        hooks(d, &[1], "before-get"),
        hooks(d, &[1], point),
        hooks(d, &[2, 3], "joined"),
    ]
    .join(";");
    let mut args = vec!["--in-place", "--delay", "2:800/3:1200"];
    args.extend_from_slice(extra);
    let child = job.start_with(d, &hooks, 1, &args, &SMALL);
    held(d, &[1], "before-get");
    held(d, &[2], "joined");
    held(d, &[3], "joined");
    // Their joins reach the master and queue: the root is busy.
    std::thread::sleep(Duration::from_millis(300));
    release(d, 1, "before-get");
    held(d, &[1], point);
    child
}

/// The master handed the root a task that gathered a further provider:
/// without gathering, every task has one provider.
fn gathered(t: &str) {
    // The master's `task` lines (`taskfold::master::drive` at debug).
    let gathered = t
        .lines()
        .filter_map(|l| l.split("gathered=").nth(1))
        .filter_map(|n| {
            n.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<u32>()
                .ok()
        })
        .max();
    assert_eq!(
        gathered,
        Some(1),
        "the root's second task gathers one more:\n{t}"
    );
}

/// Rank 3, a provider the root gathers, is killed while the root is held
/// at `point`; the job survives it, and the master's log is returned.
fn provider_killed_at(job: &Job, point: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let child = start(job, d, point, &[]);
    kill(d, 3);
    std::thread::sleep(Duration::from_millis(200));
    release(d, 1, point);
    let out = wait_bounded(child, LIMIT);
    recovered(&out, 3);
    let t = text(&out);
    gathered(&t);
    t
}

/// A provider the root gathers dies after the task reached the root,
/// before the root read anything: the root cannot read a dead process's
/// memory it had not mapped, leaves it out of its report, and the master
/// schedules it again, from its buddy's copy.
pub fn gathered_provider_killed_while_the_root_gathers(job: &Job) {
    let t = provider_killed_at(job, "before-gather");
    assert!(
        t.contains("provider=3 source=Replica"),
        "left out, rank 3 is read from its copy next:\n{t}"
    );
}

/// A provider the root gathers dies after the root read its data in
/// place, before the fold: the bytes read stay readable (the mapping
/// outlives the process), the fold goes on, and its original is not
/// recovered a second time.
pub fn gathered_provider_killed_while_the_root_folds(job: &Job) {
    let t = provider_killed_at(job, "before-gathered-fold");
    assert!(
        !t.contains("provider=3 "),
        "read already, rank 3 is never scheduled again:\n{t}"
    );
}

/// The root dies holding the gathering task: every survivor gets the
/// same typed error (nobody else can hold the result).
pub fn root_killed_while_it_gathers(job: &Job) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let child = start(job, d, "before-gathered-fold", &["--allow-lost"]);
    kill(d, 1);
    let t = text(&wait_bounded(child, LIMIT));
    root_lost_everywhere(&t);
    gathered(&t);
}
