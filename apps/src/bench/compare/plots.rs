//! The SVG plots of `bench compare`, written next to the report.

use super::harness::Harness;
use super::CompareArgs;
use std::path::Path;
use taskfold_benches::plot;

/// One plot: a scenario's medians (or tails) of every side against size
/// (or K).
struct PlotJob {
    file: String,
    title: String,
    scenario: &'static str,
    np: u32,
    /// Plot the tails instead of the times.
    tail: bool,
    /// Logarithmic axes.
    log: bool,
}

impl PlotJob {
    fn new(file: String, title: String, scenario: &'static str, np: u32) -> Self {
        PlotJob {
            file,
            title,
            scenario,
            np,
            tail: false,
            log: true,
        }
    }
}

/// The plots of the scenarios `a` asks for, in the report's order.
fn plot_jobs(a: &CompareArgs) -> Vec<PlotJob> {
    let mut jobs: Vec<PlotJob> =
        a.np.iter()
            .map(|&np| {
                PlotJob::new(
                    format!("quiet-p{np}.svg"),
                    format!("a. quiet, p = {np}"),
                    "quiet",
                    np,
                )
            })
            .collect();
    let p = a.np_interference;
    for (s, t) in [
        ("slow-half", "b. one slow rank, D = 50% of quiet"),
        ("slow-20ms", "b. one slow rank, D = 20 ms"),
        ("load", "d. background load"),
    ] {
        jobs.push(PlotJob::new(
            format!("{s}-p{p}.svg"),
            format!("{t}, p = {p}"),
            s,
            p,
        ));
    }
    jobs.push(PlotJob {
        tail: true,
        ..PlotJob::new(
            format!("stagger-tail-p{p}.svg"),
            format!("c. staggered arrival: tail, p = {p}"),
            "stagger",
            p,
        )
    });
    jobs.push(PlotJob {
        log: false,
        ..PlotJob::new(
            format!("concurrent-p{p}.svg"),
            format!("e. K concurrent reductions (total), p = {p}"),
            "concurrent",
            p,
        )
    });
    jobs
}

impl Harness {
    /// Writes every plot that has data into `dir` and lists it in the
    /// report.
    pub(super) fn plots(&mut self, dir: &Path, a: &CompareArgs) {
        for job in plot_jobs(a) {
            let series = plot::series_of(&self.report.records, job.scenario, job.np, job.tail);
            if series.is_empty() {
                continue;
            }
            let x = if job.scenario == "concurrent" {
                "K"
            } else {
                "contribution (KiB)"
            };
            let y = if job.tail {
                "tail (ms)"
            } else {
                "time per operation (ms)"
            };
            let file = job.file;
            match plot::lines(&dir.join(&file), &job.title, x, y, &series, job.log) {
                Ok(()) => self.report.plots.push(file),
                Err(e) => eprintln!("compare: plot {file}: {e}"),
            }
        }
    }
}
