//! psdm in one process over `LocalCluster`, a rank other than the root
//! killed at several points of the run: the survivors redo the batches it
//! had not contributed to and share out its traces, every survivor ends
//! well, and the root's image matches the sequential migration within
//! [`TOLERANCE`]. And `--root`: the image ends up at the rank it names.

use std::time::Instant;
use taskfold::{LocalCluster, ReduceError};
use taskfold_psdm::image::TOLERANCE;
use taskfold_psdm::job::{Job, JobArgs};
use taskfold_psdm::rank::{run_rank, Outcome};

/// A small model in many small batches (a few seconds per run).
fn job(extra: &[&str]) -> Job {
    let mut args = vec![
        "--nx",
        "80",
        "--nz",
        "40",
        "--shots",
        "4",
        "--receivers",
        "24",
        "--batch",
        "3",
        "--in-flight",
        "2",
    ];
    args.extend_from_slice(extra);
    Job::new(JobArgs::parse(args).expect("valid options")).expect("valid job")
}

/// Runs `job` on `size` ranks; when the root has settled `kill_at` batches
/// (or at once, for 0), rank `victim` is killed. Returns every rank's
/// result (the victim's is whatever it got).
fn run(job: &Job, size: u32, victim: Option<(u32, usize)>) -> Vec<Result<Outcome, ReduceError>> {
    let cluster = LocalCluster::new(size).expect("cluster");
    let root = job.args.root;
    if let Some((v, 0)) = victim {
        cluster.kill(v);
    }
    let results = std::thread::scope(|s| {
        let cluster = &cluster;
        let handles: Vec<_> = cluster
            .ranks()
            .iter()
            .map(|rt| {
                s.spawn(move || {
                    let mut progress = |done: usize, _total: usize| {
                        if let Some((v, at)) = victim {
                            if done == at && rt.rank() == root {
                                cluster.kill(v);
                            }
                        }
                    };
                    run_rank(rt, job, &mut progress)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread panicked"))
            .collect()
    });
    results
}

/// The survivors end well and the root holds the full image.
fn check(job: &Job, results: &[Result<Outcome, ReduceError>], victim: u32, what: &str) {
    let root = job.args.root;
    for (r, res) in results.iter().enumerate() {
        if r as u32 == victim {
            continue;
        }
        let o = res
            .as_ref()
            .unwrap_or_else(|e| panic!("{what}: rank {r} failed: {e}"));
        assert!(
            o.lost.iter().all(|&l| l == victim),
            "{what}: rank {r} lost {:?}",
            o.lost
        );
        assert_eq!((r as u32 == root), o.root.is_some(), "{what}: rank {r}");
    }
    let survivors: Vec<&Outcome> = results
        .iter()
        .enumerate()
        .filter(|(r, _)| *r as u32 != victim)
        .map(|(_, o)| o.as_ref().unwrap())
        .collect();
    // Every survivor learnt the same.
    for o in &survivors {
        assert_eq!(
            (&o.lost, o.redone),
            (&survivors[0].lost, survivors[0].redone),
            "{what}"
        );
    }
    let out = results[root as usize].as_ref().unwrap();
    let image = &out.root.as_ref().unwrap().image;
    let diff = image.relative_difference(&job.migrate_sequentially());
    assert!(diff <= TOLERANCE, "{what}: the image differs by {diff:e}");
}

#[test]
fn a_rank_killed_early_in_the_middle_or_late_costs_no_trace() {
    let job = job(&[]);
    let size = 4;
    let batches = job.batches(size);
    assert!(batches >= 6, "{batches} batches");
    for (victim, at) in [
        (3, 0),
        (1, 1),
        (2, batches / 2),
        (3, batches - 1),
        (1, batches),
    ] {
        let started = Instant::now();
        let results = run(&job, size, Some((victim, at)));
        let what = format!("rank {victim} killed after {at} of {batches} batches");
        check(&job, &results, victim, &what);
        let root = results[job.args.root as usize].as_ref().unwrap();
        // A rank other than the root settles a batch only once the root
        // holds it (`--completion result`), so it is at most about two
        // windows of batches ahead of the root: killed this early, it has
        // batches left that it never joined; killed by half-way, it cannot
        // have finished and the timing reductions lose it at least.
        if at <= 1 {
            assert!(root.redone >= 1, "{what}: nothing redone");
        }
        if at <= batches / 2 {
            assert_eq!(root.lost, vec![victim], "{what}");
        }
        eprintln!(
            "{what}: lost {:?}, {} redone, {:?}",
            root.lost,
            root.redone,
            started.elapsed()
        );
    }
}

#[test]
fn two_ranks_lost_one_after_the_other() {
    let job = job(&[]);
    let size = 5;
    let cluster = LocalCluster::new(size).expect("cluster");
    let batches = job.batches(size);
    let results: Vec<_> = std::thread::scope(|s| {
        let (cluster, job) = (&cluster, &job);
        let handles: Vec<_> = cluster
            .ranks()
            .iter()
            .map(|rt| {
                s.spawn(move || {
                    let mut progress = |done: usize, _: usize| {
                        if done == 1 {
                            cluster.kill(4);
                        } else if done == batches / 2 {
                            cluster.kill(2);
                        }
                    };
                    run_rank(rt, job, &mut progress)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in [0, 1, 3] {
        let o = results[r]
            .as_ref()
            .unwrap_or_else(|e| panic!("rank {r}: {e}"));
        assert_eq!(o.lost, vec![2, 4], "rank {r}");
    }
    let image = &results[0].as_ref().unwrap().root.as_ref().unwrap().image;
    let diff = image.relative_difference(&job.migrate_sequentially());
    assert!(diff <= TOLERANCE, "the image differs by {diff:e}");
}

#[test]
fn the_image_ends_up_at_the_root_it_names() {
    let job = job(&["--root", "2"]);
    let results = run(&job, 3, None);
    for (r, res) in results.iter().enumerate() {
        let o = res.as_ref().unwrap();
        assert_eq!(o.root.is_some(), r == 2, "rank {r}");
    }
    let root = results[2].as_ref().unwrap().root.as_ref().unwrap();
    let diff = root.image.relative_difference(&job.migrate_sequentially());
    assert!(diff <= TOLERANCE, "the image differs by {diff:e}");
    assert_eq!(root.total.traces, job.survey.traces() as u64);
    // And a rank lost with the root elsewhere than rank 0 (which runs
    // the master, so it is not the one killed).
    let results = run(&job, 4, Some((3, 2)));
    check(&job, &results, 3, "rank 3 killed, root 2");
}

#[test]
fn a_root_outside_the_job_is_refused() {
    let job = job(&["--root", "3"]);
    let cluster = LocalCluster::new(3).expect("cluster");
    let e = run_rank(cluster.rank(0), &job, &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("--root 3"), "{e}");
}

/// With `--completion contributed` a rank done with a batch does not hear
/// that the batch failed, so the survivors cannot agree on what to redo: a
/// lost rank ends the run with its error on every survivor.
#[test]
fn with_early_completion_a_lost_rank_ends_the_run() {
    let job = job(&["--completion", "contributed"]);
    // Killed before it joins anything: nothing of it can be recovered.
    let results = run(&job, 4, Some((3, 0)));
    for (r, res) in results.iter().enumerate().take(3) {
        match res {
            Err(ReduceError::RanksLost { ranks, .. }) => assert_eq!(ranks, &vec![3], "rank {r}"),
            other => panic!("rank {r}: expected RanksLost, got {other:?}"),
        }
    }
}

/// A lost root is the end: every other rank stops with an error naming it
/// (there is nobody to hold the image), and says so plainly.
#[test]
fn a_lost_root_ends_the_run_on_every_rank() {
    let job = job(&["--root", "2"]);
    let results = run(&job, 4, Some((2, 0)));
    for r in [0usize, 1, 3] {
        let e = results[r].as_ref().expect_err("the root was lost");
        let names_root = match e {
            ReduceError::RootLost { root, .. } => *root == 2,
            ReduceError::RanksLost { ranks, .. } => ranks.contains(&2),
            _ => false,
        };
        assert!(names_root, "rank {r}: {e}");
        let said = taskfold_psdm::app::failure(&job, e);
        assert!(said.contains("the root, rank 2, was lost"), "{said}");
    }
}
