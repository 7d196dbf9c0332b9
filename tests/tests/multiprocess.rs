//! Multi-process reductions over TCP: real ranks launched by `taskfold run`
//! and by MPICH's `mpiexec`, results checked by the ranks themselves.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use taskfold_tests::{
    job_key, job_key_file, run_bounded, signal, taskfold_bin, text, wait_bounded, wait_for_pid,
};

const LIMIT: Duration = Duration::from_secs(240);

fn tf_check() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tf_check"))
}

fn launch(np: u32, args: &[&str]) -> Command {
    let mut cmd = Command::new(taskfold_bin());
    cmd.args(["run", "-n", &np.to_string(), "--timeout", "200s", "--"])
        .arg(tf_check())
        .args(args);
    cmd
}

fn assert_all_ok(out: &std::process::Output, np: u32) {
    let t = text(out);
    assert!(out.status.success(), "job failed:\n{t}");
    for r in 0..np {
        assert!(
            t.contains(&format!("[{r}] rank {r}: "))
                && !t.contains(&format!("[{r}] rank {r}: 0 ok")),
            "{t}"
        );
    }
    assert!(
        !t.contains("WRONG") && t.matches(" 0 failed").count() == np as usize,
        "{t}"
    );
}

#[test]
fn taskfold_run_4_ranks_28_concurrent_8mib() {
    let out = run_bounded(
        launch(
            4,
            &["--size", "8388608", "--reductions", "28", "--root", "1"],
        ),
        LIMIT,
    );
    assert_all_ok(&out, 4);
}

#[test]
fn taskfold_run_8_ranks_28_concurrent_8mib() {
    let out = run_bounded(
        launch(
            8,
            &["--size", "8388608", "--reductions", "28", "--root", "1"],
        ),
        LIMIT,
    );
    assert_all_ok(&out, 8);
    assert!(
        bytes_read_in_place(&out) > 0,
        "same-node ranks read no contribution in place:\n{}",
        text(&out)
    );
}

/// Without the shared heap, same-node gets copy with `process_vm_readv`
/// (or stream): the results are the same, and nothing is read in place.
/// `off` turns the heap off as `0` does (the heap reads its switch with
/// the settings' boolean parser).
#[test]
fn taskfold_run_4_ranks_without_the_shared_heap() {
    let mut cmd = launch(
        4,
        &["--size", "4194304", "--reductions", "8", "--root", "2"],
    );
    cmd.env("TASKFOLD_SHARED_HEAP", "off");
    let out = run_bounded(cmd, LIMIT);
    assert_all_ok(&out, 4);
    assert_eq!(bytes_read_in_place(&out), 0, "{}", text(&out));
}

/// With `TASKFOLD_INTEGRITY=mac` every frame between the ranks is sealed;
/// with the shared heap and cross-memory copies off, every contribution
/// crosses a socket, sealed: the results are the same. A launch with an
/// unknown value is refused naming the variable.
#[test]
fn taskfold_run_4_ranks_with_every_frame_sealed() {
    let mut cmd = launch(
        4,
        &["--size", "4194304", "--reductions", "8", "--root", "2"],
    );
    cmd.env("TASKFOLD_INTEGRITY", "mac")
        .env("TASKFOLD_SHARED_HEAP", "off")
        .env("TASKFOLD_TCP_CMA", "0");
    let out = run_bounded(cmd, LIMIT);
    assert_all_ok(&out, 4);
    let mut bad = launch(2, &["--size", "1024", "--reductions", "1"]);
    bad.env("TASKFOLD_INTEGRITY", "sha");
    let out = run_bounded(bad, LIMIT);
    assert!(!out.status.success());
    assert!(text(&out).contains("TASKFOLD_INTEGRITY"), "{}", text(&out));
}

/// The TCP transport on one thread (`TASKFOLD_TCP_THREADS=1`) gives the
/// same results; a thread count that is not one is refused by the launcher
/// before any rank starts, with an error naming the variable.
#[test]
fn one_transport_thread_works_and_a_bad_count_is_a_clear_error() {
    let mut cmd = launch(
        4,
        &["--size", "2097152", "--reductions", "8", "--root", "2"],
    );
    cmd.env("TASKFOLD_TCP_THREADS", "1");
    assert_all_ok(&run_bounded(cmd, LIMIT), 4);
    let mut cmd = launch(2, &["--reductions", "1"]);
    cmd.env("TASKFOLD_TCP_THREADS", "zero");
    let out = run_bounded(cmd, LIMIT);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        t.contains("taskfold run: TASKFOLD_TCP_THREADS=\"zero\": expected"),
        "{t}"
    );
    assert!(
        !t.contains("[0]") && !t.contains("[1]"),
        "a rank started:\n{t}"
    );
}

