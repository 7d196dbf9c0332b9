//! One rank's migration: model and migrate its traces batch by batch; every
//! batch ends with a non-blocking reduction of the batch's partial image to
//! the root (`--root`) while the rank goes on with the next batch.
//!
//! A rank that dies (or leaves) makes the batch reductions it had not
//! joined fail on every survivor with `RanksLost`; the survivors then redo
//! those batches among themselves, its traces shared out, and reduce every
//! later batch over their own group ([`crate::recovery`]). A lost root,
//! the master lost, this rank fenced, or any other error ends the rank
//! with that error, as does a lost rank under `--completion contributed`
//! (a rank done with a batch does not hear that it failed, so the
//! survivors could not agree on what to redo).
//!
//! Every `--checkpoint-every` batches the rank checkpoints its progress
//! (and the root its image) without waiting for the write, and a run can
//! resume after a checkpoint's batches ([`run_resumed`], see
//! [`crate::checkpoint`]).
//!
//! Overlap is measured, not assumed. Between traces the rank polls its live
//! reductions (`is_done`, which never blocks) and notes when each finished;
//! a reduction's *latency* runs from `reduce` to that moment, and the part
//! of it the rank did not spend blocked in `get` was *hidden* behind
//! computation.

use crate::checkpoint::writer::{Checkpointer, Parts};
use crate::checkpoint::{fingerprint, Cadence, State};
use crate::image::Image;
use crate::job::Job;
use crate::model::Rng;
use crate::recovery::{suffixed, Attempt, Schedule};
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use taskfold::{Completion, InPlace, Max, Reduce, ReduceError, ReduceFuture, Runtime, Sum};

/// Where one rank's time went.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Timing {
    /// Modelling and migrating traces.
    pub compute: Duration,
    /// Blocked waiting on reductions (`get`).
    pub wait: Duration,
    /// Sum over this rank's reductions of their latency (`reduce` → done).
    pub latency: Duration,
    /// The part of `latency` spent computing instead of waiting.
    pub hidden: Duration,
    /// Sleeping to simulate a noisy node (`--jitter`).
    pub jitter: Duration,
    /// Traces migrated.
    pub traces: u64,
    /// Batch reductions issued.
    pub reductions: u64,
}

impl Timing {
    /// The timing as numbers (what a checkpoint and the timing
    /// reductions carry).
    pub fn to_vec(self) -> Vec<f64> {
        vec![
            self.compute.as_secs_f64(),
            self.wait.as_secs_f64(),
            self.latency.as_secs_f64(),
            self.hidden.as_secs_f64(),
            self.jitter.as_secs_f64(),
            self.traces as f64,
            self.reductions as f64,
        ]
    }

    /// The timing of [`Timing::to_vec`]'s numbers (missing ones zero).
    pub fn from_slice(v: &[f64]) -> Timing {
        let at = |i: usize| v.get(i).copied().unwrap_or(0.0);
        let d = |x: f64| Duration::from_secs_f64(x.max(0.0));
        Timing {
            compute: d(at(0)),
            wait: d(at(1)),
            latency: d(at(2)),
            hidden: d(at(3)),
            jitter: d(at(4)),
            traces: at(5) as u64,
            reductions: at(6) as u64,
        }
    }
}

/// What a rank ends with.
#[derive(Debug)]
pub struct Outcome {
    /// This rank's timing.
    pub timing: Timing,
    /// Wall time of the migration loop on this rank.
    pub elapsed: Duration,
    /// The ranks lost during the run (the same on every survivor).
    pub lost: Vec<u32>,
    /// Batch reductions that failed for a lost rank and were redone.
    pub redone: usize,
    /// Batches this run resumed after (from a checkpoint), 0 if none.
    pub resumed_at: usize,
    /// Checkpoints taken, and the time the rank spent taking them
    /// (serialising, and blocked on a write not yet durable).
    pub checkpoints: (u64, Duration),
    /// At the root: the final image and every surviving rank's timing
    /// summed and maximised (element-wise).
    pub root: Option<RootResult>,
    /// With `--allreduce`, on every rank but the root: the stacked image
    /// it kept (the root's is in [`RootResult::image`]).
    pub kept: Option<Image>,
}

/// The root's share of the outcome.
#[derive(Debug)]
pub struct RootResult {
    /// The migrated image.
    pub image: Image,
    /// Timings of every surviving rank, summed.
    pub total: Timing,
    /// Timings of every surviving rank, element-wise maximum.
    pub max: Timing,
    /// Checkpoints of every surviving rank: taken in all, seconds spent in
    /// all, and the most seconds one rank spent.
    pub checkpoints: (f64, f64, f64),
}

