//! psdm end to end: a small model migrated on 1, 3 and 4 ranks under
//! `taskfold run`, on 3 ranks under MPICH's `mpiexec`, and on 2 ranks in
//! one process; every image must match the sequential migration within
//! [`TOLERANCE`], and the PNG must show the reflectors where they were
//! modelled.

// Not every helper is used here.
#[allow(dead_code)]
mod common;

use common::kept_checksums;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use taskfold_psdm::image::{Image, TOLERANCE};
use taskfold_psdm::job::{Job, JobArgs};
use taskfold_tests::{run_bounded, taskfold_bin, text};

const LIMIT: Duration = Duration::from_secs(180);

/// The small model every test migrates (a fraction of a second per rank).
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

fn psdm() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_psdm"))
}

fn small_job() -> Job {
    Job::new(JobArgs::parse(SMALL).expect("valid options")).expect("valid job")
}

fn outputs(dir: &Path, tag: &str) -> (PathBuf, PathBuf, Vec<String>) {
    let png = dir.join(format!("{tag}.png"));
    let raw = dir.join(format!("{tag}.f32"));
    let args = vec![
        "--out".to_string(),
        png.display().to_string(),
        "--raw".to_string(),
        raw.display().to_string(),
    ];
    (png, raw, args)
}

fn checksum_printed(out: &Output) -> f64 {
    let t = text(out);
    let line = t
        .lines()
        .find_map(|l| l.split("psdm: checksum ").nth(1))
        .unwrap_or_else(|| panic!("no checksum printed:\n{t}"));
    line.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("bad checksum line {line:?}"))
}

/// Checks one run's outputs against the sequential image.
fn check_run(out: &Output, png: &Path, raw: &Path, want: &Image, job: &Job, what: &str) {
    let t = text(out);
    assert!(out.status.success(), "{what} failed:\n{t}");
    assert!(
        t.contains("waiting on reductions"),
        "{what}: no overlap report:\n{t}"
    );
    let got = Image::read_raw(raw).unwrap_or_else(|e| panic!("{what}: {e}\n{t}"));
    let diff = got.relative_difference(want);
    assert!(diff <= TOLERANCE, "{what}: image differs by {diff:e}");
    let sum = checksum_printed(out);
    let rel = (sum - want.checksum()).abs() / want.checksum().abs();
    assert!(
        rel <= TOLERANCE,
        "{what}: checksum {sum} vs {}",
        want.checksum()
    );
    check_png(png, job, what);
}

/// The PNG decodes, has the image's size and real contrast, and its
/// energy sits on the modelled reflectors (and not on decoys between them).
fn check_png(path: &Path, job: &Job, what: &str) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder
        .read_info()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut buf = vec![0u8; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(
        (info.width as usize, info.height as usize),
        (job.model.nx, job.model.nz)
    );
    assert_eq!(info.color_type, png::ColorType::Grayscale);
    let grey = Image {
        nx: job.model.nx,
        nz: job.model.nz,
        data: buf[..info.buffer_size()]
            .iter()
            .map(|&g| g as f32 - 127.5)
            .collect(),
    };
    let (lo, hi) = grey
        .data
        .iter()
        .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
    assert!(hi - lo > 200.0, "{what}: flat PNG ({lo}..{hi})");
    // Mid-grey is zero: the energy of the displayed image.
    let hw = job.reflector_halfwidth();
    let on = grey.energy_near_reflectors(&job.model, hw);
    // The same measure on a uniform image is the share of pixels in the
    // bands: energy must be concentrated there, not merely spread.
    let uniform = Image {
        nx: grey.nx,
        nz: grey.nz,
        data: vec![1.0; grey.data.len()],
    };
    let bands = uniform.energy_near_reflectors(&job.model, hw);
    assert!(
        on > 0.7 && on > bands + 0.25,
        "{what}: {on:.2} of the energy within {hw} rows of the reflectors, which cover {bands:.2}"
    );
}

