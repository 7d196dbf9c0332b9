//! Short slices of the failure campaigns (`taskfold bench chaos`, the
//! book's chapter Surviving failures of the application, Many failures):
//! real processes of a job that reduces and checkpoints every step,
//! killed K times per trial at instants drawn over the whole run (and at
//! the hard instants: while a replacement is let in, while it restores,
//! while the job rolls back), with exactly the replacements the kills
//! need. Every trial must end exact: every step's sum right at the root
//! and the launcher's verdict a success; a typed error, a wrong result or
//! a hang fails the test, with the kept output of the trial.
//!
//! The long campaigns (hundreds of trials, simulated nodes) are the
//! benchmark's; see `benches/RESULTS.md`.

use std::process::Command;
use std::time::Duration;
use taskfold_tests::{run_bounded, taskfold_bin, text};

/// Runs `bench chaos` with `args` (6 ranks unless they say, 40 steps);
/// asserts that every trial of every campaign ended exact, and returns
/// the report.
fn chaos(args: &[&str]) -> serde_json::Value {
    // One campaign at a time: each job's failure timeout is short, and
    // campaigns side by side on a small machine would starve each other.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("chaos.json");
    let keep = dir.path().join("kept");
    let mut cmd = Command::new(taskfold_bin());
    cmd.args(["bench", "chaos", "--steps", "40", "--reference", "1"]);
    if !args.contains(&"--np") {
        cmd.args(["--np", "6"]);
    }
    cmd.args(args)
        .arg("--json")
        .arg(&json)
        .arg("--keep")
        .arg(&keep);
    let out = run_bounded(cmd, Duration::from_secs(600));
    let report: serde_json::Value = match std::fs::read(&json) {
        Ok(b) => serde_json::from_slice(&b).unwrap(),
        Err(e) => panic!("no report ({e}): {}", text(&out)),
    };
    for c in report["campaigns"].as_array().unwrap() {
        // The tally's keys sit in the campaign itself.
        let tally = c;
        let n = |k: &str| tally[k].as_u64().unwrap_or_else(|| panic!("{k}: {c}"));
        if n("exact") != n("trials") {
            let kept: Vec<String> = c["trials_detail"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t["outcome"] != "exact")
                .map(|t| {
                    let log = t["log"].as_str().unwrap_or("");
                    let tail = logs_tail(log);
                    format!("{t}\n{tail}")
                })
                .collect();
            let counts: Vec<String> = ["trials", "exact", "typed_errors", "wrong", "hangs"]
                .iter()
                .map(|k| format!("{k} {}", n(k)))
                .collect();
            panic!(
                "not every trial ended exact: {}\n{}\n{}",
                counts.join(", "),
                kept.join("\n"),
                text(&out)
            );
        }
        assert!(n("trials") > 0, "{c}");
    }
    assert!(out.status.success(), "{}", text(&out));
    report
}

/// The last lines of a kept trial's output (a file, or every file of a
/// directory).
fn logs_tail(path: &str) -> String {
    let path = std::path::Path::new(path);
    let files: Vec<std::path::PathBuf> = match std::fs::read_dir(path) {
        Ok(entries) => entries.flatten().map(|e| e.path()).collect(),
        Err(_) => vec![path.to_path_buf()],
    };
    let mut s = String::new();
    for f in files {
        let body = std::fs::read_to_string(&f).unwrap_or_default();
        let lines: Vec<&str> = body.lines().collect();
        let from = lines.len().saturating_sub(60);
        s += &format!("== {}\n{}\n", f.display(), lines[from..].join("\n"));
    }
    s
}

/// Two ranks killed per trial, in turn or at once, workers or the
/// replacement of the first: local restart ends exact.
#[test]
fn two_kills_of_workers_and_replacements_end_exact_under_local_restart() {
    chaos(&[
        "--kills",
        "2",
        "--restart",
        "local",
        "--victims",
        "worker,replacement",
        "--instants",
        "any,admission,restore",
        "--trials",
        "3",
        "--seed",
        "11",
    ]);
}

/// Global restart with two kills, one of them possibly during the
/// rollback the first started (before, during or after the meeting).
#[test]
fn two_kills_under_global_restart_even_during_the_rollback_end_exact() {
    chaos(&[
        "--kills",
        "2",
        "--restart",
        "global",
        "--victims",
        "worker,replacement",
        "--instants",
        "any,rollback,admission",
        "--trials",
        "3",
        "--seed",
        "12",
    ]);
}