struct Pending {
    attempt: Attempt,
    issued: Instant,
    done_at: Option<Instant>,
    future: Batch,
    /// The rank's timing once it was issued: the work of batches up to
    /// this one, and no later one (what a checkpoint taken when it
    /// settles counts).
    t_issued: Timing,
}

/// A batch's reduction: to the root, or (`--allreduce`) to every rank.
enum Batch {
    Reduce(ReduceFuture<InPlace<Sum<f32>>>),
    All(taskfold::SpreadFuture<InPlace<Sum<f32>>>),
}

impl Batch {
    /// True once its outcome is known (never blocks).
    fn is_done(&self) -> bool {
        match self {
            Batch::Reduce(f) => f.is_done(),
            Batch::All(f) => f.is_done(),
        }
    }

    /// The batch image, where this rank gets it.
    fn get(self) -> Result<Option<InPlace<Sum<f32>>>, ReduceError> {
        match self {
            Batch::Reduce(f) => f.get(),
            Batch::All(f) => f.get().map(Some),
        }
    }
}

/// One rank's run: its schedule, its partial state, what it reports.
struct Run<'a> {
    rt: &'a Runtime,
    job: &'a Job,
    sched: Schedule,
    t: Timing,
    /// At the root (on every rank with `--allreduce`): the batch images
    /// added so far.
    image: Option<Image>,
    /// This rank is the root.
    root: bool,
    pending: VecDeque<Pending>,
    ckpt: Option<Checkpointer>,
    progress: &'a mut dyn FnMut(usize, usize),
}

