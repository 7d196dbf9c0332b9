//! The program around the rank loop: start the runtime (launched, or
//! `--local N` ranks in this process), report progress, and at the root
//! (`--root`) print the summary and write the image. A rank whose run
//! fails prints why and exits 1; a `--root` outside the job exits 2, as
//! does a `TASKFOLD_CHECKPOINT_KEEP` too small for `--checkpoint-every`.
//! Before it runs, every rank resumes from its checkpoints if there are
//! any ([`crate::checkpoint`]); a rank that cannot exits 1.

use crate::checkpoint::resume::{self, Resumed};
use crate::checkpoint::{unix_ms, Lifecycle, Start};
use crate::image::{Image, TOLERANCE};
use crate::job::Job;
use crate::rank::{run_resumed, Outcome, Timing};
use std::process::ExitCode;
use std::time::Duration;
use taskfold::config::Restart;
use taskfold::{Config, Entry, LocalCluster, ReduceError, Runtime, Settings, StartError};

/// Reports batch progress at the root: `@taskfold-progress` lines under
/// `taskfold run` (`launcher`: drawn as a progress bar), plain lines at
/// every quarter otherwise (mpiexec, srun, `--local`).
pub fn progress_reporter(launcher: bool) -> impl FnMut(usize, usize) {
    let mut last_quarter = 0;
    move |done, total| {
        if launcher {
            println!("@taskfold-progress {done} {total} batches reduced");
        } else {
            let q = done * 4 / total.max(1);
            if q > last_quarter {
                last_quarter = q;
                println!("psdm: {done}/{total} batches reduced");
            }
        }
    }
}

