//! Jobs under a real Slurm (`srun`; CI starts one on this machine with
//! `.ci/slurm`) with none of the variables that name the master or give a
//! key: the ranks find both in Slurm's key-value store (the PMI-1 wire
//! protocol of its `pmi2` plugin; PMIx and `libpmi2` with the cargo
//! features `pmix` and `pmi2`). psdm under `srun` and `sbatch`, and a
//! job that loses a rank, are psdm's tests (`apps/psdm/tests/slurm.rs`).

use std::path::PathBuf;
use std::time::Duration;
use taskfold_tests::launchers::{self, assert_tf_check_ok};
use taskfold_tests::{run_bounded, text};

const LIMIT: Duration = Duration::from_secs(240);

fn tf_check() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tf_check"))
}

const JOB: &[&str] = &["--size", "8388608", "--reductions", "8", "--root", "2"];

/// `srun --mpi=pmi2 -n 4`: the master's address and a fresh job key
/// through Slurm's store, spoken as PMI-1 (no library).
#[test]
fn srun_ranks_find_the_master_and_the_key_in_slurms_store() {
    let Some(srun) = launchers::slurm() else {
        return;
    };
    let mut cmd = launchers::srun(&srun, 4, "pmi2");
    cmd.arg(tf_check()).args(JOB);
    assert_tf_check_ok(&run_bounded(cmd, LIMIT), 4);
}

/// Without a store (`--mpi=none`) and without a variable naming the
/// master, every rank stops at once, saying how to launch it.
#[test]
fn srun_without_a_store_names_what_to_set() {
    let Some(srun) = launchers::slurm() else {
        return;
    };
    let mut cmd = launchers::srun(&srun, 2, "none");
    cmd.arg(tf_check()).args(["--reductions", "1"]);
    let out = run_bounded(cmd, LIMIT);
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    for r in 0..2 {
        assert!(
            t.contains(&format!(
                "{r}: tf_check: cannot start: cannot find the master: nothing tells this rank"
            )),
            "{t}"
        );
    }
    assert!(t.contains("srun --mpi=pmi2 or --mpi=pmix"), "{t}");
}

/// A key of the ranks' own (`TASKFOLD_JOB_KEY_FILE`) is used, not the
/// store's: ranks given the same key file form a job, and ranks given
/// different keys do not (rank 0's key differs: the others never prove
/// the key to it, and it gives up on them after its connect timeout).
#[test]
fn srun_ranks_keep_a_key_file_of_their_own() {
    let Some(srun) = launchers::slurm() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let same = taskfold_tests::job_key_file(dir.path());
    let mut cmd = launchers::srun(&srun, 3, "pmi2");
    cmd.env("TASKFOLD_JOB_KEY_FILE", &same)
        .arg(tf_check())
        .args(JOB);
    assert_tf_check_ok(&run_bounded(cmd, LIMIT), 3);

    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let odd = taskfold_tests::job_key_file(&other);
    let mut cmd = launchers::srun(&srun, 3, "pmi2");
    // Rank 0's file holds another key; a failed rank ends the job.
    let script = format!(
        "if [ \"$SLURM_PROCID\" = 0 ]; then export TASKFOLD_JOB_KEY_FILE={}; fi; exec {} --reductions 1",
        odd.display(),
        tf_check().display()
    );
    cmd.arg("--kill-on-bad-exit=1")
        .env("TASKFOLD_JOB_KEY_FILE", &same)
        .args(["sh", "-c", &script]);
    let out = run_bounded(cmd, LIMIT);
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("0: tf_check: cannot start: ") && t.contains("ranks [1, 2] never registered"),
        "{t}"
    );
}

/// A rank that never reaches the store's fence (here a process that is
/// no taskfold rank) leaves the others waiting at most 30 s: they then
/// fail, naming the fence.
#[test]
fn srun_a_rank_that_never_reaches_the_fence_fails_the_others_in_time() {
    let Some(srun) = launchers::slurm() else {
        return;
    };
    let mut cmd = launchers::srun(&srun, 2, "pmi2");
    let script = format!(
        "if [ \"$SLURM_PROCID\" = 1 ]; then exec sleep 120; fi; exec {} --reductions 1",
        tf_check().display()
    );
    // Rank 0's failure ends the job (the sleeper with it).
    cmd.arg("--kill-on-bad-exit=1").args(["sh", "-c", &script]);
    let started = std::time::Instant::now();
    let out = run_bounded(cmd, LIMIT);
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("0: tf_check: cannot start: master unreachable: the launcher's key-value store (pmi1, job ")
            && t.contains("barrier_in: no answer from the launcher in time (every rank of the job must reach the fence within 30s)"),
        "{t}"
    );
    let took = started.elapsed();
    assert!(took < Duration::from_secs(100), "took {took:?}:\n{t}");
}

/// `srun --mpi=pmix`: PMIx's store (cargo feature `pmix`).
#[cfg(feature = "pmix")]
#[test]
fn srun_ranks_bootstrap_through_pmix() {
    let Some(srun) = launchers::slurm() else {
        return;
    };
    let mut cmd = launchers::srun(&srun, 4, "pmix");
    cmd.arg(tf_check()).args(JOB);
    assert_tf_check_ok(&run_bounded(cmd, LIMIT), 4);
}

/// `srun --mpi=pmi2` with `TASKFOLD_PMI=pmi2`: Slurm's own `libpmi2`
/// (cargo feature `pmi2`).
#[cfg(feature = "pmi2")]
#[test]
fn srun_ranks_bootstrap_through_libpmi2() {
    let Some(srun) = launchers::slurm() else {
        return;
    };
    let mut cmd = launchers::srun(&srun, 4, "pmi2");
    cmd.env("TASKFOLD_PMI", "pmi2").arg(tf_check()).args(JOB);
    assert_tf_check_ok(&run_bounded(cmd, LIMIT), 4);
}
