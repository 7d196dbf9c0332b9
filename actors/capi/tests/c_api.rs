//! The C API from C: every call used as documented, and bad input, each
//! checked by the C programs themselves on every rank (`tests/c`).

mod support;

use support::*;

fn c_test(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join(name);
    compile_c(&[crate_dir().join(format!("tests/c/{name}.c"))], &exe);
    (dir, exe)
}

/// Every call as documented: typed reductions of the six datatypes and
/// four operations, a zero-copy buffer, custom folds over a struct and a
/// blob, options, test and timed waits, barriers, checkpoint and restore,
/// the lifecycle and the re-init entry point, overlapped reductions;
/// checkpoints at L1 and L4 (`TASKFOLD_CHECKPOINT_SHARED_DIR`).
#[test]
fn every_call_works_from_c_under_taskfold_run() {
    let (dir, exe) = c_test("api");
    // Checkpoints at L4 too (the shared directory), besides L1.
    let shared = dir.path().join("shared");
    let mut cmd = std::process::Command::new(taskfold_bin());
    cmd.env("TASKFOLD_CHECKPOINT_SHARED_DIR", &shared)
        .args(["run", "-n", "3", "--timeout", "200s", "--"])
        .arg(&exe);
    let out = run_bounded(cmd, LIMIT);
    assert_every_rank(&out, 3, |r| format!("[{r}] rank {r}: api ok"));
}

/// Null pointers, out-of-range arguments, wrong handles (completed,
/// foreign, of another kind), a duplicate id, ranks that disagree on the
/// length or the type, a failing fold callback, a caught panic, calls
/// before init and after finalize: each its code and message.
#[test]
fn bad_input_from_c_gets_its_error_code_and_message() {
    let (_dir, exe) = c_test("errors");
    let out = under_taskfold(2, &exe, &[]);
    assert_every_rank(&out, 2, |r| format!("[{r}] rank {r}: errors ok"));
}

/// The same program under MPICH's `mpiexec`: rank and size from PMI, the
/// master through the rendezvous file, the key from a private file.
#[test]
fn every_call_works_from_c_under_mpiexec() {
    let (dir, exe) = c_test("api");
    if let Some(out) = under_mpiexec(3, &exe, &[], dir.path()) {
        assert_every_rank(&out, 3, |r| format!("rank {r}: api ok"));
    }
}

/// `tf_iallreduce` (three operations, two datatypes, in place, a group,
/// an id reused) and `tf_ibcast` (a member asking for another count told
/// so), every result checked on every rank, and their bad input.
#[test]
fn allreduce_and_broadcast_work_from_c() {
    let (_dir, exe) = c_test("allreduce");
    let out = under_taskfold(3, &exe, &[]);
    assert_every_rank(&out, 3, |r| format!("[{r}] rank {r}: allreduce ok"));
}

/// The same from Fortran, through the module's interfaces.
#[test]
fn allreduce_and_broadcast_work_from_fortran() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("allreduce_f");
    let src = crate_dir().join("tests/fortran/allreduce.f90");
    compile_fortran(&[src], &exe, dir.path());
    let out = under_taskfold(3, &exe, &[]);
    assert_every_rank(&out, 3, |r| format!("[{r}] rank {r}: fortran allreduce ok"));
}
