//! Jobs started by MPICH's `mpiexec` and Open MPI's `mpirun` with none of
//! the variables that name the master or give a key (no
//! `TASKFOLD_RENDEZVOUS`, `TASKFOLD_MASTER`, `TASKFOLD_JOB_KEY`): the
//! ranks find both in the launcher's key-value store (Hydra's PMI-1 on
//! `PMI_FD`; PMIx under `mpirun`, with the cargo feature `pmix`; Slurm's
//! `libpmi2` under Hydra, with the feature `pmi2`). The same under Slurm
//! is `slurm.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use taskfold_tests::launchers::{self, assert_tf_check_ok, CLEARED};
use taskfold_tests::{run_bounded, text};

const LIMIT: Duration = Duration::from_secs(240);

fn tf_check() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tf_check"))
}

/// `mpiexec -n N tf_check ARGS` with none of the [`CLEARED`] variables.
fn mpiexec(hydra: &Path, np: u32, args: &[&str]) -> Command {
    let mut cmd = Command::new(hydra);
    for v in CLEARED {
        cmd.env_remove(v);
    }
    cmd.args(["-n", &np.to_string()]).arg(tf_check()).args(args);
    cmd
}

const JOB: &[&str] = &["--size", "8388608", "--reductions", "8", "--root", "1"];

/// Hydra's store carries the master's address and a fresh job key: four
/// ranks reduce 8 MiB arrays, every sum exact, none insecure.
#[test]
fn mpiexec_ranks_find_the_master_and_the_key_in_hydras_store() {
    let Some(hydra) = launchers::hydra() else {
        return;
    };
    let out = run_bounded(mpiexec(&hydra, 4, JOB), LIMIT);
    assert_tf_check_ok(&out, 4);
}

/// Variables naming the master come before the store: with a rendezvous
/// file (and a key file) set, rank 0 writes the file, which says at the
/// end that the job is over; the store carries nothing.
#[test]
fn mpiexec_variables_come_before_the_store() {
    let Some(hydra) = launchers::hydra() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rendezvous = dir.path().join("master.addr");
    let mut cmd = mpiexec(&hydra, 3, JOB);
    cmd.env("TASKFOLD_RENDEZVOUS", &rendezvous).env(
        "TASKFOLD_JOB_KEY_FILE",
        taskfold_tests::job_key_file(dir.path()),
    );
    assert_tf_check_ok(&run_bounded(cmd, LIMIT), 3);
    let written = std::fs::read_to_string(&rendezvous).expect("rank 0 wrote the rendezvous file");
    assert!(
        written.starts_with("taskfold-rendezvous ") && written.trim_end().ends_with(" over"),
        "{written}"
    );
}

/// Rank 0 given a key and the others none: the others say so at once,
/// naming the variables (and the launcher then ends the job).
#[test]
fn mpiexec_a_key_given_to_rank_0_alone_is_a_clear_error() {
    let Some(hydra) = launchers::hydra() else {
        return;
    };
    let key = taskfold_tests::job_key();
    let mut cmd = Command::new(hydra);
    for v in CLEARED {
        cmd.env_remove(v);
    }
    // MPMD: rank 0 with the key, ranks 1 and 2 without.
    cmd.args(["-n", "1", "-env", "TASKFOLD_JOB_KEY", &key])
        .arg(tf_check())
        .args(["--reductions", "1", ":", "-n", "2"])
        .arg(tf_check())
        .args(["--reductions", "1"]);
    let out = run_bounded(cmd, LIMIT);
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("rank 0 was given the job's key (TASKFOLD_JOB_KEY or TASKFOLD_JOB_KEY_FILE) and this rank was not"),
        "{t}"
    );
    assert!(!t.contains(&key), "the key was printed:\n{t}");
}

/// `TASKFOLD_PMI=off`: the store is not used, and every rank says what
/// would tell it where the master is.
#[test]
fn mpiexec_with_the_store_turned_off_names_what_to_set() {
    let Some(hydra) = launchers::hydra() else {
        return;
    };
    let mut cmd = mpiexec(&hydra, 2, &["--reductions", "1"]);
    cmd.env("TASKFOLD_PMI", "off");
    let out = run_bounded(cmd, LIMIT);
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("nothing tells this rank where the master is: set TASKFOLD_MASTER"),
        "{t}"
    );
    assert!(t.contains("TASKFOLD_PMI unset or auto"), "{t}");
}

/// Slurm's `libpmi2` speaks PMI-2 to Hydra too.
#[cfg(feature = "pmi2")]
#[test]
fn mpiexec_ranks_bootstrap_through_libpmi2() {
    let Some(hydra) = launchers::hydra() else {
        return;
    };
    let mut cmd = mpiexec(&hydra, 4, JOB);
    cmd.env("TASKFOLD_PMI", "pmi2");
    assert_tf_check_ok(&run_bounded(cmd, LIMIT), 4);
}

fn mpirun(np: u32, args: &[&str]) -> Option<Command> {
    let mpirun = launchers::openmpi()?;
    let mut cmd = Command::new(mpirun);
    for v in CLEARED {
        cmd.env_remove(v);
    }
    cmd.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-n",
        &np.to_string(),
    ])
    .arg(tf_check())
    .args(args);
    Some(cmd)
}

/// Open MPI's `mpirun` serves PMIx: four ranks find the master and a
/// fresh key there.
#[cfg(feature = "pmix")]
#[test]
fn mpirun_ranks_find_the_master_and_the_key_through_pmix() {
    let Some(cmd) = mpirun(4, JOB) else {
        return;
    };
    assert_tf_check_ok(&run_bounded(cmd, LIMIT), 4);
}

/// A build without PMIx under `mpirun` says which feature it lacks and
/// what else works.
#[cfg(not(feature = "pmix"))]
#[test]
fn mpirun_without_pmix_support_says_how_to_build_or_launch() {
    let Some(cmd) = mpirun(2, &["--reductions", "1"]) else {
        return;
    };
    let out = run_bounded(cmd, LIMIT);
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("the launcher serves pmix, which this build of taskfold does not speak")
            && t.contains("cargo feature `pmix`"),
        "{t}"
    );
}
