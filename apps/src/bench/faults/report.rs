//! The figures of `bench faults`: one [`FaultReport`] per durability mode
//! and victim, its counts split by the phase the victim was in when it
//! was killed.

use serde::Serialize;
use std::path::PathBuf;
use taskfold_benches::stats::median;

/// Where the victim was when the kill came.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// A victim's join had not gone out yet: its contribution was not safe (under
    /// synchronous durability the join leaves only once its copies are
    /// written and acknowledged; under asynchronous durability they may
    /// still be on their way after it).
    BeforeSafe,
    /// Every victim's contribution was safe (its future said so,
    /// `ReduceFuture::is_safe`), or the job had already ended.
    AfterSafe,
    /// No kill: the victim never called `reduce` (the job failed first).
    NotKilled,
}

impl Phase {
    /// The name in the per-trial records.
    pub fn name(self) -> &'static str {
        match self {
            Phase::BeforeSafe => "before_safe",
            Phase::AfterSafe => "after_safe",
            Phase::NotKilled => "not_killed",
        }
    }
}

/// How a trial ended, at the surviving rank that reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The correct result at the root (or, with the root the victim, the
    /// runtime told a survivor the root held it).
    Recovered,
    /// A typed error (`RanksLost`, `RootLost`, `MasterLost`...).
    Error,
    /// A wrong result: must never happen.
    Wrong,
    /// No outcome within the timeout: must never happen.
    Hang,
}

impl Outcome {
    /// The name in the per-trial records.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Recovered => "recovered",
            Outcome::Error => "error",
            Outcome::Wrong => "wrong",
            Outcome::Hang => "hang",
        }
    }
}

/// Outcome counts of a set of trials.
#[derive(Serialize, Debug, Default, Clone, Copy)]
pub struct Counts {
    /// Trials counted.
    pub trials: u32,
    /// Correct result.
    pub recovered: u32,
    /// Typed error.
    pub typed_errors: u32,
    /// Wrong result (must be 0).
    pub wrong: u32,
    /// No outcome within the timeout (must be 0).
    pub hangs: u32,
}

impl Counts {
    fn add(&mut self, o: Outcome) {
        self.trials += 1;
        match o {
            Outcome::Recovered => self.recovered += 1,
            Outcome::Error => self.typed_errors += 1,
            Outcome::Wrong => self.wrong += 1,
            Outcome::Hang => self.hangs += 1,
        }
    }

    /// `recovered/typed errors/wrong/hangs`.
    pub fn short(&self) -> String {
        format!(
            "{}/{}/{}/{}",
            self.recovered, self.typed_errors, self.wrong, self.hangs
        )
    }
}

/// The figures of one durability mode and victim.
#[derive(Serialize, Debug, Default)]
pub struct FaultReport {
    /// `"sync"` or `"async"`.
    pub durability: String,
    /// `"worker"`, `"root"` or `"master"`.
    pub victim: String,
    /// The killed rank whose `reduce` call timed the kill.
    pub victim_rank: u32,
    /// Every rank killed at that instant.
    pub victims: Vec<u32>,
    /// Simulated nodes the jobs ran over (1: this machine as one node).
    pub nodes: u32,
    /// `TASKFOLD_STANDBY` of the jobs.
    pub standby: String,
    /// The failure-detection timeout of the jobs, in seconds.
    pub failure_timeout_s: f64,
    /// The root of the reductions.
    pub root: u32,
    /// The rank whose outcome is counted.
    pub observer: u32,
    /// Ranks.
    pub np: u32,
    /// Bytes per contribution.
    pub size: usize,
    /// Mean duration of a whole reduction without failure, from the
    /// slowest-starting rank's `reduce` call to the root's result: the
    /// kill window after the victim's `reduce` call.
    pub t_whole_s: f64,
    /// Every trial's outcome (`trials`, `recovered`, `typed_errors`,
    /// `wrong`, `hangs` at the top level).
    #[serde(flatten)]
    pub all: Counts,
    /// The trials whose victim was killed before its contribution was safe.
    pub before_safe: Counts,
    /// The trials whose victim was killed after.
    pub after_safe: Counts,
    /// The trials whose victim was never killed (the job failed first).
    pub not_killed: Counts,
    /// Of the recovered trials, those whose result came before the kill.
    pub completed_before_kill: u32,
    /// Median seconds from the kill to the outcome, over trials whose
    /// outcome came after the kill (with the master the victim and a
    /// standby, the failover: from the master's death to the first result
    /// the standby completed).
    pub median_kill_to_result_s: f64,
    /// `median_kill_to_result_s` over `failure_timeout_s`.
    pub kill_to_result_per_timeout: f64,
    /// The typed errors seen, one per trial that ended with one.
    pub errors: Vec<String>,
    /// Every trial.
    pub per_trial: Vec<TrialRecord>,
    #[serde(skip)]
    pub(super) delays: Vec<f64>,
}