#[test]
fn taskfold_run_on_1_3_and_4_ranks_gives_the_same_image() {
    let job = small_job();
    let want = job.migrate_sequentially();
    let dir = tempfile::tempdir().unwrap();
    for np in [1u32, 3, 4] {
        let (png, raw, extra) = outputs(dir.path(), &format!("run{np}"));
        let mut cmd = Command::new(taskfold_bin());
        cmd.args(["run", "-n", &np.to_string(), "--timeout", "150s", "--"])
            .arg(psdm())
            .args(SMALL)
            .args(&extra)
            // Noisy nodes: contributions arrive in a different order.
            .args(["--jitter", if np > 1 { "15ms" } else { "0s" }])
            // Both completions: by default a rank other than the root is
            // done with a batch once its part was folded in.
            .args([
                "--completion",
                if np == 3 { "result" } else { "contributed" },
            ]);
        if np == 3 {
            cmd.arg("--verbose");
        }
        let out = run_bounded(cmd, LIMIT);
        check_run(
            &out,
            &png,
            &raw,
            &want,
            &job,
            &format!("taskfold run -n {np}"),
        );
        let t = text(&out);
        assert!(!t.contains("@psdm-"), "markers without --markers:\n{t}");
        if np == 3 {
            for r in 0..np {
                assert!(t.contains(&format!("[{r}] psdm: rank {r}: ")), "{t}");
            }
        } else {
            quiet_and_ordered(&String::from_utf8_lossy(&out.stdout));
        }
    }
}

/// Only the root speaks, in short lines, and its summary comes in one
/// block, in order.
fn quiet_and_ordered(stdout: &str) {
    let lines: Vec<&str> = stdout.lines().collect();
    for l in &lines {
        assert!(
            l.starts_with("[0] psdm: "),
            "a line not from the root: {l:?}\n{stdout}"
        );
        assert!(l.len() <= 100, "a long line: {l:?}");
    }
    let order = [
        "psdm: migrated ",
        "psdm: per rank (mean): ",
        "psdm: slowest rank ",
        "psdm: overlap: ",
        "psdm: checkpoints: ",
        "psdm: image written to ",
        "psdm: checksum ",
    ];
    // No checkpoint line when the run was too short for one.
    let at: Vec<usize> = order
        .iter()
        .filter(|w| !w.contains("checkpoints") || stdout.contains(*w))
        .map(|w| {
            lines
                .iter()
                .position(|l| l.contains(w))
                .unwrap_or_else(|| panic!("no {w:?} line:\n{stdout}"))
        })
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{at:?}\n{stdout}");
    assert_eq!(at[at.len() - 1], lines.len() - 1, "{stdout}");
}

/// MPICH's Hydra launcher, if installed (CI installs `mpich`).
fn hydra() -> Option<PathBuf> {
    ["mpiexec.hydra", "mpiexec.mpich"].iter().find_map(|name| {
        std::env::var("PATH")
            .unwrap_or_default()
            .split(':')
            .map(|dir| PathBuf::from(dir).join(name))
            .find(|p| p.exists())
    })
}

#[test]
fn mpiexec_on_3_ranks_gives_the_same_image() {
    let Some(mpiexec) = hydra() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install mpich for the mpiexec tests"
        );
        eprintln!("skipped: MPICH's mpiexec is not installed (apt-get install mpich)");
        return;
    };
    let job = small_job();
    let want = job.migrate_sequentially();
    let dir = tempfile::tempdir().unwrap();
    let (png, raw, extra) = outputs(dir.path(), "mpiexec3");
    let mut cmd = Command::new(mpiexec);
    // The job's key, as a user gives it under mpiexec (`taskfold run`
    // makes its own).
    cmd.env("TASKFOLD_RENDEZVOUS", dir.path().join("master.addr"))
        .env("TASKFOLD_JOB_KEY", taskfold_tests::job_key())
        .env_remove("TASKFOLD_JOB_KEY_FILE")
        .env("TASKFOLD_JOB", "psdm-mpiexec-test")
        .env_remove("TASKFOLD_RANK")
        .env_remove("TASKFOLD_SIZE")
        .env_remove("TASKFOLD_MASTER")
        .args(["-n", "3"])
        .arg(psdm())
        .args(SMALL)
        .args(&extra);
    let out = run_bounded(cmd, LIMIT);
    check_run(&out, &png, &raw, &want, &job, "mpiexec -n 3");
    // Not under `taskfold run`: progress is printed as plain lines.
    assert!(text(&out).contains("batches reduced"), "{}", text(&out));
}

