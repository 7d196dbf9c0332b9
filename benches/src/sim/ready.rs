//! Ready-first scheduling, simulated: every decision is taken by
//! `taskfold_core`'s [`Schedule`] and the faster-rank rule of its
//! [`PerfTable`], as the master takes them; only the ranks, links and
//! folds are simulated, as events in time order.
//!
//! A member's join reaches its scheduler `α` after its contribution is
//! ready; each task reaches its receiver `α` after the scheduler sent
//! it, runs one fetch and fold ([`Model::step`]) and is reported `α`
//! later. A root whose fold made its value whole holds the result then
//! (it does not wait for the completion notice); under [`Shape::ByNode`]
//! it joins the master's schedule of the nodes at that instant.

use super::{Arrivals, Layout, Model, Outcome, Shape};
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Instant;
use taskfold_core::perf::PerfTable;
use taskfold_core::schedule::{Assignment, Schedule, Step, GATHER_CAP};
use taskfold_core::{Rank, RankSet};

/// One scheduler and the schedule of its members.
struct Scheduler {
    schedule: Schedule,
    /// The global rank at each group position (position 0 is the root).
    members: Vec<usize>,
    /// The rank it runs beside: its messages travel to and from there.
    host: usize,
    /// When its core is free again.
    free: f64,
    /// Messages it handled, in and out.
    messages: u64,
    /// Its result's position in the master's schedule (`None`: it is the
    /// master).
    up: Option<usize>,
    /// Its own faster-rank table, as each scheduler has.
    perf: PerfTable,
    /// What it was told, in order, for [`replay`].
    log: Vec<Op>,
    /// When it gathers by node: each position's node (numbered from 1,
    /// as the runtime's view numbers them).
    nodes: Option<Vec<u64>>,
}

/// A message a scheduler took, as [`replay`] hands it in again.
#[derive(Clone, Copy)]
enum Op {
    /// Position `pos` joined.
    Join(usize),
    /// Task `task` ended at `pos` after `nanos`.
    Done { task: u64, pos: usize, nanos: u64 },
}

enum Ev {
    /// Position `pos`'s join reaches scheduler `s`.
    Join { s: usize, pos: usize },
    /// Task `a` of scheduler `s` reaches its receiver.
    Task { s: usize, a: Box<Assignment> },
    /// Its report reaches `s`: the receiver at `pos` holds `path` now,
    /// after `took` seconds.
    Done {
        s: usize,
        task: u64,
        pos: usize,
        path: RankSet,
        took: f64,
    },
}

/// An event at `at`; `seq` orders equal instants as they were made.
struct Timed {
    at: f64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Timed {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Timed {
    /// Reversed: the heap pops the earliest first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.total_cmp(&self.at).then(other.seq.cmp(&self.seq))
    }
}

struct Sim<'a> {
    m: &'a Model,
    l: &'a Layout,
    a: &'a Arrivals,
    scheds: Vec<Scheduler>,
    /// The master's index in `scheds` (the last).
    master: usize,
    events: BinaryHeap<Timed>,
    seq: u64,
    decisions: u64,
    makespan: Option<f64>,
}

/// Simulates one reduction to rank 0 with arrivals `a`.
pub fn run(m: &Model, l: &Layout, a: &Arrivals, shape: Shape) -> Outcome {
    let mut sim = Sim::new(m, l, a, shape);
    while let Some(Timed { at, ev, .. }) = sim.events.pop() {
        match ev {
            Ev::Join { s, pos } => sim.joined(s, pos, at),
            Ev::Task { s, a } => sim.task(s, *a, at),
            Ev::Done {
                s,
                task,
                pos,
                path,
                took,
            } => sim.done(s, task, pos, &path, took, at),
        }
    }
    let (decisions, seconds) = replay(&sim.scheds, m.bytes as u64);
    assert_eq!(decisions, sim.decisions, "a replay decides as the run did");
    let master = &sim.scheds[sim.master];
    Outcome {
        makespan: sim.makespan.expect("every reduction completes"),
        master_messages: master.messages,
        node_messages: sim.scheds[..sim.master]
            .iter()
            .map(|s| s.messages)
            .max()
            .unwrap_or(0),
        decisions: sim.decisions,
        scheduling_seconds: seconds,
    }
}

