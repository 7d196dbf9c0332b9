use super::*;
use crate::job::JobArgs;
use proptest::prelude::*;

#[test]
fn due_every_interval() {
    let c = Cadence {
        every: 3,
        in_flight: 4,
    };
    let due: Vec<_> = (0..10).filter_map(|d| c.due(d)).collect();
    assert_eq!(due, vec![1, 2, 3]);
    assert_eq!(c.due(6), Some(2));
    assert_eq!(c.batches_of(2), 6);
}

#[test]
fn spread_and_keep() {
    let c = |every, in_flight| Cadence { every, in_flight };
    // The interval longer than the window: one version apart at most.
    assert_eq!(c(8, 4).spread(), 1);
    assert_eq!(c(8, 4).keep_needed(), 2);
    assert!(c(8, 4).check_keep(2).is_ok());
    // A window that reaches into the next interval: two.
    assert_eq!(c(4, 4).spread(), 2);
    assert_eq!(c(1, 4).spread(), 5);
    let e = c(4, 4).check_keep(2).unwrap_err();
    assert!(
        e.contains("TASKFOLD_CHECKPOINT_KEEP") && e.contains("least 3"),
        "{e}"
    );
}

proptest! {
    /// The batch before which version `v` must be durable was not issued
    /// when `v` was taken (after settling batch `v·B - 1`, batches up to
    /// `v·B - 1 + in_flight` are issued), and it is the last batch of an
    /// interval, so that a rank holding version `v + s` implies every
    /// rank contributed to it after `v` was durable.
    #[test]
    fn waits_fall_after_the_window(every in 1usize..20, in_flight in 1usize..10, v in 1u64..50) {
        let c = Cadence { every, in_flight };
        let w = c.wait_before(v);
        prop_assert!(w > c.batches_of(v) - 1 + in_flight);
        prop_assert_eq!(w, c.batches_of(v + c.spread()) - 1);
        // And not later than needed: one interval earlier would be inside
        // the window.
        if c.spread() > 1 {
            prop_assert!(c.batches_of(v + c.spread() - 1) - 1 <= c.batches_of(v) - 1 + in_flight);
        }
    }
}

#[test]
fn start_kinds() {
    assert_eq!(Start::of(Lifecycle::New, 0), Start::Fresh);
    assert_eq!(Start::of(Lifecycle::Restarted, 0), Start::Fresh);
    assert_eq!(Start::of(Lifecycle::New, 8), Start::Cut);
    assert_eq!(Start::of(Lifecycle::Restarted, 8), Start::Own);
    assert_eq!(Start::of(Lifecycle::Reinited, 8), Start::Cut);
}

#[test]
fn fingerprint_names_the_configuration() {
    let job = |extra: &[&str]| {
        let mut a = vec!["--nx", "20", "--nz", "10", "--shots", "2"];
        a.extend_from_slice(extra);
        crate::job::Job::new(JobArgs::parse(a).unwrap()).unwrap()
    };
    let base = fingerprint(&job(&[]), 4);
    assert_eq!(base, fingerprint(&job(&[]), 4));
    assert_ne!(base, fingerprint(&job(&[]), 3));
    assert_ne!(base, fingerprint(&job(&["--seed", "8"]), 4));
    assert_ne!(base, fingerprint(&job(&["--checkpoint-every", "3"]), 4));
    // Where the outputs go does not matter.
    assert_eq!(base, fingerprint(&job(&["--out", "x.png"]), 4));
}

#[test]
fn a_state_round_trips_through_its_archive() {
    let s = State {
        fingerprint: 7,
        rank: 2,
        batches_done: 16,
        timing: vec![1.5, 0.25],
        image: vec![0.5, -1.0, 3.0],
    };
    let bytes = taskfold::rkyv::to_bytes::<taskfold::rkyv::rancor::Error>(&s).unwrap();
    let back: State =
        taskfold::rkyv::from_bytes::<State, taskfold::rkyv::rancor::Error>(&bytes).unwrap();
    assert_eq!(back, s);
}
