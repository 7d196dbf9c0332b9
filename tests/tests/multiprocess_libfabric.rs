//! Multi-process reductions over the libfabric transport: the rank program
//! `tf_check` launched by `taskfold run` with `TASKFOLD_TRANSPORT=libfabric`
//! and each provider of this machine (`tcp;ofi_rxm`, `sockets`, `shm`), and
//! a job where a rank exits early, which must end the reductions without a
//! hang, and the SIGKILL / SIGSTOP fault scenarios of
//! `taskfold_tests::faults`. A provider this machine lacks fails under CI (env `CI` set) and is
//! skipped otherwise.

#![cfg(feature = "libfabric")]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;
use taskfold_tests::{faults, run_bounded, target_dir, text};
use taskfold_transports::libfabric::provider_available;

const LIMIT: Duration = Duration::from_secs(180);

/// `taskfold` and `tf_check` built with the feature `libfabric` (and the
/// test hooks, which the fault scenarios hold ranks with), copied under
/// names of their own: other tests rebuild the workspace's binaries
/// without the feature, over the usual paths.
fn binaries() -> &'static (PathBuf, PathBuf) {
    static BINS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BINS.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "--workspace",
                "--bins",
                "--features",
                "taskfold-tests/libfabric,taskfold/test-hooks",
            ])
            .status()
            .expect("run cargo build");
        assert!(
            status.success(),
            "building the binaries with libfabric failed"
        );
        let dir = target_dir();
        let exe = std::env::consts::EXE_SUFFIX;
        let copy = |name: &str| {
            let from = dir.join(format!("{name}{exe}"));
            let to = dir.join(format!("{name}-libfabric{exe}"));
            std::fs::copy(&from, &to).unwrap_or_else(|e| panic!("copying {}: {e}", from.display()));
            to
        };
        (copy("taskfold"), copy("tf_check"))
    })
}

/// False (after saying so) if `provider` is missing and CI is not set.
fn have(provider: &str) -> bool {
    if provider_available(provider) {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "libfabric provider `{provider}` is not available on this machine (CI is set)"
    );
    eprintln!("skipped: libfabric provider `{provider}` is not available here");
    false
}

fn launch(provider: &str, np: u32, args: &[&str]) -> Command {
    let (taskfold, tf_check) = binaries();
    let mut cmd = Command::new(taskfold);
    // The ranks inherit the launcher's environment.
    cmd.env("TASKFOLD_TRANSPORT", "libfabric")
        .env("TASKFOLD_FI_PROVIDER", provider)
        .args(["run", "-n", &np.to_string(), "--timeout", "150s", "--"])
        .arg(tf_check)
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

/// Four ranks, twelve concurrent reductions of 4 MiB each.
fn concurrent_reductions(provider: &str) {
    if !have(provider) {
        return;
    }
    let out = run_bounded(
        launch(
            provider,
            4,
            &["--size", "4194304", "--reductions", "12", "--root", "1"],
        ),
        LIMIT,
    );
    assert_all_ok(&out, 4);
}

#[test]
fn tcp_rxm_4_ranks_12_concurrent_4mib() {
    concurrent_reductions("tcp;ofi_rxm");
}

#[test]
fn sockets_4_ranks_12_concurrent_4mib() {
    concurrent_reductions("sockets");
}

#[test]
fn shm_4_ranks_12_concurrent_4mib() {
    concurrent_reductions("shm");
}

/// Rank 3 exits after joining: the launcher reports it, the survivors see
/// every reduction end with the loss, nobody hangs in a completion queue.
fn a_rank_exits_early(provider: &str) {
    if !have(provider) {
        return;
    }
    let out = run_bounded(
        launch(
            provider,
            4,
            &["--size", "1048576", "--reductions", "3", "--exit-rank", "3"],
        ),
        LIMIT,
    );
    taskfold_tests::faults::assert_rank_3_exited_early(&out);
}

#[test]
fn tcp_rxm_a_rank_that_exits_early_ends_reductions_without_a_hang() {
    a_rank_exits_early("tcp;ofi_rxm");
}

#[test]
fn shm_a_rank_that_exits_early_ends_reductions_without_a_hang() {
    a_rank_exits_early("shm");
}

/// The fault scenarios of the fault-tolerance tests, over `provider`.
fn fault_job(provider: &str) -> Option<faults::Job> {
    if !have(provider) {
        return None;
    }
    let (taskfold, tf_check) = binaries();
    Some(faults::Job {
        taskfold: taskfold.clone(),
        tf_check: tf_check.clone(),
        env: vec![
            ("TASKFOLD_TRANSPORT".into(), "libfabric".into()),
            ("TASKFOLD_FI_PROVIDER".into(), provider.into()),
        ],
    })
}

#[test]
fn tcp_rxm_place_1_sigkill_before_the_task_reaches_its_receiver() {
    if let Some(job) = fault_job("tcp;ofi_rxm") {
        faults::place_1_killed_before_the_task_reaches_it(&job);
    }
}

#[test]
fn tcp_rxm_place_2_sigkill_of_a_receiver_while_it_folds() {
    if let Some(job) = fault_job("tcp;ofi_rxm") {
        faults::place_2_receiver_killed_while_it_folds(&job);
    }
}

#[test]
fn tcp_rxm_place_3_sigkill_of_a_provider_while_the_receiver_fetches() {
    if let Some(job) = fault_job("tcp;ofi_rxm") {
        faults::place_3_provider_killed_while_the_receiver_fetches(&job);
    }
}

#[test]
fn shm_place_3_sigkill_of_a_provider_while_the_receiver_fetches() {
    if let Some(job) = fault_job("shm") {
        faults::place_3_provider_killed_while_the_receiver_fetches(&job);
    }
}

#[test]
fn tcp_rxm_sigkill_of_a_rank_and_its_buddy_is_a_typed_error_everywhere() {
    if let Some(job) = fault_job("tcp;ofi_rxm") {
        faults::rank_and_buddy_killed(&job);
    }
}

#[test]
fn tcp_rxm_sigkill_of_the_root_is_a_typed_error_everywhere() {
    if let Some(job) = fault_job("tcp;ofi_rxm") {
        faults::root_killed(&job);
    }
}

#[test]
fn tcp_rxm_a_stopped_rank_is_fenced_and_changes_nothing_when_resumed() {
    if let Some(job) = fault_job("tcp;ofi_rxm") {
        faults::stopped_rank_fenced(&job);
    }
}

#[test]
fn tcp_rxm_async_sigkill_after_the_disk_write_before_the_join_is_recovered_from_disk() {
    if let Some(job) = fault_job("tcp;ofi_rxm") {
        faults::killed_after_its_disk_write_before_its_join(&job);
    }
}
