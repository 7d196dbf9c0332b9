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

/// Six ranks, root 1 late (5 s): the members gather their node by
/// themselves meanwhile.
const MEMBERS: Setup = Setup { ranks: 6, ..SMALL };

/// The root is late; the members' first pair is held (its receiver at
/// `before-get`) while the three others join, who wait for it, busy on
/// their node; released, its next task gathers them all, and the member
/// receiving that one is killed holding it. Its providers go back into
/// the queue, its data is recovered from its copies, and every survivor
/// ends with the exact result.
pub fn member_killed_while_it_gathers_its_node(job: &Job) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let members = [0, 2, 3, 4, 5];
    let hooks = [
        hooks(d, &members, "before-get"),
        hooks(d, &members, "before-gather"),
    ]
    .join(";");
    let args = ["--in-place", "--delay", "1:5000"];
    let child = job.start_with(d, &hooks, 1, &args, &MEMBERS);
    let first = held(d, &members, "before-get");
    // The other joins reach the master and wait for `first`.
    std::thread::sleep(Duration::from_millis(500));
    release(d, first, "before-get");
    let victim = held(d, &members, "before-gather");
    kill(d, victim);
    // The tasks after it (the victim's providers, back in the queue, are
    // gathered again) go on unheld.
    for r in members.iter().filter(|&&r| r != victim) {
        release(d, *r, "before-gather");
        release(d, *r, "before-get");
    }
    let out = wait_bounded(child, LIMIT);
    super::recovered_of(&out, victim, 6);
    let t = text(&out);
    let by_member = t.lines().any(|l| {
        l.contains(&format!("receiver=rank {victim} "))
            && l.split("gathered=")
                .nth(1)
                .is_some_and(|n| !n.starts_with('0'))
    });
    assert!(by_member, "rank {victim} was handed a gathering task:\n{t}");
}
