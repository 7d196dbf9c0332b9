//! What `bench chaos` measured: every trial, and per campaign (kills per
//! trial and restart mode) the outcomes, per victim and per instant.

use super::plan::Plan;
use super::watch::Struck;
use super::{ChaosArgs, Restart};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use taskfold_benches::stats::median;

/// How a trial ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every step's result exact at the root, the job a success.
    Exact,
    /// Some reduction (or the start) ended with an error.
    TypedError,
    /// Some result was not the sum.
    Wrong,
    /// Not over within its time limit.
    Hang,
}

/// One trial.
#[derive(Clone, Debug, Serialize)]
pub struct TrialEnd {
    /// Its kills (none: failure-free).
    pub plan: Option<Plan>,
    /// The kills that landed.
    pub struck: Vec<Struck>,
    /// How it ended.
    pub outcome: Outcome,
    /// Allreduce steps a replacement redid after they had finished
    /// without it (local restart: `ResultLost`, as documented).
    pub lost: u32,
    /// From the launch to the end, in seconds.
    pub seconds: f64,
    /// The launcher's complaint, if any.
    pub error: Option<String>,
    /// The ranks' output, kept if it was not exact.
    pub log: Option<PathBuf>,
}

impl TrialEnd {
    /// A trial that could not run.
    pub fn failed(error: String) -> TrialEnd {
        TrialEnd {
            plan: None,
            struck: Vec::new(),
            outcome: Outcome::TypedError,
            lost: 0,
            seconds: 0.0,
            error: Some(error),
            log: None,
        }
    }
}

/// Outcomes counted.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Tally {
    /// Trials.
    pub trials: u32,
    /// Kills that landed.
    pub kills: u32,
    /// Trials that ended exact.
    pub exact: u32,
    /// Trials that ended in a typed error.
    pub typed_errors: u32,
    /// Trials with a wrong result.
    pub wrong: u32,
    /// Trials that did not end.
    pub hangs: u32,
    /// Allreduce steps a replacement redid after they had finished
    /// without it (`ResultLost`, local restart), over every trial.
    pub lost_steps: u32,
}

impl Tally {
    fn add(&mut self, t: &TrialEnd) {
        self.trials += 1;
        self.kills += t.struck.len() as u32;
        self.lost_steps += t.lost;
        match t.outcome {
            Outcome::Exact => self.exact += 1,
            Outcome::TypedError => self.typed_errors += 1,
            Outcome::Wrong => self.wrong += 1,
            Outcome::Hang => self.hangs += 1,
        }
    }
}

/// One campaign: `kills` per trial under `restart`.
#[derive(Clone, Debug, Serialize)]
pub struct Campaign {
    /// Kills per trial.
    pub kills_per_trial: u32,
    /// The restart mode.
    pub restart: Restart,
    /// Every trial's outcome together.
    #[serde(flatten)]
    pub tally: Tally,
    /// Per victim: the trials with at least one kill of it.
    pub by_victim: BTreeMap<String, Tally>,
    /// Per instant: the trials with at least one kill at it.
    pub by_instant: BTreeMap<String, Tally>,
    /// Median time to solution over the failure-free one.
    pub median_ratio: Option<f64>,
    /// Every trial.
    pub trials_detail: Vec<TrialEnd>,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Working ranks.
    pub np: u32,
    /// Steps per job.
    pub steps: u32,
    /// What every step is.
    pub collective: super::Collective,
    /// Values per contribution.
    pub len: usize,
    /// Spares (instead of the launcher's respawn).
    pub spares: bool,
    /// Simulated nodes.
    pub sim_nodes: Option<u32>,
    /// Who launched.
    pub launcher: super::LaunchBy,
    /// Median failure-free time to solution, seconds.
    pub reference_s: f64,
    /// The failure-free trials.
    pub reference: Vec<TrialEnd>,
    /// The campaigns.
    pub campaigns: Vec<Campaign>,
}

fn name<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