/// One trial of the experiment.
#[derive(Serialize, Debug, Default)]
pub struct TrialRecord {
    /// Seconds between the victim's `reduce` call and its SIGKILL.
    pub kill_delay_s: f64,
    /// `before_safe`, `after_safe` or `not_killed`.
    pub phase: String,
    /// `recovered`, `error`, `wrong` or `hang`.
    pub outcome: String,
    /// The ranks' output, kept for a trial that was not recovered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<PathBuf>,
}

/// How one trial ended.
pub struct TrialEnd {
    /// The victim's phase at the kill.
    pub phase: Phase,
    /// The outcome.
    pub outcome: Outcome,
    /// Seconds from the victim's `reduce` call to the kill.
    pub kill_delay_s: f64,
    /// The typed error, for a trial that ended with one.
    pub error: String,
    /// When the kill came and when the outcome did (seconds on the same
    /// clock), if they did.
    pub kill_at: Option<f64>,
    /// See `kill_at`.
    pub outcome_at: Option<f64>,
    /// The kept ranks' output.
    pub log: Option<PathBuf>,
}

impl FaultReport {
    /// Counts one trial.
    pub fn add(&mut self, end: TrialEnd) {
        self.all.add(end.outcome);
        match end.phase {
            Phase::BeforeSafe => self.before_safe.add(end.outcome),
            Phase::AfterSafe => self.after_safe.add(end.outcome),
            Phase::NotKilled => self.not_killed.add(end.outcome),
        }
        if end.outcome == Outcome::Error {
            self.errors.push(end.error);
        }
        match (end.kill_at, end.outcome_at) {
            (Some(k), Some(w)) if w >= k => self.delays.push(w - k),
            _ if end.outcome == Outcome::Recovered => self.completed_before_kill += 1,
            _ => {}
        }
        self.per_trial.push(TrialRecord {
            kill_delay_s: end.kill_delay_s,
            phase: end.phase.name().into(),
            outcome: end.outcome.name().into(),
            log: end.log,
        });
    }

    /// Computes the median once every trial is counted.
    pub fn finish(&mut self) {
        self.median_kill_to_result_s = median(&mut self.delays);
        self.kill_to_result_per_timeout = self.median_kill_to_result_s / self.failure_timeout_s;
    }

    /// One line: mode, victim, counts, the phase split.
    pub fn line(&self) -> String {
        format!(
            "{:>5} {:>6} (ranks {:?}, {} node(s)) {:>3} trials, t = {:>6.1} ms: {:>3} recovered, {} typed errors, \
             {} wrong, {} hangs | before safe {:>3}: {} | after safe {:>3}: {} | \
             median kill → result {}",
            self.durability,
            self.victim,
            self.victims,
            self.nodes,
            self.all.trials,
            self.t_whole_s * 1e3,
            self.all.recovered,
            self.all.typed_errors,
            self.all.wrong,
            self.all.hangs,
            self.before_safe.trials,
            self.before_safe.short(),
            self.after_safe.trials,
            self.after_safe.short(),
            if self.median_kill_to_result_s.is_nan() {
                "– (every result came first)".to_string()
            } else {
                format!("{:.1} ms", self.median_kill_to_result_s * 1e3)
            }
        )
    }
}