impl<'a> Sim<'a> {
    fn new(m: &'a Model, l: &'a Layout, a: &'a Arrivals, shape: Shape) -> Self {
        let groups: Vec<Vec<usize>> = match shape {
            Shape::Flat | Shape::Gathered => Vec::new(),
            Shape::ByNode => (0..l.nodes())
                .map(|n| (n * l.per_node..((n + 1) * l.per_node).min(l.ranks)).collect())
                .collect(),
        };
        let tops: Vec<usize> = match shape {
            Shape::Flat | Shape::Gathered => (0..l.ranks).collect(),
            Shape::ByNode => groups.iter().map(|g| g[0]).collect(),
        };
        let mut scheds: Vec<Scheduler> = groups
            .into_iter()
            .enumerate()
            .map(|(n, g)| Scheduler::new(g, Some(n)))
            .collect();
        let mut top = Scheduler::new(tops, None);
        if shape == Shape::Gathered && m.bytes <= m.gather_max {
            top.nodes = Some(top.members.iter().map(|&r| l.node(r) as u64 + 1).collect());
        }
        scheds.push(top);
        let master = scheds.len() - 1;
        let mut sim = Sim {
            m,
            l,
            a,
            scheds,
            master,
            events: BinaryHeap::new(),
            seq: 0,
            decisions: 0,
            makespan: None,
        };
        // The first joins: every rank's, to its node's scheduler or the
        // master.
        let first: Vec<usize> = match shape {
            Shape::Flat | Shape::Gathered => vec![master],
            Shape::ByNode => (0..master).collect(),
        };
        for s in first {
            for pos in 0..sim.scheds[s].members.len() {
                let r = sim.scheds[s].members[pos];
                sim.ready(s, pos, a.at[r]);
            }
        }
        sim
    }

    fn push(&mut self, at: f64, ev: Ev) {
        self.seq += 1;
        self.events.push(Timed {
            at,
            seq: self.seq,
            ev,
        });
    }

    /// Position `pos` of scheduler `s` is ready at `at`: its join goes.
    /// A group of one is whole at once.
    fn ready(&mut self, s: usize, pos: usize, at: f64) {
        let sc = &self.scheds[s];
        let r = sc.members[pos];
        let join = at + self.m.msg(self.l, r, sc.host);
        if sc.members.len() == 1 {
            self.whole(s, at);
        }
        self.push(join, Ev::Join { s, pos });
    }

    /// The root of scheduler `s` holds its members' result at `at`.
    fn whole(&mut self, s: usize, at: f64) {
        match self.scheds[s].up {
            None => self.makespan = Some(at),
            Some(pos) => self.ready(self.master, pos, at),
        }
    }

    /// Scheduler `s` takes a message that reached it at `at`: when it
    /// is handled.
    fn receive(&mut self, s: usize, at: f64) -> f64 {
        let sc = &mut self.scheds[s];
        sc.free = sc.free.max(at) + self.m.mu;
        sc.messages += 1;
        sc.free
    }

    fn joined(&mut self, s: usize, pos: usize, at: f64) {
        self.receive(s, at);
        let sc = &mut self.scheds[s];
        sc.log.push(Op::Join(pos));
        sc.schedule.join(pos).expect("each position joins once");
        self.drive(s);
    }

    fn done(&mut self, s: usize, task: u64, pos: usize, path: &RankSet, took: f64, at: f64) {
        self.receive(s, at);
        let nanos = (took * 1e9) as u64;
        let sc = &mut self.scheds[s];
        sc.log.push(Op::Done { task, pos, nanos });
        let done = sc.schedule.task_done(task, pos, path);
        done.expect("the report matches its task");
        let rank = Rank(sc.members[pos] as u32);
        sc.perf.record(rank, nanos, self.m.bytes as u64);
        self.drive(s);
    }

    /// Sends every task the schedule of `s` decides now.
    fn drive(&mut self, s: usize) {
        loop {
            let Some(step) = self.scheds[s].next() else {
                return;
            };
            self.decisions += 1;
            let sc = &mut self.scheds[s];
            match step {
                Step::Task(a) => {
                    sc.free += self.m.mu;
                    sc.messages += 1;
                    let receiver = sc.members[a.receiver.index];
                    let at = sc.free + self.m.msg(self.l, sc.host, receiver);
                    self.push(at, Ev::Task { s, a: Box::new(a) });
                }
                Step::Complete => {
                    // Every member is told; the root knew first.
                    let n = sc.members.len() as u64;
                    sc.free += self.m.mu * n as f64;
                    sc.messages += n;
                    return;
                }
            }
        }
    }

