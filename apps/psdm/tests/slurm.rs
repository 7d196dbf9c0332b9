//! psdm under a real Slurm (`.ci/slurm` starts one on this machine), with
//! none of the variables that name the master or give a key: the ranks
//! find both in Slurm's key-value store. `srun -n 4` gives the image of
//! the sequential migration; `srun -n 4` with a rank SIGKILLed mid-run
//! still does (the three others share its work out); and the batch
//! scripts of the book's Launching chapter run under `sbatch` as written.
//!
//! The C example (`apps/c`) under `srun` is a test of the C API's
//! (`actors/capi/tests/examples.rs`).

mod common;

use common::{checksum_printed, psdm};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};
use taskfold_psdm::image::{Image, TOLERANCE};
use taskfold_psdm::job::{Job, JobArgs};
use taskfold_tests::launchers::{self, rank_pid};
use taskfold_tests::{run_bounded, signal, text, wait_bounded, Signal};

const LIMIT: Duration = Duration::from_secs(240);

/// The small model of psdm's other end-to-end tests.
const SMALL: &[&str] = &[
    "--nx",
    "160",
    "--nz",
    "90",
    "--shots",
    "6",
    "--receivers",
    "48",
    "--batch",
    "20",
    "--in-flight",
    "2",
];

fn small_job() -> Job {
    Job::new(JobArgs::parse(SMALL).expect("valid options")).expect("valid job")
}

/// The image a run wrote to `raw` matches `want`, and so does the
/// checksum its root printed.
fn check_image(out: &Output, raw: &Path, want: &Image) {
    let t = text(out);
    let got = Image::read_raw(raw).unwrap_or_else(|e| panic!("{e}\n{t}"));
    let diff = got.relative_difference(want);
    assert!(diff <= TOLERANCE, "the image differs by {diff:e}\n{t}");
    let sum = checksum_printed(&t);
    let rel = (sum - want.checksum()).abs() / want.checksum().abs();
    assert!(rel <= TOLERANCE, "checksum {sum} vs {}", want.checksum());
}

#[test]
fn srun_4_ranks_find_each_other_in_slurms_store_and_give_the_image() {
    let Some(srun) = launchers::slurm() else {
        return;
    };
    let job = small_job();
    let want = job.migrate_sequentially();
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("srun4.f32");
    let mut cmd = launchers::srun(&srun, 4, "pmi2");
    cmd.arg(psdm())
        .args(SMALL)
        .arg("--out")
        .arg(dir.path().join("srun4.png"))
        .arg("--raw")
        .arg(&raw);
    let out = run_bounded(cmd, LIMIT);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    // The root's summary speaks for the job (ranks' own lines only with
    // `--verbose`).
    assert!(t.contains("0: psdm: 4 ranks, "), "{t}");
    assert!(!t.contains("insecure mode"), "{t}");
    check_image(&out, &raw, &want);
}

