//! `taskfold bench sim`: the scheduling code of `taskfold_core` (the
//! master's [`Schedule`](taskfold_core::schedule::Schedule) and its
//! faster-rank rule, [`PerfTable`](taskfold_core::perf::PerfTable)),
//! driven by simulated ranks, links and folds under an α–β–γ model, and
//! set against fixed binomial and k-nomial trees under the same model.
//!
//! # Layout
//!
//! - this file: the model ([`Model`], [`Layout`]), the arrival patterns
//!   ([`Pattern`]) and one comparison ([`compare`]);
//! - `ready`: ready-first scheduling by a master over every rank
//!   ([`Shape::Flat`]; gathering small data by node, as the runtime's
//!   master does, [`Shape::Gathered`]), or over nodes, each node's ranks
//!   scheduled by a scheduler of their own ([`Shape::ByNode`]);
//! - `tree`: fixed k-nomial trees (binomial: k = 2).
//!
//! # What is modelled
//!
//! A message between two ranks costs `α` of their link (one node's ranks
//! share the `intra` link, others the `inter` one); a task moves the
//! provider's `bytes` (`α + bytes·β`) and folds them (`bytes·γ`) at the
//! receiver. A scheduler handles one message at a time, `μ` each, in and
//! out: a master's messages queue behind each other, which is what makes
//! it the bottleneck of a flat schedule at scale. A rank under load has
//! its transfers and folds slowed by its factor. Trees receive their
//! children one after the other, each once both sides are ready (one
//! port per rank, as a reduce's binomial tree does). Not modelled: link
//! contention between pairs, failures, copies for durability.

pub mod ready;
pub mod tree;

#[cfg(test)]
mod tests;

use serde::Serialize;

/// One kind of link: latency and time per byte.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Link {
    /// Seconds per message.
    pub alpha: f64,
    /// Seconds per byte.
    pub beta: f64,
}

/// The α–β–γ model of a job, and the size of every contribution.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Model {
    /// Between two ranks of one node.
    pub intra: Link,
    /// Between nodes.
    pub inter: Link,
    /// Seconds per byte folded.
    pub gamma: f64,
    /// Seconds a scheduler spends per message it handles (in or out).
    pub mu: f64,
    /// Bytes of every contribution (a fold keeps the size).
    pub bytes: f64,
    /// Contributions up to this many bytes are gathered by node under
    /// [`Shape::Gathered`] (the runtime's `TASKFOLD_GATHER_MAX`; 0: never).
    pub gather_max: f64,
}

impl Model {
    /// The link between ranks `a` and `b`.
    pub fn link(&self, l: &Layout, a: usize, b: usize) -> Link {
        match l.node(a) == l.node(b) {
            true => self.intra,
            false => self.inter,
        }
    }

    /// A control message from `a` to `b` (free within one rank).
    pub fn msg(&self, l: &Layout, a: usize, b: usize) -> f64 {
        match a == b {
            true => 0.0,
            false => self.link(l, a, b).alpha,
        }
    }

    /// Receiver `r` fetches provider `q`'s data and folds it into its
    /// own; `slow` is each rank's slow-down factor.
    pub fn step(&self, l: &Layout, r: usize, q: usize, slow: &[f64]) -> f64 {
        let link = self.link(l, r, q);
        let transfer = self.bytes * link.beta * slow[r].max(slow[q]);
        link.alpha + transfer + self.bytes * self.gamma * slow[r]
    }

    /// The cheapest step there is: the faster link's latency and bytes,
    /// and a fold at an unloaded rank.
    pub fn cheapest_step(&self) -> f64 {
        let alpha = self.intra.alpha.min(self.inter.alpha);
        let beta = self.intra.beta.min(self.inter.beta);
        alpha + self.bytes * (beta + self.gamma)
    }

    /// The least makespan of any schedule, tree or scheduled, under
    /// arrivals `a` (root: rank 0): every other rank's contribution still
    /// has to move and be folded at least once after it is ready, at no
    /// less than [`Model::cheapest_step`]. Scheduled schedules pay their
    /// schedulers' messages on top ([`Model::master_floor`]).
    pub fn lower_bound(&self, a: &Arrivals) -> f64 {
        let last =
            a.at.iter()
                .skip(1)
                .copied()
                .fold(f64::NEG_INFINITY, f64::max);
        match last.is_finite() {
            true => last + self.cheapest_step(),
            false => 0.0,
        }
    }

    /// The least makespan of a schedule whose master pairs `nodes` nodes:
    /// it hears from each node at least once before the result can exist,
    /// one message after the other at `μ` each.
    pub fn master_floor(&self, nodes: usize) -> f64 {
        nodes as f64 * self.mu
    }
}

/// Where the ranks run: `per_node` consecutive ranks per node.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Layout {
    /// Ranks of the job.
    pub ranks: usize,
    /// Ranks per node (the last node may have fewer).
    pub per_node: usize,
}

impl Layout {
    /// The node of rank `r`.
    pub fn node(&self, r: usize) -> usize {
        r / self.per_node.max(1)
    }

    /// Nodes of the job.
    pub fn nodes(&self) -> usize {
        self.ranks.div_ceil(self.per_node.max(1))
    }
}

