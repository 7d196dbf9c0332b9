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
