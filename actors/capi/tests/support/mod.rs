//! Building and launching C and Fortran programs against libtaskfold, for
//! the tests (each test uses part of it).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;
pub use taskfold_tests::{job_key_file, run_bounded, taskfold_bin, text};

/// The longest any job of these tests may run.
pub const LIMIT: Duration = Duration::from_secs(240);

/// This crate's folder.
pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace's folder.
pub fn workspace() -> PathBuf {
    crate_dir().join("../..").canonicalize().expect("workspace")
}

/// The folder holding `libtaskfold_capi.so` and `.a` (built if missing:
/// a test run builds this crate's library, but not always its C forms).
pub fn lib_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = taskfold_tests::target_dir();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "taskfold-capi", "--lib"])
            .status()
            .expect("run cargo build");
        assert!(status.success(), "building libtaskfold failed");
        for lib in ["libtaskfold_capi.so", "libtaskfold_capi.a"] {
            assert!(dir.join(lib).exists(), "{lib} missing in {}", dir.display());
        }
        dir
    })
    .clone()
}

/// Runs a build command, panicking with its output if it fails.
pub fn build(mut cmd: Command) {
    let out = cmd.output().expect("run the compiler");
    assert!(out.status.success(), "{cmd:?} failed:\n{}", text(&out));
}

/// Compiles and links the C sources `srcs` into `out` against the shared
/// library, with `-Wall -Wextra -Werror`.
pub fn compile_c(srcs: &[PathBuf], out: &Path) {
    let lib = lib_dir();
    let mut cmd = Command::new("cc");
    cmd.args([
        "-std=c11",
        "-O2",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-D_POSIX_C_SOURCE=200809L",
    ])
    .arg("-I")
    .arg(crate_dir().join("include"))
    .args(srcs)
    .arg("-L")
    .arg(&lib)
    .arg(format!("-Wl,-rpath,{}", lib.display()))
    .args(["-ltaskfold_capi", "-lm", "-o"])
    .arg(out);
    build(cmd);
}

/// Compiles the Fortran module and `srcs` into `out` in `dir`.
pub fn compile_fortran(srcs: &[PathBuf], out: &Path, dir: &Path) {
    let lib = lib_dir();
    let module = dir.join("taskfold_mod.o");
    let mut cmd = Command::new("gfortran");
    cmd.args(["-std=f2018", "-Wall", "-Werror", "-c"])
        .arg(crate_dir().join("fortran/taskfold.f90"))
        .arg("-J")
        .arg(dir)
        .arg("-o")
        .arg(&module);
    build(cmd);
    let mut cmd = Command::new("gfortran");
    // The program's own modules' files go to `dir` too (by default to the
    // working directory, which concurrent tests share).
    cmd.current_dir(dir)
        .args(["-O2", "-Wall", "-Werror"])
        .arg("-J")
        .arg(dir)
        .arg("-I")
        .arg(dir)
        .args(srcs)
        .arg(&module)
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-ltaskfold_capi", "-o"])
        .arg(out);
    build(cmd);
}

/// `program args` on `np` ranks under `taskfold run`.
pub fn under_taskfold(np: u32, program: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(taskfold_bin());
    cmd.args(["run", "-n", &np.to_string(), "--timeout", "200s", "--"])
        .arg(program)
        .args(args);
    run_bounded(cmd, LIMIT)
}

/// MPICH's Hydra launcher, if installed (CI installs `mpich`).
pub fn hydra() -> Option<PathBuf> {
    for name in ["mpiexec.hydra", "mpiexec.mpich"] {
        for dir in std::env::var("PATH").unwrap_or_default().split(':') {
            let p = PathBuf::from(dir).join(name);
            if p.exists() {
                return Some(p);
            }
        }
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must install mpich for the mpiexec tests"
    );
    None
}

/// `program args` on `np` ranks under MPICH's `mpiexec`, the job's key in
/// a private file and the master found through a rendezvous file in
/// `dir`; `None` (with a message) where MPICH is not installed.
pub fn under_mpiexec(np: u32, program: &Path, args: &[&str], dir: &Path) -> Option<Output> {
    let Some(mpiexec) = hydra() else {
        eprintln!("skipping: MPICH's mpiexec is not installed (apt-get install mpich)");
        return None;
    };
    let mut cmd = Command::new(mpiexec);
    cmd.env("TASKFOLD_JOB_KEY_FILE", job_key_file(dir))
        .env("TASKFOLD_RENDEZVOUS", dir.join("master.addr"))
        .env("TASKFOLD_JOB", format!("capi-{}", std::process::id()))
        .env_remove("TASKFOLD_JOB_KEY")
        .env_remove("TASKFOLD_INSECURE")
        .env_remove("TASKFOLD_RANK")
        .env_remove("TASKFOLD_SIZE")
        .args(["-n", &np.to_string()])
        .arg(program)
        .args(args);
    Some(run_bounded(cmd, LIMIT))
}

/// Asserts that the job succeeded and every rank printed `line`.
pub fn assert_every_rank(out: &Output, np: u32, line: impl Fn(u32) -> String) {
    let t = text(out);
    assert!(out.status.success(), "job failed:\n{t}");
    for r in 0..np {
        assert!(
            t.contains(&line(r)),
            "rank {r} did not say {:?}:\n{t}",
            line(r)
        );
    }
}