    /// Task `a` reached its receiver at `at`: it fetches and folds.
    fn task(&mut self, s: usize, a: Assignment, at: f64) {
        let sc = &self.scheds[s];
        let (r, q) = (sc.members[a.receiver.index], sc.members[a.provider.index]);
        let mut took = self.m.step(self.l, r, q, &self.a.slow);
        let mut path = a.receiver.path.union(&a.provider.path);
        for e in &a.more {
            // Read in place on the receiver's node: a fold, no transfer.
            took += self.m.bytes * self.m.gamma * self.a.slow[r];
            path = path.union(&e.path);
        }
        let whole = a.receiver.index == 0 && path.len() == sc.members.len();
        let report = at + took + self.m.msg(self.l, r, sc.host);
        if whole {
            self.whole(s, at + took);
        }
        let ev = Ev::Done {
            s,
            task: a.task_id,
            pos: a.receiver.index,
            path,
            took,
        };
        self.push(report, ev);
    }
}

impl Scheduler {
    fn new(members: Vec<usize>, up: Option<usize>) -> Self {
        Scheduler {
            schedule: Schedule::new(members.len(), 0),
            host: members[0],
            members,
            free: 0.0,
            messages: 0,
            up,
            perf: PerfTable::new(),
            log: Vec::new(),
            nodes: None,
        }
    }

    /// The schedule's next decision under the faster-rank rule.
    fn next(&mut self) -> Option<Step> {
        let Scheduler {
            schedule,
            members,
            perf,
            nodes,
            ..
        } = self;
        let prefers = |x, y| perf.prefers(Rank(members[x] as u32), Rank(members[y] as u32));
        match nodes {
            None => schedule.next(prefers),
            Some(n) => schedule.next_gathering(prefers, n[0], |e| Some(n[e.index]), GATHER_CAP),
        }
    }
}

/// CPU time a replay gathers before its rate is taken: the thread's CPU
/// time advances by scheduler ticks, so a short span reads as nothing.
const REPLAY_CPU: std::time::Duration = std::time::Duration::from_millis(100);

/// Most replays of one run, and most wall time they may take.
const REPLAY_MAX: (u32, std::time::Duration) = (10_000, std::time::Duration::from_secs(2));

/// Hands every scheduler's messages to a fresh one again, in order, with
/// nothing simulated around them (the reports' paths are the unions the
/// receivers would report), and times it: the scheduling code's own
/// rate. Repeated until [`REPLAY_CPU`] of the thread's CPU time is spent
/// (within [`REPLAY_MAX`]), so that a busy machine does not slow the
/// figure and a small run is still timed. Returns the decisions of one
/// replay and the seconds one took (wall time where the thread's CPU
/// time cannot be read).
fn replay(scheds: &[Scheduler], bytes: u64) -> (u64, f64) {
    let (wall, cpu) = (Instant::now(), super::thread_cpu());
    let mut reps = 0u32;
    let decisions = loop {
        let decisions = replay_once(scheds, bytes);
        reps += 1;
        let spent = match (cpu, super::thread_cpu()) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => wall.elapsed(),
        };
        if spent >= REPLAY_CPU || reps >= REPLAY_MAX.0 || wall.elapsed() >= REPLAY_MAX.1 {
            break (decisions, spent);
        }
    };
    (decisions.0, decisions.1.as_secs_f64() / f64::from(reps))
}

/// One replay of every scheduler's messages: the decisions taken.
fn replay_once(scheds: &[Scheduler], bytes: u64) -> u64 {
    let mut decisions = 0u64;
    for old in scheds {
        let mut s = Scheduler::new(old.members.clone(), old.up);
        s.nodes.clone_from(&old.nodes);
        for &op in &old.log {
            match op {
                Op::Join(pos) => s.schedule.join(pos).expect("as in the run"),
                Op::Done { task, pos, nanos } => {
                    let a = s.schedule.task(task).expect("as in the run");
                    // The report's path, as the receiver built it: the
                    // runtime's master reads it from the wire, one copy of
                    // its words, so it is built here into one copy too
                    // (not a new set per provider folded).
                    let mut path = a.receiver.path.clone();
                    for e in a.providers() {
                        path.union_with(&e.path);
                    }
                    s.schedule
                        .task_done(task, pos, &path)
                        .expect("as in the run");
                    s.perf.record(Rank(s.members[pos] as u32), nanos, bytes);
                }
            }
            while let Some(step) = s.next() {
                decisions += 1;
                std::hint::black_box(&step);
            }
        }
    }
    decisions
}
