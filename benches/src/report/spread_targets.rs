//! The targets of an allreduce's comparison (and a broadcast's): quiet and
//! under background load against Open MPI in the same run, and with one
//! slow rank against the lower bound no schedule beats, each part of it
//! measured alone.

use super::{human, Report, Target};

/// How far above its lower bound the slow-rank case may end.
const OVER_BOUND: f64 = 1.2;

/// The smallest size the targets are judged at.
const FROM: usize = 2 << 20;

impl Report {
    /// Quiet ≤ 1.0 × Open MPI, one slow rank (both delays) ≤ 1.2 × its
    /// lower bound, background load ≤ 0.5 ×; p = 8, ≥ 2 MiB.
    pub(super) fn spread_targets(&self) -> Vec<Target> {
        let all = self.against == "MPI_Allreduce";
        vec![
            self.ratio_target(
                "quiet, p = 8, ≥ 2 MiB: taskfold / Open MPI ≤ 1.0",
                "quiet",
                1.0,
                FROM,
            ),
            self.bound_target("slow-half", "D = 50% of quiet", all),
            self.bound_target("slow-20ms", "D = 20 ms", all),
            self.ratio_target(
                "background load, p = 8, ≥ 2 MiB: taskfold / Open MPI ≤ 0.5",
                "load",
                0.5,
                FROM,
            ),
        ]
    }

    /// One slow rank: taskfold's time over the bound no schedule beats.
    /// An allreduce's slow member contributes after D; its contribution
    /// must then be fetched and folded, and the result fetched: D + an
    /// allreduce of two ranks alone. A broadcast's slow member asks after
    /// D and fetches: D + a broadcast of two ranks alone.
    fn bound_target(&self, scenario: &str, delay: &str, all: bool) -> Target {
        let parts = if all {
            "D, then one fetch + fold and one fetch of the result: an allreduce of 2 ranks alone"
        } else {
            "D, then one fetch: a broadcast of 2 ranks alone"
        };
        let (measured, met) = self.judge(scenario, FROM, OVER_BOUND, |r| {
            let alone = self.spread_alone.iter().find(|(s, _)| *s == r.size);
            Some(match r.param_s.zip(alone).map(|(d, (_, t))| d + t) {
                Some(bound) => {
                    let x = r.median_s / bound;
                    let text = format!("{}: {x:.2} (bound {:.1} ms)", human(r.size), bound * 1e3);
                    (text, Some(x))
                }
                None => (format!("{}: bound not measured", human(r.size)), None),
            })
        });
        Target {
            what: format!(
                "one slow rank ({delay}), p = 8, ≥ 2 MiB: ≤ {OVER_BOUND} × the lower bound ({parts})"
            ),
            measured,
            met,
        }
    }
}
