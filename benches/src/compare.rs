//! The figures of `taskfold bench compare`: what each side's driver prints
//! ([`Sample`]), what the report keeps ([`Record`]), and the ratios.

use crate::stats::median;
use serde::{Deserialize, Serialize};

/// One line printed by a driver (taskfold's ranks or the MPI program): the
/// timed repetitions of one scenario at one (np, size, k).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Sample {
    /// The driver's scenario: `quiet`, `slow`, `stagger` or `concurrent`.
    pub scenario: String,
    /// Ranks.
    pub np: u32,
    /// Bytes per contribution.
    pub size: usize,
    /// Concurrent reductions per repetition (1 outside `concurrent`).
    pub k: u32,
    /// Per repetition: max over ranks of barrier → outcome, seconds.
    pub times_s: Vec<f64>,
    /// Per repetition: the root's result time minus the latest
    /// contribution time over ranks, seconds.
    pub tails_s: Vec<f64>,
    /// The master's traffic during the timed repetitions (taskfold only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master: Option<MasterLoad>,
}

/// The master's control traffic over the timed repetitions of one size
/// (the source paper's Table 1).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Default)]
pub struct MasterLoad {
    /// Messages into the master.
    pub msgs_in: u64,
    /// Messages out of the master.
    pub msgs_out: u64,
    /// Bytes into the master.
    pub bytes_in: u64,
    /// Bytes out of the master.
    pub bytes_out: u64,
    /// Wall time of the timed repetitions, seconds.
    pub seconds: f64,
    /// Reductions in that time. Barriers are not reductions, but their
    /// messages, 2 p per barrier, two barriers per repetition, are in the
    /// message and byte counts.
    pub reductions: u64,
}

impl MasterLoad {
    /// Messages per second, in and out.
    pub fn msgs_per_s(&self) -> (f64, f64) {
        (
            self.msgs_in as f64 / self.seconds,
            self.msgs_out as f64 / self.seconds,
        )
    }

    /// Bytes per second, in and out.
    pub fn bytes_per_s(&self) -> (f64, f64) {
        (
            self.bytes_in as f64 / self.seconds,
            self.bytes_out as f64 / self.seconds,
        )
    }
}

/// One figure of the report: one side, one scenario, one (np, size, k).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Record {
    /// `taskfold`, `openmpi` or `mpich`.
    pub side: String,
    /// The report's scenario: `quiet`, `slow-half`, `slow-20ms`,
    /// `stagger`, `load`, `concurrent`.
    pub scenario: String,
    /// Ranks.
    pub np: u32,
    /// Bytes per contribution.
    pub size: usize,
    /// Concurrent reductions per repetition.
    pub k: u32,
    /// The scenario's delay parameter (D or J), seconds, if any.
    pub param_s: Option<f64>,
    /// Median per repetition (for `concurrent`: the total of K).
    pub median_s: f64,
    /// Median tail (see [`Sample::tails_s`]).
    pub tail_median_s: f64,
    /// Every repetition.
    pub times_s: Vec<f64>,
    /// Every repetition's tail.
    pub tails_s: Vec<f64>,
    /// The master's traffic (taskfold only).
    pub master: Option<MasterLoad>,
}

impl Record {
    /// The record of `sample`, run by `side` under the report's `scenario`.
    pub fn new(side: &str, scenario: &str, param_s: Option<f64>, s: Sample) -> Self {
        Record {
            side: side.to_string(),
            scenario: scenario.to_string(),
            np: s.np,
            size: s.size,
            k: s.k,
            param_s,
            median_s: median(&mut s.times_s.clone()),
            tail_median_s: median(&mut s.tails_s.clone()),
            times_s: s.times_s,
            tails_s: s.tails_s,
            master: s.master,
        }
    }
}

/// Looks up the record of `side` at (scenario, np, size, k).
pub fn find<'a>(
    records: &'a [Record],
    side: &str,
    scenario: &str,
    np: u32,
    size: usize,
    k: u32,
) -> Option<&'a Record> {
    records.iter().find(|r| {
        r.side == side && r.scenario == scenario && r.np == np && r.size == size && r.k == k
    })
}

/// taskfold's median over `side`'s at the same point, if both exist.
pub fn ratio(records: &[Record], side: &str, r: &Record) -> Option<f64> {
    let base = find(records, side, &r.scenario, r.np, r.size, r.k)?;
    (base.median_s > 0.0).then(|| r.median_s / base.median_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_take_medians_and_ratios_match_points() {
        let s = Sample {
            scenario: "quiet".into(),
            np: 8,
            size: 1024,
            k: 1,
            times_s: vec![3.0, 1.0, 2.0],
            tails_s: vec![0.5, 0.1, 0.2],
            master: None,
        };
        let tf = Record::new("taskfold", "quiet", None, s.clone());
        assert_eq!((tf.median_s, tf.tail_median_s), (2.0, 0.2));
        let mut m = s.clone();
        m.times_s = vec![4.0, 4.0, 4.0];
        let ompi = Record::new("openmpi", "quiet", None, m.clone());
        let other = Record::new("openmpi", "load", None, m);
        let all = vec![tf.clone(), other, ompi];
        assert_eq!(ratio(&all, "openmpi", &tf), Some(0.5));
        assert_eq!(ratio(&all, "mpich", &tf), None);
        let line = serde_json::to_string(&s).unwrap();
        assert!(!line.contains("master"));
        assert_eq!(serde_json::from_str::<Sample>(&line).unwrap(), s);
    }
}
