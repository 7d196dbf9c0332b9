//! `taskfold bench checkpoint`: the costs of multilevel checkpoints, in
//! one run.
//!
//! - **L3 encoding**: the median time for one thread to code `k` shards
//!   of each size into `m` parity shards (`taskfold_core::checkpoint::
//!   erasure::Coder`, reed-solomon-simd, kept between calls as a group's
//!   encoder keeps it), as GiB/s of data coded per
//!   core: by the thread's CPU time (what one core spent, whatever else
//!   loads the machine), and by wall time.
//! - **Retrieval** ([`retrieval`], callable from other benches): ranks in
//!   this process over the loopback, several per simulated node, each
//!   checkpointing a state at L1, L2 and L3; a rank's node and its
//!   partner's node are then lost (the rank's directory wiped, every
//!   other rank of those nodes killed), which destroys its L1 and L2. The
//!   rank restores its state knowing the failure (straight to L3) and
//!   FTI-style (L1, L2, L3 in turn, each holder dead costing the
//!   detection timeout), alternately, `reps` times each; the figure is the
//!   ratio of the medians, measured in the same run.
//!
//! JSON (`--json`) and a Markdown table (stdout, and `--markdown`).

use crate::sizes::{human, parse_size};
use clap::Args;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use taskfold::checkpoint::{rank_dir, Failure, Level, Placement, Retrieval};
use taskfold::config::CheckpointConfig;
use taskfold::rkyv::{Archive, Deserialize as RkyvDeserialize, Serialize as RkyvSerialize};
use taskfold::{Config, LocalCluster};
use taskfold_benches::stats::median;
use taskfold_core::checkpoint::{erasure, Intervals};

/// Options of `bench checkpoint`.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  taskfold bench checkpoint\n  taskfold bench checkpoint --size 4M,16M --np 8 --per-node 2 --json ckpt.json"
)]
pub struct CheckpointArgs {
    /// Data shards of an L3 group (k).
    #[arg(long, default_value_t = 4)]
    pub k: usize,
    /// Parity shards of an L3 group (m).
    #[arg(long, default_value_t = 2)]
    pub m: usize,
    /// Shard sizes to encode, comma-separated (K, M, G suffixes).
    #[arg(long, value_delimiter = ',', default_value = "4M,16M,64M", value_parser = parse_size)]
    pub size: Vec<usize>,
    /// Timed encodings per size.
    #[arg(long, default_value_t = 5)]
    pub reps: u32,
    /// Ranks of the retrieval job.
    #[arg(long, default_value_t = 8)]
    pub np: u32,
    /// Ranks per simulated node.
    #[arg(long, default_value_t = 2)]
    pub per_node: u32,
    /// Bytes of each rank's state (K, M, G suffixes).
    #[arg(long, default_value = "4M", value_parser = parse_size)]
    pub state: usize,
    /// The failure detection timeout, with its unit.
    #[arg(long, value_name = "DURATION", default_value = "1s",
          value_parser = crate::launcher::cli::duration)]
    pub timeout: Duration,
    /// Renamed `--timeout`, which takes a unit.
    #[arg(long = "timeout-ms", hide = true, value_parser = crate::launcher::cli::renamed("--timeout", "ms"))]
    pub old_timeout_ms: Option<String>,
    /// Timed retrievals of each kind.
    #[arg(long, default_value_t = 3)]
    pub retrieval_reps: u32,
    /// Also write the figures to this JSON file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also write the Markdown table to this file.
    #[arg(long)]
    pub markdown: Option<PathBuf>,
}

/// The encoding throughput of one shard size.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Encode {
    /// Data shards.
    pub k: usize,
    /// Parity shards.
    pub m: usize,
    /// Bytes of each shard.
    pub shard_bytes: usize,
    /// Median wall seconds to code the `k` shards, one thread.
    pub median_s: f64,
    /// Median CPU seconds of the coding thread (what a core spent, other
    /// processes' load aside).
    pub cpu_median_s: f64,
    /// `k × shard_bytes / cpu_median_s`, in GiB/s: the throughput of one
    /// core.
    pub gib_per_s_per_core: f64,
    /// `k × shard_bytes / median_s`, in GiB/s (wall time).
    pub gib_per_s_wall: f64,
}

/// What [`retrieval`] measures.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct RetrievalParams {
    /// Ranks.
    pub np: u32,
    /// Ranks per simulated node.
    pub per_node: u32,
    /// L3 data shards (k) and parity (m).
    pub k: u16,
    /// L3 parity shards.
    pub m: u16,
    /// Bytes of each rank's state.
    pub state_bytes: usize,
    /// The failure detection timeout.
    pub timeout: Duration,
    /// Timed retrievals of each kind.
    pub reps: u32,
}

