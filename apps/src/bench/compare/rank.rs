//! One taskfold rank of `bench compare`: the same scenarios, data, root
//! and seeded delays as the MPI driver (`benches/mpi/reduce_bench.c`),
//! printed as the same [`Sample`] lines.
//!
//! Every repetition: barrier, build the contributions, barrier, t0,
//! \[delay\], contribute, outcome, t1; the root verifies its result after
//! t1 (every rank of an allreduce or a broadcast, after a barrier; see
//! `run_point` for why the contributions are built there).
//! K concurrent reductions are K futures started back to back and then
//! awaited, like K `MPI_Ireduce` and one `MPI_Waitall`.

use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use taskfold::{InPlace, MasterStats, Max, Reduce, ReduceError, Runtime, Sum};
use taskfold_benches::compare::{MasterLoad, Sample};
use taskfold_benches::delay::{busy_spin, delay_fraction};

/// Options of one rank (internal; the harness passes them).
#[derive(Args, Debug, Clone)]
pub struct CompareRankArgs {
    /// `quiet`, `slow`, `stagger` or `concurrent`.
    #[arg(long)]
    pub scenario: String,
    /// Contribution sizes in bytes.
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<usize>,
    /// Timed repetitions.
    #[arg(long)]
    pub reps: u32,
    /// Untimed repetitions first.
    #[arg(long)]
    pub warmup: u32,
    /// The root.
    #[arg(long, default_value_t = 1)]
    pub root: u32,
    /// The slow rank (`slow`).
    #[arg(long, default_value_t = 2)]
    pub slow_rank: u32,
    /// Busy time of the slow rank per size, µs (`slow`).
    #[arg(long, value_delimiter = ',')]
    pub delay_us: Vec<f64>,
    /// Largest arrival delay per size, µs (`stagger`).
    #[arg(long, value_delimiter = ',')]
    pub jitter_us: Vec<f64>,
    /// Seed of the arrival delays.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Concurrent reductions per repetition (`concurrent`).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub k: Vec<u32>,
    /// `reduce`, `allreduce` or `broadcast` (from the root).
    #[arg(long, default_value = "reduce")]
    pub collective: String,
    /// Rank 0 writes the sample lines here.
    #[arg(long)]
    pub out: PathBuf,
}

/// Seconds on CLOCK_MONOTONIC, the clock the MPI driver reads too: shared
/// by all processes of a node, so tails can compare stamps across ranks.
fn mono_s() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

fn per_size(v: &[f64], i: usize) -> Duration {
    Duration::from_secs_f64(v.get(i).copied().unwrap_or(0.0).max(0.0) * 1e-6)
}

/// Per-repetition records of one (size, k) on this rank.
#[derive(Default)]
struct Reps {
    times: Vec<f64>,
    stamps: Vec<f64>,
    done: Vec<f64>,
}

