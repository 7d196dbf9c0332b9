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
use crate::rank::{run_resumed, Outcome, RootResult, Timing};
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

/// `n` and its noun, singular for one: `1 checkpoint`, `2 checkpoints`
/// (`one` and `many` are the two spellings).
pub fn count(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Ranks as a list: `3`, `1 and 3`, `1, 2 and 3`.
pub fn ranks_list(ranks: &[u32]) -> String {
    match ranks {
        [] => "none".to_string(),
        [one] => one.to_string(),
        [init @ .., last] => {
            let init: Vec<String> = init.iter().map(u32::to_string).collect();
            format!("{} and {last}", init.join(", "))
        }
    }
}

/// What the root says about the job before it starts: short lines.
pub fn describe(job: &Job, size: u32) -> Vec<String> {
    let m = &job.model;
    let s = &job.survey;
    let kib = (m.nx * m.nz * 4).div_ceil(1024);
    let checkpoints = match job.args.checkpoint_every {
        0 => "no checkpoints".to_string(),
        b => format!("a checkpoint every {}", count(b as u64, "batch", "batches")),
    };
    vec![
        format!(
            "psdm: {}x{} image ({:.1} x {:.1} km), {} (seed {})",
            m.nx,
            m.nz,
            m.width() / 1e3,
            m.depth() / 1e3,
            count(m.reflectors.len() as u64, "reflector", "reflectors"),
            job.args.seed,
        ),
        format!(
            "psdm: {} x {} = {} of {}",
            count(s.shots.len() as u64, "shot", "shots"),
            count(s.receivers.len() as u64, "receiver", "receivers"),
            count(s.traces() as u64, "trace", "traces"),
            count(s.nt as u64, "sample", "samples"),
        ),
        format!(
            "psdm: {}, {} of {kib} KiB to rank {}",
            count(size, "rank", "ranks"),
            count(
                job.batches(size) as u64,
                "batch reduction",
                "batch reductions"
            ),
            job.args.root,
        ),
        format!(
            "psdm: up to {} in flight per rank, completion {}, {checkpoints}",
            job.args.in_flight, job.args.completion,
        ),
    ]
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

/// This rank's own line (`--verbose`): its time, its checkpoints, where
/// it resumed.
pub fn rank_line(rank: u32, t: &Timing, checkpoints: (u64, Duration), resumed_at: usize) -> String {
    let mean_latency = if t.reductions > 0 {
        secs(t.latency) / t.reductions as f64
    } else {
        0.0
    };
    let mut line = format!(
        "psdm: rank {rank}: {}, computing {:.2} s, waiting {:.3} s; {} of {:.3} s, \
         {:.0}% hidden",
        count(t.traces, "trace", "traces"),
        secs(t.compute),
        secs(t.wait),
        count(t.reductions, "reduction", "reductions"),
        mean_latency,
        pct(t.hidden, t.latency)
    );
    let (n, spent) = checkpoints;
    if n > 0 {
        line += &format!(
            "; {} ({:.3} s)",
            count(n, "checkpoint", "checkpoints"),
            secs(spent)
        );
    }
    if resumed_at > 0 {
        line += &format!("; resumed after batch {resumed_at}");
    }
    line
}

/// The root's summary, in order: what was migrated, the ranks' time, the
/// overlap, the checkpoints (lines without the image's).
pub fn summary(size: u32, outcome: &Outcome, root: &RootResult) -> Vec<String> {
    let (total, max) = (&root.total, &root.max);
    let ranks = size.saturating_sub(outcome.lost.len() as u32).max(1);
    let p = ranks as f64;
    let mut lines = Vec::new();
    let on = if outcome.lost.is_empty() {
        count(size, "rank", "ranks")
    } else {
        format!("{ranks} of {size} ranks")
    };
    lines.push(format!(
        "psdm: migrated {} on {on} in {:.2} s",
        count(total.traces, "trace", "traces"),
        secs(outcome.elapsed)
    ));
    if !outcome.lost.is_empty() {
        lines.push(format!(
            "psdm: lost {} {}, whose traces the others migrated; {} redone",
            if outcome.lost.len() == 1 {
                "rank"
            } else {
                "ranks"
            },
            ranks_list(&outcome.lost),
            count(outcome.redone as u64, "batch reduction", "batch reductions"),
        ));
    }
    lines.push(format!(
        "psdm: per rank (mean): computing {:.2} s, waiting on reductions {:.3} s ({:.1}%)",
        secs(total.compute) / p,
        secs(total.wait) / p,
        pct(total.wait, total.compute),
    ));
    lines.push(format!(
        "psdm: slowest rank computing {:.2} s; longest wait {:.3} s",
        secs(max.compute),
        secs(max.wait)
    ));
    let mean_latency = if total.reductions > 0 {
        secs(total.latency) / total.reductions as f64
    } else {
        0.0
    };
    lines.push(format!(
        "psdm: overlap: {} per rank, {mean_latency:.3} s latency each, {:.0}% hidden \
         behind migration",
        count(
            total.reductions / ranks as u64,
            "batch reduction",
            "batch reductions"
        ),
        pct(total.hidden, total.latency)
    ));
    if root.checkpoints.0 > 0.0 {
        let per_rank = (root.checkpoints.0 / p).round() as u64;
        lines.push(format!(
            "psdm: checkpoints: {per_rank} per rank, {:.3} s per rank (mean), {:.3} s at most",
            root.checkpoints.1 / p,
            root.checkpoints.2
        ));
    }
    lines
}

/// Prints `lines` to stdout in one write, so that nothing lands between
/// them.
pub fn say(lines: &[String]) {
    use std::io::Write;
    let mut text = lines.join("\n");
    text.push('\n');
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// With `--allreduce`: the line in which a rank says which image it
/// kept (the same checksum on every rank).
fn kept_line(root: u32, image: &crate::image::Image, is_root: bool) -> String {
    let who = if is_root { "the root" } else { "this rank" };
    format!(
        "psdm: {who} keeps the stacked image (root {root}), checksum {:.9e}",
        image.checksum()
    )
}

/// Writes the root's outputs and prints its summary in one block;
/// returns the checksum.
pub fn finish_root(job: &Job, size: u32, outcome: &Outcome) -> std::io::Result<f64> {
    if let Some(kept) = &outcome.kept {
        say(&[kept_line(job.args.root, kept, false)]);
    }
    let Some(root) = &outcome.root else {
        return Ok(0.0);
    };
    if job.args.allreduce {
        say(&[kept_line(job.args.root, &root.image, true)]);
    }
    let mut lines = summary(size, outcome, root);
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
    lines.push(format!(
        "psdm: image written to {} ({}x{})",
        job.args.out.display(),
        image.nx,
        image.nz,
    ));
    lines.push(format!(
        "psdm: {:.1}% of its energy lies within {} of the modelled reflectors",
        100.0 * image.energy_near_reflectors(&job.model, hw),
        count(hw as u64, "row", "rows")
    ));
    lines.push(format!(
        "psdm: checksum {checksum:.6e} (any rank count agrees within a relative {TOLERANCE:e})"
    ));
    say(&lines);
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
        // A replacement of a rank that had finished, or a spare the job
        // did not need: its work is done.
        Err(e @ (StartError::RankFinished | StartError::Spare)) => {
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
        say(&describe(job, size));
    }
    let mut progress = progress_reporter(launcher);
    let outcome = rt
        .run_reinit(|rt, entry| entry_point(rt, job, entry, global, &mut progress))
        .unwrap_or_else(|e| Err(failure(job, &e)));
    let code = match outcome {
        Ok(outcome) => match finish_root(job, size, &outcome) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("psdm: cannot write the image: {e}");
                ExitCode::from(1)
            }
        },
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
    say(&describe(job, n));
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
        if let Err(e) = r {
            eprintln!("psdm: rank {rank}: {e}");
            code = ExitCode::from(1);
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
    say_resumed(job, (rt.rank(), start.0), &resumed, up);
    run_resumed(rt, job, resumed.state.as_ref(), progress).map_err(RunError::Reduce)
}

/// Says where a rank resumed: a plain line if from a checkpoint (the
/// root's, or every rank's with `--verbose`), and with `--markers` the
/// machine-readable `@psdm-resumed` line whenever checkpoints are on
/// (`up_unix_ms`: when the runtime was up, before restoring).
fn say_resumed(job: &Job, (rank, incarnation): (u32, u32), r: &Resumed, up: u128) {
    if r.start == Start::Fresh {
        return;
    }
    let batches = r.state.as_ref().map_or(0, |s| s.batches_done);
    if r.version > 0 && (job.args.verbose || rank == job.args.root) {
        println!(
            "psdm: rank {rank} resumed from checkpoint version {} ({} done), restored in \
             {:.3} s",
            r.version,
            count(batches, "batch", "batches"),
            r.took.as_secs_f64()
        );
    }
    if job.args.markers {
        println!(
            "@psdm-resumed rank={rank} start={} incarnation={incarnation} version={} \
             batches={batches} restore_ms={:.3} up_unix_ms={up}",
            r.start.name(),
            r.version,
            r.took.as_secs_f64() * 1e3
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_agree_with_their_nouns() {
        assert_eq!(count(1u64, "checkpoint", "checkpoints"), "1 checkpoint");
        assert_eq!(count(0u64, "checkpoint", "checkpoints"), "0 checkpoints");
        assert_eq!(count(2u32, "batch", "batches"), "2 batches");
        assert_eq!(ranks_list(&[3]), "3");
        assert_eq!(ranks_list(&[1, 3]), "1 and 3");
        assert_eq!(ranks_list(&[0, 1, 2]), "0, 1 and 2");
    }

    #[test]
    fn the_description_is_short_lines_with_right_plurals() {
        let args = crate::job::JobArgs::parse(["--nx", "20", "--nz", "10", "--shots", "1"]);
        let mut args = args.unwrap();
        args.reflectors = 1;
        let job = Job::new(args).unwrap();
        let lines = describe(&job, 1);
        let text = lines.join("\n");
        for line in &lines {
            assert!(line.len() <= 90, "{line}");
        }
        assert!(text.contains("1 reflector (seed"), "{text}");
        assert!(text.contains("1 shot x"), "{text}");
        assert!(text.contains("psdm: 1 rank, "), "{text}");
    }
}
