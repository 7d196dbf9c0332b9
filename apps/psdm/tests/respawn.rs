//! psdm under `taskfold run --respawn` (the book's chapter Surviving
//! failures of the application): a rank other than the root SIGKILLed at
//! an instant drawn over the whole run is replaced, and the job ends with
//! exit code 0 and the failure-free image checksum, both ways back: the
//! replacement alone resumes from its checkpoint (local restart), or every
//! rank rolls back to one (global restart).

mod common;

use common::{checksum_printed, kept_checksums, psdm};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use taskfold_psdm::image::TOLERANCE;
use taskfold_psdm::job::{Job, JobArgs};
use taskfold_tests::{drawn_instant, signal, taskfold_bin, text, wait_bounded, Signal};

/// 24 batches per rank on 3 ranks, a checkpoint every 4, paced so that a
/// run lasts about a second and a half.
const ARGS: &[&str] = &[
    "--nx",
    "160",
    "--nz",
    "90",
    "--shots",
    "8",
    "--receivers",
    "54",
    "--batch",
    "6",
    "--in-flight",
    "2",
    "--checkpoint-every",
    "4",
    "--jitter",
    "60ms",
];

/// `taskfold run -n 3 --respawn 1` of psdm with `extra` arguments,
/// restarting by `restart`.
fn launch(restart: &str, out: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(taskfold_bin());
    cmd.args([
        "run",
        "-n",
        "3",
        "--respawn",
        "1",
        "--timeout",
        "200s",
        "--",
    ])
    .arg(psdm())
    .args(ARGS)
    .args(extra)
    // The `@psdm-resumed` lines this test reads.
    .arg("--markers")
    .arg("--out")
    .arg(out)
    .env("TASKFOLD_RESTART", restart)
    .env_remove("TASKFOLD_CHECKPOINT_DIR")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    cmd
}

/// The live process of `rank` among the children of `parent`.
fn rank_pid(parent: u32, rank: u32) -> Option<i32> {
    let want = format!("TASKFOLD_RANK={rank}");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
        let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
        let (state, ppid) = (rest.next()?, rest.next()?.parse::<u32>().ok()?);
        let env = std::fs::read(e.path().join("environ")).ok()?;
        let mine = env.split(|&b| b == 0).any(|v| v == want.as_bytes());
        (ppid == parent && state != "Z" && mine).then_some(pid)
    })
}

/// Runs the job, SIGKILLs `victim` `at` after it started; the output and
/// whether the kill hit a live process of the victim.
fn run_killed(restart: &str, victim: u32, at: Duration, extra: &[&str]) -> (Output, bool) {
    let dir = tempfile::tempdir().unwrap();
    let child = launch(restart, &dir.path().join("image.png"), extra)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut pid = None;
    while pid.is_none() && Instant::now() < deadline {
        pid = rank_pid(child.id(), victim);
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(at);
    let hit = pid.is_some_and(|p| signal(p, Signal::KILL).is_ok());
    (wait_bounded(child, Duration::from_secs(200)), hit)
}

/// The failure-free span of the job, from a second run: the first after
/// a build pays for cold caches, and kills drawn over it would land after
/// the killed runs' end.
fn failure_free_span(restart: &str, extra: &[&str]) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let mut span = Duration::ZERO;
    for _ in 0..2 {
        let began = Instant::now();
        let mut clean = launch(restart, &dir.path().join("clean.png"), extra);
        let clean = wait_bounded(clean.spawn().unwrap(), Duration::from_secs(200));
        span = began.elapsed();
        assert!(clean.status.success(), "{}", text(&clean));
    }
    span
}