/// Runs the timed loop of one (size, k); returns this rank's repetitions
/// and whether the root saw a wrong result.
fn run_point(
    rt: &Runtime,
    a: &CompareRankArgs,
    si: usize,
    k: u32,
    master: &mut Option<MasterLoad>,
) -> Result<(Reps, bool), ReduceError> {
    let (rank, np) = (rt.rank(), rt.size());
    let root = a.root.min(np - 1);
    let bytes = a.sizes[si];
    let data = vec![(rank + 1) as f32; (bytes / 4).max(1)];
    let expected = (np * (np + 1) / 2) as f32;
    let mut reps = Reps::default();
    let mut wrong = false;
    let mut before = None;
    let mut wall = Instant::now();
    let total = a.warmup + a.reps;
    for rep in 0..total {
        // The contributions are built before the clock starts, in their
        // wire form, as the MPI driver's send buffers are filled before
        // its loop: each repetition's right before it, between two
        // barriers, so that no rank copies data while another rank's
        // clock runs (a rank that has its result would otherwise build the
        // next repetition's contributions beside the ranks still waiting
        // for theirs) and so that they are as recently touched as the MPI
        // driver's send buffer, which every repetition reads again (built
        // many repetitions ahead, they would be read from memory, where
        // the MPI driver reads its buffer from the cache).
        rt.barrier()?;
        let values: Vec<InPlace<Sum<f32>>> = (0..k).map(|_| InPlace::from_slice(&data)).collect();
        // A broadcast sends the root's array as it is, like MPI_Bcast's
        // buffer (every other rank gives nothing).
        let sent: Vec<Option<InPlace<Sum<f32>>>> = (0..k)
            .map(|_| (rank == root).then(|| InPlace::from_slice(&data)))
            .collect();
        rt.barrier()?;
        if rep == a.warmup && rank == 0 {
            before = rt.master_stats();
            wall = Instant::now();
        }
        let t0 = Instant::now();
        arrive(a, rank, si, rep);
        let stamp = mono_s();
        let id = |j: usize| format!("cmp-{}-{bytes}-{k}-{rep}-{j}", a.scenario);
        let got = collective(rt, &a.collective, values, sent, root, id)?;
        let dt = t0.elapsed().as_secs_f64();
        let done = mono_s();
        // Every rank of an allreduce or a broadcast verifies its value, and
        // reading 8 MiB takes a core for milliseconds: after a barrier, so
        // that no rank's verification takes a core from a rank still
        // waiting for its value (eight ranks share two cores here, where a
        // job gives each its own). The MPI driver does the same.
        if a.collective != "reduce" {
            rt.barrier()?;
        }
        wrong |= match got {
            Got::Reduced(results) if rank == root => results
                .iter()
                .any(|r| !matches!(r, Some(v) if v.as_slice().iter().all(|&x| x == expected))),
            Got::Reduced(_) => false,
            Got::All(results) => results
                .iter()
                .any(|v| v.as_slice().iter().any(|&x| x != expected)),
            Got::Sent(results) => results
                .iter()
                .any(|v| v.as_slice().iter().any(|&x| x != (root + 1) as f32)),
        };
        if std::env::var_os("TF_STAMPS").is_some() && rank == root {
            eprintln!("STAMP {stamp:.6} {done:.6}");
        }
        if rep >= a.warmup {
            reps.times.push(dt);
            reps.stamps.push(stamp);
            reps.done.push(if rank == root { done } else { 0.0 });
        }
    }
    if rank == 0 {
        let seconds = wall.elapsed().as_secs_f64();
        if let (Some(b), Some(e)) = (before, rt.master_stats()) {
            *master = Some(master_load(&b, &e, seconds));
        }
    }
    Ok((reps, wrong))
}

/// What one repetition's collectives gave this rank.
enum Got {
    Reduced(Vec<Option<InPlace<Sum<f32>>>>),
    All(Vec<InPlace<Sum<f32>>>),
    Sent(Vec<InPlace<Sum<f32>>>),
}

/// Runs one repetition's collectives of kind `which` (every one started,
/// then every one awaited): `values` reduced, or `sent` broadcast.
fn collective(
    rt: &Runtime,
    which: &str,
    values: Vec<InPlace<Sum<f32>>>,
    sent: Vec<Option<InPlace<Sum<f32>>>>,
    root: u32,
    id: impl Fn(usize) -> String,
) -> Result<Got, ReduceError> {
    let opts = |j| Reduce::root(root).id(id(j));
    Ok(match which {
        "allreduce" => {
            let fs = values
                .into_iter()
                .enumerate()
                .map(|(j, v)| rt.allreduce(v, opts(j)));
            let fs = fs.collect::<Result<Vec<_>, _>>()?;
            Got::All(fs.into_iter().map(|f| f.get()).collect::<Result<_, _>>()?)
        }
        "broadcast" => {
            let fs = sent
                .into_iter()
                .enumerate()
                .map(|(j, v)| rt.broadcast_in_place(v, opts(j)));
            let fs = fs.collect::<Result<Vec<_>, _>>()?;
            Got::Sent(fs.into_iter().map(|f| f.get()).collect::<Result<_, _>>()?)
        }
        _ => {
            let fs = values
                .into_iter()
                .enumerate()
                .map(|(j, v)| rt.reduce(v, opts(j)));
            let fs = fs.collect::<Result<Vec<_>, _>>()?;
            Got::Reduced(fs.into_iter().map(|f| f.get()).collect::<Result<_, _>>()?)
        }
    })
}