/// A rank started without the launcher (as by `mpiexec`) and without a
/// job key does not start, naming the variables that give one and the
/// insecure mode; with `TASKFOLD_INSECURE` it runs, warning.
#[test]
fn a_rank_without_a_key_does_not_start_naming_the_variables() {
    let dir = tempfile::tempdir().unwrap();
    let rank = |insecure: bool| {
        let mut cmd = Command::new(tf_check());
        cmd.args(["--reductions", "1", "--root", "0"])
            .env("TASKFOLD_RANK", "0")
            .env("TASKFOLD_SIZE", "1")
            .env("TASKFOLD_RENDEZVOUS", dir.path().join("master.addr"))
            .env("RUST_LOG", "warn")
            .env_remove("TASKFOLD_JOB_KEY")
            .env_remove("TASKFOLD_JOB_KEY_FILE")
            .env_remove("TASKFOLD_INSECURE");
        if insecure {
            cmd.env("TASKFOLD_INSECURE", "1");
        }
        run_bounded(cmd, LIMIT)
    };
    let out = rank(false);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(3), "{t}");
    assert!(
        t.contains("tf_check: cannot start: this job has no key"),
        "{t}"
    );
    for var in [
        "TASKFOLD_JOB_KEY_FILE",
        "TASKFOLD_JOB_KEY",
        "TASKFOLD_INSECURE",
    ] {
        assert!(t.contains(var), "{var} in {t}");
    }
    let out = rank(true);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("without a key (insecure mode)"), "{t}");
}

/// A rank started without the launcher (as by `mpiexec`) with a bad value
/// stops at once, naming the variable: a number that is not one, and a
/// boolean that is not one (the shared heap's switch, which the heap
/// itself reads before `main`, with the same parser). `taskfold run`
/// refuses the same values before starting any rank.
#[test]
fn a_bad_setting_stops_a_rank_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    for (name, value) in [
        ("TASKFOLD_PING_MS", "abc"),
        ("TASKFOLD_SHARED_HEAP", "maybe"),
    ] {
        let mut cmd = Command::new(tf_check());
        cmd.args(["--reductions", "1", "--root", "0"])
            .env("TASKFOLD_RANK", "0")
            .env("TASKFOLD_SIZE", "1")
            .env("TASKFOLD_RENDEZVOUS", dir.path().join("master.addr"))
            .env(name, value);
        let out = run_bounded(cmd, LIMIT);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(3), "{name}={value}: {t}");
        let quoted = format!("tf_check: cannot start: {name}=\"{value}\": expected");
        assert!(t.contains(&quoted), "{t}");
        let mut cmd = launch(1, &["--reductions", "1", "--root", "0"]);
        cmd.env(name, value);
        let out = run_bounded(cmd, LIMIT);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{name}={value}: {t}");
        assert!(
            t.contains(&format!("taskfold run: {name}=\"{value}\"")),
            "{t}"
        );
    }
    assert!(
        !dir.path().join("master.addr").exists(),
        "a rank started a master"
    );
}

/// A misspelt variable is not refused, but warned about: once for the
/// job, by the launcher, with the closest name (the ranks, told so by the
/// launcher, do not repeat it).
#[test]
fn an_unknown_variable_is_warned_about() {
    let mut cmd = launch(2, &["--size", "4096", "--reductions", "1", "--root", "0"]);
    cmd.env("TASKFOLD_PING_MZ", "100").env("RUST_LOG", "warn");
    let out = run_bounded(cmd, LIMIT);
    assert_all_ok(&out, 2);
    let t = text(&out);
    assert_eq!(
        t.matches("TASKFOLD_PING_MZ is set but is no taskfold setting")
            .count(),
        1,
        "{t}"
    );
    assert!(
        t.contains("taskfold run: warning: TASKFOLD_PING_MZ is set but is no taskfold setting (did you mean TASKFOLD_PING_MS?)"),
        "{t}"
    );
}