/// When each rank's contribution is ready, and how slow each rank is.
#[derive(Clone, Debug, PartialEq)]
pub struct Arrivals {
    /// Seconds after the reduction's start.
    pub at: Vec<f64>,
    /// Factor on a rank's transfers and folds (1: unloaded).
    pub slow: Vec<f64>,
}

/// Arrival patterns, as `bench compare`'s scenarios.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Every contribution ready at once.
    Quiet,
    /// Rank 1 ready `delay` late (a first child of the root in a
    /// binomial tree), every other at once.
    Slow,
    /// Each rank ready at a seeded instant in `[0, delay)`.
    Staggered,
    /// Every contribution at once; a seeded quarter of the ranks share
    /// their cores with other work: their transfers and folds take 3×.
    Load,
}

/// The factor on a loaded rank's transfers and folds.
pub const LOAD_FACTOR: f64 = 3.0;

impl Pattern {
    /// Every pattern, in report order.
    pub const ALL: [Pattern; 4] = [
        Pattern::Quiet,
        Pattern::Slow,
        Pattern::Staggered,
        Pattern::Load,
    ];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Quiet => "quiet",
            Pattern::Slow => "slow",
            Pattern::Staggered => "staggered",
            Pattern::Load => "load",
        }
    }

    /// The pattern named `s`.
    pub fn parse(s: &str) -> Result<Pattern, String> {
        Pattern::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown pattern {s:?} (quiet, slow, staggered, load)"))
    }

    /// The arrivals of `ranks` ranks; `delay` scales the late ones.
    pub fn arrivals(self, ranks: usize, delay: f64, seed: u64) -> Arrivals {
        let draw = |r: usize| crate::delay::delay_fraction(seed, 0, r as u64);
        let mut a = Arrivals {
            at: vec![0.0; ranks],
            slow: vec![1.0; ranks],
        };
        match self {
            Pattern::Quiet => {}
            Pattern::Slow => {
                if ranks > 1 {
                    a.at[1] = delay;
                }
            }
            Pattern::Staggered => {
                for (r, at) in a.at.iter_mut().enumerate() {
                    *at = delay * draw(r);
                }
            }
            Pattern::Load => {
                for (r, s) in a.slow.iter_mut().enumerate() {
                    if draw(r) < 0.25 {
                        *s = LOAD_FACTOR;
                    }
                }
            }
        }
        a
    }
}

/// How the ready-first scheduler is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// One master schedules every rank.
    Flat,
    /// A scheduler per node pairs its node's ranks; the master pairs the
    /// nodes' results.
    ByNode,
    /// One master schedules every rank and, below the model's
    /// `gather_max`, gathers each node's small data by node
    /// (`Schedule::next_gathering`, the runtime's rule): a gathering
    /// task's receiver reads each further provider in place and folds it.
    Gathered,
}

/// One simulated reduction.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Outcome {
    /// Seconds from the start until the root holds the result.
    pub makespan: f64,
    /// Messages the master handled, in and out.
    pub master_messages: u64,
    /// Most messages one node's scheduler handled (0: none).
    pub node_messages: u64,
    /// Decisions of the real scheduling code: tasks and completions.
    pub decisions: u64,
    /// CPU seconds of one core taking those decisions again from the same
    /// inputs, nothing simulated around them (wall seconds where the
    /// thread's CPU time cannot be read).
    pub scheduling_seconds: f64,
}

/// This thread's CPU time so far, from `/proc/thread-self/schedstat`
/// (Linux; updated at each tick, so only long spans are exact).
pub fn thread_cpu() -> Option<std::time::Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(std::time::Duration::from_nanos(nanos))
}

/// One comparison: ready-first (flat and by node) and trees, under one
/// model, layout and pattern.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// The pattern.
    pub pattern: Pattern,
    /// The late ranks' delay (seconds): the binomial tree's quiet
    /// makespan.
    pub delay: f64,
    /// Ready-first, one master.
    pub flat: Outcome,
    /// Ready-first, one master gathering by node (as the runtime).
    pub gathered: Outcome,
    /// Ready-first, a scheduler per node.
    pub by_node: Outcome,
    /// The binomial tree's makespan.
    pub binomial: f64,
    /// The best k-nomial tree by the cost model (the quiet makespan
    /// over k = 2..=16), and its k.
    pub best_tree: f64,
    /// The best tree's k.
    pub best_k: usize,
    /// That tree's makespan under this pattern.
    pub best_tree_here: f64,
    /// The least makespan of any schedule under this pattern
    /// ([`Model::lower_bound`]).
    pub bound: f64,
}

/// Runs one comparison (`root` is rank 0).
pub fn compare(model: &Model, layout: &Layout, pattern: Pattern, seed: u64) -> Comparison {
    let quiet = Pattern::Quiet.arrivals(layout.ranks, 0.0, seed);
    let (best_k, best_tree) = tree::best(model, layout, &quiet);
    let delay = tree::makespan(model, layout, &quiet, 2);
    let a = pattern.arrivals(layout.ranks, delay, seed);
    Comparison {
        pattern,
        delay,
        flat: ready::run(model, layout, &a, Shape::Flat),
        gathered: ready::run(model, layout, &a, Shape::Gathered),
        by_node: ready::run(model, layout, &a, Shape::ByNode),
        binomial: tree::makespan(model, layout, &a, 2),
        best_tree,
        best_k,
        best_tree_here: tree::makespan(model, layout, &a, best_k),
        bound: model.lower_bound(&a),
    }
}
