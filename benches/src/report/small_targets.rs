//! The targets of small reductions, quiet, against Open MPI in the same
//! run: 8 B at p = 8 and p = 32 within 3 × its time, 128 KiB at p = 8 and
//! two ranks from 512 KiB within its time, and no size taking less time
//! than a smaller one beyond the repetitions' spread (the book's
//! Benchmarks chapter, Reading the report).

use super::{human, label, Report, Target};
use crate::compare::{ratio, Record};

/// 8 B, p = 8 and p = 32: at most this many times Open MPI's time.
const SMALL_OVER_MPI: f64 = 3.0;

impl Report {
    /// The small-size targets, each judged on the default configuration
    /// (the first taskfold side), `None` where it was not measured.
    pub(super) fn small_targets(&self) -> Vec<Target> {
        vec![
            self.small_ratio(
                "quiet, 8 B, p = 8 and p = 32: taskfold / Open MPI ≤ 3",
                SMALL_OVER_MPI,
                |r| r.size == 8 && (r.np == 8 || r.np == 32),
            ),
            self.small_ratio(
                "quiet, 128 KiB, p = 8: taskfold / Open MPI ≤ 1.0",
                1.0,
                |r| r.size == 128 << 10 && r.np == 8,
            ),
            self.small_ratio(
                "quiet, p = 2, ≥ 512 KiB: taskfold / Open MPI ≤ 1.0",
                1.0,
                |r| r.size >= 512 << 10 && r.np == 2,
            ),
            self.monotone_target(),
        ]
    }

    /// Every quiet point `pick` takes (K = 1), as `p = N, size: ratio`.
    fn small_ratio(&self, what: &str, bound: f64, pick: impl Fn(&Record) -> bool) -> Target {
        let sides = self.taskfold_sides();
        let (mut measured, mut met) = (Vec::new(), None);
        for side in &sides {
            let mut line = Vec::new();
            for r in self.points_of(side, "quiet") {
                if r.k != 1 || !pick(r) {
                    continue;
                }
                let Some(x) = ratio(&self.records, "openmpi", r) else {
                    continue;
                };
                line.push(format!("p = {}, {}: {x:.2}", r.np, human(r.size)));
                if *side == sides[0] {
                    met = Some(met.unwrap_or(true) && x <= bound);
                }
            }
            if !line.is_empty() {
                measured.push(label(side, &sides, line.join(", ")));
            }
        }
        Target {
            what: what.into(),
            measured,
            met,
        }
    }

    /// Quiet, each p: a size whose repetitions all but a quarter took less
    /// time than all but a quarter of the next smaller size's (the upper
    /// quartile below the lower one) takes less time beyond noise.
    fn monotone_target(&self) -> Target {
        let sides = self.taskfold_sides();
        let (mut measured, mut met) = (Vec::new(), None);
        for side in &sides {
            let pts: Vec<&Record> = self
                .points_of(side, "quiet")
                .into_iter()
                .filter(|r| r.k == 1)
                .collect();
            let mut judged = false;
            let mut drops = Vec::new();
            for w in pts.windows(2).filter(|w| w[0].np == w[1].np) {
                judged = true;
                let (a, b) = (w[0], w[1]);
                if quartile(&b.times_s, 3) < quartile(&a.times_s, 1) {
                    drops.push(format!(
                        "p = {}: {} {:.3} ms, {} {:.3} ms",
                        a.np,
                        human(a.size),
                        a.median_s * 1e3,
                        human(b.size),
                        b.median_s * 1e3
                    ));
                }
            }
            if !judged {
                continue;
            }
            let text = if drops.is_empty() {
                "no size faster than a smaller one beyond the spread".to_string()
            } else {
                format!("faster than the size before: {}", drops.join("; "))
            };
            measured.push(label(side, &sides, text));
            if *side == sides[0] {
                met = Some(drops.is_empty());
            }
        }
        Target {
            what: "quiet, every p: time per reduction never decreasing with size beyond noise (the larger size's upper quartile below the smaller's lower one)".into(),
            measured,
            met,
        }
    }
}

/// The `q`-th quartile (1 or 3) of `v`, by the nearest rank; NaN if empty.
fn quartile(v: &[f64], q: usize) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let at = ((s.len() - 1) * q + 2) / 4;
    s[at.min(s.len() - 1)]
}