/// Gets streamed over the sockets, as between nodes (no shared heap, no
/// cross-memory reads): every contribution of 3 MiB arrives in 1 MiB
/// chunks, each folded while the next is read (`InPlace` values fold in
/// pieces at the root too); the results are exact.
#[test]
fn streamed_gets_are_folded_piece_by_piece() {
    let mut cmd = launch(
        4,
        &[
            "--size",
            "3145728",
            "--reductions",
            "6",
            "--root",
            "3",
            "--in-place",
        ],
    );
    cmd.env("TASKFOLD_SHARED_HEAP", "0")
        .env("TASKFOLD_TCP_CMA", "0");
    let out = run_bounded(cmd, LIMIT);
    assert_all_ok(&out, 4);
    assert_eq!(bytes_read_in_place(&out), 0, "{}", text(&out));
    // 6 reductions of 4 ranks: 18 fetches of 3 chunks, each folded alone.
    assert!(
        reported(&out, ": folded ", " pieces as they arrived") >= 18 * 3,
        "{}",
        text(&out)
    );
}

/// The sum over ranks of `N` in lines `...{before}N{after}`.
fn reported(out: &std::process::Output, before: &str, after: &str) -> u64 {
    text(out)
        .lines()
        .filter_map(|l| l.split(before).nth(1))
        .filter_map(|l| l.strip_suffix(after))
        .map(|n| n.trim().parse::<u64>().expect("a count"))
        .sum()
}

/// The bytes all ranks report having read in place.
fn bytes_read_in_place(out: &std::process::Output) -> u64 {
    reported(out, ": read ", " bytes in place")
}

/// MPICH's Hydra launcher, if installed (CI installs `mpich`).
fn hydra() -> Option<PathBuf> {
    for name in ["mpiexec.hydra", "mpiexec.mpich"] {
        for dir in std::env::var("PATH").unwrap_or_default().split(':') {
            let p = PathBuf::from(dir).join(name);
            if p.exists() {
                return Some(p);
            }
        }
    }
    None
}

fn mpiexec_job(np: u32, key_in_file: bool) {
    let Some(mpiexec) = hydra() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install mpich for the mpiexec tests"
        );
        eprintln!("skipping: MPICH's mpiexec is not installed (apt-get install mpich)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(mpiexec);
    // Hydra passes our environment on to every rank: they find their rank in
    // PMI_RANK / PMI_SIZE and the master through the rendezvous file, and
    // the job's key where a user puts it: in a private file, or in the
    // variable itself.
    if key_in_file {
        cmd.env("TASKFOLD_JOB_KEY_FILE", job_key_file(dir.path()))
            .env_remove("TASKFOLD_JOB_KEY");
    } else {
        cmd.env("TASKFOLD_JOB_KEY", job_key())
            .env_remove("TASKFOLD_JOB_KEY_FILE");
    }
    cmd.env("TASKFOLD_RENDEZVOUS", dir.path().join("master.addr"))
        .env("TASKFOLD_JOB", format!("mpiexec-test-{np}"))
        .env_remove("TASKFOLD_INSECURE")
        .env_remove("TASKFOLD_RANK")
        .env_remove("TASKFOLD_SIZE")
        .args(["-n", &np.to_string()])
        .arg(tf_check())
        .args(["--size", "8388608", "--reductions", "28", "--root", "1"]);
    let out = run_bounded(cmd, LIMIT);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert_eq!(t.matches(" 0 failed").count(), np as usize, "{t}");
}

#[test]
fn mpiexec_4_ranks() {
    mpiexec_job(4, true);
}

#[test]
fn mpiexec_8_ranks() {
    mpiexec_job(8, false);
}

#[derive(serde::Deserialize)]
struct Stats {
    task_log: Vec<Task>,
    dead: Vec<u32>,
}

#[derive(serde::Deserialize)]
struct Task {
    reduction: String,
    task_id: u64,
    receiver: u32,
    provider: u32,
    receiver_path: Vec<u32>,
    provider_path: Vec<u32>,
}

/// Process state letter from /proc (`T` when stopped).
fn state(pid: i32) -> char {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().and_then(|r| r.trim().chars().next()))
        .unwrap_or('?')
}

