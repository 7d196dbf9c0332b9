//! The Markdown report of `bench compare`: the targets first, then one
//! table per scenario with ratios taskfold / Open MPI and taskfold / MPICH,
//! the master's load, the exact command lines, and the plots.

mod markdown;

use crate::compare::{find, ratio, Record};
use serde::{Deserialize, Serialize};

/// Everything one `bench compare` run measured.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
pub struct Report {
    /// The command that produced the report.
    pub invocation: String,
    /// The MPI call taskfold is compared with (`MPI_Reduce`,
    /// `MPI_Allreduce`, `MPI_Bcast`); empty in reports made before it was
    /// recorded (then `MPI_Reduce`).
    #[serde(default)]
    pub against: String,
    /// Every figure.
    pub records: Vec<Record>,
    /// `(what, command line)` of every run, exactly as executed.
    pub commands: Vec<(String, String)>,
    /// MPIs that were not found, and why.
    pub missing: Vec<String>,
    /// Free-form facts about the run (cores, durability, references).
    pub notes: Vec<String>,
    /// `(size, seconds)`: one fetch + fold of a contribution measured alone
    /// (taskfold, p = 2, quiet), the yardstick of the staggered tail.
    pub fetch_fold_alone: Vec<(usize, f64)>,
    /// `(size, seconds)`: an allreduce's or a broadcast's comparison only,
    /// the same collective of taskfold alone at p = 2, quiet (an
    /// allreduce: one fetch + fold and one fetch of the result; a
    /// broadcast: one fetch), the yardstick of the slow-rank target.
    #[serde(default)]
    pub spread_alone: Vec<(usize, f64)>,
    /// Plot files written next to the report.
    pub plots: Vec<String>,
    /// `(p, size, K, seconds)`: the (p − 1)·K pairwise folds of scenario e
    /// run alone on every core at once ([`crate::baseline::fold_floor`]),
    /// the memory-bandwidth floor of K concurrent reductions.
    #[serde(default)]
    pub fold_floor: Vec<(u32, usize, u32, f64)>,
    /// `(p, size, K, seconds)`: the same folds with the first fold of each
    /// receiving rank (p / 2 per reduction, as in a balanced pairing) into
    /// a new buffer ([`crate::baseline::fold_floor_kept`]): the floor of a
    /// durability that keeps every original unchanged until its reduction
    /// ends.
    #[serde(default)]
    pub fold_floor_kept: Vec<(u32, usize, u32, f64)>,
}

/// Bytes as `128 KiB`, `8 MiB`.
pub fn human(bytes: usize) -> String {
    crate::units::human(bytes as f64)
}

fn ms(s: f64) -> String {
    if s.is_nan() {
        "–".into()
    } else if s < 0.01 {
        format!("{:.3}", s * 1e3)
    } else {
        format!("{:.1}", s * 1e3)
    }
}

fn opt_ratio(r: Option<f64>) -> String {
    r.map_or("–".into(), |r| format!("{r:.2}"))
}

/// `text`, prefixed with the side's name when several taskfold
/// configurations were measured.
fn label(side: &str, sides: &[&str], text: String) -> String {
    if sides.len() > 1 {
        format!("{side}: {text}")
    } else {
        text
    }
}

/// One target: its statement, the measured values and whether all meet it.
struct Target {
    what: String,
    measured: Vec<String>,
    met: Option<bool>,
}

/// Whether `side` is a taskfold configuration (`taskfold`, or
/// `taskfold (durability off)` and the like).
pub fn is_taskfold(side: &str) -> bool {
    side.starts_with("taskfold")
}

impl Report {
    /// The taskfold configurations measured, in order of appearance.
    pub fn taskfold_sides(&self) -> Vec<&str> {
        let mut v: Vec<&str> = Vec::new();
        for r in &self.records {
            if is_taskfold(&r.side) && !v.contains(&r.side.as_str()) {
                v.push(&r.side);
            }
        }
        v
    }

    /// The records of `side` in `scenario`, ordered by (np, size, k).
    fn points_of(&self, side: &str, scenario: &str) -> Vec<&Record> {
        let mut v: Vec<&Record> = self
            .records
            .iter()
            .filter(|r| r.side == side && r.scenario == scenario)
            .collect();
        v.sort_by_key(|r| (r.np, r.size, r.k));
        v
    }

    /// The points (np, size, k) measured by any taskfold side.
    fn points(&self, scenario: &str) -> Vec<&Record> {
        let mut v: Vec<&Record> = Vec::new();
        for side in self.taskfold_sides() {
            for r in self.points_of(side, scenario) {
                if !v.iter().any(|x| (x.np, x.size, x.k) == (r.np, r.size, r.k)) {
                    v.push(r);
                }
            }
        }
        v.sort_by_key(|r| (r.np, r.size, r.k));
        v
    }

    /// Per taskfold side, one line of `point`'s text for each point of
    /// `scenario` at p = 8 from `min_size` (a point without text is left
    /// out), and whether the target is met: every figure of the first
    /// side (the default configuration) at most `bound`, `None` if it has
    /// none.
    fn judge(
        &self,
        scenario: &str,
        min_size: usize,
        bound: f64,
        point: impl Fn(&Record) -> Option<(String, Option<f64>)>,
    ) -> (Vec<String>, Option<bool>) {
        let mut measured = Vec::new();
        let mut met = None;
        let sides = self.taskfold_sides();
        for side in &sides {
            let mut line = Vec::new();
            for r in self
                .points_of(side, scenario)
                .into_iter()
                .filter(|r| r.np == 8 && r.size >= min_size)
            {
                let Some((text, x)) = point(r) else { continue };
                line.push(text);
                if let (Some(x), true) = (x, *side == sides[0]) {
                    met = Some(met.unwrap_or(true) && x <= bound);
                }
            }
            if !line.is_empty() {
                measured.push(label(side, &sides, line.join(", ")));
            }
        }
        (measured, met)
    }

