//! The report's figures and files.

use super::*;

impl Report {
    /// An empty report of `np` ranks running psdm with `psdm_args`.
    pub fn new(np: u32, psdm_args: Vec<String>) -> Report {
        Report {
            np,
            psdm_args,
            retrieval: retrieval(),
            ..Report::default()
        }
    }

    /// Adds a trial.
    pub fn push(&mut self, t: Trial) {
        self.trials.push(t);
    }

    /// The failure-free length and checksum, from the `none` trials that
    /// ended well; an error if none did or their checksums disagree.
    pub fn set_reference(&mut self) -> Result<(), String> {
        let good: Vec<&Trial> = self
            .trials
            .iter()
            .filter(|t| t.mode == "none" && t.exit_ok && t.checksum.is_some())
            .collect();
        let Some(first) = good.first() else {
            let why = self
                .trials
                .iter()
                .find_map(|t| t.error.clone())
                .unwrap_or_else(|| "no checksum printed".into());
            return Err(format!("the failure-free job did not end well: {why}"));
        };
        let reference = first.checksum.expect("filtered");
        let mut times: Vec<f64> = good.iter().map(|t| t.time_to_solution_s).collect();
        self.failure_free_s = median(&mut times);
        self.reference_checksum = reference;
        Ok(())
    }

    /// Marks every trial's checksum against the reference, bounds the
    /// `local` trials, and sums up each mode.
    pub fn finish(&mut self) {
        let (reference, free) = (self.reference_checksum, self.failure_free_s);
        for t in &mut self.trials {
            t.checksum_matches = t.checksum.map(|c| {
                (c - reference).abs() <= CHECKSUM_TOLERANCE * reference.abs().max(f64::MIN_POSITIVE)
            });
            t.bound(free);
        }
        let mut names: Vec<String> = Vec::new();
        for t in &self.trials {
            if !names.contains(&t.mode) {
                names.push(t.mode.clone());
            }
        }
        self.modes = names.iter().map(|m| self.summary(m)).collect();
    }

    fn summary(&self, mode: &str) -> ModeSummary {
        let of: Vec<&Trial> = self.trials.iter().filter(|t| t.mode == mode).collect();
        let exact: Vec<&Trial> = of.iter().copied().filter(|t| is_exact(t)).collect();
        let med = |f: &dyn Fn(&Trial) -> Option<f64>| {
            let mut v: Vec<f64> = exact.iter().filter_map(|t| f(t)).collect();
            (!v.is_empty()).then(|| median(&mut v))
        };
        let median_s = med(&|t| Some(t.time_to_solution_s));
        let mut errors: Vec<String> = Vec::new();
        for e in of.iter().filter_map(|t| t.error.clone()) {
            if !errors.contains(&e) {
                errors.push(e);
            }
        }
        ModeSummary {
            mode: mode.into(),
            trials: of.len() as u32,
            killed: of.iter().filter(|t| t.kill_unix_ms.is_some()).count() as u32,
            exact: exact.len() as u32,
            median_s,
            ratio_to_none: median_s.map(|m| m / self.failure_free_s),
            median_bound_s: med(&|t| t.lower_bound_s),
            median_ratio_to_bound: med(&|t| t.ratio_to_bound),
            errors,
        }
    }

    /// Whether every trial ended exactly.
    pub fn all_exact(&self) -> bool {
        self.trials.iter().all(is_exact)
    }

