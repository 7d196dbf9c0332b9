//! One run of one scenario: what every side's job is given.

use super::CompareArgs;

/// One run of one scenario on every side.
pub(super) struct Run<'a> {
    pub(super) label: &'static str,
    pub(super) driver: &'static str,
    pub(super) np: u32,
    pub(super) sizes: Vec<usize>,
    /// D or J per size, seconds.
    pub(super) params: Vec<f64>,
    pub(super) ks: Vec<u32>,
    pub(super) reps: u32,
    /// A yardstick of taskfold alone: no baseline, the first taskfold
    /// configuration only.
    pub(super) yardstick: bool,
    pub(super) args: &'a CompareArgs,
}

impl<'a> Run<'a> {
    /// A run of `driver` at `np` ranks over every `--size`, one reduction
    /// at a time, with no delay, `--reps` times.
    pub(super) fn of(
        args: &'a CompareArgs,
        label: &'static str,
        driver: &'static str,
        np: u32,
    ) -> Self {
        Run {
            label,
            driver,
            np,
            sizes: args.size.clone(),
            params: Vec::new(),
            ks: vec![1],
            reps: args.reps,
            yardstick: false,
            args,
        }
    }

    /// `-sSIZE` for a run of one size of several, `-kK` for a run of one
    /// K > 1: what tells this job's files and command lines apart.
    pub(super) fn suffix(&self) -> String {
        let mut s = String::new();
        if let [size] = self.sizes[..] {
            s += &format!("-s{size}");
        }
        if let [k] = self.ks[..] {
            if k > 1 {
                s += &format!("-k{k}");
            }
        }
        s
    }

    /// This run's sizes, each as a run of its own.
    pub(super) fn per_size(&self) -> Vec<Run<'_>> {
        self.sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| Run {
                label: self.label,
                driver: self.driver,
                np: self.np,
                sizes: vec![size],
                params: self.params.get(i).map(|&p| vec![p]).unwrap_or_default(),
                ks: self.ks.clone(),
                reps: self.reps,
                yardstick: self.yardstick,
                args: self.args,
            })
            .collect()
    }

    /// The arguments of the scenario driver (the MPI driver's and
    /// `compare-rank`'s alike).
    pub(super) fn driver_args(&self) -> Vec<String> {
        let list = |v: Vec<String>| v.join(",");
        let us = |v: &[f64]| list(v.iter().map(|s| format!("{:.0}", s * 1e6)).collect());
        let mut a = vec![
            "--scenario".into(),
            self.driver.into(),
            "--sizes".into(),
            list(self.sizes.iter().map(|s| s.to_string()).collect()),
            "--reps".into(),
            self.reps.to_string(),
            "--warmup".into(),
            self.args.warmup.to_string(),
            "--root".into(),
            "1".into(),
            "--seed".into(),
            self.args.seed.to_string(),
            "--k".into(),
            list(self.ks.iter().map(|k| k.to_string()).collect()),
        ];
        if self.args.collective != "reduce" {
            a.extend(["--collective".into(), self.args.collective.clone()]);
        }
        match self.driver {
            "slow" => a.extend([
                "--slow-rank".into(),
                "2".into(),
                "--delay-us".into(),
                us(&self.params),
            ]),
            "stagger" => a.extend(["--jitter-us".into(), us(&self.params)]),
            _ => {}
        }
        a
    }
}
