//! Settings a user can see and keep, through the built binaries: `taskfold
//! config` prints every setting with its source; a `taskfold.toml` (or the
//! file `TASKFOLD_CONFIG` names) is read by the launcher and by the ranks;
//! a misspelt variable is warned about once per job, with the closest
//! name; the `taskfold` command, built as a user builds it, has no test
//! hooks; and an application with no logger of its own still hears that a
//! rank was declared failed.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;
use taskfold_tests::{psdm_bin, run_bounded, taskfold_bin, text};

const LIMIT: Duration = Duration::from_secs(120);

/// `taskfold ARGS` in `dir`, with no `TASKFOLD_*` variable but `env`.
fn taskfold_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(taskfold_bin());
    cmd.current_dir(dir).args(args);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("TASKFOLD_")) {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().copied());
    run_bounded(cmd, LIMIT)
}

/// The line of `name` in `taskfold config`'s output, split in words.
fn row<'a>(t: &'a str, name: &str) -> Vec<&'a str> {
    t.lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in\n{t}"))
        .split_whitespace()
        .collect()
}

#[test]
fn config_prints_every_setting_and_its_source() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("taskfold.toml"),
        "# kept with the job\nping_ms = 100\ndurability = \"sync\"\nnotice_board = false\n",
    )
    .unwrap();
    let out = taskfold_in(dir.path(), &["config"], &[("TASKFOLD_DURABILITY", "off")]);
    let t = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", text(&out));
    assert!(t.starts_with("settings file: taskfold.toml\n"), "{t}");
    assert_eq!(
        row(&t, "TASKFOLD_PING_MS"),
        ["TASKFOLD_PING_MS", "ping_ms", "100", "file"]
    );
    assert_eq!(
        row(&t, "TASKFOLD_DURABILITY"),
        ["TASKFOLD_DURABILITY", "durability", "off", "environment"]
    );
    assert_eq!(
        row(&t, "TASKFOLD_NOTICE_BOARD"),
        ["TASKFOLD_NOTICE_BOARD", "notice_board", "off", "file"]
    );
    assert_eq!(
        row(&t, "TASKFOLD_FAILURE_TIMEOUT_MS"),
        [
            "TASKFOLD_FAILURE_TIMEOUT_MS",
            "failure_timeout_ms",
            "3000",
            "default"
        ]
    );
    assert_eq!(
        row(&t, "TASKFOLD_LOG"),
        ["TASKFOLD_LOG", "log", "warn", "default"]
    );
    // Every setting of the table, none of the test hooks'.
    let rows = t.lines().filter(|l| l.starts_with("TASKFOLD_")).count();
    assert_eq!(rows, taskfold_core::settings::variables().len(), "{t}");
    assert!(!t.contains("TASKFOLD_TEST_HOOK"), "{t}");
    // `--changed`: only what a source sets.
    let out = taskfold_in(
        dir.path(),
        &["config", "--changed"],
        &[("TASKFOLD_DURABILITY", "off")],
    );
    let t = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        t.lines().filter(|l| l.starts_with("TASKFOLD_")).count(),
        3,
        "{t}"
    );
}

#[test]
fn the_file_named_by_taskfold_config_and_its_errors() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("job.toml");
    std::fs::write(&other, "fold_threads = 3\n").unwrap();
    let named = other.to_str().unwrap();
    let out = taskfold_in(dir.path(), &["config"], &[("TASKFOLD_CONFIG", named)]);
    let t = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(t.starts_with(&format!("settings file: {named}\n")), "{t}");
    assert_eq!(row(&t, "TASKFOLD_FOLD_THREADS")[2..], ["3", "file"]);
    // No file: said so.
    let empty = tempfile::tempdir().unwrap();
    let out = taskfold_in(empty.path(), &["config"], &[]);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("settings file: none"));
    // A file named but missing, a misspelt key: refused, exit 2.
    let out = taskfold_in(
        dir.path(),
        &["config"],
        &[("TASKFOLD_CONFIG", "/no/such.toml")],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("TASKFOLD_CONFIG=\"/no/such.toml\": expected a settings file"));
    std::fs::write(&other, "ping_mz = 100\n").unwrap();
    let out = taskfold_in(dir.path(), &["config"], &[("TASKFOLD_CONFIG", named)]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("ping_mz = \"100\": expected a setting (did you mean ping_ms?)"),
        "{}",
        text(&out)
    );
}

