//! psdm's checkpoints: the state a rank checkpoints restores exactly (its
//! batches, its share of the traces, at the root the image of exactly
//! those batches); a job resumed from a cut older than a rank's newest
//! version reads that version and ends with the full image; and under
//! `taskfold run` a job whose processes are all SIGKILLed mid-run and
//! launched again ends with the failure-free checksum.

mod common;

use common::{checksum_printed, psdm};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use taskfold::checkpoint::{rank_dir, JobId};
use taskfold::config::CheckpointConfig;
use taskfold::{Config, LocalCluster};
use taskfold_psdm::checkpoint::resume::{resume, Resumed};
use taskfold_psdm::checkpoint::{Start, State};
use taskfold_psdm::image::{Image, TOLERANCE};
use taskfold_psdm::job::{Job, JobArgs};
use taskfold_psdm::rank::{run_resumed, Outcome};
use taskfold_tests::{signal, taskfold_bin, text, wait_bounded, Signal};

/// 16 batches per rank on 3 ranks, a checkpoint every 3.
const ARGS: &[&str] = &[
    "--nx",
    "160",
    "--nz",
    "90",
    "--shots",
    "6",
    "--receivers",
    "48",
    "--batch",
    "6",
    "--in-flight",
    "2",
    "--checkpoint-every",
    "3",
];

fn job() -> Job {
    Job::new(JobArgs::parse(ARGS).expect("valid options")).expect("valid job")
}

/// The image of batches `0..k` of every rank, migrated on one thread.
fn partial_image(job: &Job, size: u32, k: usize) -> Image {
    let mut img = Image::zeros(job.model.nx, job.model.nz);
    for rank in 0..size {
        for b in 0..k {
            for g in job.batch_traces(rank, size, b) {
                let trace = job.survey.model_trace(&job.model, g);
                let (is, ir) = job.survey.geometry(g);
                job.tables.migrate_trace(&mut img.data, &trace, is, ir);
            }
        }
    }
    img
}

fn config(dir: &Path) -> Config {
    Config {
        checkpoint: CheckpointConfig {
            dir: Some(dir.to_path_buf()),
            job: Some("psdm-checkpoint-test".into()),
            ..CheckpointConfig::default()
        },
        ..Config::default()
    }
}