/// Retrieval after the loss of a rank's node and its partner's node.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct RetrievalFigures {
    /// What was measured.
    pub params: RetrievalParams,
    /// The rank that restored.
    pub rank: u32,
    /// Median seconds, knowing the failure.
    pub aware_median_s: f64,
    /// Median seconds, probing L1, L2, L3 in turn.
    pub probing_median_s: f64,
    /// `aware_median_s / probing_median_s` (target ≤ 0.5).
    pub ratio: f64,
    /// The levels the aware retrieval tried.
    pub aware_levels: Vec<u8>,
    /// The levels the probing retrieval tried.
    pub probing_levels: Vec<u8>,
}

/// Everything one run measured.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Report {
    /// L3 encoding, per shard size.
    pub encode: Vec<Encode>,
    /// Retrieval, aware against probing.
    pub retrieval: Option<RetrievalFigures>,
}

/// The state a rank checkpoints.
#[derive(Archive, RkyvSerialize, RkyvDeserialize, Debug, PartialEq)]
#[rkyv(crate = taskfold::rkyv)]
struct State {
    rank: u32,
    bytes: Vec<u8>,
}

fn state(rank: u32, len: usize) -> State {
    State {
        rank,
        bytes: (0..len)
            .map(|i| (i as u32 ^ rank.wrapping_mul(131)) as u8)
            .collect(),
    }
}

/// This thread's CPU time, in seconds.
fn thread_cpu_s() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// The median time to code `k` shards of `bytes` each into `m`, on this
/// thread.
pub fn encode_throughput(k: usize, m: usize, bytes: usize, reps: u32) -> Result<Encode, String> {
    let shards: Vec<Vec<u8>> = (0..k)
        .map(|s| (0..bytes).map(|i| (i * 31 + s * 7) as u8).collect())
        .collect();
    let data: Vec<&[u8]> = shards.iter().map(Vec::as_slice).collect();
    // Kept between calls, as a group's encoder keeps it between versions.
    let mut coder = erasure::Coder::new();
    coder.encode(&data, m).map_err(|e| e.to_string())?;
    let (mut times, mut cpu) = (Vec::new(), Vec::new());
    for _ in 0..reps.max(1) {
        let (t, c) = (Instant::now(), thread_cpu_s());
        let parity = coder.encode(&data, m).map_err(|e| e.to_string())?;
        cpu.push(thread_cpu_s() - c);
        times.push(t.elapsed().as_secs_f64());
        std::hint::black_box(parity);
    }
    let (median_s, cpu_median_s) = (median(&mut times), median(&mut cpu));
    let gib = (k * bytes) as f64 / f64::from(1u32 << 30);
    Ok(Encode {
        k,
        m,
        shard_bytes: bytes,
        median_s,
        cpu_median_s,
        gib_per_s_per_core: gib / cpu_median_s,
        gib_per_s_wall: gib / median_s,
    })
}

/// The ranks lost with `r`'s node and its partner's.
fn lost_with(p: &Placement, r: u32) -> Option<Failure> {
    let nodes = [p.node(r)?, p.node(p.partner(r)?)?];
    let ranks = (0..p.ranks() as u32).filter(|&x| p.node(x).is_some_and(|n| nodes.contains(&n)));
    Some(Failure::new(ranks, nodes))
}

/// A rank (not rank 0's node's) whose node's and partner's node's loss
/// leaves its L3.
fn pick(p: &Placement) -> Option<(u32, Failure)> {
    (1..p.ranks() as u32).find_map(|r| {
        let f = lost_with(p, r)?;
        (!f.ranks.contains(&0) && p.cheapest(r, &f) == Some(Level::L3)).then_some((r, f))
    })
}

