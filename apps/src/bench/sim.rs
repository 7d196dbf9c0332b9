//! `taskfold bench sim`: the master's scheduling code of `taskfold_core`
//! driven by simulated ranks, links and folds (see
//! `taskfold_benches::sim`), up to tens of thousands of ranks on one
//! core: ready-first over every rank (one master, pairing, and gathering
//! small data by node as the runtime's master does)
//! and by node (a scheduler per node, the master over nodes), against
//! binomial and k-nomial trees under the same α–β–γ model, for each
//! arrival pattern.
//! Prints a table per rank count and size, judges the targets at
//! the largest rank count, and writes every figure to `--json`.

use crate::sizes::{human, parse_size};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use taskfold_benches::sim::{self, Comparison, Layout, Link, Model, Outcome, Pattern};

/// Options of `bench sim`.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  taskfold bench sim\n  taskfold bench sim --ranks 256,65536 --per-node 16 --size 8,1M --json sim.json"
)]
pub struct SimArgs {
    /// Rank counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "256,4096,65536")]
    pub ranks: Vec<usize>,
    /// Ranks per node.
    #[arg(long, default_value_t = 16)]
    pub per_node: usize,
    /// Contribution sizes, comma-separated (K, M, G suffixes).
    #[arg(long, value_delimiter = ',', default_value = "8,128K,8M", value_parser = parse_size)]
    pub size: Vec<usize>,
    /// Arrival patterns: quiet, slow, staggered, load.
    #[arg(long, value_delimiter = ',', default_value = "quiet,slow,staggered,load", value_parser = Pattern::parse)]
    pub patterns: Vec<Pattern>,
    /// Latency between ranks of one node, microseconds.
    #[arg(long, default_value_t = 0.3)]
    pub intra_us: f64,
    /// Bandwidth between ranks of one node, GB/s.
    #[arg(long, default_value_t = 10.0)]
    pub intra_gbs: f64,
    /// Latency between nodes, microseconds.
    #[arg(long, default_value_t = 1.5)]
    pub inter_us: f64,
    /// Bandwidth between nodes, GB/s (12.5: 100 Gbit/s).
    #[arg(long, default_value_t = 12.5)]
    pub inter_gbs: f64,
    /// Fold speed, GB/s.
    #[arg(long, default_value_t = 5.0)]
    pub fold_gbs: f64,
    /// Contributions up to this size are gathered by node in the
    /// `gathered` schedule (the runtime's `TASKFOLD_GATHER_MAX`; 0: never).
    #[arg(long, default_value = "256K", value_parser = parse_size)]
    pub gather_max: usize,
    /// A scheduler's time per message it handles, microseconds.
    #[arg(long, default_value_t = 1.0)]
    pub mu_us: f64,
    /// Seed of the staggered arrivals and the loaded ranks.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write every figure to this JSON file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One row of the JSON output.
#[derive(serde::Serialize)]
struct Row {
    ranks: usize,
    per_node: usize,
    nodes: usize,
    bytes: usize,
    model: Model,
    #[serde(flatten)]
    comparison: Comparison,
}

/// Runs `bench sim`.
pub fn main(args: SimArgs) -> ExitCode {
    if let Err(e) = check(&args) {
        eprintln!("bench sim: {e}");
        return ExitCode::from(2);
    }
    let mut rows = Vec::new();
    for &ranks in &args.ranks {
        let layout = Layout {
            ranks,
            per_node: args.per_node,
        };
        for &bytes in &args.size {
            let model = model_of(&args, bytes);
            println!(
                "\n{ranks} ranks, {} per node ({} nodes), {}:",
                args.per_node,
                layout.nodes(),
                human(bytes as f64)
            );
            print_header();
            for &p in &args.patterns {
                let c = sim::compare(&model, &layout, p, args.seed);
                print_row(&c, &layout);
                rows.push(Row {
                    ranks,
                    per_node: args.per_node,
                    nodes: layout.nodes(),
                    bytes,
                    model,
                    comparison: c,
                });
            }
        }
    }
    judge(&rows);
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&rows).expect("figures serialise");
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("bench sim: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

fn check(args: &SimArgs) -> Result<(), String> {
    if args.ranks.iter().any(|&r| r == 0 || r > 1 << 20) {
        return Err("--ranks: each count must be 1 to 1048576".into());
    }
    if args.per_node == 0 {
        return Err("--per-node must be at least 1".into());
    }
    let positive = [
        ("--intra-gbs", args.intra_gbs),
        ("--inter-gbs", args.inter_gbs),
        ("--fold-gbs", args.fold_gbs),
    ];
    if let Some((name, _)) = positive.iter().find(|(_, v)| !(*v > 0.0 && v.is_finite())) {
        return Err(format!("{name} must be a positive number"));
    }
    let times = [
        ("--intra-us", args.intra_us),
        ("--inter-us", args.inter_us),
        ("--mu-us", args.mu_us),
    ];
    if let Some((name, _)) = times.iter().find(|(_, v)| !(*v >= 0.0 && v.is_finite())) {
        return Err(format!("{name} must be zero or more"));
    }
    Ok(())
}

fn model_of(args: &SimArgs, bytes: usize) -> Model {
    let link = |us: f64, gbs: f64| Link {
        alpha: us * 1e-6,
        beta: 1.0 / (gbs * 1e9),
    };
    Model {
        intra: link(args.intra_us, args.intra_gbs),
        inter: link(args.inter_us, args.inter_gbs),
        gamma: 1.0 / (args.fold_gbs * 1e9),
        mu: args.mu_us * 1e-6,
        bytes: bytes as f64,
        gather_max: args.gather_max as f64,
    }
}

fn print_header() {
    println!(
        "{:<10} {:>11} {:>11} {:>11} {:>11} {:>14} {:>9} {:>9} {:>13} {:>10} {:>13} {:>35}",
        "pattern",
        "flat ms",
        "gathered ms",
        "by node ms",
        "binomial ms",
        "best tree ms",
        "node/best",
        "node/bin",
        "master msgs",
        "node msgs",
        "gathered msgs",
        "decisions/s flat, gathered, node"
    );
}

fn print_row(c: &Comparison, l: &Layout) {
    let ms = |s: f64| s * 1e3;
    let best = format!("{:.4} (k={})", ms(c.best_tree_here), c.best_k);
    let per_node = c.by_node.master_messages as f64 / l.nodes() as f64;
    println!(
        "{:<10} {:>11.4} {:>11.4} {:>11.4} {:>11.4} {:>14} {:>9.3} {:>9.3} {:>8} ({:.1}/n) {:>10} {:>13} {:>11.0} {:>11.0} {:>11.0}",
        c.pattern.name(),
        ms(c.flat.makespan),
        ms(c.gathered.makespan),
        ms(c.by_node.makespan),
        ms(c.binomial),
        best,
        c.by_node.makespan / c.best_tree_here,
        c.by_node.makespan / c.binomial,
        c.by_node.master_messages,
        per_node,
        c.by_node.node_messages,
        c.gathered.master_messages,
        rate(&c.flat),
        rate(&c.gathered),
        rate(&c.by_node)
    );
}

/// Decisions per second of one core in the scheduling code.
fn rate(o: &Outcome) -> f64 {
    o.decisions as f64 / o.scheduling_seconds.max(1e-12)
}

/// The targets, judged at the largest rank count run, each size,
/// for the shape the issue names (by node) and the runtime's (gathered),
/// each beside the floor no schedule of its kind beats.
fn judge(rows: &[Row]) {
    let Some(top) = rows.iter().map(|r| r.ranks).max() else {
        return;
    };
    println!("\nTargets at {top} ranks (by node; gathered, the runtime's):");
    for row in rows.iter().filter(|r| r.ranks == top) {
        let c = &row.comparison;
        let size = human(row.bytes as f64);
        let line = match c.pattern {
            Pattern::Quiet => quiet_line(row),
            Pattern::Slow => slow_line(c),
            _ => continue,
        };
        println!("  {size}, {line}");
        let per_node = |o: &Outcome| o.master_messages as f64 / row.nodes as f64;
        let (node, gathered) = (per_node(&c.by_node), per_node(&c.gathered));
        println!(
            "  {size}, {}: master messages per node ≤ 4: {node:.2} ({}), {gathered:.2} ({}); \
             decisions/s ≥ 500000: {:.0} ({}), {:.0} ({}); flat {:.0}",
            c.pattern.name(),
            verdict(node <= 4.0),
            verdict(gathered <= 4.0),
            rate(&c.by_node),
            verdict(rate(&c.by_node) >= 500_000.0),
            rate(&c.gathered),
            verdict(rate(&c.gathered) >= 500_000.0),
            rate(&c.flat),
        );
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}

/// Quiet ≤ 1.2 × the best tree, and what any master pays: it hears each
/// node once before the result exists ([`Model::master_floor`]).
fn quiet_line(row: &Row) -> String {
    let c = &row.comparison;
    let (node, gathered) = (
        c.by_node.makespan / c.best_tree,
        c.gathered.makespan / c.best_tree,
    );
    let floor = row.model.master_floor(row.nodes);
    let mu_max = 1.2 * c.best_tree / row.nodes as f64;
    format!(
        "quiet ≤ 1.2 × best tree ({:.4} ms): {node:.3} × ({}), {gathered:.3} × ({}); \
         a master over {} nodes needs ≥ {} × μ = {:.3} ms = {:.3} × best tree \
         (within 1.2 × only at μ ≤ {:.1} ns a message)",
        c.best_tree * 1e3,
        verdict(node <= 1.2),
        verdict(gathered <= 1.2),
        row.nodes,
        row.nodes,
        floor * 1e3,
        floor / c.best_tree,
        mu_max * 1e9
    )
}

/// One slow rank ≤ 0.5 × the binomial tree, and the bound no schedule
/// beats ([`Model::lower_bound`]): the late data moves once after D.
fn slow_line(c: &Comparison) -> String {
    let (node, gathered) = (
        c.by_node.makespan / c.binomial,
        c.gathered.makespan / c.binomial,
    );
    let bound = c.bound / c.binomial;
    let reach = if bound > 0.5 {
        "out of reach of any schedule"
    } else {
        "within reach"
    };
    format!(
        "one slow rank ≤ 0.5 × binomial ({:.4} ms): {node:.3} × ({}), {gathered:.3} × ({}); \
         no schedule beats D + one step = {bound:.3} × binomial ({reach})",
        c.binomial * 1e3,
        verdict(node <= 0.5),
        verdict(gathered <= 0.5),
    )
}