/// `srun -n 4`, rank 3 held before it joins the third batch reduction and
/// SIGKILLed there: the three survivors share its traces out, redo the
/// batch it did not join, and end well with the sequential image. `srun`
/// itself exits 137, the status of its killed task.
#[test]
fn srun_4_ranks_survive_a_rank_killed_mid_run() {
    let Some(srun) = launchers::slurm() else {
        return;
    };
    let job = small_job();
    let want = job.migrate_sequentially();
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("killed.f32");
    let mark = format!("TF_SLURM_TEST_MARK={}", dir.path().display());
    let (name, value) = mark.split_once('=').expect("a mark");
    let hook = format!("3:before-join:psdm-batch-2:{}", dir.path().display());
    let mut cmd = launchers::srun(&srun, 4, "pmi2");
    cmd.arg(psdm())
        .args(SMALL)
        .arg("--out")
        .arg(dir.path().join("killed.png"))
        .arg("--raw")
        .arg(&raw)
        .env(name, value)
        .env("TASKFOLD_TEST_HOOK", hook)
        .env("TASKFOLD_FAILURE_TIMEOUT_MS", "1500")
        .env("TASKFOLD_PING_MS", "100")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().expect("spawn srun");
    let held = dir.path().join("held-3-before-join");
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut pid = None;
    while pid.is_none() && Instant::now() < deadline {
        if held.exists() {
            pid = rank_pid(&mark, 3);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let Some(pid) = pid else {
        let out = wait_bounded(child, Duration::from_secs(1));
        panic!("rank 3 was never held:\n{}", text(&out));
    };
    signal(pid, Signal::KILL).expect("SIGKILL rank 3");
    let out = wait_bounded(child, LIMIT);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(137), "{t}");
    assert!(t.contains("task 3: Killed"), "{t}");
    assert!(
        t.contains("0: psdm: rank 3 was lost; its traces go to ranks 0, 1 and 2"),
        "{t}"
    );
    assert!(t.contains("redone by ranks 0, 1 and 2"), "{t}");
    assert!(
        t.contains("lost rank 3, whose traces the others migrated"),
        "{t}"
    );
    check_image(&out, &raw, &want);
}

/// The batch scripts of the book's Launching chapter (its code blocks
/// holding `#SBATCH`), as written.
fn book_scripts() -> Vec<String> {
    let book = include_str!("../../../book/src/launching.md");
    let mut scripts = Vec::new();
    let mut block: Option<String> = None;
    for line in book.lines() {
        match (&mut block, line.trim_end()) {
            (None, "```sh") => block = Some(String::new()),
            (Some(b), "```") => {
                if b.contains("#SBATCH") {
                    scripts.push(b.clone());
                }
                block = None;
            }
            (Some(b), l) => {
                b.push_str(l);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    scripts
}

/// Each batch script of the book runs under `sbatch --wait` as written,
/// with psdm on the `PATH`: the job ends well, its four ranks report, the
/// image is written, and both scripts print the same checksum. The
/// key-file script leaves no key behind. Ranks listen on 127.0.0.1 here
/// (`TASKFOLD_BIND_HOST`, which the scripts keep when it is set).
#[test]
fn the_books_batch_scripts_run_under_sbatch_as_written() {
    let Some(srun) = launchers::slurm() else {
        return;
    };
    let sbatch = srun.with_file_name("sbatch");
    let scripts = book_scripts();
    assert_eq!(scripts.len(), 2, "the book's batch scripts:\n{scripts:?}");
    let bin: PathBuf = psdm().parent().expect("psdm's directory").to_path_buf();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut sums = Vec::new();
    for (i, script) in scripts.iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(format!("job-{i}.sbatch"));
        std::fs::write(&file, script).unwrap();
        let mut cmd = std::process::Command::new(&sbatch);
        for v in launchers::CLEARED {
            cmd.env_remove(v);
        }
        cmd.arg("--wait")
            .arg(format!("--chdir={}", dir.path().display()))
            .arg(&file)
            .env("PATH", &path)
            .env("HOME", dir.path())
            .env("TASKFOLD_BIND_HOST", "127.0.0.1");
        let out = run_bounded(cmd, LIMIT);
        let log = job_output(dir.path());
        assert!(
            out.status.success(),
            "script {i} failed:\n{script}\n{}\n{log}",
            text(&out)
        );
        assert!(log.contains("psdm: 4 ranks, "), "{log}");
        assert!(log.contains("psdm: image written to psdm-"), "{log}");
        assert!(!log.contains("insecure mode"), "{log}");
        sums.push(checksum_printed(&log));
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".taskfold-job-"))
            .collect();
        assert!(left.is_empty(), "script {i} left {left:?}");
    }
    let rel = (sums[0] - sums[1]).abs() / sums[0].abs();
    assert!(rel <= TOLERANCE, "checksums {sums:?}");
}

/// What the batch job in `dir` wrote (`psdm-<job id>.out`).
fn job_output(dir: &Path) -> String {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with("psdm-") && n.ends_with(".out")
        })
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}
