//! The harness: runs one scenario on every side (the MPI baselines, then
//! each taskfold configuration) and collects their records.

use super::run::Run;
use super::side_name;
use crate::launcher::{self, Launch};
use std::path::PathBuf;

use taskfold_benches::compare::{find, Record, Sample};
use taskfold_benches::mpi::{self, Mpi};
use taskfold_benches::report::Report;

/// Runs the sides of every scenario and collects their records.
pub(super) struct Harness {
    pub(super) exe: PathBuf,
    pub(super) mpis: Vec<Mpi>,
    pub(super) report: Report,
    pub(super) step: usize,
}

impl Harness {
    fn param_of(&self, r: &Run, s: &Sample) -> Option<f64> {
        r.sizes
            .iter()
            .position(|&x| x == s.size)
            .and_then(|i| r.params.get(i).copied())
    }

    fn taskfold(&mut self, r: &Run) -> Result<(), String> {
        if r.yardstick {
            let (d, c, i) = super::first_configuration(r.args);
            return self.taskfold_with(r, d, c, i);
        }
        for d in &r.args.durability {
            for c in &r.args.completion {
                for i in &r.args.integrity {
                    self.taskfold_with(r, d, c, i)?;
                }
            }
        }
        Ok(())
    }

    fn taskfold_with(
        &mut self,
        r: &Run,
        durability: &str,
        completion: &str,
        integrity: &str,
    ) -> Result<(), String> {
        let side = side_name(durability, completion, integrity);
        let out = r.args.out.join(format!(
            "taskfold-{durability}-{completion}-{integrity}-{}-p{}{}.jsonl",
            r.label,
            r.np,
            r.suffix()
        ));
        let mut args = vec!["compare-rank".to_string()];
        args.extend(r.driver_args());
        args.extend(["--out".into(), out.display().to_string()]);
        let cmd = format!(
            "TASKFOLD_DURABILITY={durability} TASKFOLD_COMPLETION={completion} TASKFOLD_INTEGRITY={integrity} {} run -n {} -- {} {}",
            self.exe.display(),
            r.np,
            self.exe.display(),
            args.join(" ")
        );
        self.report
            .commands
            .push((format!("{side}, {} p={}{}", r.label, r.np, r.suffix()), cmd));
        let launch = Launch {
            ranks: r.np,
            program: self.exe.clone().into_os_string(),
            args: args.into_iter().map(Into::into).collect(),
            timeout: Some(r.args.timeout),
            env: vec![
                ("TASKFOLD_DURABILITY".into(), durability.into()),
                ("TASKFOLD_COMPLETION".into(), completion.into()),
                ("TASKFOLD_INTEGRITY".into(), integrity.into()),
            ],
            log: None,
            respawn: 0,
        };
        let fail = |detail: String| format!("{side} {} p={}: {detail}", r.label, r.np);
        match launcher::run(&launch) {
            Ok(exits) if exits.iter().all(|e| e.success()) => {}
            Ok(exits) => {
                let bad: Vec<String> = exits
                    .iter()
                    .filter(|e| !e.success())
                    .map(|e| format!("rank {} {}", e.rank, e.describe()))
                    .collect();
                return Err(fail(bad.join(", ")));
            }
            Err(e) => return Err(fail(e.to_string())),
        }
        let text = std::fs::read_to_string(&out).map_err(|e| format!("{}: {e}", out.display()))?;
        for s in mpi::parse_samples(&text)? {
            let p = self.param_of(r, &s);
            self.report.records.push(Record::new(&side, r.label, p, s));
        }
        Ok(())
    }

    fn baselines(&mut self, r: &Run) -> Result<(), String> {
        let args = r.driver_args();
        for m in &self.mpis {
            self.report.commands.push((
                format!("{}, {} p={}{}", m.name, r.label, r.np, r.suffix()),
                m.command_line(r.np, &args),
            ));
            let samples = m
                .run(r.np, &args, r.args.timeout)
                .map_err(|e| e.to_string())?;
            for s in samples {
                let p = self.param_of(r, &s);
                self.report.records.push(Record::new(m.name, r.label, p, s));
            }
        }
        Ok(())
    }

    /// Runs `r` on every side: each size in a job of its own, unless
    /// `--sizes-in-one-job`. An MPI job that ran smaller sizes first is not
    /// the same baseline: Open MPI is several times slower at a size after
    /// smaller ones in the same job than in a job of its own.
    pub(super) fn run(&mut self, r: &Run) -> Result<(), String> {
        if r.sizes.len() > 1 && !r.args.sizes_in_one_job {
            for one in r.per_size() {
                self.run_job(&one)?;
            }
            return Ok(());
        }
        self.run_job(r)
    }

    /// Runs `r` as one job on every side.
    fn run_job(&mut self, r: &Run) -> Result<(), String> {
        self.step += 1;
        eprintln!(
            "[compare {}] {} p={} sizes={:?} k={:?}",
            self.step, r.label, r.np, r.sizes, r.ks
        );
        // The baselines first: their quiet times set the next scenarios'
        // delays, and the order is the same for every scenario.
        if !r.yardstick {
            self.baselines(r)?;
        }
        self.taskfold(r)
    }

    /// The quiet time that sets D and J at (np, size): the first baseline's.
    pub(super) fn quiet_time(&self, np: u32, size: usize, first: &str) -> Option<f64> {
        ["openmpi", "mpich", first]
            .iter()
            .find_map(|side| find(&self.report.records, side, "quiet", np, size, 1))
            .map(|r| r.median_s)
    }
}