/// The scenario's delay before this rank contributes to repetition `rep`
/// of size `si`: the slow rank busy-spins D; with staggered arrivals every
/// rank sleeps its seeded share of J.
fn arrive(a: &CompareRankArgs, rank: u32, si: usize, rep: u32) {
    match a.scenario.as_str() {
        "slow" if rank == a.slow_rank => busy_spin(per_size(&a.delay_us, si)),
        "stagger" => std::thread::sleep(per_size(&a.jitter_us, si).mul_f64(delay_fraction(
            a.seed,
            u64::from(rep),
            u64::from(rank),
        ))),
        _ => {}
    }
}

/// The master's load between two of its counters' readings `seconds` apart.
fn master_load(b: &MasterStats, e: &MasterStats, seconds: f64) -> MasterLoad {
    MasterLoad {
        msgs_in: e.msgs_in - b.msgs_in,
        msgs_out: e.msgs_out - b.msgs_out,
        bytes_in: e.bytes_in - b.bytes_in,
        bytes_out: e.bytes_out - b.bytes_out,
        seconds,
        reductions: e.reductions_completed - b.reductions_completed,
    }
}

fn gather(rt: &Runtime, v: Vec<f64>, id: String) -> Result<Option<Vec<f64>>, ReduceError> {
    Ok(rt
        .reduce(Max(v), Reduce::root(0).id(id))?
        .get()?
        .map(|m| m.0))
}

fn run(rt: &Runtime, a: &CompareRankArgs) -> Result<(Vec<Sample>, bool), ReduceError> {
    let ks = if a.scenario == "concurrent" {
        a.k.clone()
    } else {
        vec![1]
    };
    let mut samples = Vec::new();
    let mut wrong = false;
    for si in 0..a.sizes.len() {
        for &k in &ks {
            let mut master = None;
            let (reps, w) = run_point(rt, a, si, k, &mut master)?;
            wrong |= w;
            let tag = format!("{}-{si}-{k}", a.scenario);
            let times = gather(rt, reps.times, format!("cmp-times-{tag}"))?;
            let stamps = gather(rt, reps.stamps, format!("cmp-stamps-{tag}"))?;
            let done = gather(rt, reps.done, format!("cmp-done-{tag}"))?;
            if let (Some(times_s), Some(stamps), Some(done)) = (times, stamps, done) {
                samples.push(Sample {
                    scenario: a.scenario.clone(),
                    np: rt.size(),
                    size: a.sizes[si],
                    k,
                    times_s,
                    tails_s: done.iter().zip(&stamps).map(|(d, s)| d - s).collect(),
                    master: (a.scenario == "quiet").then_some(master).flatten(),
                });
            }
        }
    }
    Ok((samples, wrong))
}

/// Runs one rank; rank 0 writes the samples.
pub fn rank_main(a: CompareRankArgs) -> ExitCode {
    let rt = match Runtime::from_env() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("compare rank: {e}");
            return ExitCode::from(3);
        }
    };
    let code = match run(&rt, &a) {
        Ok((samples, wrong)) => {
            let mut code = 0;
            if wrong {
                eprintln!("compare rank {}: WRONG RESULT at the root", rt.rank());
                code = 1;
            }
            if rt.rank() == 0 {
                let lines: String = samples
                    .iter()
                    .filter_map(|s| serde_json::to_string(s).ok())
                    .map(|l| l + "\n")
                    .collect();
                if let Err(e) = std::fs::write(&a.out, lines) {
                    eprintln!("cannot write {}: {e}", a.out.display());
                    code = 1;
                }
            }
            code
        }
        Err(e) => {
            eprintln!("compare rank {}: {e}", rt.rank());
            1
        }
    };
    if let Err(e) = rt.shutdown() {
        eprintln!("shutdown: {e}");
    }
    ExitCode::from(code)
}
