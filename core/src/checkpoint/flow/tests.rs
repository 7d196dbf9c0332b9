use super::*;
use proptest::prelude::*;

#[test]
fn a_checkpoint_settles_once_every_level_did() {
    let mut p = Progress::new(7, &[Level::L2, Level::L1, Level::L3]);
    assert_eq!(p.version(), 7);
    assert!(p.durable(Level::L1));
    assert_eq!(p.outcome(), None);
    assert!(p.durable(Level::L2));
    assert!(!p.durable(Level::L2), "settles once");
    assert!(!p.durable(Level::L4), "not due");
    assert!(p.failed(Level::L3, "encoder dead"));
    assert!(!p.durable(Level::L3), "a failed level stays failed");
    let partial = p.outcome().unwrap().unwrap_err();
    assert_eq!(partial.written, vec![Level::L1, Level::L2]);
    assert_eq!(
        partial.failed,
        vec![(Level::L3, "encoder dead".to_string())]
    );
}

#[test]
fn a_checkpoint_with_every_level_durable_is_written() {
    let mut p = Progress::new(1, &[Level::L4, Level::L1]);
    p.durable(Level::L4);
    p.durable(Level::L1);
    assert_eq!(p.outcome(), Some(Ok(vec![Level::L1, Level::L4])));
    let mut q = Progress::new(2, &[Level::L2]);
    q.fail_waiting("deadline");
    assert_eq!(q.step(Level::L2), Some(&Step::Failed("deadline".into())));
}

#[test]
fn coding_gathers_encodes_stores_and_announces() {
    let mut c = Coding::new(3, 2);
    assert_eq!(c.shard(1, 10, 9), Next::Wait);
    assert_eq!(c.shard(0, 12, 9), Next::Wait);
    assert_eq!(
        c.lost(Role::Member(1), "gone"),
        Next::Wait,
        "its shard is here"
    );
    assert_eq!(c.shard(2, 4, 9), Next::Encode);
    c.sent();
    assert_eq!(c.stored(1, true, ""), Next::Wait);
    assert_eq!(c.stored(0, true, ""), Next::Announce(vec![12, 10, 4]));
    assert!(c.settled());
    assert_eq!(c.lost(Role::Holder(0), "late"), Next::Wait);
}

#[test]
fn coding_fails_on_a_lost_part_a_refusal_or_a_foreign_shard() {
    let mut c = Coding::new(2, 1);
    c.shard(0, 10, 9);
    assert!(matches!(c.lost(Role::Member(1), "dead"), Next::Fail(_)));
    assert_eq!(c.shard(1, 10, 9), Next::Wait, "settled");
    let mut c = Coding::new(2, 1);
    c.shard(0, 10, 9);
    assert!(matches!(c.shard(1, 10, 8), Next::Fail(r) if r.contains("type")));
    let mut c = Coding::new(2, 1);
    c.shard(0, 1, 9);
    assert!(matches!(c.shard(0, 1, 9), Next::Fail(_)));
    let mut c = Coding::new(1, 1);
    assert_eq!(c.shard(0, 1, 9), Next::Encode);
    c.sent();
    assert!(matches!(c.stored(0, false, "disk full"), Next::Fail(r) if r.contains("disk full")));
    let mut c = Coding::new(1, 1);
    assert!(matches!(c.shard(5, 1, 9), Next::Fail(_)));
}

proptest! {
    /// In any order of shards, answers and deaths, the encoder announces
    /// at most once, only when every shard and every parity piece is in,
    /// and fails exactly when a part it still needed was lost.
    #[test]
    fn coding_announces_once_and_only_when_complete(
        k in 1usize..5,
        m in 1usize..4,
        events in proptest::collection::vec((0u8..3, 0usize..6), 0..30),
    ) {
        let mut c = Coding::new(k, m);
        let (mut shards, mut stored) = (vec![false; k], vec![false; m]);
        let (mut encoded, mut announced, mut failed) = (false, 0, false);
        for (kind, i) in events {
            let next = match kind {
                0 if i < k && !shards[i] => { shards[i] = true; c.shard(i, i as u64 + 1, 3) }
                1 if i < m && encoded && !stored[i] => { stored[i] = true; c.stored(i, true, "") }
                2 => {
                    let needed = if i < k { !shards[i] } else { !stored[(i - k) % m] };
                    let role = if i < k { Role::Member(i) } else { Role::Holder((i - k) % m) };
                    let next = c.lost(role, "dead");
                    prop_assert_eq!(matches!(next, Next::Fail(_)), needed && !failed && announced == 0);
                    next
                }
                _ => Next::Wait,
            };
            match next {
                Next::Encode => { prop_assert!(shards.iter().all(|&s| s)); c.sent(); encoded = true; }
                Next::Announce(lens) => {
                    prop_assert!(stored.iter().all(|&s| s));
                    prop_assert_eq!(lens, (1..=k as u64).collect::<Vec<_>>());
                    announced += 1;
                }
                Next::Fail(_) => { failed = true; }
                Next::Wait => {}
            }
        }
        prop_assert!(announced <= 1);
        prop_assert!(!(failed && announced > 0));
        prop_assert_eq!(c.settled(), failed || announced == 1);
    }
}

proptest! {
    /// Whatever the order of events, each level due settles once, the
    /// outcome comes only when none waits, and it accounts for every
    /// level due: written or failed, never both.
    #[test]
    fn progress_settles_each_level_once(
        due in proptest::collection::vec(1u8..5, 0..6),
        events in proptest::collection::vec((1u8..5, proptest::bool::ANY), 0..20),
    ) {
        let due: Vec<Level> = due.iter().map(|&n| Level::from_number(n).unwrap()).collect();
        let mut p = Progress::new(3, &due);
        let mut first: std::collections::BTreeMap<Level, bool> = Default::default();
        for (n, ok) in events {
            let l = Level::from_number(n).unwrap();
            let changed = if ok { p.durable(l) } else { p.failed(l, "x") };
            prop_assert_eq!(changed, due.contains(&l) && !first.contains_key(&l));
            if changed {
                first.insert(l, ok);
            }
        }
        let mut levels = due.clone();
        levels.sort();
        levels.dedup();
        match p.outcome() {
            None => prop_assert!(first.len() < levels.len()),
            Some(out) => {
                prop_assert_eq!(first.len(), levels.len());
                let written: Vec<Level> = first.iter().filter(|(_, &ok)| ok).map(|(&l, _)| l).collect();
                match out {
                    Ok(w) => { prop_assert_eq!(&w, &written); prop_assert_eq!(w, levels); }
                    Err(partial) => {
                        prop_assert_eq!(partial.written, written);
                        prop_assert_eq!(partial.failed.len(), first.values().filter(|ok| !**ok).count());
                    }
                }
            }
        }
    }
}
