//! The example programs of `apps/c` and `apps/fortran`, built against
//! libtaskfold and run as users run them: under `taskfold run -n 4`,
//! MPICH's `mpiexec -n 4` and Slurm's `srun -n 4`.

mod support;

use std::path::{Path, PathBuf};
use support::*;
use taskfold_psdm::image::{Image, TOLERANCE};
use taskfold_psdm::job::{Job, JobArgs};

/// A small survey (psdm's options), quick in a debug build.
const SURVEY: [&str; 12] = [
    "--nx",
    "160",
    "--nz",
    "80",
    "--shots",
    "6",
    "--receivers",
    "40",
    "--batch",
    "12",
    "--in-flight",
    "3",
];

fn app(rel: &str) -> PathBuf {
    workspace().join("apps").join(rel)
}

fn kirchhoff(dir: &Path) -> PathBuf {
    let exe = dir.join("kirchhoff");
    compile_c(&[app("c/kirchhoff.c")], &exe);
    exe
}

/// The C kernel's image is psdm's, within psdm's tolerance: the image as
/// a whole and its checksum, against psdm's own sequential migration of
/// the same survey.
fn assert_psdm_image(out: &std::process::Output, raw: &Path) {
    let t = text(out);
    let args = JobArgs::parse(SURVEY).unwrap();
    let reference = Job::new(args).unwrap().migrate_sequentially();
    let image = Image::read_raw(raw).unwrap_or_else(|e| panic!("no image ({e}):\n{t}"));
    let diff = image.relative_difference(&reference);
    assert!(
        diff <= TOLERANCE,
        "relative difference {diff:e} from psdm's image:\n{t}"
    );
    let printed: f64 = t
        .lines()
        .find_map(|l| l.split("kirchhoff: checksum ").nth(1))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no checksum printed:\n{t}"));
    let want = reference.checksum();
    let rel = ((printed - want) / want).abs();
    assert!(
        rel <= TOLERANCE,
        "checksum {printed:e}, psdm's {want:e} ({rel:e}):\n{t}"
    );
    assert!(reference.norm() > 0.0);
}

#[test]
fn kirchhoff_matches_psdm_under_taskfold_run() {
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("image.f32");
    let mut args: Vec<&str> = SURVEY.to_vec();
    let raw_s = raw.to_str().unwrap();
    args.extend(["--raw", raw_s]);
    let out = under_taskfold(4, &kirchhoff(dir.path()), &args);
    assert_every_rank(&out, 4, |r| format!("[{r}] rank {r}: kirchhoff done"));
    assert_psdm_image(&out, &raw);
}

#[test]
fn kirchhoff_matches_psdm_under_mpiexec() {
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("image.f32");
    let mut args: Vec<&str> = SURVEY.to_vec();
    let raw_s = raw.to_str().unwrap();
    args.extend(["--raw", raw_s, "--root", "2"]);
    if let Some(out) = under_mpiexec(4, &kirchhoff(dir.path()), &args, dir.path()) {
        assert_every_rank(&out, 4, |r| format!("rank {r}: kirchhoff done"));
        assert_psdm_image(&out, &raw);
    }
}

/// Under a real Slurm (`.ci/slurm`), `srun --mpi=pmi2 -n 4` with none of
/// the variables that name the master or give a key: the C ranks find
/// both in Slurm's key-value store, and the image is psdm's.
#[test]
fn kirchhoff_matches_psdm_under_srun_without_variables() {
    let Some(srun) = taskfold_tests::launchers::slurm() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("image.f32");
    let mut cmd = taskfold_tests::launchers::srun(&srun, 4, "pmi2");
    cmd.arg(kirchhoff(dir.path()))
        .args(SURVEY)
        .arg("--raw")
        .arg(&raw);
    let out = taskfold_tests::run_bounded(cmd, std::time::Duration::from_secs(240));
    assert_every_rank(&out, 4, |r| format!("{r}: rank {r}: kirchhoff done"));
    assert_psdm_image(&out, &raw);
}

fn field_stats(dir: &Path) -> PathBuf {
    let exe = dir.join("field_stats");
    compile_fortran(&[app("fortran/field_stats.f90")], &exe, dir);
    exe
}

/// The Fortran program reduces its derived type through a custom fold;
/// rank 0 checks every step against its own computation.
#[test]
fn fortran_derived_type_under_taskfold_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = under_taskfold(4, &field_stats(dir.path()), &["6"]);
    assert_every_rank(&out, 4, |r| format!("[{r}] rank {r}: fortran stats ok"));
    assert!(
        text(&out).contains("field_stats: 6 steps over 4 ranks"),
        "{}",
        text(&out)
    );
}

#[test]
fn fortran_derived_type_under_mpiexec() {
    let dir = tempfile::tempdir().unwrap();
    let exe = field_stats(dir.path());
    if let Some(out) = under_mpiexec(4, &exe, &["6"], dir.path()) {
        assert_every_rank(&out, 4, |r| format!("rank {r}: fortran stats ok"));
    }
}

/// A short slice of `taskfold bench capi`: the C variant of the reduce
/// benchmark and the Rust ranks in one run, the table printed (the ratio
/// itself is measured by the benchmark, not asserted here).
#[test]
fn the_c_benchmark_runs_beside_the_rust_one() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("bench_reduce");
    compile_c(&[app("c/bench_reduce.c")], &exe);
    let json = dir.path().join("capi.json");
    let mut cmd = std::process::Command::new(taskfold_bin());
    cmd.args([
        "bench", "capi", "--np", "2", "--size", "64K", "--reps", "2", "--warmup", "1",
    ])
    .args(["--rounds", "1", "--program"])
    .arg(&exe)
    .arg("--json")
    .arg(&json);
    let out = run_bounded(cmd, LIMIT);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("c/rust") && t.contains("64 KiB"), "{t}");
    let rows: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let ratio = rows[0]["ratio"].as_f64().unwrap();
    assert!(ratio.is_finite() && ratio > 0.0, "{t}");
}
