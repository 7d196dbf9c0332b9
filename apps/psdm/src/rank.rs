//! One rank's migration: model and migrate its traces batch by batch; every
//! batch ends with a non-blocking reduction of the batch's partial image to
//! the root while the rank goes on with the next batch.
//!
//! Overlap is measured, not assumed. Between traces the rank polls its live
//! reductions (`is_done`, which never blocks) and notes when each finished;
//! a reduction's *latency* runs from `reduce` to that moment, and the part
//! of it the rank did not spend blocked in `get` was *hidden* behind
//! computation.

use crate::image::Image;
use crate::job::Job;
use crate::model::Rng;
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use taskfold::{InPlace, Max, Reduce, ReduceError, ReduceFuture, Runtime, Sum};

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
    /// Sleeping to simulate a noisy node (`--jitter-ms`).
    pub jitter: Duration,
    /// Traces migrated.
    pub traces: u64,
    /// Batch reductions issued.
    pub reductions: u64,
}

impl Timing {
    fn to_vec(self) -> Vec<f64> {
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

    fn from_slice(v: &[f64]) -> Timing {
        let d = |x: f64| Duration::from_secs_f64(x.max(0.0));
        Timing {
            compute: d(v[0]),
            wait: d(v[1]),
            latency: d(v[2]),
            hidden: d(v[3]),
            jitter: d(v[4]),
            traces: v[5] as u64,
            reductions: v[6] as u64,
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
    /// At the root: the final image and every rank's timing summed and
    /// maximised (element-wise).
    pub root: Option<RootResult>,
}

/// The root's share of the outcome.
#[derive(Debug)]
pub struct RootResult {
    /// The migrated image.
    pub image: Image,
    /// Timings of every rank, summed.
    pub total: Timing,
    /// Timings of every rank, element-wise maximum.
    pub max: Timing,
}

/// The rank that receives every batch image.
pub const ROOT: u32 = 0;

struct Pending {
    issued: Instant,
    done_at: Option<Instant>,
    future: ReduceFuture<InPlace<Sum<f32>>>,
}

/// Runs this rank's part of `job` on `rt`. `progress(done, total)` is
/// called at the root each time a batch image arrives.
pub fn run_rank(
    rt: &Runtime,
    job: &Job,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Outcome, ReduceError> {
    let (rank, size) = (rt.rank(), rt.size());
    let (nx, nz) = (job.model.nx, job.model.nz);
    let batches = job.batches(size);
    let started = Instant::now();
    let mut t = Timing::default();
    let mut image = (rank == ROOT).then(|| Image::zeros(nx, nz));
    let mut pending: VecDeque<Pending> = VecDeque::new();
    let mut settled = 0usize;
    let mut rng = Rng::new(job.args.seed ^ (0x5eed_0000 + rank as u64));

    // Takes the oldest reduction's result (blocking if it is not done).
    let mut settle = |p: Pending, t: &mut Timing, image: &mut Option<Image>| {
        let before = Instant::now();
        let result = p.future.get();
        let waited = before.elapsed();
        let done = p.done_at.unwrap_or_else(Instant::now);
        let latency = done.saturating_duration_since(p.issued);
        t.wait += waited;
        t.latency += latency;
        t.hidden += latency.saturating_sub(waited);
        if let (Some(img), Some(part)) = (image.as_mut(), result?) {
            img.add(part.as_slice());
        }
        settled += 1;
        if rank == ROOT {
            progress(settled, batches);
        }
        Ok::<(), ReduceError>(())
    };

    for b in 0..batches {
        let partial = migrate_batch(job, (rank, size), b, &mut t, &mut pending);
        if job.args.jitter_ms > 0 {
            let ms = rng.next_u64() % (job.args.jitter_ms + 1);
            std::thread::sleep(Duration::from_millis(ms));
            t.jitter += Duration::from_millis(ms);
        }
        let opts = Reduce::root(ROOT)
            .id(format!("psdm-batch-{b}"))
            .completion(job.args.completion());
        let future = rt.reduce(partial, opts)?;
        t.reductions += 1;
        pending.push_back(Pending {
            issued: Instant::now(),
            done_at: None,
            future,
        });
        // Settle what is done, in batch order; wait only when too many are
        // in flight.
        while pending.front().is_some_and(|p| p.future.is_done())
            || pending.len() > job.args.in_flight
        {
            let p = pending.pop_front().expect("non-empty");
            settle(p, &mut t, &mut image)?;
        }
    }
    while let Some(p) = pending.pop_front() {
        settle(p, &mut t, &mut image)?;
    }
    let elapsed = started.elapsed();

    Ok(Outcome {
        timing: t,
        elapsed,
        root: gather(rt, &t, image)?,
    })
}

/// Migrates this rank's traces of batch `b` (`who` = (rank, size)) into a
/// new partial image, counting its time in `t` and noting, between traces,
/// which `pending` reductions finished meanwhile (never blocks).
fn migrate_batch(
    job: &Job,
    who: (u32, u32),
    b: usize,
    t: &mut Timing,
    pending: &mut VecDeque<Pending>,
) -> InPlace<Sum<f32>> {
    let (nx, nz) = (job.model.nx, job.model.nz);
    // Migrated straight into the contribution's wire form: `reduce`
    // sends it without a serialising copy.
    let mut partial = InPlace::<Sum<f32>>::zeroed(nx * nz);
    for g in job.batch_traces(who.0, who.1, b) {
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
    partial
}

/// Every rank's timing, summed and maximised at the root, which also
/// holds the final `image`.
fn gather(
    rt: &Runtime,
    t: &Timing,
    image: Option<Image>,
) -> Result<Option<RootResult>, ReduceError> {
    let v = t.to_vec();
    let sum = rt.reduce(Sum(v.clone()), Reduce::root(ROOT).id("psdm-timing-sum"))?;
    let max = rt.reduce(Max(v), Reduce::root(ROOT).id("psdm-timing-max"))?;
    let (sum, max) = (sum.get()?, max.get()?);
    Ok(match (image, sum, max) {
        (Some(image), Some(sum), Some(max)) => Some(RootResult {
            image,
            total: Timing::from_slice(&sum.0),
            max: Timing::from_slice(&max.0),
        }),
        _ => None,
    })
}