/// The launcher checks the ranks' settings with the file, and the ranks
/// read it too (psdm serves metrics where the file says).
#[test]
fn the_launcher_and_the_ranks_read_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("taskfold.toml");
    std::fs::write(&toml, "durability = \"sometimes\"\n").unwrap();
    let out = taskfold_in(dir.path(), &["run", "-n", "2", "--", "true"], &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        t.contains("taskfold run: taskfold.toml: durability = \"sometimes\": expected sync"),
        "{t}"
    );
    std::fs::write(&toml, "metrics_addr = \"127.0.0.1:0\"\n").unwrap();
    let psdm = psdm_bin();
    let args = [
        "--nx",
        "40",
        "--nz",
        "20",
        "--shots",
        "2",
        "--receivers",
        "8",
        "--batch",
        "8",
    ];
    let mut run = vec![
        "run",
        "-n",
        "1",
        "--timeout",
        "100s",
        "--",
        psdm.to_str().unwrap(),
    ];
    run.extend(args);
    let out = taskfold_in(dir.path(), &run, &[]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains("[0] psdm: rank 0: metrics at http://127.0.0.1:"),
        "{t}"
    );
}

/// The `taskfold` command as a user builds it has no test hooks: the
/// variable is refused, naming it, rather than silently ignored.
#[test]
fn the_command_a_user_builds_has_no_test_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let hook = [("TASKFOLD_TEST_HOOK", "1:before-join:x:/tmp")];
    let out = taskfold_in(dir.path(), &["config"], &hook);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("TASKFOLD_TEST_HOOK=\"1:before-join:x:/tmp\": expected it unset: this build has no test hooks"),
        "{}",
        text(&out)
    );
}

/// A misspelt variable: one warning for the job, from the launcher, with
/// the closest name; the ranks (told by the launcher) say nothing.
#[test]
fn a_misspelt_variable_is_warned_about_once_per_job() {
    let dir = tempfile::tempdir().unwrap();
    let plain = env!("CARGO_BIN_EXE_tf_plain");
    let out = taskfold_in(
        dir.path(),
        &["run", "-n", "3", "--timeout", "100s", "--", plain],
        &[("TASKFOLD_PING_MZ", "100"), ("TF_PLAIN_ALL_LIVE", "1")],
    );
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert_eq!(t.matches("TASKFOLD_PING_MZ").count(), 1, "{t}");
    assert!(
        t.contains("taskfold run: warning: TASKFOLD_PING_MZ is set but is no taskfold setting (did you mean TASKFOLD_PING_MS?); ignored"),
        "{t}"
    );
}

/// An application that installs no `tracing` subscriber: the runtime's
/// own logger says that rank 1 was declared failed, in plain text (a
/// pipe); `TASKFOLD_LOG=off` silences it.
#[test]
fn an_application_without_a_logger_hears_of_a_failed_rank() {
    let dir = tempfile::tempdir().unwrap();
    let plain = env!("CARGO_BIN_EXE_tf_plain");
    let run = ["run", "-n", "3", "--timeout", "100s", "--", plain];
    let out = taskfold_in(dir.path(), &run, &[]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("rank 1 killed by signal 6 (SIGABRT)"), "{t}");
    let said = t
        .lines()
        .find(|l| l.starts_with("[0] ") && l.contains("rank declared failed"))
        .unwrap_or_else(|| panic!("no warning at the master:\n{t}"));
    assert!(
        said.contains("ERROR") && said.contains("rank=rank 1 "),
        "{said}"
    );
    assert!(!t.contains('\x1b'), "colour codes in a pipe:\n{t}");
    let out = taskfold_in(dir.path(), &run, &[("TASKFOLD_LOG", "off")]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("rank 1 killed by signal 6 (SIGABRT)"), "{t}");
    assert!(!t.contains("declared failed"), "{t}");
}