    /// The summary, one line per mode.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "bench recovery: {} ranks, failure-free {:.2} s (median), checksum {:.6e}",
            self.np, self.failure_free_s, self.reference_checksum
        )];
        for m in &self.modes {
            let mut l = format!(
                "  {:8} {}/{} exact ({} killed), median {} s, x{} of failure-free",
                m.mode,
                m.exact,
                m.trials,
                m.killed,
                opt(m.median_s, 2),
                opt(m.ratio_to_none, 3)
            );
            if m.mode == "local" {
                l += &format!(
                    "; lower bound {} s, ratio to it {} (target <= 1.25)",
                    opt(m.median_bound_s, 2),
                    opt(m.median_ratio_to_bound, 3)
                );
            }
            for e in &m.errors {
                l += &format!("\n    error: {e}");
            }
            out.push(l);
        }
        out.push(match &self.retrieval {
            Some(r) => format!(
                "  retrieval after the loss of L1 and L2: naive (probing) {:.3} s, \
                 topology-aware {:.3} s, ratio {:.3} (target <= 0.5)",
                r.naive_s,
                r.topology_aware_s,
                r.topology_aware_s / r.naive_s
            ),
            None => "  retrieval: not measured here (taskfold bench checkpoint)".into(),
        });
        out
    }

    /// Writes `recovery.json`, `report.md` and `recovery.svg` into `dir`.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(dir.join("recovery.json"), json)?;
        let plotted = self.plot(&dir.join("recovery.svg"));
        std::fs::write(dir.join("report.md"), self.markdown(plotted.is_ok()))?;
        plotted.map_err(std::io::Error::other)
    }

    fn markdown(&self, plotted: bool) -> String {
        let mut md = format!(
            "# Recovery of a psdm job\n\n{} ranks, psdm `{}`; failure-free time to solution \
             {:.2} s (median of the `none` trials), the kill window. One rank other than the \
             root SIGKILLed per trial, at a uniform random instant of that window.\n\n\
             | mode | trials | killed | exact | median (s) | × failure-free | lower bound (s) | × bound |\n\
             | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
            self.np,
            self.psdm_args.join(" "),
            self.failure_free_s
        );
        for m in &self.modes {
            md += &format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                m.mode,
                m.trials,
                m.killed,
                m.exact,
                opt(m.median_s, 2),
                opt(m.ratio_to_none, 3),
                opt(m.median_bound_s, 2),
                opt(m.median_ratio_to_bound, 3)
            );
        }
        md += "\nExact: exit 0 and the failure-free checksum. The lower bound of a `local` \
               trial is the failure-free time plus the dead rank's work since its last \
               checkpoint, its respawn and its restore (target: ratio ≤ 1.25).\n";
        for m in self.modes.iter().filter(|m| !m.errors.is_empty()) {
            md += &format!("\n`{}` failed: {}\n", m.mode, m.errors.join("; "));
        }
        md += &match &self.retrieval {
            Some(r) => format!(
                "\nRetrieval after a failure that destroyed L1 and L2 (8 ranks on 4 \
                 nodes, L3 groups of 4 + 2 parity, 4 MiB states, 1 s detection \
                 timeout): naive probing {:.3} s, topology-aware {:.3} s, ratio \
                 {:.3} (target ≤ 0.5).\n",
                r.naive_s,
                r.topology_aware_s,
                r.topology_aware_s / r.naive_s
            ),
            None => "\nRetrieval (naive against topology-aware): not measured by this \
                     benchmark; see `taskfold bench checkpoint`.\n"
                .into(),
        };
        if plotted {
            md += "\n![time to solution against the kill instant](recovery.svg)\n";
        }
        md
    }

    /// Time to solution against the kill instant, a line per mode.
    fn plot(&self, path: &Path) -> Result<(), String> {
        let mut series = Vec::new();
        for m in &self.modes {
            let mut pts: Vec<(f64, f64)> = self
                .trials
                .iter()
                .filter(|t| t.mode == m.mode && is_exact(t))
                .map(|t| (t.kill_at_s.unwrap_or(0.0), t.time_to_solution_s))
                .collect();
            if m.mode == "none" {
                let y = m.median_s.unwrap_or(self.failure_free_s);
                pts = vec![(0.0, y), (self.failure_free_s, y)];
            }
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            if !pts.is_empty() {
                series.push((m.mode.clone(), pts));
            }
        }
        plot::lines(
            path,
            &format!("psdm on {} ranks: one rank SIGKILLed", self.np),
            "kill instant (s after launch)",
            "time to solution (s)",
            &series,
            false,
        )
    }
}

/// Exit 0 with the failure-free checksum.
fn is_exact(t: &Trial) -> bool {
    t.exit_ok && t.checksum_matches == Some(true)
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("—".into(), |x| format!("{x:.digits$}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(mode: &str, tts: f64, checksum: f64) -> Trial {
        Trial {
            mode: mode.into(),
            time_to_solution_s: tts,
            exit_ok: true,
            checksum: Some(checksum),
            ..Trial::default()
        }
    }

    #[test]
    fn medians_and_exactness() {
        let mut r = Report::new(4, vec![]);
        for t in [3.0, 1.0, 2.0] {
            r.push(trial("none", t, 100.0));
        }
        r.set_reference().unwrap();
        assert_eq!(r.failure_free_s, 2.0);
        r.push(trial("restart", 4.0, 100.0 * (1.0 + 1e-7)));
        r.push(trial("restart", 6.0, 101.0));
        let mut local = trial("local", 3.0, 100.0);
        (local.lost_s, local.respawn_s, local.restore_s) = (Some(0.3), Some(0.1), Some(0.1));
        r.push(local);
        r.finish();
        let restart = r.modes.iter().find(|m| m.mode == "restart").unwrap();
        assert_eq!((restart.exact, restart.median_s), (1, Some(4.0)));
        assert_eq!(restart.ratio_to_none, Some(2.0));
        assert!(!r.all_exact());
        let local = r.modes.iter().find(|m| m.mode == "local").unwrap();
        assert!((local.median_bound_s.unwrap() - 2.5).abs() < 1e-12);
        assert!((local.median_ratio_to_bound.unwrap() - 1.2).abs() < 1e-12);
    }

    #[test]
    fn a_failed_reference_is_an_error() {
        let mut r = Report::new(4, vec![]);
        r.push(Trial {
            mode: "none".into(),
            error: Some("boom".into()),
            ..Trial::default()
        });
        assert!(r.set_reference().unwrap_err().contains("boom"));
    }

    #[test]
    fn psdm_lines_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("l");
        std::fs::write(
            &log,
            "[2] @psdm-checkpoint rank=2 version=1 batches=6 unix_ms=1000\n\
             [2] @psdm-checkpoint rank=2 version=2 batches=12 unix_ms=3000\n\
             [1] @psdm-checkpoint rank=1 version=2 batches=12 unix_ms=1500\n\
             [2] @psdm-resumed rank=2 start=own incarnation=1 version=1 batches=6 restore_ms=20 up_unix_ms=2600\n\
             [0] psdm: checksum 1.5e3 (any rank count)\n",
        )
        .unwrap();
        let mut t = Trial {
            mode: "local".into(),
            victim: Some(2),
            kill_unix_ms: Some(2500.0),
            exit_ok: true,
            ..Trial::default()
        };
        t.read_logs(&[log]);
        assert_eq!(t.checksum, Some(1500.0));
        assert_eq!(t.last_checkpoint_unix_ms, Some(1000.0));
        assert_eq!(t.lost_s, Some(1.5));
        assert_eq!(t.resumed_version, Some(1));
        assert_eq!(t.respawn_s, Some(0.1));
        assert_eq!(t.restore_s, Some(0.02));
    }
}
