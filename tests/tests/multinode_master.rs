//! The master across simulated nodes (`taskfold run --sim-nodes 2`): a
//! standby on the other node takes over when the master, or its whole
//! node, dies, for the checker, `bench faults` and psdm. They need root;
//! a machine where namespaces cannot be made skips them with a message,
//! except in CI (`CI` set), where they must run.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use taskfold_tests::netns::{launch, namespaces_of, namespaces_or_skip, start};
use taskfold_tests::{run_bounded, signal, taskfold_bin, text, wait_bounded, wait_for_pid, Signal};

const LIMIT: Duration = Duration::from_secs(240);

fn tf_failover() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tf_failover"))
}

/// A small deterministic generator of kill instants (splitmix64).
fn instant(trial: u64, span_ms: u64) -> Duration {
    let mut z = trial.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    Duration::from_millis((z ^ (z >> 31)) % (span_ms + 1))
}

/// Two nodes of two ranks (0, 1 | 2, 3), synchronous durability: the
/// `victims` are SIGKILLed together at `after` past rank 0's start, while
/// reductions to `root` go on. Rank 2, the lowest rank on the other node,
/// takes over as master; every reduction a victim had made safe ends
/// with the exact sum at the root; the others end with a typed loss; the
/// job goes on over the survivors and `taskfold run` exits 0.
fn master_killed_with_standby(victims: &[u32], root: u32, after: Duration) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let root_s = root.to_string();
    let args = [
        "--reductions",
        "40",
        "--pace-ms",
        "25",
        "--root",
        &root_s,
        "--pid-dir",
        d,
    ];
    let mut cmd = launch(2, 4, &[], &tf_failover(), &args);
    cmd.env("TASKFOLD_DURABILITY", "sync");
    let child = start(cmd);
    let launcher = child.id();
    let pids: Vec<i32> = victims
        .iter()
        .map(|v| {
            wait_for_pid(
                &dir.path().join(format!("rank-{v}.pid")),
                Duration::from_secs(60),
            )
        })
        .collect();
    std::thread::sleep(after);
    for pid in pids {
        let _ = signal(pid, Signal::KILL);
    }
    let out = wait_bounded(child, LIMIT);
    let t = text(&out);
    assert!(out.status.success(), "after {after:?}:\n{t}");
    assert!(
        t.contains("taskfold run: rank 0 killed by signal 9 (SIGKILL); the master died: the standby, rank 2, takes over"),
        "{t}"
    );
    let bad = |l: &&str| l.contains("] WRONG") || l.contains("] unexpected");
    assert!(!t.lines().any(|l| bad(&l)), "{t}");
    let survivors: Vec<u32> = (0..4).filter(|r| !victims.contains(r)).collect();
    for &r in &survivors {
        assert!(t.contains(&format!("[{r}] rank {r}: ")), "rank {r}:\n{t}");
        assert!(
            t.contains(&format!("[{r}] final ok over {survivors:?}")),
            "rank {r}:\n{t}"
        );
    }
    // Every reduction whose victims all made their contribution safe
    // ended with the exact sum at the root.
    let safe = |v: &u32, i: u32| t.lines().any(|l| l == format!("[{v}] safe {i}"));
    for i in (0..40).filter(|&i| victims.iter().all(|v| safe(v, i))) {
        let want = format!("[{root}] ok {i}");
        assert!(t.lines().any(|l| l == want), "{want} after {after:?}:\n{t}");
    }
    let left = namespaces_of(launcher);
    assert!(left.is_empty(), "left behind: {left:?}\n{t}");
}

/// The master (rank 0) SIGKILLed at instants drawn over the whole run.
#[test]
fn a_killed_master_is_replaced_by_the_standby_on_another_node() {
    if !namespaces_or_skip("a_killed_master_is_replaced_by_the_standby_on_another_node") {
        return;
    }
    for trial in 0..4 {
        master_killed_with_standby(&[0], 1, instant(trial, 800));
    }
}

/// The master's whole node (ranks 0 and 1) SIGKILLed at once: the
/// standby on the other node takes over, and both victims' safe
/// contributions come from their buddies there.
#[test]
fn the_masters_whole_node_dies_and_the_standby_goes_on() {
    if !namespaces_or_skip("the_masters_whole_node_dies_and_the_standby_goes_on") {
        return;
    }
    for trial in 10..13 {
        master_killed_with_standby(&[0, 1], 3, instant(trial, 800));
    }
}