/// The master killed while the job reduces, alone or followed by the
/// standby that took over from it (or a worker): each new master takes
/// over, the dead masters' ranks are replaced under it, and a replaced
/// root gets back the results that had completed under its dead process
/// (local and global restart).
#[test]
fn the_master_and_then_its_successor_killed_end_exact() {
    chaos(&[
        "--kills",
        "1,2",
        "--restart",
        "local,global",
        "--victims",
        "master",
        "--instants",
        "any",
        "--trials",
        "2",
        "--seed",
        "13",
    ]);
}

/// The master killed, then the master after it killed while it lets the
/// dead one's replacement in: the ranks it told of the replacement and
/// those it did not still turn to the same standby, the oldest live rank,
/// and every trial ends exact (local and global restart).
#[test]
fn the_master_killed_while_it_lets_a_replacement_in_ends_exact() {
    chaos(&[
        "--kills",
        "2",
        "--restart",
        "local,global",
        "--victims",
        "master",
        "--instants",
        "admission",
        "--trials",
        "2",
        "--seed",
        "17",
    ]);
}

/// Every step an allreduce, checked on every rank: two kills of workers,
/// replacements or the master, local and global restart. Under local
/// restart a replacement's redone step that had finished without it ends
/// in the documented `ResultLost` (counted apart); every other step of
/// every rank is exact.
#[test]
fn allreduce_steps_survive_two_kills_on_every_rank() {
    let report = chaos(&[
        "--collective",
        "allreduce",
        "--kills",
        "2",
        "--restart",
        "local,global",
        "--victims",
        "worker,replacement,master",
        "--instants",
        "any,admission,restore,rollback",
        "--trials",
        "2",
        "--seed",
        "18",
    ]);
    assert_eq!(report["collective"], "allreduce");
    for c in report["campaigns"].as_array().unwrap() {
        if c["restart"] == "global" {
            assert_eq!(c["lost_steps"], 0, "global restart redoes together: {c}");
        }
    }
}

/// Spares instead of the launcher's respawn: parked spares take the
/// places of two dead ranks (a spare itself may be the victim).
#[test]
fn spares_take_the_places_of_two_dead_ranks() {
    chaos(&[
        "--spares",
        "--kills",
        "2",
        "--restart",
        "local",
        "--victims",
        "worker,replacement,spare",
        "--trials",
        "3",
        "--seed",
        "14",
    ]);
}

/// Whether simulated nodes can run here (they need root, as network
/// namespaces do); CI runs as root and must run them.
fn simulated_nodes_allowed() -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run the simulated nodes (as root)"
    );
    eprintln!("skipped: simulated nodes need root");
    false
}

/// Whole simulated nodes killed (every process of one network namespace),
/// one or two per trial, on 4 nodes: their ranks are replaced on them and
/// every trial ends exact (local and global restart). Needs root (network
/// namespaces); CI runs as root.
#[test]
fn whole_simulated_nodes_killed_end_exact() {
    if !simulated_nodes_allowed() {
        return;
    }
    chaos(&[
        "--sim-nodes",
        "4",
        "--np",
        "8",
        "--kills",
        "1,2",
        "--restart",
        "local,global",
        "--victims",
        "node",
        "--trials",
        "2",
        "--seed",
        "42",
    ]);
}

/// A node and the master, in either order, on 4 simulated nodes: the
/// sequences whose campaigns found two masters at once, an epoch mixed
/// into the next, and a replacement's join counted twice (each now has a
/// test of its own). Needs root, as above.
#[test]
fn a_node_and_the_master_killed_in_turn_end_exact() {
    if !simulated_nodes_allowed() {
        return;
    }
    chaos(&[
        "--sim-nodes",
        "4",
        "--np",
        "8",
        "--kills",
        "2",
        "--restart",
        "local,global",
        "--victims",
        "node,master",
        "--trials",
        "3",
        "--seed",
        "57",
    ]);
}

/// Under MPICH's `mpiexec` with spares, each rank under `taskfold guard`:
/// a worker, a spare or the master killed, once or twice, and the spares
/// take the dead ranks' places (hydra would end the job at the first
/// death by a signal without the guard). Skipped where MPICH is not
/// installed; CI installs it.
#[test]
fn spares_under_mpiexec_take_the_places_of_the_dead() {
    let hydra = ["mpiexec.hydra", "mpiexec.mpich"].iter().any(|name| {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).exists()))
    });
    if !hydra {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the spares under mpiexec (MPICH is installed there)"
        );
        eprintln!("skipped: MPICH's mpiexec is not installed");
        return;
    }
    chaos(&[
        "--launcher",
        "mpiexec",
        "--kills",
        "1,2",
        "--restart",
        "local",
        "--victims",
        "worker,spare,master",
        "--trials",
        "2",
        "--seed",
        "23",
    ]);
}
