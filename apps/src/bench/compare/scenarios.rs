//! The scenarios a to e, each run on every side, in the order that lets
//! each use the ones before: the quiet runs first, whose times set the
//! delays (D, J) of the slow rank and of the staggered arrivals.

use super::harness::Harness;
use super::load;
use super::run::Run;
use super::CompareArgs;
use std::path::Path;

use taskfold_benches::baseline::{fold_floor, fold_floor_kept};
use taskfold_benches::compare::find;

impl Harness {
    /// Runs every scenario `a` asks for. `first` names the taskfold side
    /// the targets are judged on; `exe` is this binary (the background
    /// load's processes), `cores` the cores the load and the floors use.
    pub(super) fn scenarios(
        &mut self,
        a: &CompareArgs,
        first: &str,
        exe: &Path,
        cores: usize,
    ) -> Result<(), String> {
        let has = |s: &str| a.scenarios.iter().any(|x| x == s);
        self.quiet(a)?;
        let p = a.np_interference;
        let quiet: Vec<f64> = a
            .size
            .iter()
            .map(|&s| self.quiet_time(p, s, first).unwrap_or(0.0))
            .collect();
        if has("slow") {
            self.slow(a, &quiet)?;
            if a.collective != "reduce" {
                self.yardstick(a, first)?;
            }
        }
        if has("stagger") {
            self.stagger(a, &quiet, first)?;
        }
        if has("load") {
            self.load(a, exe, cores)?;
        }
        if has("concurrent") {
            self.concurrent(a, cores)?;
        }
        Ok(())
    }

    /// a. The quiet runs, at every `--np`, and at the p the slow rank and
    /// the staggered arrivals need (their delays are the quiet times at
    /// their p), and at p = 2 for the staggered tail's yardstick (one
    /// fetch + fold alone).
    fn quiet(&mut self, a: &CompareArgs) -> Result<(), String> {
        let has = |s: &str| a.scenarios.iter().any(|x| x == s);
        let p = a.np_interference;
        let mut quiet_nps: Vec<u32> = if has("quiet") {
            a.np.clone()
        } else {
            Vec::new()
        };
        if (has("slow") || has("stagger")) && !quiet_nps.contains(&p) {
            quiet_nps.push(p);
        }
        if has("stagger") && !quiet_nps.contains(&2) {
            quiet_nps.insert(0, 2);
        }
        for &np in &quiet_nps {
            self.run(&Run::of(a, "quiet", "quiet", np))?;
        }
        Ok(())
    }

    /// b. One slow rank: D = 50% of the quiet time, and D = 20 ms.
    fn slow(&mut self, a: &CompareArgs, quiet: &[f64]) -> Result<(), String> {
        let p = a.np_interference;
        let half = quiet.iter().map(|q| q * 0.5).collect();
        self.run(&Run {
            params: half,
            ..Run::of(a, "slow-half", "slow", p)
        })?;
        self.run(&Run {
            params: vec![0.020; a.size.len()],
            ..Run::of(a, "slow-20ms", "slow", p)
        })
    }

    /// The yardstick of a spread's slow-rank target: the same collective
    /// at p = 2, quiet, taskfold alone. After the slow rank's delay, no
    /// allreduce ends before one fetch and fold of its contribution and
    /// one fetch of the result, which is what an allreduce of two ranks
    /// does; no broadcast before one fetch, a broadcast of two.
    fn yardstick(&mut self, a: &CompareArgs, first: &str) -> Result<(), String> {
        self.run(&Run {
            yardstick: true,
            ..Run::of(a, "alone", "quiet", 2)
        })?;
        self.report.spread_alone = a
            .size
            .iter()
            .filter_map(|&s| find(&self.report.records, first, "alone", 2, s, 1))
            .map(|r| (r.size, r.median_s))
            .collect();
        Ok(())
    }

    /// c. Staggered arrivals within J = the quiet time, and the yardstick
    /// of their tail: one fetch + fold alone (`first` at p = 2, quiet).
    fn stagger(&mut self, a: &CompareArgs, quiet: &[f64], first: &str) -> Result<(), String> {
        self.run(&Run {
            params: quiet.to_vec(),
            ..Run::of(a, "stagger", "stagger", a.np_interference)
        })?;
        self.report.fetch_fold_alone = a
            .size
            .iter()
            .filter_map(|&s| {
                find(&self.report.records, first, "quiet", 2, s, 1).map(|r| (s, r.median_s))
            })
            .collect();
        Ok(())
    }

    /// d. The quiet scenario beside one load process per core.
    fn load(&mut self, a: &CompareArgs, exe: &Path, cores: usize) -> Result<(), String> {
        let limit = a.timeout * (1 + self.mpis.len() as u32);
        let _load =
            load::Load::start(exe, cores, limit).map_err(|e| format!("background load: {e}"))?;
        self.run(&Run::of(a, "load", "quiet", a.np_interference))
    }

    /// e. K reductions at once, each K in a job of its own on every side (a
    /// process that ran the smaller Ks first is not the same baseline: Open
    /// MPI is several times slower at a K after smaller ones in the same
    /// processes), with the floors below any schedule: the same folds alone.
    fn concurrent(&mut self, a: &CompareArgs, cores: usize) -> Result<(), String> {
        let p = a.np_interference;
        let size = a.concurrent_size;
        for &k in &a.k {
            self.run(&Run {
                sizes: vec![size],
                ks: vec![k],
                reps: a.reps_concurrent,
                ..Run::of(a, "concurrent", "concurrent", p)
            })?;
            let folds = (p.max(1) - 1) * k;
            let floor = fold_floor(size, folds, cores, 3);
            self.report.fold_floor.push((p, size, k, floor));
            // With originals kept, each receiving rank's first fold writes a
            // new buffer: p / 2 of the p − 1 folds in a balanced pairing.
            let fresh = p / 2 * k;
            let kept = fold_floor_kept(size, folds, fresh, cores, 3);
            self.report.fold_floor_kept.push((p, size, k, kept));
        }
        Ok(())
    }
}
