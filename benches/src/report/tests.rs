//! The report's targets and tables, from hand-made records.

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

#[test]
fn an_allreduce_is_judged_on_its_own_targets() {
    let mut slow = rec("taskfold", "slow-20ms", 2 << 20, 0.030);
    slow.param_s = Some(0.020);
    let r = Report {
        against: "MPI_Allreduce".into(),
        records: vec![
            rec("taskfold", "quiet", 2 << 20, 0.010),
            rec("openmpi", "quiet", 2 << 20, 0.020),
            rec("taskfold", "load", 2 << 20, 0.012),
            rec("openmpi", "load", 2 << 20, 0.020),
            slow,
        ],
        ..Report::default()
    };
    let t = r.targets();
    assert_eq!(t.len(), 4);
    assert_eq!(t[0].met, Some(true));
    // 0.6 of Open MPI under load: above 0.5.
    assert_eq!(t[3].met, Some(false), "{:?}", t[3].measured);
    // Without the yardsticks the slow rank's bound is unknown.
    assert_eq!(t[2].met, None);
    assert_eq!(t[2].measured, vec!["2 MiB: bound not measured"]);
    // 20 ms + an allreduce of two ranks alone, 5 ms: 30 ms is 1.2 × that.
    let mut with = r.clone();
    with.spread_alone = vec![(2 << 20, 0.005)];
    let t = with.targets();
    assert_eq!(t[2].met, Some(true), "{:?}", t[2].measured);
    assert_eq!(t[2].measured, vec!["2 MiB: 1.20 (bound 25.0 ms)"]);
    with.spread_alone = vec![(2 << 20, 0.004)];
    assert_eq!(with.targets()[2].met, Some(false));
}

/// A quiet record of `side` at `np` ranks and `size` bytes, with `times`.
fn quiet(side: &str, np: u32, size: usize, times: &[f64]) -> Record {
    Record::new(
        side,
        "quiet",
        None,
        Sample {
            scenario: "quiet".into(),
            np,
            size,
            k: 1,
            times_s: times.to_vec(),
            tails_s: times.to_vec(),
            master: None,
        },
    )
}

#[test]
fn small_reductions_are_judged_on_their_own_targets() {
    let r = Report {
        records: vec![
            quiet("taskfold", 8, 8, &[0.0005]),
            quiet("openmpi", 8, 8, &[0.0001]),
            quiet("taskfold", 32, 8, &[0.0020]),
            quiet("openmpi", 32, 8, &[0.0010]),
            quiet("taskfold", 8, 128 << 10, &[0.0006]),
            quiet("openmpi", 8, 128 << 10, &[0.0006]),
            quiet("taskfold", 2, 512 << 10, &[0.0003]),
            quiet("openmpi", 2, 512 << 10, &[0.0001]),
        ],
        ..Report::default()
    };
    let t = r.targets();
    let find = |start: &str| t.iter().find(|t| t.what.starts_with(start)).unwrap();
    let eight = find("quiet, 8 B");
    // 5 × at p = 8, 2 × at p = 32: one above 3.
    assert_eq!(eight.met, Some(false));
    assert_eq!(eight.measured, vec!["p = 8, 8 B: 5.00, p = 32, 8 B: 2.00"]);
    assert_eq!(find("quiet, 128 KiB").met, Some(true));
    assert_eq!(find("quiet, p = 2").met, Some(false));
    assert!(r
        .markdown()
        .contains("## Targets (against Open MPI in the same run)"));
    // Without the small sizes, nothing is judged.
    let large = Report {
        records: vec![quiet("taskfold", 8, 8 << 20, &[0.01])],
        ..Report::default()
    };
    let t = large.targets();
    assert!(t
        .iter()
        .filter(|t| t.what.starts_with("quiet, "))
        .all(|t| t.met.is_none()));
}

#[test]
fn a_size_faster_than_a_smaller_one_counts_only_beyond_the_spread() {
    let spread = [0.0010, 0.0011, 0.0012, 0.0013, 0.0014];
    let r = |larger: &[f64]| Report {
        records: vec![
            quiet("taskfold", 8, 8, &spread),
            quiet("taskfold", 8, 1 << 10, larger),
            // Another p is judged on its own sizes only.
            quiet("taskfold", 32, 8, &[0.0001]),
        ],
        ..Report::default()
    };
    let judged = |larger: &[f64]| {
        let t = r(larger).targets();
        let m = t
            .into_iter()
            .find(|t| t.what.contains("never decreasing"))
            .unwrap();
        (m.met, m.measured)
    };
    // Faster in the median, but within the spread: no drop.
    assert_eq!(
        judged(&[0.0009, 0.0010, 0.00105, 0.0011, 0.0013]).0,
        Some(true)
    );
    // Every repetition but the slowest below the smaller size's lower
    // quartile: a drop.
    let (met, measured) = judged(&[0.0005, 0.0006, 0.0007, 0.0008, 0.0020]);
    assert_eq!(met, Some(false));
    assert_eq!(
        measured,
        vec!["faster than the size before: p = 8: 8 B 1.200 ms, 1 KiB 0.700 ms"]
    );
}