/// Every rank of a fresh cluster resumes as a launched job does, then
/// runs; their resumes and outcomes.
fn resume_and_run(job: &Job, config: &Config, size: u32) -> Vec<(Resumed, Outcome)> {
    let cluster = LocalCluster::with_config(size, config.clone()).expect("cluster");
    let out = std::thread::scope(|s| {
        let handles: Vec<_> = cluster
            .ranks()
            .iter()
            .map(|rt| {
                s.spawn(move || {
                    let r = resume(rt, job, Start::Cut).expect("resume");
                    let o = run_resumed(rt, job, r.state.as_ref(), &mut |_, _| {}).expect("run");
                    (r, o)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    cluster.shutdown().expect("shutdown");
    out
}

fn final_image(results: &[(Resumed, Outcome)]) -> &Image {
    &results[0]
        .1
        .root
        .as_ref()
        .expect("rank 0 is the root")
        .image
}

#[test]
fn the_state_restores_exactly_and_an_older_cut_is_read_back() {
    let (job, size) = (job(), 3);
    let batches = job.batches(size);
    assert_eq!(batches, 16);
    let tmp = tempfile::tempdir().unwrap();
    let config = config(&tmp.path().join("ckpt"));
    let want = job.migrate_sequentially();

    // A first run from nothing checkpoints every 3 batches: versions 1..=5.
    let first = resume_and_run(&job, &config, size);
    assert!(first
        .iter()
        .all(|(r, _)| r.version == 0 && r.state.is_none()));
    assert!(first.iter().all(|(_, o)| o.checkpoints.0 == 5));
    assert!(final_image(&first).relative_difference(&want) <= TOLERANCE);

    // What each rank restores: version 5, 15 batches, its own traces of
    // them, and at the root the image of exactly those batches.
    let cluster = LocalCluster::with_config(size, config.clone()).unwrap();
    for rt in cluster.ranks() {
        let (v, s) = rt
            .checkpoints()
            .restore::<State>()
            .unwrap()
            .expect("a version");
        assert_eq!((v, s.batches_done, s.rank), (5, 15, rt.rank()));
        let traces: usize = (0..15)
            .map(|b| job.batch_traces(rt.rank(), size, b).len())
            .sum();
        assert_eq!(s.timing[5] as usize, traces, "rank {}", rt.rank());
        if rt.rank() == 0 {
            let img = Image {
                nx: job.model.nx,
                nz: job.model.nz,
                data: s.image.clone(),
            };
            let diff = img.relative_difference(&partial_image(&job, size, 15));
            assert!(
                diff <= TOLERANCE,
                "the checkpointed image differs by {diff:e}"
            );
        } else {
            assert!(s.image.is_empty());
        }
    }
    // A replacement process (local restart) takes its own newest version
    // alone, with no agreement; the root refuses to.
    let own = resume(cluster.rank(1), &job, Start::Own).unwrap();
    assert_eq!((own.version, own.state.unwrap().batches_done), (5, 15));
    let e = resume(cluster.rank(0), &job, Start::Own).unwrap_err();
    assert!(e.to_string().contains("cannot resume alone"), "{e}");
    let job_id = cluster.rank(2).checkpoints().job();
    cluster.shutdown().unwrap();

    // Rank 2's newest version lost: the ranks agree on version 4, which
    // the others read back although they hold 5, and the job ends with
    // the full image, each batch counted once.
    let piece = rank_dir(&tmp.path().join("ckpt"), job_id, 2).join("r2-L1-v5.tfck");
    std::fs::remove_file(&piece).unwrap_or_else(|e| panic!("{}: {e}", piece.display()));
    let again = resume_and_run(&job, &config, size);
    for (r, o) in &again {
        assert_eq!(r.version, 4);
        assert_eq!(r.state.as_ref().unwrap().batches_done, 12);
        assert_eq!(o.resumed_at, 12);
    }
    let diff = final_image(&again).relative_difference(&want);
    assert!(diff <= TOLERANCE, "the resumed image differs by {diff:e}");
    let total = &again[0].1.root.as_ref().unwrap().total;
    assert_eq!(total.traces, job.survey.traces() as u64);
}

/// The live children of `parent`.
fn children(parent: u32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
            let (state, ppid) = (rest.next()?, rest.next()?.parse::<u32>().ok()?);
            (ppid == parent && state != "Z").then_some(pid)
        })
        .collect()
}

/// `taskfold run -n 3` of psdm with checkpoints in `ckpt`.
fn launch(ckpt: &Path, out: &Path, hook: Option<String>) -> Command {
    let mut cmd = Command::new(taskfold_bin());
    cmd.args(["run", "-n", "3", "--timeout", "150s", "--"])
        .arg(psdm())
        .args(ARGS)
        // The `@psdm-checkpoint` lines, and every rank's resume line.
        .args(["--markers", "--verbose"])
        .arg("--out")
        .arg(out)
        .env("TASKFOLD_CHECKPOINT_DIR", ckpt)
        .env("TASKFOLD_CHECKPOINT_JOB", "psdm-killed-and-relaunched")
        .env_remove("TASKFOLD_TEST_HOOK")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(h) = hook {
        cmd.env("TASKFOLD_TEST_HOOK", h);
    }
    cmd
}

/// Rank 1 is held before it joins batch 7's reduction; the whole job is
/// then SIGKILLed (every rank) and launched again with the same
/// `TASKFOLD_CHECKPOINT_JOB`: every rank resumes from one version taken
/// before batch 7, and the image's checksum is the sequential
/// migration's.
#[test]
fn a_job_killed_and_launched_again_ends_with_the_failure_free_checksum() {
    let job = job();
    let want = job.migrate_sequentially().checksum();
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ckpt");
    let png = dir.path().join("image.png");
    let hook = format!("1:before-join:psdm-batch-7:{}", dir.path().display());
    let child = launch(&ckpt, &png, Some(hook))
        .spawn()
        .expect("taskfold run");
    let held = dir.path().join("held-1-before-join");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !held.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(held.exists(), "rank 1 was never held");
    // The others go on until they need rank 1's batch 7: the root takes
    // version 2 (6 batches) meanwhile.
    let job_id = JobId::named("psdm-killed-and-relaunched");
    let v2 = rank_dir(&ckpt, job_id, 0).join("r0-L1-v2.tfck");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !v2.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for _ in 0..50 {
        let left = children(child.id());
        if left.is_empty() {
            break;
        }
        for pid in left {
            let _ = signal(pid, Signal::KILL);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let first = text(&wait_bounded(child, Duration::from_secs(60)));
    assert!(!first.contains("psdm: checksum"), "{first}");
    assert!(
        first.contains("@psdm-checkpoint rank=0 version=2"),
        "{first}"
    );

    let out: Output = wait_bounded(
        launch(&ckpt, &png, None).spawn().unwrap(),
        Duration::from_secs(150),
    );
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    // Every rank resumes from one version, a checkpoint taken before
    // batch 7.
    let versions: Vec<&str> = (0..3)
        .map(|r| {
            let says = format!("rank {r} resumed from checkpoint version ");
            t.lines()
                .find_map(|l| l.split(&says).nth(1))
                .and_then(|v| v.split_whitespace().next())
                .unwrap_or_else(|| panic!("rank {r} did not resume:\n{t}"))
        })
        .collect();
    assert!(
        versions.iter().all(|v| *v == versions[0]),
        "{versions:?}\n{t}"
    );
    assert!(["1", "2"].contains(&versions[0]), "{versions:?}\n{t}");
    let got = checksum_printed(&t);
    assert!(
        (got - want).abs() <= TOLERANCE * want.abs(),
        "checksum {got} vs {want}\n{t}"
    );
    assert!(t.contains("psdm: migrated 288 traces"), "{t}");
}

/// A keep too small for the cadence, and an incarnation that is not a
/// number, are refused at start, naming the variable.
#[test]
fn bad_settings_are_refused_at_start() {
    let run = |args: &[&str], env: (&str, &str)| {
        let out = Command::new(psdm())
            .args(args)
            .env(env.0, env.1)
            .output()
            .expect("run psdm");
        (out.status.code(), text(&out))
    };
    let (code, t) = run(
        &[
            "--checkpoint-every",
            "2",
            "--in-flight",
            "4",
            "--local",
            "2",
        ],
        ("TASKFOLD_CHECKPOINT_KEEP", "2"),
    );
    assert_eq!(code, Some(2), "{t}");
    assert!(t.contains("TASKFOLD_CHECKPOINT_KEEP of at least 4"), "{t}");
    let (code, t) = run(&[], ("TASKFOLD_INCARNATION", "two"));
    assert_eq!(code, Some(3), "{t}");
    assert!(t.contains("TASKFOLD_INCARNATION"), "{t}");
}