/// Runs this rank's part of `job` on `rt`. `progress(done, total)` is
/// called at the root each time a batch image arrives.
///
/// Fails with [`ReduceError::InvalidOptions`] if `--root` is not a rank
/// of the job, and with the error of a reduction that cannot be redone
/// (see the module's documentation).
pub fn run_rank(
    rt: &Runtime,
    job: &Job,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Outcome, ReduceError> {
    run_resumed(rt, job, None, progress)
}

/// As [`run_rank`], resuming after the batches `from` holds (a checkpoint
/// of this rank, [`crate::checkpoint::resume`]), with its timing and, at
/// the root, its image.
pub fn run_resumed(
    rt: &Runtime,
    job: &Job,
    from: Option<&State>,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Outcome, ReduceError> {
    let (rank, size) = (rt.rank(), rt.size());
    job.args
        .check_root(size)
        .map_err(ReduceError::InvalidOptions)?;
    let root = job.args.root;
    let started = Instant::now();
    let mut run = Run {
        rt,
        job,
        sched: Schedule::new(size, root, rank, job.batches(size)),
        t: Timing::default(),
        image: (rank == root || job.args.allreduce)
            .then(|| Image::zeros(job.model.nx, job.model.nz)),
        root: rank == root,
        pending: VecDeque::new(),
        ckpt: (job.args.checkpoint_every > 0).then(|| {
            let cadence = Cadence {
                every: job.args.checkpoint_every,
                in_flight: job.args.in_flight,
            };
            Checkpointer::new(cadence, fingerprint(job, size), job.args.markers)
        }),
        progress,
    };
    let resumed_at = match from {
        Some(s) => run.resume(s)?,
        None => 0,
    };
    run.batches()?;
    if let Some(c) = run.ckpt.as_mut() {
        c.finish(rank);
    }
    let elapsed = started.elapsed();
    let checkpoints = run
        .ckpt
        .as_ref()
        .map_or((0, Duration::ZERO), |c| (c.taken, c.spent));
    if job.args.verbose {
        // Before the gather, so that it comes before the root's summary.
        println!(
            "{}",
            crate::app::rank_line(rank, &run.t, checkpoints, resumed_at)
        );
    }
    // Every rank but the root keeps its image (`--allreduce`).
    let kept = if rank == root { None } else { run.image.take() };
    let root = run.gather(checkpoints)?;
    Ok(Outcome {
        kept,
        timing: run.t,
        elapsed,
        lost: run.sched.lost().to_vec(),
        redone: run.sched.redone(),
        resumed_at,
        checkpoints,
        root,
    })
}

impl Run<'_> {
    /// Takes up the state of a checkpoint: its batches are done. Returns
    /// them; refuses a state whose image is not this rank's to hold.
    fn resume(&mut self, s: &State) -> Result<usize, ReduceError> {
        let cells = self.image.as_ref().map_or(0, |i| i.data.len());
        if s.image.len() != cells {
            return Err(ReduceError::InvalidOptions(format!(
                "the checkpoint holds an image of {} cells where rank {} holds {cells}",
                s.image.len(),
                self.rt.rank()
            )));
        }
        let done = (s.batches_done as usize).min(self.sched.batches());
        self.sched.resume_at(done);
        self.t = Timing::from_slice(&s.timing);
        if let Some(img) = self.image.as_mut() {
            img.data.copy_from_slice(&s.image);
        }
        Ok(done)
    }

    /// Checkpoints once `done` batches are settled, if one is due and no
    /// rank was lost (see [`crate::checkpoint`]); `t` is the timing up to
    /// the last of them.
    fn checkpoint(&mut self, done: usize, t: Timing) {
        let Some(c) = self.ckpt.as_mut() else { return };
        let Some(version) = c.due(done).filter(|_| self.sched.lost().is_empty()) else {
            return;
        };
        let parts = Parts {
            batches: done,
            timing: t.to_vec(),
            image: self.image.as_ref().map(|i| i.data.as_slice()),
        };
        c.take(self.rt, version, parts);
    }

    /// Issues and settles every batch. Issuing and settling interleave by
    /// count alone (issue until `in_flight + 1` are live, then settle the
    /// oldest, blocking if it is not done), so that every survivor issues
    /// the same attempts in the same order (see [`crate::recovery`]).
    fn batches(&mut self) -> Result<(), ReduceError> {
        // One settle per attempt, and attempts are bounded.
        for _ in 0..=self.sched.most_attempts() {
            while self.pending.len() <= self.job.args.in_flight {
                let Some(attempt) = self.sched.next_attempt() else {
                    break;
                };
                self.issue(attempt)?;
            }
            let Some(p) = self.pending.pop_front() else {
                return Ok(());
            };
            self.settle(p)?;
        }
        unreachable!("more attempts than the schedule allows")
    }

    /// Migrates this rank's share of `attempt` and starts its reduction.
    fn issue(&mut self, attempt: Attempt) -> Result<(), ReduceError> {
        let (rank, size) = (self.rt.rank(), self.rt.size());
        let traces = self
            .job
            .attempt_traces(rank, size, attempt.batch, &attempt.lost);
        let partial = migrate_batch(self.rt, self.job, &traces, (&mut self.t, &mut self.pending))?;
        let jitter = self.job.args.jitter_ms();
        if jitter > 0 {
            // A function of the rank and the batch alone, so that a batch
            // redone after a restart sleeps as long.
            let seed = (self.job.args.seed ^ (0x5eed_0000 + rank as u64))
                ^ (attempt.batch as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let ms = Rng::new(seed).next_u64() % (jitter + 1);
            std::thread::sleep(Duration::from_millis(ms));
            self.t.jitter += Duration::from_millis(ms);
        }
        if let Some(c) = self.ckpt.as_mut() {
            c.before_issue(rank, attempt.batch);
        }
        let mut opts = Reduce::root(self.job.args.root)
            .id(attempt.id())
            .completion(self.job.args.completion());
        if !attempt.lost.is_empty() {
            opts = opts.group(attempt.group(size));
        }
        let future = match self.job.args.allreduce {
            true => Batch::All(self.rt.allreduce(partial, opts)?),
            false => Batch::Reduce(self.rt.reduce(partial, opts)?),
        };
        self.t.reductions += 1;
        self.pending.push_back(Pending {
            attempt,
            issued: Instant::now(),
            done_at: None,
            future,
            t_issued: self.t,
        });
        Ok(())
    }

    /// Takes the oldest reduction's result (blocking if it is not done):
    /// adds the batch image at the root, or schedules the batch again if
    /// ranks were lost.
    fn settle(&mut self, p: Pending) -> Result<(), ReduceError> {
        let before = Instant::now();
        let result = p.future.get();
        let waited = before.elapsed();
        let done = p.done_at.unwrap_or_else(Instant::now);
        let latency = done.saturating_duration_since(p.issued);
        self.t.wait += waited;
        self.t.latency += latency;
        self.t.hidden += latency.saturating_sub(waited);
        let err = match result {
            Ok(part) => {
                if let (Some(img), Some(part)) = (self.image.as_mut(), part) {
                    img.add(part.as_slice());
                }
                let done = self.sched.succeeded();
                if self.root {
                    (self.progress)(done, self.sched.batches());
                }
                self.checkpoint(done, p.t_issued);
                return Ok(());
            }
            Err(e) => e,
        };
        let ReduceError::RanksLost { ranks, .. } = &err else {
            return Err(err);
        };
        let ranks = ranks.clone();
        self.learn(|s| s.failed(&p.attempt, &ranks), err)?;
        if self.root {
            eprintln!(
                "psdm: batch {} ({}) failed: redone by ranks {}",
                p.attempt.batch,
                p.attempt.id(),
                crate::app::ranks_list(&self.sched.survivors())
            );
        }
        Ok(())
    }

    /// Learns lost ranks through `step` on the schedule; `err` is the
    /// reduction's error, returned if they cannot be redone. Logs each
    /// newly lost rank.
    fn learn(
        &mut self,
        step: impl FnOnce(&mut Schedule) -> Result<Vec<u32>, crate::recovery::Fatal>,
        err: ReduceError,
    ) -> Result<Vec<u32>, ReduceError> {
        let rank = self.rt.rank();
        if self.job.args.completion() == Completion::Contributed {
            eprintln!(
                "psdm: rank {rank}: ranks lost; with --completion contributed a rank done with a \
                 batch does not hear that it failed, so the batches cannot be redone (use \
                 --completion result)"
            );
            return Err(err);
        }
        let new = step(&mut self.sched).map_err(|why| {
            eprintln!("psdm: rank {rank}: {why}");
            err
        })?;
        // The root says it for the job; every rank with `--verbose`.
        let who = match (self.root, self.job.args.verbose) {
            (true, _) => String::new(),
            (false, true) => format!("rank {rank}: "),
            (false, false) => return Ok(new),
        };
        for l in &new {
            eprintln!(
                "psdm: {who}rank {l} was lost; its traces go to ranks {}",
                crate::app::ranks_list(&self.sched.survivors())
            );
        }
        Ok(new)
    }

    /// Every surviving rank's timing, summed and maximised at the root,
    /// which also holds the final image. Reduced again over the survivors
    /// if a rank is lost meanwhile.
    fn gather(&mut self, checkpoints: (u64, Duration)) -> Result<Option<RootResult>, ReduceError> {
        // The timing, then this rank's checkpoints: taken, and seconds.
        let mut v = self.t.to_vec();
        v.extend([checkpoints.0 as f64, checkpoints.1.as_secs_f64()]);
        let root = self.job.args.root;
        for _ in 0..self.rt.size() {
            let lost = self.sched.lost().to_vec();
            let opts = |what: &str| {
                Reduce::root(root)
                    .group(self.sched.survivors())
                    .id(suffixed(format!("psdm-timing-{what}"), &lost))
                    .completion(Completion::Result)
            };
            let sum = self.rt.reduce(Sum(v.clone()), opts("sum"))?;
            let max = self.rt.reduce(Max(v.clone()), opts("max"))?;
            let (sum, max) = match (sum.get(), max.get()) {
                (Ok(sum), Ok(max)) => (sum, max),
                (Err(e), _) | (_, Err(e)) => {
                    let ReduceError::RanksLost { ranks, .. } = &e else {
                        return Err(e);
                    };
                    let ranks = ranks.clone();
                    self.learn(|s| s.learn(&lost, &ranks), e)?;
                    continue;
                }
            };
            return Ok(match (self.image.take(), sum, max) {
                (Some(image), Some(sum), Some(max)) => {
                    let at = |v: &[f64], i: usize| v.get(i).copied().unwrap_or(0.0);
                    let n = v.len();
                    Some(RootResult {
                        image,
                        total: Timing::from_slice(&sum.0),
                        max: Timing::from_slice(&max.0),
                        checkpoints: (at(&sum.0, n - 2), at(&sum.0, n - 1), at(&max.0, n - 1)),
                    })
                }
                _ => None,
            });
        }
        unreachable!("every retry of the timing reductions follows a new lost rank")
    }
}

/// Migrates `traces` into a new partial image, counting its time in `t`
/// and noting, between traces, which `pending` reductions finished
/// meanwhile (never blocks). A rollback of the job (global restart) ends
/// it between two traces, with `ReduceError::Reinit`.
fn migrate_batch(
    rt: &Runtime,
    job: &Job,
    traces: &[usize],
    (t, pending): (&mut Timing, &mut VecDeque<Pending>),
) -> Result<InPlace<Sum<f32>>, ReduceError> {
    let (nx, nz) = (job.model.nx, job.model.nz);
    // Migrated straight into the contribution's wire form: `reduce`
    // sends it without a serialising copy.
    let mut partial = InPlace::<Sum<f32>>::zeroed(nx * nz);
    for &g in traces {
        rt.check_reinit()?;
        let c = Instant::now();
        let trace = job.survey.model_trace(&job.model, g);
        let (is, ir) = job.survey.geometry(g);
        job.tables
            .migrate_trace(partial.as_mut_slice(), &trace, is, ir);
        t.compute += c.elapsed();
        t.traces += 1;
        let now = Instant::now();
        for p in pending.iter_mut().filter(|p| p.done_at.is_none()) {
            if p.future.is_done() {
                p.done_at = Some(now);
            }
        }
    }
    Ok(partial)
}
