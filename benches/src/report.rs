//! The Markdown report of `bench compare`: the targets first, then one
//! table per scenario with ratios taskfold / Open MPI and taskfold / MPICH,
//! the master's load, the exact command lines, and the plots.

use crate::compare::{find, ratio, Record};
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// Everything one `bench compare` run measured.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
pub struct Report {
    /// The command that produced the report.
    pub invocation: String,
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

    fn ratio_target(&self, what: &str, scenario: &str, bound: f64, min_size: usize) -> Target {
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
                if let Some(x) = ratio(&self.records, "openmpi", r) {
                    line.push(format!("{}: {x:.2}", human(r.size)));
                    // The target is judged on the default configuration.
                    if *side == sides[0] {
                        met = Some(met.unwrap_or(true) && x <= bound);
                    }
                }
            }
            if !line.is_empty() {
                measured.push(label(side, &sides, line.join(", ")));
            }
        }
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
        // Staggered tail: against Open MPI's tail, and against one fetch +
        // fold measured alone.
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
        t.push(Target {
            what: "staggered tail, p = 8: ≤ 0.3, and ≤ 2× one fetch + fold alone".into(),
            measured,
            met,
        });
        let mut k28 = self.ratio_target(
            "K = 28 concurrent 8 MiB, total: ≤ 0.25",
            "concurrent",
            0.25,
            0,
        );
        k28.measured.clear();
        k28.met = None;
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
        t.push(k28);
        t
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

    fn scenario_table(&self, out: &mut String, title: &str, scenario: &str, tails: bool) {
        let pts = self.points(scenario);
        if pts.is_empty() {
            return;
        }
        let sides = self.taskfold_sides();
        let _ = writeln!(out, "\n## {title}\n");
        let mut head = String::from("| p | size | K | param (ms) |");
        for s in &sides {
            let _ = write!(head, " {s} (ms) |");
        }
        head.push_str(" Open MPI (ms) | MPICH (ms) |");
        for s in &sides {
            let _ = write!(head, " {s} / Open MPI | {s} / MPICH |");
        }
        let _ = writeln!(out, "{head}");
        let cols = 6 + 3 * sides.len();
        let _ = writeln!(out, "|{}", "---|".repeat(cols));
        for r in &pts {
            let get = |side: &str| find(&self.records, side, scenario, r.np, r.size, r.k);
            let (o, m) = (get("openmpi"), get("mpich"));
            let mut row = format!(
                "| {} | {} | {} | {} |",
                r.np,
                human(r.size),
                r.k,
                r.param_s.map_or("–".into(), ms)
            );
            for s in &sides {
                let _ = write!(row, " {} |", get(s).map_or("–".into(), |x| ms(x.median_s)));
            }
            let _ = write!(
                row,
                " {} | {} |",
                o.map_or("–".into(), |x| ms(x.median_s)),
                m.map_or("–".into(), |x| ms(x.median_s))
            );
            for s in &sides {
                let t = get(s);
                let _ = write!(
                    row,
                    " {} | {} |",
                    opt_ratio(t.and_then(|t| ratio(&self.records, "openmpi", t))),
                    opt_ratio(t.and_then(|t| ratio(&self.records, "mpich", t)))
                );
            }
            let _ = writeln!(out, "{row}");
        }
        if tails {
            let _ = writeln!(
                out,
                "\nTail: from the last contribution to the result at the root.\n"
            );
            let _ = writeln!(
                out,
                "| side | p | size | tail (ms) | Open MPI tail (ms) | MPICH tail (ms) | / Open MPI | fetch+fold alone (ms) |"
            );
            let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
            for side in &sides {
                for r in self.points_of(side, scenario) {
                    let get = |s| find(&self.records, s, scenario, r.np, r.size, r.k);
                    let (o, m) = (get("openmpi"), get("mpich"));
                    let alone = self.fetch_fold_alone.iter().find(|(s, _)| *s == r.size);
                    let _ = writeln!(
                        out,
                        "| {side} | {} | {} | {} | {} | {} | {} | {} |",
                        r.np,
                        human(r.size),
                        ms(r.tail_median_s),
                        o.map_or("–".into(), |x| ms(x.tail_median_s)),
                        m.map_or("–".into(), |x| ms(x.tail_median_s)),
                        opt_ratio(o.map(|o| r.tail_median_s / o.tail_median_s)),
                        alone.map_or("–".into(), |(_, t)| ms(*t)),
                    );
                }
            }
        }
    }

    /// The report as Markdown.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# taskfold against MPI_Reduce\n");
        let _ = writeln!(out, "Produced by `{}`.\n", self.invocation);
        let _ = writeln!(
            out,
            "Each figure is the per-operation time, maximum over ranks, median over repetitions; results are verified outside the timed loop. Ratios below 1 mean taskfold is faster.\n"
        );
        for n in &self.notes {
            let _ = writeln!(out, "- {n}");
        }
        for m in &self.missing {
            let _ = writeln!(out, "- not measured: {m}");
        }
        let _ = writeln!(out, "\n## Targets (p = 8, against Open MPI)\n");
        let _ = writeln!(out, "| target | measured | met |");
        let _ = writeln!(out, "|---|---|---|");
        for t in self.targets() {
            let met = match t.met {
                Some(true) => "yes",
                Some(false) => "no",
                None => "not measured",
            };
            let _ = writeln!(out, "| {} | {} | {met} |", t.what, t.measured.join("; "));
        }
        self.scenario_table(&mut out, "a. Quiet machine", "quiet", false);
        self.scenario_table(
            &mut out,
            "b. One slow rank (rank 2 busy-spins D = 50% of the quiet time)",
            "slow-half",
            false,
        );
        self.scenario_table(
            &mut out,
            "b. One slow rank (rank 2 busy-spins D = 20 ms)",
            "slow-20ms",
            false,
        );
        self.scenario_table(
            &mut out,
            "c. Staggered arrival (seeded delays in [0, J], J = the quiet time)",
            "stagger",
            true,
        );
        self.scenario_table(
            &mut out,
            "d. Background load (one migration-kernel process per core)",
            "load",
            false,
        );
        self.scenario_table(
            &mut out,
            "e. Concurrent reductions (K at once; time is the total)",
            "concurrent",
            false,
        );
        let conc = self.points("concurrent");
        if !conc.is_empty() {
            let sides = self.taskfold_sides();
            let _ = writeln!(out, "\nTime per reduction (total / K), ms:\n");
            let mut head = String::from("| p | K |");
            for s in sides.iter().copied().chain(["Open MPI", "MPICH"]) {
                let _ = write!(head, " {s} |");
            }
            let _ = write!(
                head,
                " fold floor | floor / Open MPI | kept floor | kept / Open MPI |"
            );
            let _ = writeln!(out, "{head}\n|{}", "---|".repeat(sides.len() + 8));
            for r in conc {
                let per = |side: &str| {
                    find(&self.records, side, "concurrent", r.np, r.size, r.k)
                        .map_or("–".into(), |x| ms(x.median_s / f64::from(x.k)))
                };
                let mut row = format!("| {} | {} |", r.np, r.k);
                for s in sides.iter().copied().chain(["openmpi", "mpich"]) {
                    let _ = write!(row, " {} |", per(s));
                }
                let base = find(&self.records, "openmpi", "concurrent", r.np, r.size, r.k);
                for floor in [self.floor_of(r.np, r.k), self.floor_kept_of(r.np, r.k)] {
                    let _ = write!(
                        row,
                        " {} | {} |",
                        floor.map_or("–".into(), |f| ms(f / f64::from(r.k))),
                        opt_ratio(floor.zip(base).map(|(f, b)| f / b.median_s))
                    );
                }
                let _ = writeln!(out, "{row}");
            }
            let _ = writeln!(
                out,
                "\nThe fold floor is the (p − 1)·K pairwise folds of K reductions, run \
                 alone on every core at once, per reduction: the memory bandwidth they need \
                 bounds any schedule from below. The kept floor is the same with p / 2 folds \
                 of each reduction into a new buffer instead of in place (each receiving rank's \
                 first fold, in a balanced pairing), as a durability that keeps every original \
                 unchanged until its reduction ends must do."
            );
        }
        let master: Vec<&Record> = self
            .taskfold_sides()
            .first()
            .map(|s| self.points_of(s, "quiet"))
            .unwrap_or_default()
            .into_iter()
            .filter(|r| r.master.is_some())
            .collect();
        if !master.is_empty() {
            let _ = writeln!(out, "\n## f. Master load (taskfold, quiet)\n");
            let _ = writeln!(
                out,
                "| p | size | reductions | msgs/s in | msgs/s out | KiB/s in | KiB/s out | msgs per reduction |"
            );
            let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
            for r in master {
                let Some(m) = r.master else { continue };
                let ((mi, mo), (bi, bo)) = (m.msgs_per_s(), m.bytes_per_s());
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {mi:.0} | {mo:.0} | {:.1} | {:.1} | {:.1} |",
                    r.np,
                    human(r.size),
                    m.reductions,
                    bi / 1024.0,
                    bo / 1024.0,
                    (m.msgs_in + m.msgs_out) as f64 / m.reductions.max(1) as f64
                );
            }
            let _ = writeln!(
                out,
                "\nThe counts include each repetition's two barriers (one message each way \
                 per rank); barriers are not counted as reductions."
            );
        }
        if !self.plots.is_empty() {
            let _ = writeln!(out, "\n## Plots\n");
            for p in &self.plots {
                let _ = writeln!(out, "![{p}]({p})\n");
            }
        }
        let _ = writeln!(out, "\n## Command lines\n");
        for (what, cmd) in &self.commands {
            let _ = writeln!(out, "- {what}: `{cmd}`");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::Sample;

    fn rec(side: &str, scenario: &str, size: usize, t: f64) -> Record {
        Record::new(
            side,
            scenario,
            None,
            Sample {
                scenario: scenario.into(),
                np: 8,
                size,
                k: if scenario == "concurrent" { 28 } else { 1 },
                times_s: vec![t],
                tails_s: vec![t / 2.0],
                master: None,
            },
        )
    }

    #[test]
    fn targets_are_judged_from_the_ratios() {
        let r = Report {
            records: vec![
                rec("taskfold", "quiet", 2 << 20, 0.010),
                rec("openmpi", "quiet", 2 << 20, 0.020),
                rec("taskfold", "quiet", 8 << 20, 0.030),
                rec("openmpi", "quiet", 8 << 20, 0.020),
                rec("taskfold", "concurrent", 8 << 20, 0.1),
                rec("openmpi", "concurrent", 8 << 20, 1.0),
            ],
            ..Report::default()
        };
        let t = r.targets();
        assert_eq!(t[0].met, Some(false), "{:?}", t[0].measured);
        assert_eq!(t[0].measured, vec!["2 MiB: 0.50, 8 MiB: 1.50"]);
        assert_eq!(t[1].met, None);
        assert_eq!(t[4].met, Some(true));
        // A slow rank's D bounds any schedule from below.
        let mut rs = r.clone();
        let mut slow = rec("openmpi", "slow-20ms", 2 << 20, 0.025);
        slow.param_s = Some(0.020);
        rs.records.push(slow);
        rs.records
            .push(rec("taskfold", "slow-20ms", 2 << 20, 0.030));
        let t = rs.targets();
        assert_eq!(t[2].met, Some(false));
        assert!(
            t[2].measured
                .iter()
                .any(|m| m.starts_with("lower bound") && m.ends_with("2 MiB: 0.80")),
            "{:?}",
            t[2].measured
        );
        // The floor of scenario e is quoted against Open MPI's time.
        let mut rf = r.clone();
        rf.fold_floor = vec![(8, 8 << 20, 28, 0.5)];
        rf.fold_floor_kept = vec![(8, 8 << 20, 28, 0.6)];
        let k28 = &rf.targets()[4].measured;
        assert!(
            k28.iter().any(|m| m.ends_with("on every core): 0.50")),
            "{k28:?}"
        );
        assert!(
            k28.iter().any(|m| m.ends_with("into a new buffer): 0.60")),
            "{k28:?}"
        );
        assert!(
            rf.markdown()
                .contains("| 8 | 28 | 3.571 | 35.7 | – | 17.9 | 0.50 | 21.4 | 0.60 |"),
            "{}",
            rf.markdown()
        );
        let md = r.markdown();
        assert!(
            md.contains("| 8 | 8 MiB | 1 | – | 30.0 | 20.0 | – | 1.50 | – |"),
            "{md}"
        );
        assert!(md.contains("not measured"));
        // A second configuration gets its own columns and target lines;
        // the targets are judged on the first (the default).
        let mut r2 = r.clone();
        r2.records
            .push(rec("taskfold (durability off)", "quiet", 8 << 20, 0.010));
        let t = r2.targets();
        assert_eq!(t[0].met, Some(false));
        assert_eq!(t[0].measured[1], "taskfold (durability off): 8 MiB: 0.50");
        let md = r2.markdown();
        assert!(
            md.contains("| 8 | 8 MiB | 1 | – | 30.0 | 10.0 | 20.0 | – | 1.50 | – | 0.50 | – |"),
            "{md}"
        );
    }

    #[test]
    fn sizes_print_in_binary_units() {
        assert_eq!(human(128 << 10), "128 KiB");
        assert_eq!(human(3 << 19), "1.50 MiB");
    }
}