#[test]
fn a_rank_killed_anywhere_is_replaced_and_the_image_is_the_failure_free_one() {
    let job = Job::new(JobArgs::parse(ARGS).expect("valid options")).expect("valid job");
    let want = job.migrate_sequentially().checksum();
    let span = failure_free_span("local", &[]);
    for restart in ["local", "global"] {
        let mut landed = 0;
        for trial in 0..12u64 {
            if landed == 2 {
                break;
            }
            let victim = 1 + (trial % 2) as u32;
            let (out, hit) = run_killed(restart, victim, drawn_instant(trial, span), &[]);
            let t = text(&out);
            if !hit || !t.contains("started again (incarnation") {
                continue; // the victim had ended: drawn again
            }
            landed += 1;
            assert!(out.status.success(), "{restart}:\n{t}");
            let got = checksum_printed(&t);
            assert!(
                (got - want).abs() <= TOLERANCE * want.abs(),
                "{restart}: checksum {got} vs {want}\n{t}"
            );
            assert!(t.contains("(replaced: "), "{t}");
            // The replacement resumed alone from its own checkpoint, or
            // every rank came back to the entry point and resumed again.
            let (start, again) = match restart {
                "local" => ("own", 1),
                _ => ("cut", 2),
            };
            let resumed = format!("@psdm-resumed rank={victim} start={start} incarnation=1 ");
            assert!(
                t.contains(&resumed),
                "{restart}: the replacement resumed:\n{t}"
            );
            let root = t.matches("@psdm-resumed rank=0 ").count();
            assert_eq!(root, again, "{restart}: the root's entries:\n{t}");
        }
        assert_eq!(
            landed, 2,
            "{restart}: two kills landed while the victim ran"
        );
    }
}

/// `--allreduce` under global restart: a rank other than the root killed
/// at an instant drawn over the run (the failure-free span measured
/// first); every rank rolls back and resumes, and every rank keeps the
/// failure-free image.
#[test]
fn with_allreduce_global_restart_leaves_every_rank_the_failure_free_image() {
    let job = Job::new(JobArgs::parse(ARGS).expect("valid options")).expect("valid job");
    let want = job.migrate_sequentially().checksum();
    let span = failure_free_span("global", &["--allreduce"]);
    let mut landed = 0;
    for trial in 0..10u64 {
        if landed == 2 {
            break;
        }
        let victim = 1 + (trial % 2) as u32;
        let at = drawn_instant(trial + 40, span);
        let (out, hit) = run_killed("global", victim, at, &["--allreduce"]);
        let t = text(&out);
        if !hit || !t.contains("started again (incarnation") {
            continue; // the victim had ended: drawn again
        }
        landed += 1;
        assert!(out.status.success(), "{t}");
        assert!(t.contains("(replaced: "), "{t}");
        for sum in kept_checksums(&t, 3) {
            assert!(
                (sum - want).abs() <= TOLERANCE * want.abs(),
                "{sum} vs {want}\n{t}"
            );
        }
    }
    assert_eq!(landed, 2, "two kills landed while the victim ran");
}

/// `--allreduce` under local restart: a replaced rank cannot resume alone
/// (the batch images its dead process held are gone, and those batches'
/// allreduces finished without it); it says so and the job fails, at
/// once, rather than waiting for values nobody holds.
#[test]
fn with_allreduce_a_rank_replaced_alone_refuses_to_resume() {
    let mut landed = false;
    for trial in 0..6u64 {
        let at = Duration::from_millis(300 + 100 * trial);
        let began = Instant::now();
        let (out, hit) = run_killed("local", 2, at, &["--allreduce"]);
        let t = text(&out);
        if !hit || !t.contains("started again (incarnation") {
            continue;
        }
        landed = true;
        assert!(!out.status.success(), "{t}");
        assert!(
            t.contains("[2] psdm: rank 2: rank 2 cannot resume alone with --allreduce"),
            "{t}"
        );
        assert!(t.contains("TASKFOLD_RESTART=global"), "{t}");
        // Within the launcher's handling of the failure, not its 200 s
        // time limit.
        assert!(began.elapsed() < Duration::from_secs(100), "{t}");
        break;
    }
    assert!(landed, "a kill landed while rank 2 ran");
}