impl Report {
    /// A report of `args`' run, its reference measured.
    pub fn new(args: &ChaosArgs, reference_s: f64, reference: Vec<TrialEnd>) -> Report {
        Report {
            np: args.np,
            steps: args.steps,
            collective: args.collective,
            len: args.len,
            spares: args.with_spares(),
            sim_nodes: args.sim_nodes,
            launcher: args.launcher,
            reference_s,
            reference,
            campaigns: Vec::new(),
        }
    }

    /// Counts trial `t` of the campaign of `kills` under `restart`.
    pub fn add(&mut self, kills: u32, restart: Restart, t: TrialEnd) {
        let at = self
            .campaigns
            .iter()
            .position(|c| c.kills_per_trial == kills && c.restart == restart);
        let i = at.unwrap_or_else(|| {
            self.campaigns.push(Campaign {
                kills_per_trial: kills,
                restart,
                tally: Tally::default(),
                by_victim: BTreeMap::new(),
                by_instant: BTreeMap::new(),
                median_ratio: None,
                trials_detail: Vec::new(),
            });
            self.campaigns.len() - 1
        });
        let c = &mut self.campaigns[i];
        c.tally.add(&t);
        if let Some(p) = &t.plan {
            let mut victims: Vec<String> = p.kills.iter().map(|k| name(&k.victim)).collect();
            victims.dedup();
            for v in victims {
                c.by_victim.entry(v).or_default().add(&t);
            }
            let mut instants: Vec<String> = p.kills.iter().map(|k| name(&k.instant)).collect();
            instants.sort();
            instants.dedup();
            for i in instants {
                c.by_instant.entry(i).or_default().add(&t);
            }
        }
        c.trials_detail.push(t);
        let mut exact: Vec<f64> = c
            .trials_detail
            .iter()
            .filter(|t| t.outcome == Outcome::Exact)
            .map(|t| t.seconds / self.reference_s)
            .collect();
        c.median_ratio = (!exact.is_empty()).then(|| median(&mut exact));
    }

    /// Whether every trial ended exact.
    pub fn all_exact(&self) -> bool {
        self.campaigns
            .iter()
            .all(|c| c.tally.exact == c.tally.trials)
    }

    /// The summary, one table.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![
            format!(
                "bench chaos: {} ranks, {} {} steps of {} f64, {}{}; failure-free {:.2} s",
                self.np,
                self.steps,
                name(&self.collective),
                self.len,
                if self.spares { "spares" } else { "respawn" },
                self.sim_nodes
                    .map(|n| format!(", {n} simulated nodes"))
                    .unwrap_or_default(),
                self.reference_s
            ),
            "| kills | restart | trials | kills landed | exact | typed errors | wrong | hangs | median × failure-free | steps lost to a replacement |".into(),
            "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |".into(),
        ];
        for c in &self.campaigns {
            let t = &c.tally;
            out.push(format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                c.kills_per_trial,
                c.restart.name(),
                t.trials,
                t.kills,
                t.exact,
                t.typed_errors,
                t.wrong,
                t.hangs,
                c.median_ratio.map_or("-".into(), |r| format!("{r:.3}")),
                t.lost_steps
            ));
        }
        for c in &self.campaigns {
            for (label, by) in [("victim", &c.by_victim), ("instant", &c.by_instant)] {
                for (k, t) in by {
                    out.push(format!(
                        "  {} kill(s) {}: {label} {k}: {}/{} exact, {} typed errors, {} wrong, {} hangs",
                        c.kills_per_trial,
                        c.restart.name(),
                        t.exact,
                        t.trials,
                        t.typed_errors,
                        t.wrong,
                        t.hangs
                    ));
                }
            }
            for t in c
                .trials_detail
                .iter()
                .filter(|t| t.outcome != Outcome::Exact)
            {
                out.push(format!(
                    "  not exact: {:?} {:?}{}",
                    t.outcome,
                    t.struck
                        .iter()
                        .map(|s| s.whom.join("+"))
                        .collect::<Vec<_>>(),
                    t.log
                        .as_ref()
                        .map(|l| format!(", log {}", l.display()))
                        .unwrap_or_default()
                ));
            }
        }
        out
    }

    /// Writes the JSON report.
    pub fn write_json(&self, path: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(path, text)
    }
}