/// Retrieval time of a rank whose node and partner's node were lost,
/// aware of the failure against FTI-style probing (see the module
/// documentation).
pub fn retrieval(params: &RetrievalParams) -> Result<RetrievalFigures, String> {
    let tmp = std::env::temp_dir().join(format!("taskfold-bench-ckpt-{}", std::process::id()));
    let l1 = tmp.join("l1");
    let config = Config {
        checkpoint: CheckpointConfig {
            dir: Some(l1.clone()),
            intervals: Intervals([1, 1, 1, 0]),
            group: params.k,
            parity: params.m,
            job: Some("bench-checkpoint".into()),
            ..CheckpointConfig::default()
        },
        failure_timeout: params.timeout,
        ..Config::default()
    };
    let nodes: Vec<u64> = (0..params.np)
        .map(|r| u64::from(r / params.per_node.max(1)))
        .collect();
    let result = (|| {
        let cluster = LocalCluster::with_nodes(nodes, config).map_err(|e| e.to_string())?;
        let out = measure(&cluster, &l1, params);
        drop(cluster);
        out
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

fn measure(
    cluster: &LocalCluster,
    l1: &std::path::Path,
    params: &RetrievalParams,
) -> Result<RetrievalFigures, String> {
    let p = cluster
        .rank(0)
        .checkpoints()
        .placement()
        .ok_or("no placement")?
        .clone();
    let (r, failure) = pick(&p).ok_or("no rank whose loss leaves L3 with these settings")?;
    let pending: Vec<_> = cluster
        .ranks()
        .iter()
        .map(|rt| {
            rt.checkpoints()
                .save(1, &state(rt.rank(), params.state_bytes))
        })
        .collect();
    for f in pending {
        f.wait().map_err(|e| e.to_string())?;
    }
    let _ = std::fs::remove_dir_all(rank_dir(l1, cluster.rank(r).checkpoints().job(), r));
    for &d in failure.ranks.iter().filter(|&&d| d != r) {
        cluster.kill(d);
    }
    let rt = cluster.rank(r);
    let want = state(r, params.state_bytes);
    let (mut aware, mut probing) = (Vec::new(), Vec::new());
    let (mut aware_levels, mut probing_levels) = (Vec::new(), Vec::new());
    for _ in 0..params.reps.max(1) {
        for (how, times, levels) in [
            (
                Retrieval::Aware(failure.clone()),
                &mut aware,
                &mut aware_levels,
            ),
            (Retrieval::Probing, &mut probing, &mut probing_levels),
        ] {
            let t = Instant::now();
            let got = rt
                .checkpoints()
                .restore_with::<State>(&how)
                .map_err(|e| e.to_string())?;
            times.push(t.elapsed().as_secs_f64());
            let got = got.ok_or("nothing restored")?;
            if got.state != want || got.level != Level::L3 {
                return Err(format!("wrong state restored from {}", got.level));
            }
            *levels = got.tried.iter().map(|l| l.number()).collect();
        }
    }
    let (a, pr) = (median(&mut aware), median(&mut probing));
    Ok(RetrievalFigures {
        params: params.clone(),
        rank: r,
        aware_median_s: a,
        probing_median_s: pr,
        ratio: a / pr,
        aware_levels,
        probing_levels,
    })
}

fn markdown(r: &Report) -> String {
    let mut s = String::from(
        "| k | m | shard | wall | CPU | GiB/s per core (CPU) | GiB/s (wall) |\n| --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for e in &r.encode {
        s += &format!(
            "| {} | {} | {} | {:.2} ms | {:.2} ms | {:.2} | {:.2} |\n",
            e.k,
            e.m,
            human(e.shard_bytes as f64),
            e.median_s * 1e3,
            e.cpu_median_s * 1e3,
            e.gib_per_s_per_core,
            e.gib_per_s_wall
        );
    }
    if let Some(f) = &r.retrieval {
        s += "\n| np | per node | state | timeout | aware | probing | aware / probing |\n| --- | --- | --- | --- | --- | --- | --- |\n";
        s += &format!(
            "| {} | {} | {} | {} ms | {:.1} ms (L{:?}) | {:.1} ms (L{:?}) | {:.3} |\n",
            f.params.np,
            f.params.per_node,
            human(f.params.state_bytes as f64),
            f.params.timeout.as_millis(),
            f.aware_median_s * 1e3,
            f.aware_levels,
            f.probing_median_s * 1e3,
            f.probing_levels,
            f.ratio
        );
    }
    s
}

/// Runs the benchmark and prints the table.
pub fn main(args: CheckpointArgs) -> ExitCode {
    let mut report = Report {
        encode: Vec::new(),
        retrieval: None,
    };
    for &bytes in &args.size {
        match encode_throughput(args.k, args.m, bytes, args.reps) {
            Ok(e) => report.encode.push(e),
            Err(e) => {
                eprintln!("bench: encoding k = {}, m = {}: {e}", args.k, args.m);
                return ExitCode::from(2);
            }
        }
    }
    let params = RetrievalParams {
        np: args.np,
        per_node: args.per_node,
        k: u16::try_from(args.k).unwrap_or(u16::MAX),
        m: u16::try_from(args.m).unwrap_or(u16::MAX),
        state_bytes: args.state,
        timeout: args.timeout,
        reps: args.retrieval_reps,
    };
    match retrieval(&params) {
        Ok(f) => report.retrieval = Some(f),
        Err(e) => eprintln!("bench: retrieval: {e}"),
    }
    let table = markdown(&report);
    print!("{table}");
    let mut code = ExitCode::SUCCESS;
    if let Some(path) = &args.markdown {
        if let Err(e) = std::fs::write(path, &table) {
            eprintln!("bench: cannot write {}: {e}", path.display());
            code = ExitCode::from(2);
        }
    }
    if let Some(path) = &args.json {
        let json = serde_json::to_vec_pretty(&report).unwrap_or_default();
        if let Err(e) = std::fs::write(path, json) {
            eprintln!("bench: cannot write {}: {e}", path.display());
            code = ExitCode::from(2);
        }
    }
    if report.retrieval.is_none() {
        code = ExitCode::from(1);
    }
    code
}