/// `bench faults` over two simulated nodes of two ranks each, 1 MiB
/// contributions, root 1, with `args`: its JSON reports, once it
/// succeeded. Every report: no wrong result, no hang, every trial
/// killed after its victims' contributions were safe recovered.
fn bench_faults_on_two_nodes(args: &[&str]) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("faults.json");
    let mut cmd = Command::new(taskfold_bin());
    cmd.args(["bench", "faults", "--sim-nodes", "2", "--np", "4"])
        .args(["--size", "1M", "--root", "1", "--timeout", "20s"])
        .args(args)
        .arg("--json")
        .arg(&json);
    let out = run_bounded(cmd, LIMIT);
    assert!(out.status.success(), "{}", text(&out));
    let reports: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let reports = reports.as_array().unwrap().clone();
    for r in &reports {
        assert_eq!(r["nodes"], 2, "{r}");
        assert_eq!((&r["wrong"], &r["hangs"]), (&0.into(), &0.into()), "{r}");
        assert_eq!(
            r["after_safe"]["recovered"], r["after_safe"]["trials"],
            "{r}"
        );
    }
    reports
}

/// `bench faults` over two simulated nodes: a whole node (ranks 2 and 3)
/// and the master killed at instants drawn over the reduction, with
/// synchronous durability — every trial after the victims' contributions
/// were safe recovered, none wrong, none hung.
#[test]
fn bench_faults_kills_a_node_and_the_master_across_nodes() {
    if !namespaces_or_skip("bench_faults_kills_a_node_and_the_master_across_nodes") {
        return;
    }
    let reports = bench_faults_on_two_nodes(&[
        "--kill",
        "node,master",
        "--kill-rank",
        "2",
        "--durability",
        "sync",
        "--trials",
        "4",
    ]);
    assert_eq!(reports.len(), 2);
    let victims = |r: &serde_json::Value| r["victims"].clone();
    assert_eq!(
        victims(&reports[0]),
        serde_json::json!([2, 3]),
        "{}",
        reports[0]
    );
    assert_eq!(
        victims(&reports[1]),
        serde_json::json!([0]),
        "{}",
        reports[1]
    );
}

/// `bench faults` over two simulated nodes, asynchronous durability, the
/// master killed at instants drawn over the reduction: once its disk copy
/// is written its contribution outlives it, though the standby on the
/// other node cannot read that disk (rank 1, its node-mate, offers the
/// copy) — every after-safe trial recovered, none wrong, none hung.
#[test]
fn bench_faults_recovers_an_asynchronous_master_across_nodes() {
    if !namespaces_or_skip("bench_faults_recovers_an_asynchronous_master_across_nodes") {
        return;
    }
    let args = [
        "--kill",
        "master",
        "--durability",
        "async",
        "--trials",
        "20",
    ];
    let reports = bench_faults_on_two_nodes(&args);
    assert_eq!(
        reports[0]["victims"],
        serde_json::json!([0]),
        "{}",
        reports[0]
    );
}

/// The pid of the process named `comm` whose environment holds `tag` and
/// `TASKFOLD_RANK=rank` (a rank inside a simulated node is not a child of
/// the launcher).
fn pid_of_rank(tag: &str, rank: u32, comm: &str) -> Option<i32> {
    let want = format!("TASKFOLD_RANK={rank}");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let name = std::fs::read_to_string(e.path().join("comm")).ok()?;
        let env = std::fs::read(e.path().join("environ")).ok()?;
        let has = |v: &str| env.split(|&b| b == 0).any(|x| x == v.as_bytes());
        (name.trim() == comm && has(tag) && has(&want)).then_some(pid)
    })
}

/// About two seconds of migration on two cores: kill instants drawn over
/// it land in every phase of the run.
const PSDM_JOB: &[&str] = &[
    "--nx",
    "320",
    "--nz",
    "180",
    "--shots",
    "24",
    "--receivers",
    "96",
    "--batch",
    "24",
    "--root",
    "1",
];

