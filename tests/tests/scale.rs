//! The largest job this machine can hold: 256 rank processes on 16
//! simulated nodes (`taskfold run --sim-nodes 16 -n 256`), reducing small
//! contributions, every result checked exactly at its root. It needs
//! root (network namespaces); a machine where they cannot be made skips
//! it with a message, except in CI (`CI` set), where it must run.
//!
//! What it shows is that a job of this size starts, reduces, shuts down
//! and leaves no namespace behind, and that the master's tasks grow with
//! the nodes, not the ranks (each node gathers its small data: the
//! book's Architecture chapter, Small contributions); its pace is
//! measured by `bench sim` and by hand (the book's Benchmarks chapter),
//! not here.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;
use taskfold_tests::netns::{namespaces_of, namespaces_or_skip};
use taskfold_tests::{run_bounded, taskfold_bin, text, wait_bounded};

/// Bounds the whole job; at 256 ranks on two cores it starts in tens of
/// seconds.
const LIMIT: Duration = Duration::from_secs(420);

fn tf_check() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tf_check"))
}

/// 256 ranks on 16 simulated nodes, 8-byte contributions, four
/// reductions at once, each rooted at a rank of another node than the
/// master's: every rank reports every result it checked exact, the
/// master hands out at most 8 tasks per node for each reduction (paired
/// two by two, it is one per rank: 255), and the job leaves no namespace.
#[test]
fn two_hundred_fifty_six_ranks_on_sixteen_nodes_reduce_exactly() {
    if !namespaces_or_skip("two_hundred_fifty_six_ranks_on_sixteen_nodes_reduce_exactly") {
        return;
    }
    let (nodes, ranks) = (16u32, 256u32);
    let mut cmd = Command::new(taskfold_bin());
    cmd.args(["run", "--sim-nodes", &nodes.to_string()])
        .args(["-n", &ranks.to_string(), "--timeout", "400s", "--"])
        .arg(tf_check())
        .args(["--size", "8", "--reductions", "4", "--root", "17"])
        .env("RUST_LOG", "warn,taskfold::master::drive=debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn taskfold run");
    let pid = child.id();
    let out = wait_bounded(child, LIMIT);
    let t = text(&out);
    assert!(out.status.success(), "job failed:\n{t}");
    for r in 0..ranks {
        assert!(
            t.contains(&format!("[{r}] rank {r}: ")),
            "rank {r} silent:\n{t}"
        );
        assert!(!t.contains(&format!("[{r}] rank {r}: 0 ok")), "{t}");
    }
    assert!(!t.contains("WRONG"), "{t}");
    assert_eq!(t.matches(" 0 failed").count(), ranks as usize, "{t}");
    let tasks = tasks_per_reduction(&t);
    assert_eq!(tasks.len(), 4, "four reductions: {tasks:?}");
    assert!(
        tasks.values().all(|&n| n <= 8 * nodes as usize),
        "tasks per reduction, by key: {tasks:?}"
    );
    let left = namespaces_of(pid);
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// The master's tasks (its `task` lines at debug) per reduction key.
fn tasks_per_reduction(t: &str) -> std::collections::BTreeMap<String, usize> {
    let mut per = std::collections::BTreeMap::new();
    for l in t
        .lines()
        .filter(|l| l.contains("taskfold::master::drive: task "))
    {
        if let Some(key) = l.split("key=").nth(1).and_then(|k| k.split(' ').next()) {
            *per.entry(key.to_string()).or_default() += 1;
        }
    }
    per
}

/// `taskfold bench scale` on a small scale (8 ranks on 2 nodes against 4
/// of one node), with its yardsticks: one round, whose figures the JSON
/// holds, the ratio of the two medians judged against the target, each
/// yardstick's ratio the ratio of its own two medians, and the report
/// says so. Open MPI's yardstick runs where Open MPI is installed (always
/// in CI).
#[test]
fn bench_scale_judges_the_ratio_of_many_ranks_on_nodes_to_few_on_one() {
    if !namespaces_or_skip("bench_scale_judges_the_ratio_of_many_ranks_on_nodes_to_few_on_one") {
        return;
    }
    let with_mpi = std::env::var_os("CI").is_some() || on_path("mpirun.openmpi");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("scale.json");
    let mut cmd = Command::new(taskfold_bin());
    cmd.args([
        "bench", "scale", "--ranks", "8", "--nodes", "2", "--base", "4",
    ])
    .args(["--reps", "4", "--rounds", "1", "--floor", "--json"])
    .arg(&json);
    if with_mpi {
        cmd.args(["--mpi", "openmpi"]);
    }
    let out = run_bounded(cmd, LIMIT);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rounds = r["rounds"].as_array().expect("rounds");
    assert_eq!(rounds.len(), 1, "{r}");
    let (base, scaled) = (&rounds[0]["base"], &rounds[0]["scaled"]);
    let median = |j: &serde_json::Value| j["median_s"].as_f64().expect("a median");
    assert!(median(base) > 0.0 && median(scaled) > 0.0, "{r}");
    let ratio = r["ratio"].as_f64().expect("the ratio");
    assert!((ratio - median(scaled) / median(base)).abs() < 1e-9, "{r}");
    assert_eq!(r["met"].as_bool(), Some(ratio <= 3.0), "{r}");
    for j in [base, scaled] {
        assert!(
            j["cpu_per_rep_s"].as_f64().is_some_and(f64::is_finite),
            "{r}"
        );
    }
    let verdict = format!("median ratio {ratio:.1}, met: ");
    assert!(t.contains(&verdict), "{t}");
    let mut yards = vec![("floor", "floor")];
    if with_mpi {
        yards.push(("mpi", "openmpi"));
        assert_eq!(r["mpi"].as_str(), Some("openmpi"), "{r}");
    } else {
        assert!(r["mpi"].is_null() && rounds[0]["mpi"].is_null(), "{r}");
    }
    for (key, name) in yards {
        let y = &rounds[0][key];
        let (b, s) = (
            y["base_s"].as_f64().unwrap(),
            y["scaled_s"].as_f64().unwrap(),
        );
        assert!(b > 0.0 && s > 0.0, "{key}: {r}");
        let yr = r[format!("{key}_ratio")]
            .as_f64()
            .expect("a yardstick's ratio");
        assert!(
            (yr - s / b).abs() < 1e-9 && (y["ratio"].as_f64() == Some(yr)),
            "{r}"
        );
        assert!(t.contains(&format!("{name}: median ratio {yr:.1}")), "{t}");
    }
}

/// Whether `name` is an executable file on `PATH`.
fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}

#[test]
fn bench_scale_refuses_fewer_than_two_repetitions() {
    let mut cmd = Command::new(taskfold_bin());
    cmd.args(["bench", "scale", "--reps", "1"]);
    let out = run_bounded(cmd, Duration::from_secs(30));
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("--reps 1: expected at least 2"), "{t}");
}

/// An MPI that is not one of the two is refused before any job starts.
#[test]
fn bench_scale_refuses_an_unknown_mpi() {
    let mut cmd = Command::new(taskfold_bin());
    cmd.args(["bench", "scale", "--mpi", "lam"]);
    let out = run_bounded(cmd, Duration::from_secs(30));
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("--mpi lam: expected openmpi or mpich"), "{t}");
    assert!(!t.contains("bench rank"), "a job ran: {t}");
}