/// One line about the job, printed by the root before it starts.
pub fn describe(job: &Job, size: u32) -> String {
    let m = &job.model;
    let s = &job.survey;
    let bytes = m.nx * m.nz * 4;
    format!(
        "psdm: {}x{} image ({:.1} x {:.1} km), {} shots x {} receivers = {} traces of {} samples, \
         {} reflectors (seed {}), {} ranks, {} batch reductions of {} KiB to rank {}, up to {} in flight per rank, completion {}, {}",
        m.nx,
        m.nz,
        m.width() / 1e3,
        m.depth() / 1e3,
        s.shots.len(),
        s.receivers.len(),
        s.traces(),
        s.nt,
        m.reflectors.len(),
        job.args.seed,
        size,
        job.batches(size),
        bytes.div_ceil(1024),
        job.args.root,
        job.args.in_flight,
        job.args.completion,
        match job.args.checkpoint_every {
            0 => "no checkpoints".to_string(),
            b => format!("a checkpoint every {b} batches"),
        }
    )
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn pct(part: Duration, whole: Duration) -> f64 {
    if whole.is_zero() {
        0.0
    } else {
        100.0 * secs(part) / secs(whole)
    }
}

/// This rank's one-line account of its time, and of its checkpoints.
pub fn rank_line(rank: u32, o: &Outcome) -> String {
    let (n, spent) = o.checkpoints;
    let mut line = timing_line(rank, &o.timing);
    if n > 0 {
        line += &format!("; {n} checkpoints, {:.3} s", secs(spent));
    }
    if o.resumed_at > 0 {
        line += &format!("; resumed after batch {}", o.resumed_at);
    }
    line
}

/// This rank's one-line account of its time.
pub fn timing_line(rank: u32, t: &Timing) -> String {
    let mean_latency = if t.reductions > 0 {
        secs(t.latency) / t.reductions as f64
    } else {
        0.0
    };
    format!(
        "rank {rank}: {} traces, computing {:.2} s, waiting on reductions {:.3} s; \
         {} reductions, {:.3} s latency each, {:.0}% of it hidden behind migration",
        t.traces,
        secs(t.compute),
        secs(t.wait),
        t.reductions,
        mean_latency,
        pct(t.hidden, t.latency)
    )
}

/// Writes the root's outputs and prints the summary; returns the checksum.
pub fn finish_root(job: &Job, size: u32, outcome: &Outcome) -> std::io::Result<f64> {
    let Some(root) = &outcome.root else {
        return Ok(0.0);
    };
    let (total, max) = (&root.total, &root.max);
    let ranks = size.saturating_sub(outcome.lost.len() as u32).max(1);
    let p = ranks as f64;
    if outcome.lost.is_empty() {
        println!(
            "psdm: migrated {} traces on {size} ranks in {:.2} s",
            total.traces,
            secs(outcome.elapsed)
        );
    } else {
        println!(
            "psdm: migrated {} traces on {ranks} of {size} ranks in {:.2} s; lost ranks {:?}, \
             their traces shared among the others; {} batch reduction{} redone",
            total.traces,
            secs(outcome.elapsed),
            outcome.lost,
            outcome.redone,
            if outcome.redone == 1 { "" } else { "s" }
        );
    }
    println!(
        "psdm: per rank (mean): computing {:.2} s (slowest rank {:.2} s), waiting on reductions \
         {:.3} s = {:.1}% of computing (worst rank {:.3} s)",
        secs(total.compute) / p,
        secs(max.compute),
        secs(total.wait) / p,
        pct(total.wait, total.compute),
        secs(max.wait)
    );
    let per_rank = total.reductions / ranks as u64;
    println!(
        "psdm: overlap: {per_rank} batch reductions per rank, {:.3} s mean latency, {:.0}% of \
         reduction time hidden behind migration",
        if total.reductions > 0 {
            secs(total.latency) / total.reductions as f64
        } else {
            0.0
        },
        pct(total.hidden, total.latency)
    );
    let image = &root.image;
    image.write_png(&job.args.out)?;
    if let Some(raw) = &job.args.raw {
        image.write_raw(raw)?;
    }
    if let Some(path) = &job.args.model_png {
        reflectivity(job).write_png(path)?;
    }
    let hw = job.reflector_halfwidth();
    let checksum = image.checksum();
    println!(
        "psdm: image written to {} ({}x{}); energy within {hw} rows of the modelled reflectors: {:.1}%",
        job.args.out.display(),
        image.nx,
        image.nz,
        100.0 * image.energy_near_reflectors(&job.model, hw)
    );
    println!(
        "psdm: checksum {checksum:.6e} (any rank count and arrival order agree within a relative {TOLERANCE:e})"
    );
    Ok(checksum)
}

/// The true reflectivity on the image grid (one row per reflector and
/// column), for comparison with the migrated image.
pub fn reflectivity(job: &Job) -> Image {
    let m = &job.model;
    let mut img = Image::zeros(m.nx, m.nz);
    for r in &m.reflectors {
        for ix in 0..m.nx {
            let iz = (m.reflector_depth(r, ix as f64 * m.dx) / m.dx).round();
            if iz >= 0.0 && (iz as usize) < m.nz {
                img.data[iz as usize * m.nx + ix] += r.amplitude as f32;
            }
        }
    }
    img
}

/// A rank's error, said plainly when it means there is no image.
pub fn failure(job: &Job, e: &ReduceError) -> String {
    match e {
        ReduceError::RootLost { root, .. } => {
            format!("the root, rank {root}, was lost: there is no image ({e})")
        }
        ReduceError::RanksLost { ranks, .. } if ranks.contains(&job.args.root) => format!(
            "the root, rank {}, was lost: there is no image ({e})",
            job.args.root
        ),
        _ => e.to_string(),
    }
}

/// Whether `taskfold run` started this process (it draws progress lines).
fn under_taskfold_run(settings: &Settings) -> bool {
    settings
        .launch
        .identity
        .is_some_and(|id| id.launcher == "taskfold")
}

/// Runs one rank of a job started by `taskfold run`, `mpiexec` or `srun`,
/// with the settings of the environment. Its work is the runtime's
/// re-init entry point ([`Runtime::run_reinit`]): under global restart
/// every rank comes back there when one is replaced, and all resume from
/// one checkpoint; a replacement under local restart resumes alone.
pub fn run_launched(job: &Job, settings: Settings) -> ExitCode {
    let (metrics, launcher) = (settings.metrics_addr, under_taskfold_run(&settings));
    let ckpt = settings.runtime.checkpoint.clone();
    let global = settings.runtime.respawn.restart == Restart::Global;
    if let Err(e) = resume::cadence(job, &ckpt) {
        eprintln!("psdm: cannot start: {e}");
        return ExitCode::from(2);
    }
    let rt = match Runtime::from_settings(settings) {
        Ok(rt) => rt,
        // A replacement of a rank that had finished: its work is done.
        Err(e @ StartError::RankFinished) => {
            eprintln!("psdm: {e}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("psdm: {e}");
            return ExitCode::from(3);
        }
    };
    let (rank, size) = (rt.rank(), rt.size());
    if let Err(e) = job.args.check_root(size) {
        eprintln!("psdm: {e}");
        let _ = rt.shutdown();
        return ExitCode::from(2);
    }
    crate::observe::init_metrics(rank, metrics);
    if rank == job.args.root {
        println!("{}", describe(job, size));
    }
    let mut progress = progress_reporter(launcher);
    let outcome = rt
        .run_reinit(|rt, entry| entry_point(rt, job, entry, global, &mut progress))
        .unwrap_or_else(|e| Err(failure(job, &e)));
    let code = match outcome {
        Ok(outcome) => {
            println!("{}", rank_line(rank, &outcome));
            match finish_root(job, size, &outcome) {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("psdm: cannot write the image: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Err(e) => {
            eprintln!("psdm: rank {rank}: {e}");
            ExitCode::from(1)
        }
    };
    if let Err(e) = rt.shutdown() {
        eprintln!("psdm: rank {rank}: shutdown: {e}");
    }
    code
}

/// One run of a rank from the re-init entry point: resumed as `entry`
/// says (a replacement alone from its own checkpoint under local restart,
/// every rank from one cut otherwise). A rollback is returned as
/// [`ReduceError::Reinit`]; any other failure as the rank's error.
fn entry_point(
    rt: &Runtime,
    job: &Job,
    entry: Entry,
    global: bool,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Result<Outcome, String>, ReduceError> {
    let (incarnation, lifecycle) = match entry.lifecycle {
        taskfold::Lifecycle::Restarted { incarnation } if !global => {
            (incarnation, Lifecycle::Restarted)
        }
        taskfold::Lifecycle::Restarted { incarnation } => (incarnation, Lifecycle::Reinited),
        taskfold::Lifecycle::Reinited { .. } => (0, Lifecycle::Reinited),
        taskfold::Lifecycle::New => (0, Lifecycle::New),
    };
    let start = (incarnation, Start::of(lifecycle, job.args.checkpoint_every));
    match run_one(rt, job, start, progress) {
        Err(RunError::Reduce(e @ ReduceError::Reinit { .. })) => Err(e),
        Err(RunError::Resume(resume::ResumeError::Agree(e @ ReduceError::Reinit { .. }))) => Err(e),
        Err(RunError::Reduce(e)) => Ok(Err(failure(job, &e))),
        Err(RunError::Resume(e)) => Ok(Err(e.to_string())),
        Ok(o) => Ok(Ok(o)),
    }
}

/// Why a rank's run ended without an outcome.
enum RunError {
    Resume(resume::ResumeError),
    Reduce(ReduceError),
}

/// Runs `n` ranks in this process (threads over the serialising loopback;
/// of `settings`, only the metrics address, the launcher and the
/// checkpoints apply).
pub fn run_local(n: u32, job: &Job, settings: &Settings) -> ExitCode {
    if let Err(e) = job.args.check_root(n) {
        eprintln!("psdm: {e}");
        return ExitCode::from(2);
    }
    let root = job.args.root;
    let ckpt = settings.runtime.checkpoint.clone();
    if let Err(e) = resume::cadence(job, &ckpt) {
        eprintln!("psdm: {e}");
        return ExitCode::from(2);
    }
    let config = Config {
        checkpoint: ckpt.clone(),
        ..Config::default()
    };
    let cluster = match LocalCluster::with_config(n, config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("psdm: {e}");
            return ExitCode::from(3);
        }
    };
    // One process, one metrics endpoint for all its ranks.
    crate::observe::init_metrics(0, settings.metrics_addr);
    let launcher = under_taskfold_run(settings);
    println!("{}", describe(job, n));
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = cluster
            .ranks()
            .iter()
            .map(|rt| {
                s.spawn(move || {
                    let mut progress = progress_reporter(launcher);
                    let mut quiet = |_: usize, _: usize| {};
                    let p: &mut dyn FnMut(usize, usize) = if rt.rank() == root {
                        &mut progress
                    } else {
                        &mut quiet
                    };
                    let start = (0, Start::of(Lifecycle::New, job.args.checkpoint_every));
                    run_one(rt, job, start, p).map_err(|e| match e {
                        RunError::Reduce(e) => failure(job, &e),
                        RunError::Resume(e) => e.to_string(),
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread panicked"))
            .collect()
    });
    let mut code = ExitCode::SUCCESS;
    for (rank, r) in results.iter().enumerate() {
        match r {
            Ok(o) => println!("{}", rank_line(rank as u32, o)),
            Err(e) => {
                eprintln!("psdm: rank {rank}: {e}");
                code = ExitCode::from(1);
            }
        }
    }
    if let Some(Ok(outcome)) = results.get(root as usize) {
        if let Err(e) = finish_root(job, n, outcome) {
            eprintln!("psdm: cannot write the image: {e}");
            code = ExitCode::from(1);
        }
    }
    if let Err(e) = cluster.shutdown() {
        eprintln!("psdm: shutdown: {e}");
    }
    code
}

/// Resumes this rank as `start` (its incarnation, and how it starts)
/// says, then runs it; the error is said plainly ([`failure`]).
fn run_one(
    rt: &Runtime,
    job: &Job,
    start: (u32, Start),
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Outcome, RunError> {
    let up = unix_ms();
    let resumed = resume::resume(rt, job, start.1).map_err(RunError::Resume)?;
    say_resumed(rt.rank(), start.0, &resumed, up);
    run_resumed(rt, job, resumed.state.as_ref(), progress).map_err(RunError::Reduce)
}

/// Says where a rank resumed: a plain line if from a checkpoint, and the
/// machine-readable `@psdm-resumed` line whenever checkpoints are on
/// (`up_unix_ms`: when the runtime was up, before restoring).
fn say_resumed(rank: u32, incarnation: u32, r: &Resumed, up: u128) {
    if r.start == Start::Fresh {
        return;
    }
    let batches = r.state.as_ref().map_or(0, |s| s.batches_done);
    if r.version > 0 {
        println!(
            "psdm: rank {rank} resumed from checkpoint version {} ({batches} batches done), \
             restored in {:.3} s",
            r.version,
            r.took.as_secs_f64()
        );
    }
    println!(
        "@psdm-resumed rank={rank} start={} incarnation={incarnation} version={} batches={batches} \
         restore_ms={:.3} up_unix_ms={up}",
        r.start.name(),
        r.version,
        r.took.as_secs_f64() * 1e3
    );
}
