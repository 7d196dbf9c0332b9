//! The report as Markdown: the targets first, then one table per scenario,
//! the master's load, the plots and the command lines.

use super::{human, ms, opt_ratio, Report};
use crate::compare::{find, ratio, Record};
use std::fmt::Write;

/// The scenario tables, in the report's order: (title, scenario, with the
/// tails table).
const SCENARIOS: [(&str, &str, bool); 6] = [
    ("a. Quiet machine", "quiet", false),
    (
        "b. One slow rank (rank 2 busy-spins D = 50% of the quiet time)",
        "slow-half",
        false,
    ),
    (
        "b. One slow rank (rank 2 busy-spins D = 20 ms)",
        "slow-20ms",
        false,
    ),
    (
        "c. Staggered arrival (seeded delays in [0, J], J = the quiet time)",
        "stagger",
        true,
    ),
    (
        "d. Background load (one migration-kernel process per core)",
        "load",
        false,
    ),
    (
        "e. Concurrent reductions (K at once; time is the total)",
        "concurrent",
        false,
    ),
];

impl Report {
    /// The report as Markdown.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        self.head(&mut out);
        self.targets_table(&mut out);
        for (title, scenario, tails) in SCENARIOS {
            self.scenario_table(&mut out, title, scenario);
            if tails {
                self.tails_table(&mut out, scenario);
            }
        }
        self.per_reduction_table(&mut out);
        self.master_table(&mut out);
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

    /// The title, the command that produced the report, and its notes.
    fn head(&self, out: &mut String) {
        let against = match self.against.as_str() {
            "" => "MPI_Reduce",
            a => a,
        };
        let _ = writeln!(out, "# taskfold against {against}\n");
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
    }

    fn targets_table(&self, out: &mut String) {
        let _ = writeln!(out, "\n## Targets (against Open MPI in the same run)\n");
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
    }

    /// Every side's median of every point of `scenario`, and the ratios of
    /// each taskfold side to Open MPI and MPICH.
    fn scenario_table(&self, out: &mut String, title: &str, scenario: &str) {
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
    }

    /// The tails of `scenario` (last contribution → result at the root),
    /// against the baselines' and one fetch + fold alone.
    fn tails_table(&self, out: &mut String, scenario: &str) {
        if self.points(scenario).is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "\nTail: from the last contribution to the result at the root.\n"
        );
        let _ = writeln!(
            out,
            "| side | p | size | tail (ms) | Open MPI tail (ms) | MPICH tail (ms) | / Open MPI | fetch+fold alone (ms) |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
        for side in &self.taskfold_sides() {
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

    /// Scenario e per reduction (total / K), beside the fold floors.
    fn per_reduction_table(&self, out: &mut String) {
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
    }

    /// f. The master's load in the quiet runs of the first taskfold side.
    fn master_table(&self, out: &mut String) {
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
    }
}