/// psdm on two nodes of two ranks, its image's root on rank 1; `kill`:
/// SIGKILL rank 0 (the master) that long after it started. Returns the
/// job's output and its time from rank 0's start to its end.
fn psdm_on_two_nodes(standby: &str, kill: Option<Duration>, tag: &str) -> (Output, Duration) {
    taskfold_bin();
    let psdm = taskfold_tests::psdm_bin();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("psdm.png");
    let mut cmd = launch(2, 4, &[], &psdm, PSDM_JOB);
    cmd.arg("--out").arg(&out);
    cmd.env("TASKFOLD_STANDBY", standby).env("TF_TEST_TAG", tag);
    let child = start(cmd);
    let deadline = Instant::now() + Duration::from_secs(60);
    let tag = format!("TF_TEST_TAG={tag}");
    let pid = loop {
        if let Some(pid) = pid_of_rank(&tag, 0, "psdm") {
            break pid;
        }
        assert!(Instant::now() < deadline, "rank 0 never started");
        std::thread::sleep(Duration::from_millis(2));
    };
    let t = Instant::now();
    if let Some(after) = kill {
        std::thread::sleep(after);
        let _ = signal(pid, Signal::KILL);
    }
    (wait_bounded(child, LIMIT), t.elapsed())
}

fn psdm_checksum(t: &str) -> f64 {
    let line = t.lines().find_map(|l| l.split("psdm: checksum ").nth(1));
    let value = line.and_then(|l| l.split_whitespace().next()?.parse().ok());
    value.unwrap_or_else(|| panic!("no checksum:\n{t}"))
}

/// psdm with `--root 1` on two nodes: rank 0 — the master — SIGKILLed at
/// instants drawn over the run once the job is up. With the standby (the default on
/// several nodes) the job ends with exit code 0 and the failure-free
/// image's checksum every time; without one, every surviving rank ends
/// with `MasterLost` and the job with a non-zero exit code; never a hang.
#[test]
fn psdm_survives_its_master_killed_anywhere_with_a_standby() {
    if !namespaces_or_skip("psdm_survives_its_master_killed_anywhere_with_a_standby") {
        return;
    }
    let (clean, took) = psdm_on_two_nodes("auto", None, "clean");
    let t = text(&clean);
    assert!(clean.status.success(), "{t}");
    let want = psdm_checksum(&t);
    // A run may be quicker than the clean one: a kill that came after
    // rank 0 ended hit nobody, and the trial is drawn again (bounded).
    let killed = |t: &str| t.contains("taskfold run: rank 0 killed by signal 9");
    let mut hits = 0;
    for trial in 0..12 {
        // Over the run once the job is up: a master killed inside the
        // bootstrap (its first milliseconds) leaves no job to take over,
        // and ranks that cannot reach it say so (the Launching chapter).
        let span = took.as_millis() as u64;
        let after = took / 10 + instant(20 + trial, span * 85 / 100);
        let (out, _) = psdm_on_two_nodes("auto", Some(after), &format!("standby-{trial}"));
        let t = text(&out);
        assert!(out.status.success(), "killed after {after:?}:\n{t}");
        let got = psdm_checksum(&t);
        assert!(
            (got - want).abs() <= 1e-5 * want.abs(),
            "{got} vs {want} after {after:?}:\n{t}"
        );
        if killed(&t) {
            assert!(t.contains("the standby, rank 2, takes over"), "{t}");
            hits += 1;
            if hits == 4 {
                break;
            }
        }
    }
    assert_eq!(hits, 4, "the kills kept missing the run");
    for attempt in 0..4u32 {
        let after = took / (3 + attempt);
        let (out, elapsed) =
            psdm_on_two_nodes("off", Some(after), &format!("no-standby-{attempt}"));
        let t = text(&out);
        if !killed(&t) {
            continue;
        }
        assert!(!out.status.success(), "{t}");
        assert!(
            t.contains("taskfold run: rank 0 killed by signal 9 (SIGKILL); the master died"),
            "{t}"
        );
        for r in 1..4 {
            let lost = t
                .lines()
                .any(|l| l.starts_with(&format!("[{r}] ")) && l.contains("master"));
            assert!(lost, "rank {r} did not report the lost master:\n{t}");
        }
        assert!(elapsed < Duration::from_secs(60), "{elapsed:?}:\n{t}");
        return;
    }
    panic!("the kill without a standby kept missing the run");
}
