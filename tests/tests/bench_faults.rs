//! Short runs of the failure-injection experiment (`taskfold bench
//! faults`): kill instants over the whole reduction, a worker, the root or
//! the master as the victim; whatever the instant, no wrong result and no
//! hang, and the counts, overall and by phase, add up.

use std::process::Command;
use std::time::Duration;
use taskfold_tests::{run_bounded, taskfold_bin, text};

/// Runs `bench faults` on 4 ranks with `extra` options; returns its
/// reports and asserts their invariants.
fn run(extra: &[&str], trials: u64) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("faults.json");
    let mut cmd = Command::new(taskfold_bin());
    cmd.args([
        "bench",
        "faults",
        "--np",
        "4",
        "--size",
        "1M",
        "--timeout",
        "20s",
    ])
    .arg("--trials")
    .arg(trials.to_string())
    .args(extra)
    .arg("--json")
    .arg(&json);
    let out = run_bounded(cmd, Duration::from_secs(500));
    assert!(out.status.success(), "{}", text(&out));
    let reports: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let reports = reports.as_array().unwrap().clone();
    for r in &reports {
        let n =
            |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k}: {r}"));
        assert_eq!(n(r, "trials"), trials, "{r}");
        assert_eq!(n(r, "wrong"), 0, "{r}");
        assert_eq!(n(r, "hangs"), 0, "{r}");
        let outcomes = |v: &serde_json::Value| {
            n(v, "recovered") + n(v, "typed_errors") + n(v, "wrong") + n(v, "hangs")
        };
        assert_eq!(outcomes(r), trials, "{r}");
        let phases = ["before_safe", "after_safe", "not_killed"];
        for p in phases {
            assert_eq!(outcomes(&r[p]), n(&r[p], "trials"), "{p}: {r}");
        }
        let by_phase: u64 = phases.iter().map(|p| n(&r[*p], "trials")).sum();
        assert_eq!(by_phase, trials, "{r}");
        let per_trial = r["per_trial"].as_array().unwrap();
        assert_eq!(per_trial.len() as u64, trials, "{r}");
        for t in per_trial {
            assert!(phases.contains(&t["phase"].as_str().unwrap()), "{t}");
            assert!(t["kill_delay_s"].as_f64().unwrap() >= 0.0, "{t}");
            // A trial that was not recovered keeps its ranks' output.
            if t["outcome"] != "recovered" {
                let log = t["log"].as_str().expect("a kept log");
                assert!(
                    std::fs::read_to_string(log).unwrap().contains("[0] "),
                    "{log}"
                );
            }
        }
    }
    reports
}

#[test]
fn a_worker_killed_anywhere_in_the_reduction_gives_no_wrong_result_and_no_hang() {
    let reports = run(&["--kill", "worker"], 12);
    assert_eq!(reports.len(), 2);
    for r in &reports {
        assert_eq!(r["victim"], "worker", "{r}");
        assert_eq!(r["victim_rank"], 1, "{r}");
        assert_eq!(r["observer"], 0, "{r}");
        // Once its contribution is safe, a lost worker is always recovered.
        assert_eq!(
            r["after_safe"]["recovered"], r["after_safe"]["trials"],
            "{r}"
        );
    }
}

#[test]
fn the_root_and_the_master_as_victims() {
    let reports = run(&["--kill", "root,master", "--durability", "sync"], 4);
    assert_eq!(reports.len(), 2);
    let (root, master) = (&reports[0], &reports[1]);
    assert_eq!(root["victim"], "root", "{root}");
    // Root 0 would be the master: the root moves to rank 1, read at rank 0.
    assert_eq!(
        (&root["victim_rank"], &root["root"], &root["observer"]),
        (&1.into(), &1.into(), &0.into()),
        "{root}"
    );
    assert_eq!(master["victim"], "master", "{master}");
    assert_eq!(
        (&master["victim_rank"], &master["root"], &master["observer"]),
        (&0.into(), &1.into(), &1.into()),
        "{master}"
    );
    for e in master["errors"].as_array().unwrap() {
        assert!(
            e.as_str().unwrap().contains("master"),
            "the survivors of a dead master end with MasterLost: {e}"
        );
    }
    for e in root["errors"].as_array().unwrap() {
        assert!(e.as_str().unwrap().contains("lost its root"), "{e}");
    }
}

/// With a standby (`--standby on`: this machine as one node), a master
/// killed anywhere in the reduction: once its contribution is safe it is
/// always recovered, by the standby; before, a typed error at worst.
#[test]
fn a_killed_master_with_a_standby_is_recovered_once_its_contribution_is_safe() {
    let reports = run(
        &[
            "--kill",
            "master",
            "--standby",
            "on",
            "--durability",
            "sync",
        ],
        8,
    );
    let r = &reports[0];
    assert_eq!(
        (&r["victim"], &r["standby"]),
        (&"master".into(), &"on".into()),
        "{r}"
    );
    assert_eq!(
        r["after_safe"]["recovered"], r["after_safe"]["trials"],
        "{r}"
    );
    for e in r["errors"].as_array().unwrap() {
        let e = e.as_str().unwrap();
        assert!(e.contains("lost the contributions of ranks [0]"), "{e}");
    }
}

/// A trial's phase comes from the ranks themselves: each marks, through
/// the public API (`ReduceFuture::is_safe`), the instant its contribution
/// to the reduction that is hit became safe (no test hook: the
/// `taskfold` command has none).
#[test]
fn every_rank_marks_when_its_contribution_is_safe() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(taskfold_bin());
    cmd.args(["run", "-n", "3", "--timeout", "100s", "--"])
        .arg(taskfold_bin())
        .args([
            "bench-fault-rank",
            "--size",
            "4096",
            "--root",
            "0",
            "--timeout",
            "30",
        ])
        .arg("--dir")
        .arg(dir.path());
    let out = run_bounded(cmd, Duration::from_secs(150));
    assert!(out.status.success(), "{}", text(&out));
    for r in 0..3 {
        assert!(
            dir.path().join(format!("safe-{r}")).exists(),
            "rank {r}: {}",
            text(&out)
        );
        let outcome = std::fs::read_to_string(dir.path().join(format!("outcome-{r}"))).unwrap();
        assert!(
            outcome.starts_with(if r == 0 { "recovered" } else { "completed" }),
            "{outcome}"
        );
    }
}