/// A one-sided get: a rank stopped (SIGSTOP) right after it contributed is
/// read in place by the root, in its shared heap, without a request it
/// would have to answer. The others finish while it is still stopped (the
/// failure timeout is far away: it is not declared failed), and it finds
/// its reduction complete when it resumes.
#[test]
fn a_stopped_provider_is_read_in_place_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let log = d.join("tasks.json");
    // Rank 2 joins first and stops; root 1 joins next and is given the
    // task (the root always receives); rank 0 joins last.
    let mut cmd = launch(
        3,
        &[
            "--reductions",
            "1",
            "--root",
            "1",
            "--stop-after-join",
            "2",
            "--delay",
            "1:600/0:1200",
            "--pid-dir",
            d.to_str().unwrap(),
            "--task-log",
            log.to_str().unwrap(),
        ],
    );
    cmd.env("TASKFOLD_FAILURE_TIMEOUT_MS", "60000")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    let pid = wait_for_pid(&d.join("rank-2.pid"), Duration::from_secs(60));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !(d.join("rank-0.done").exists() && d.join("rank-1.done").exists()) {
        assert!(
            std::time::Instant::now() < deadline,
            "ranks 0 and 1 did not finish while rank 2 was stopped (state {})",
            state(pid)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(state(pid), 'T', "rank 2 was still stopped");
    signal(pid, taskfold_tests::Signal::CONT).unwrap();
    let out = wait_bounded(child, LIMIT);
    assert_all_ok(&out, 3);
    let stats: Stats = serde_json::from_slice(&std::fs::read(&log).unwrap()).unwrap();
    assert!(stats.dead.is_empty(), "nobody was declared failed");
    let first = stats
        .task_log
        .iter()
        .find(|t| t.task_id == 0)
        .expect("a first task");
    assert_eq!(
        (first.receiver, first.provider),
        (1, 2),
        "the root read rank 2's data"
    );
}

#[test]
fn a_stopped_rank_is_folded_last_and_holds_nobody_up() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("tasks.json");
    let mut cmd = launch(
        4,
        &[
            "--size",
            "262144",
            "--reductions",
            "6",
            "--root",
            "1",
            "--stop-rank",
            "2",
            "--pid-dir",
            dir.path().to_str().unwrap(),
            "--task-log",
            log.to_str().unwrap(),
        ],
    );
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    let pid = wait_for_pid(&dir.path().join("rank-2.pid"), Duration::from_secs(60));
    // Wait until it has really stopped, give the others time to do all they
    // can, then resume it.
    for _ in 0..500 {
        if state(pid) == 'T' {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(state(pid), 'T', "rank 2 did not stop");
    std::thread::sleep(Duration::from_millis(1500));
    signal(pid, taskfold_tests::Signal::CONT).unwrap();
    let out = wait_bounded(child, LIMIT);
    assert_all_ok(&out, 4);
    let stats: Stats = serde_json::from_slice(&std::fs::read(&log).unwrap()).unwrap();
    for k in 0..6 {
        let id = format!("check-{k}");
        let mut tasks: Vec<&Task> = stats
            .task_log
            .iter()
            .filter(|t| t.reduction == id)
            .collect();
        tasks.sort_by_key(|t| t.task_id);
        assert_eq!(tasks.len(), 3, "{id}: p - 1 tasks");
        // Every task before the last one folds ranks 0, 1 and 3 only.
        for t in &tasks[..2] {
            assert!(
                !t.receiver_path.contains(&2) && !t.provider_path.contains(&2),
                "{id}: rank 2 folded early"
            );
        }
        let last = tasks[2];
        let (mut with2, other) = if last.provider_path == [2] {
            (last.provider_path.clone(), last.receiver_path.clone())
        } else {
            (last.receiver_path.clone(), last.provider_path.clone())
        };
        assert_eq!(
            with2,
            vec![2],
            "{id}: rank 2's original is folded alone, last"
        );
        with2.extend(other);
        with2.sort();
        assert_eq!(with2, vec![0, 1, 2, 3]);
    }
}

#[test]
fn mismatched_lengths_fail_on_every_process() {
    let out = run_bounded(
        launch(
            4,
            &[
                "--size",
                "65536",
                "--reductions",
                "3",
                "--mismatch-rank",
                "2",
            ],
        ),
        LIMIT,
    );
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert_eq!(t.matches("expected error").count(), 12, "{t}");
}

#[test]
fn a_rank_that_exits_early_is_reported_and_nobody_hangs() {
    let out = run_bounded(
        launch(
            4,
            &["--size", "65536", "--reductions", "3", "--exit-rank", "3"],
        ),
        LIMIT,
    );
    taskfold_tests::faults::assert_rank_3_exited_early(&out);
}