    fn ratio_target(&self, what: &str, scenario: &str, bound: f64, min_size: usize) -> Target {
        let (mut measured, met) = self.judge(scenario, min_size, bound, |r| {
            let x = ratio(&self.records, "openmpi", r)?;
            Some((format!("{}: {x:.2}", human(r.size)), Some(x)))
        });
        if scenario.starts_with("slow") {
            // No schedule ends before the slow rank has contributed, D in.
            let bound: Vec<String> = self
                .points_of("openmpi", scenario)
                .into_iter()
                .filter(|r| r.np == 8 && r.size >= min_size && r.median_s > 0.0)
                .filter_map(|r| {
                    r.param_s
                        .map(|d| format!("{}: {:.2}", human(r.size), d / r.median_s))
                })
                .collect();
            if !bound.is_empty() {
                measured.push(format!(
                    "lower bound, D / Open MPI (nothing ends before the slow rank contributes): {}",
                    bound.join(", ")
                ));
            }
        }
        Target {
            what: what.into(),
            measured,
            met,
        }
    }

    fn targets(&self) -> Vec<Target> {
        if matches!(self.against.as_str(), "MPI_Allreduce" | "MPI_Bcast") {
            return self.spread_targets();
        }
        let mut t = vec![
            self.ratio_target(
                "quiet, p = 8, ≥ 2 MiB: taskfold / Open MPI ≤ 1.0",
                "quiet",
                1.0,
                2 << 20,
            ),
            self.ratio_target(
                "one slow rank (D = 50% of quiet), p = 8, ≥ 2 MiB: ≤ 0.7",
                "slow-half",
                0.7,
                2 << 20,
            ),
            self.ratio_target(
                "one slow rank (D = 20 ms), p = 8, ≥ 2 MiB: ≤ 0.7",
                "slow-20ms",
                0.7,
                2 << 20,
            ),
        ];
        t.push(self.stagger_target());
        t.push(self.k28_target());
        t.extend(self.small_targets());
        t
    }

    /// The staggered tail at p = 8: against Open MPI's tail, and against
    /// one fetch + fold measured alone.
    fn stagger_target(&self) -> Target {
        let mut measured = Vec::new();
        let mut met = None;
        let sides = self.taskfold_sides();
        for r in sides
            .iter()
            .flat_map(|s| self.points_of(s, "stagger"))
            .filter(|r| r.np == 8)
        {
            let base = find(&self.records, "openmpi", "stagger", 8, r.size, 1);
            let alone = self
                .fetch_fold_alone
                .iter()
                .find(|(s, _)| *s == r.size)
                .map(|(_, t)| *t);
            let tr = base.map(|b| r.tail_median_s / b.tail_median_s);
            let ar = alone.map(|a| r.tail_median_s / a);
            measured.push(label(
                &r.side,
                &sides,
                format!(
                    "{}: {} (×{} of fetch+fold alone)",
                    human(r.size),
                    opt_ratio(tr),
                    opt_ratio(ar)
                ),
            ));
            if let (Some(tr), Some(ar), true) = (tr, ar, r.side == sides[0]) {
                met = Some(met.unwrap_or(true) && tr <= 0.3 && ar <= 2.0);
            }
        }
        Target {
            what: "staggered tail, p = 8: ≤ 0.3, and ≤ 2× one fetch + fold alone".into(),
            measured,
            met,
        }
    }

    /// K = 28 concurrent reductions, with the floors no schedule beats.
    fn k28_target(&self) -> Target {
        let sides = self.taskfold_sides();
        let mut k28 = Target {
            what: "K = 28 concurrent 8 MiB, total: ≤ 0.25".into(),
            measured: Vec::new(),
            met: None,
        };
        for r in sides
            .iter()
            .flat_map(|s| self.points_of(s, "concurrent"))
            .filter(|r| r.np == 8 && r.k == 28)
        {
            if let Some(x) = ratio(&self.records, "openmpi", r) {
                k28.measured.push(label(&r.side, &sides, format!("{x:.2}")));
                if r.side == sides[0] {
                    k28.met = Some(x <= 0.25);
                }
            }
        }
        if let (Some(floor), Some(base)) = (
            self.floor_of(8, 28),
            self.records.iter().find(|r| {
                r.side == "openmpi" && r.scenario == "concurrent" && r.np == 8 && r.k == 28
            }),
        ) {
            k28.measured.push(format!(
                "memory-bandwidth floor (the 7 × 28 folds alone on every core): {:.2}",
                floor / base.median_s
            ));
            if let Some(kept) = self.floor_kept_of(8, 28) {
                k28.measured.push(format!(
                    "the same with originals kept (4 of each reduction's 7 folds into a new buffer): {:.2}",
                    kept / base.median_s
                ));
            }
        }
        k28
    }

    /// The fold floor of K reductions of p ranks, if measured.
    fn floor_of(&self, np: u32, k: u32) -> Option<f64> {
        Self::floor_in(&self.fold_floor, np, k)
    }

    /// The fold floor with originals kept of K reductions of p ranks.
    fn floor_kept_of(&self, np: u32, k: u32) -> Option<f64> {
        Self::floor_in(&self.fold_floor_kept, np, k)
    }

    fn floor_in(floors: &[(u32, usize, u32, f64)], np: u32, k: u32) -> Option<f64> {
        floors.iter().find(|f| f.0 == np && f.2 == k).map(|f| f.3)
    }
}

mod small_targets;
mod spread_targets;

#[cfg(test)]
mod tests;