#[test]
fn local_ranks_in_one_process_give_the_same_image() {
    let job = small_job();
    let want = job.migrate_sequentially();
    let dir = tempfile::tempdir().unwrap();
    let (png, raw, extra) = outputs(dir.path(), "local2");
    let mut cmd = Command::new(psdm());
    cmd.args(SMALL).args(&extra).args(["--local", "2"]);
    let out = run_bounded(cmd, LIMIT);
    check_run(&out, &png, &raw, &want, &job, "psdm --local 2");
}

/// The process of `rank` among the children of `launcher` (found by the
/// `TASKFOLD_RANK` the launcher gave it).
fn rank_pid(launcher: u32, rank: u32) -> Option<i32> {
    let want = format!("TASKFOLD_RANK={rank}");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
        // pid (comm) state ppid ...: the comm may hold spaces.
        let ppid: u32 = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        let env = std::fs::read(e.path().join("environ")).ok()?;
        let mine = ppid == launcher && env.split(|&b| b == 0).any(|v| v == want.as_bytes());
        mine.then_some(pid)
    })
}

/// Runs psdm under `taskfold run -n 4` with `args`, rank 3 held before it
/// joins the third batch reduction and SIGKILLed there; returns the
/// launcher's output and the raw image written.
fn run_with_rank_3_killed(dir: &Path, args: &[&str]) -> (Output, PathBuf, PathBuf) {
    use taskfold_tests::{signal, wait_bounded, Signal};
    let (png, raw, extra) = outputs(dir, "killed");
    let hook = format!("3:before-join:psdm-batch-2:{}", dir.display());
    let mut cmd = Command::new(taskfold_bin());
    cmd.args(["run", "-n", "4", "--timeout", "150s", "--"])
        .arg(psdm())
        .args(SMALL)
        .args(&extra)
        .args(args)
        .env("TASKFOLD_TEST_HOOK", hook)
        .env("TASKFOLD_FAILURE_TIMEOUT_MS", "1500")
        .env("TASKFOLD_PING_MS", "100")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().expect("spawn taskfold run");
    let held = dir.join("held-3-before-join");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut pid = None;
    while pid.is_none() && std::time::Instant::now() < deadline {
        if held.exists() {
            pid = rank_pid(child.id(), 3);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let Some(pid) = pid else {
        let out = wait_bounded(child, Duration::from_secs(1));
        panic!("rank 3 was never held:\n{}", text(&out));
    };
    signal(pid, Signal::KILL).expect("SIGKILL rank 3");
    (wait_bounded(child, LIMIT), png, raw)
}

/// What the launcher and the survivors say when rank 3 was lost and the
/// job survived it.
fn check_survived_rank_3(t: &str) {
    // One line per rank the launcher saw fail, one verdict for the job.
    assert_eq!(
        t.matches("taskfold run: rank 3 killed by signal 9 (SIGKILL)")
            .count(),
        1,
        "{t}"
    );
    assert_eq!(t.matches("taskfold run: done: ").count(), 1, "{t}");
    assert!(t.contains("the job survived the loss of rank 3;"), "{t}");
    for r in 0..3 {
        assert!(!t.contains(&format!("taskfold run: rank {r} ")), "{t}");
    }
    // The root says it for the job.
    assert!(
        t.contains("[0] psdm: rank 3 was lost; its traces go to ranks 0, 1 and 2"),
        "{t}"
    );
    assert!(t.contains("redone by ranks 0, 1 and 2"), "{t}");
    assert!(
        t.contains("psdm: lost rank 3, whose traces the others migrated"),
        "{t}"
    );
}

/// Under `taskfold run -n 4`, rank 3 is held before it joins the third
/// batch reduction and SIGKILLed there: the three survivors share its
/// traces out, redo the batches it did not join, and end well; the root's
/// image and checksum match the sequential migration, and the launcher
/// exits 0: the job survived the loss.
#[test]
fn taskfold_run_survives_a_rank_killed_mid_run() {
    let job = small_job();
    let want = job.migrate_sequentially();
    let dir = tempfile::tempdir().unwrap();
    let (out, png, raw) = run_with_rank_3_killed(dir.path(), &[]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    check_survived_rank_3(&t);
    // The other survivors are quiet.
    assert!(!t.contains("[1] psdm") && !t.contains("[2] psdm"), "{t}");
    let got = Image::read_raw(&raw).unwrap_or_else(|e| panic!("{e}\n{t}"));
    let diff = got.relative_difference(&want);
    assert!(diff <= TOLERANCE, "the image differs by {diff:e}\n{t}");
    let sum = checksum_printed(&out);
    let rel = (sum - want.checksum()).abs() / want.checksum().abs();
    assert!(rel <= TOLERANCE, "checksum {sum} vs {}", want.checksum());
    check_png(&png, &job, "rank 3 killed");
}

/// `--allreduce` with rank 3 killed as above: every survivor keeps the
/// same stacked image, the sequential migration's, and the job survives.
#[test]
fn with_allreduce_the_survivors_of_a_killed_rank_keep_the_same_image() {
    let job = small_job();
    let want = job.migrate_sequentially();
    let dir = tempfile::tempdir().unwrap();
    let (out, _, raw) = run_with_rank_3_killed(dir.path(), &["--allreduce"]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    check_survived_rank_3(&t);
    let sums = kept_checksums(&t, 3);
    assert!(sums.iter().all(|s| *s == sums[0]), "{sums:?}\n{t}");
    assert!(t.contains("[0] psdm: the root keeps"), "{t}");
    let got = Image::read_raw(&raw).unwrap_or_else(|e| panic!("{e}\n{t}"));
    let diff = got.relative_difference(&want);
    assert!(diff <= TOLERANCE, "the image differs by {diff:e}\n{t}");
    let rel = (sums[0] - want.checksum()).abs() / want.checksum().abs();
    assert!(rel <= TOLERANCE, "{} vs {}", sums[0], want.checksum());
}

/// `--allreduce`: every rank keeps the stacked image, and says so with
/// its checksum: the same on every rank, the root's image matching the
/// sequential migration.
#[test]
fn with_allreduce_every_rank_keeps_the_same_image() {
    let job = small_job();
    let want = job.migrate_sequentially();
    let dir = tempfile::tempdir().unwrap();
    let (png, raw, extra) = outputs(dir.path(), "all");
    let mut cmd = Command::new(taskfold_bin());
    cmd.args(["run", "-n", "3", "--timeout", "150s", "--"])
        .arg(psdm())
        .args(SMALL)
        .args(&extra)
        .args(["--allreduce", "--root", "1"])
        .env("TASKFOLD_CHECKPOINT_DIR", dir.path().join("ckpt"));
    let out = run_bounded(cmd, LIMIT);
    check_run(&out, &png, &raw, &want, &job, "--allreduce");
    let t = text(&out);
    let sums = kept_checksums(&t, 3);
    assert!(sums.iter().all(|s| *s == sums[0]), "{sums:?}\n{t}");
    assert!(t.contains("[1] psdm: the root keeps"), "{t}");
    let sum = sums[0];
    let rel = (sum - want.checksum()).abs() / want.checksum().abs();
    assert!(rel <= TOLERANCE, "{sum} vs {}", want.checksum());
}

#[test]
fn allreduce_with_early_completion_is_refused() {
    let mut args: Vec<&str> = SMALL.to_vec();
    args.extend(["--allreduce", "--completion", "contributed"]);
    let err = Job::new(JobArgs::parse(&args).expect("parses")).err();
    assert!(
        err.as_deref()
            .is_some_and(|e| e.contains("--completion result")),
        "{err:?}"
    );
}
