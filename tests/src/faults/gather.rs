//! The scenarios of a small reduction's gathering (the book's
//! Architecture chapter, "Small contributions"): the root, which joins
//! last, reads the three others' 8-byte contributions in place in one
//! task; a rank dies at each instant of that task.

use super::{
    held, hooks, kill, recovered, release, root_lost_everywhere, Job, Setup, LIMIT, SYNC_ROOT_1,
};
use crate::{text, wait_bounded};
use std::path::Path;
use std::process::Child;

/// Root 1, 8 bytes, asynchronous durability (a buddy on the node views
/// each original where it lies), the master's decisions logged.
const SMALL: Setup = Setup {
    durability: "async",
    size: 8,
    env: &[("RUST_LOG", "taskfold::master::drive=debug,warn")],
    ..SYNC_ROOT_1
};

/// A job whose root (rank 1) joins a second after the others and is held
/// at `point` of its first task.
fn start(job: &Job, d: &Path, point: &str) -> Child {
    job.start_with(
        d,
        &hooks(d, &[1], point),
        1,
        &["--in-place", "--delay", "1:1000"],
        &SMALL,
    )
}

/// The master handed the root one task that gathered providers besides
/// its first: without gathering, the root's first task would have one.
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
        Some(2),
        "the root's first task gathers two more:\n{t}"
    );
}

/// A provider the root gathers dies after the task reached the root,
/// before the root read anything: the root reads what it can (a dead
/// process's heap may be mapped already, or not), and whatever it leaves
/// out is scheduled again, from the buddy's copy.
pub fn gathered_provider_killed_while_the_root_gathers(job: &Job) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let child = start(job, d, "before-get");
    held(d, &[1], "before-get");
    kill(d, 2);
    std::thread::sleep(std::time::Duration::from_millis(200));
    release(d, 1, "before-get");
    let out = wait_bounded(child, LIMIT);
    recovered(&out, 2);
    gathered(&text(&out));
}

/// A provider the root gathers dies after the root read its data in
/// place, before the fold: the bytes read stay readable, the fold goes on
/// and its original is not recovered twice.
pub fn gathered_provider_killed_while_the_root_folds(job: &Job) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let child = start(job, d, "before-fold");
    held(d, &[1], "before-fold");
    kill(d, 3);
    std::thread::sleep(std::time::Duration::from_millis(200));
    release(d, 1, "before-fold");
    let out = wait_bounded(child, LIMIT);
    recovered(&out, 3);
    gathered(&text(&out));
}

/// The root dies holding the gathering task: every survivor gets the
/// same typed error (nobody else can hold the result).
pub fn root_killed_while_it_gathers(job: &Job) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let child = job.start_with(
        d,
        &hooks(d, &[1], "before-fold"),
        1,
        &["--in-place", "--delay", "1:1000", "--allow-lost"],
        &SMALL,
    );
    held(d, &[1], "before-fold");
    kill(d, 1);
    let t = text(&wait_bounded(child, LIMIT));
    root_lost_everywhere(&t);
    gathered(&t);
}
