//! `taskfold run` as a user meets it, through the built binary: MPI's
//! `-np`, the renamed `--nodes`, durations with their units, one line per
//! rank that failed and one verdict per job, "died" for a signal alone,
//! the exit code of each ending, examples in every help, and plain text
//! in a pipe.

use std::process::{Command, Output};
use std::time::Duration;
use taskfold_tests::{run_bounded, taskfold_bin, text};

const LIMIT: Duration = Duration::from_secs(120);

/// `taskfold ARGS`, run to its end.
fn taskfold(args: &[&str]) -> Output {
    let mut cmd = Command::new(taskfold_bin());
    cmd.args(args).env_remove("RUST_LOG");
    run_bounded(cmd, LIMIT)
}

/// `taskfold run -n N [EXTRA] -- sh -c SCRIPT`.
fn run_sh(n: u32, extra: &[&str], script: &str) -> Output {
    let n = n.to_string();
    let mut args = vec!["run", "-n", &n];
    args.extend(extra);
    args.extend(["--", "sh", "-c", script]);
    taskfold(&args)
}

#[test]
fn np_is_read_as_n_and_a_clean_job_has_one_verdict() {
    let out = taskfold(&[
        "run",
        "-np",
        "2",
        "--",
        "sh",
        "-c",
        "echo r=$TASKFOLD_RANK s=$TASKFOLD_SIZE",
    ]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(
        t.contains("[0] r=0 s=2") && t.contains("[1] r=1 s=2"),
        "{t}"
    );
    assert_eq!(t.matches("taskfold run: ").count(), 1, "{t}");
    assert!(
        t.contains("taskfold run: done: all 2 ranks exited 0"),
        "{t}"
    );
    // The program's own `-np` is its own.
    let out = taskfold(&["run", "-n", "1", "--", "sh", "-c", "echo $0 $1", "-np", "7"]);
    assert!(text(&out).contains("[0] -np 7"), "{}", text(&out));
}

#[test]
fn the_old_names_are_refused_naming_the_new_ones() {
    for (args, hint) in [
        (
            &["run", "--nodes", "2", "-n", "2", "--", "true"][..],
            "use --sim-nodes 2",
        ),
        (
            &["bench", "faults", "--nodes", "2"][..],
            "use --sim-nodes 2",
        ),
        (
            &["run", "-n", "1", "--timeout", "30", "--", "true"][..],
            "write 30s for seconds",
        ),
        (
            &["bench", "checkpoint", "--timeout-ms", "300"][..],
            "--timeout 300ms",
        ),
    ] {
        let out = taskfold(args);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {t}");
        assert!(t.contains(hint), "{args:?}: {hint} in\n{t}");
    }
}

#[test]
fn a_rank_lost_to_a_signal_is_said_once_and_survived() {
    let out = run_sh(
        3,
        &[],
        "if [ $TASKFOLD_RANK = 1 ]; then kill -9 $$; fi; sleep 1",
    );
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert_eq!(
        t.matches("rank 1 killed by signal 9 (SIGKILL)").count(),
        1,
        "{t}"
    );
    assert_eq!(
        t.matches("taskfold run: ").count(),
        2,
        "one line per failed rank, one verdict:\n{t}"
    );
    assert!(
        t.contains(
            "taskfold run: done: the job survived the loss of rank 1; every other process exited 0"
        ),
        "{t}"
    );
}

#[test]
fn an_exit_code_is_an_exit_code_and_died_is_for_a_signal() {
    let out = run_sh(3, &[], "if [ $TASKFOLD_RANK = 2 ]; then exit 3; fi; exit 0");
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert_eq!(
        t.matches("rank 2 exited with code 3").count(),
        2,
        "its line and the verdict:\n{t}"
    );
    assert!(
        t.contains("taskfold run: failed: rank 2 exited with code 3"),
        "{t}"
    );
    assert!(!t.contains("died"), "{t}");
    // The master exits with a code: it ended, it did not die; the others,
    // left without it, are stopped after the grace.
    let mut cmd = Command::new(taskfold_bin());
    cmd.args(["run", "-n", "3", "--", "sh", "-c"])
        .arg("if [ $TASKFOLD_RANK = 0 ]; then exit 4; fi; exec sleep 60")
        .env("TASKFOLD_FAILURE_TIMEOUT_MS", "100");
    let out = run_bounded(cmd, LIMIT);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains(
            "taskfold run: rank 0 exited with code 4; the master ended and no standby takes over"
        ),
        "{t}"
    );
    assert!(
        t.contains("taskfold run: no master left: stopping ranks 1 and 2"),
        "{t}"
    );
    assert!(
        t.contains(
            "taskfold run: failed: the master, rank 0, exited with code 4 and no standby took over"
        ),
        "{t}"
    );
    assert!(!t.contains("died"), "{t}");
    // Killed by a signal, the master died.
    let mut cmd = Command::new(taskfold_bin());
    cmd.args(["run", "-n", "2", "--", "sh", "-c"])
        .arg("if [ $TASKFOLD_RANK = 0 ]; then kill -9 $$; fi; exec sleep 60")
        .env("TASKFOLD_FAILURE_TIMEOUT_MS", "100");
    let t = text(&run_bounded(cmd, LIMIT));
    assert!(
        t.contains("taskfold run: rank 0 killed by signal 9 (SIGKILL); the master died and no standby takes over"),
        "{t}"
    );
    assert!(
        t.contains("taskfold run: failed: the master, rank 0, died (killed by signal 9, SIGKILL)"),
        "{t}"
    );
}

#[test]
fn a_time_limit_has_its_own_exit_code() {
    let out = run_sh(2, &["--timeout", "1s"], "exec sleep 60");
    let t = text(&out);
    assert_eq!(out.status.code(), Some(124), "{t}");
    assert!(
        t.contains("taskfold run: the time limit of 1s was reached: stopping ranks 0 and 1"),
        "{t}"
    );
    assert!(
        t.contains("taskfold run: failed: the time limit (--timeout) was reached"),
        "{t}"
    );
    // The ranks it stopped are said once, in the line that stops them.
    assert!(!t.contains("killed by signal"), "{t}");
    assert_eq!(t.matches("taskfold run: ").count(), 2, "{t}");
}

#[test]
fn every_help_has_examples() {
    let commands: [&[&str]; 11] = [
        &[],
        &["run"],
        &["config"],
        &["demo"],
        &["bench"],
        &["bench", "reduce"],
        &["bench", "faults"],
        &["bench", "transports"],
        &["bench", "compare"],
        &["bench", "recovery"],
        &["bench", "checkpoint"],
    ];
    for path in commands {
        let mut args = path.to_vec();
        args.push("--help");
        let out = taskfold(&args);
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{path:?}: {}", text(&out));
        assert!(
            help.contains("\nExamples:\n  taskfold "),
            "{path:?}:\n{help}"
        );
        assert!(!help.contains("paper"), "{path:?}:\n{help}");
        assert!(!help.contains('\x1b'), "{path:?}: colour in a pipe");
    }
}

/// In a pipe, the ranks' logs (the command's own logger, at `RUST_LOG`)
/// carry no colour codes.
#[test]
fn logs_are_plain_text_in_a_pipe() {
    let mut cmd = Command::new(taskfold_bin());
    cmd.args(["demo", "-n", "2", "--reductions", "2", "--size", "4K"])
        .env("RUST_LOG", "taskfold=debug");
    let out = run_bounded(cmd, LIMIT);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("runtime started"), "{t}");
    assert!(!t.contains('\x1b'), "colour codes in a pipe:\n{t}");
}
