use super::*;
use proptest::prelude::*;

fn set(v: &[usize]) -> RankSet {
    v.iter().copied().collect()
}

fn h(index: usize, path: &[usize], has_value: bool) -> Holding {
    Holding {
        index,
        path: set(path),
        has_value,
    }
}

#[test]
fn standby_is_on_another_node_when_there_is_one() {
    let nodes = [7, 7, 9, 9];
    let none = RankSet::new();
    assert_eq!(
        standby_of(0, 4, &none, &[], Some(&nodes), Standby::Auto),
        Some(2)
    );
    assert_eq!(
        standby_of(2, 4, &set(&[0]), &[], Some(&nodes), Standby::Auto),
        Some(1)
    );
    assert_eq!(
        standby_of(0, 4, &set(&[2]), &[], Some(&nodes), Standby::Auto),
        Some(3)
    );
    // Every other rank of another node dead: none with auto, the next
    // live rank with on.
    assert_eq!(
        standby_of(0, 4, &set(&[2, 3]), &[], Some(&nodes), Standby::Auto),
        None
    );
    assert_eq!(
        standby_of(0, 4, &set(&[2, 3]), &[], Some(&nodes), Standby::On),
        Some(1)
    );
    assert_eq!(
        standby_of(0, 4, &none, &[], Some(&nodes), Standby::Off),
        None
    );
}

#[test]
fn one_node_has_a_standby_only_when_asked() {
    let nodes = [1, 1, 1];
    let none = RankSet::new();
    assert_eq!(
        standby_of(0, 3, &none, &[], Some(&nodes), Standby::Auto),
        None
    );
    assert_eq!(standby_of(0, 3, &none, &[], None, Standby::Auto), None);
    assert_eq!(standby_of(0, 3, &none, &[], None, Standby::On), Some(1));
    assert_eq!(
        standby_of(1, 3, &set(&[0]), &[], None, Standby::On),
        Some(2)
    );
    assert_eq!(standby_of(0, 1, &none, &[], None, Standby::On), None);
}

/// The case `bench chaos` found: master 0 died, master 1 let rank 0's
/// replacement (incarnation 1) in and told rank 2, then died before it
/// told ranks 3-5. Rank 2 sees rank 0 live, the others see it dead: both
/// must still turn to the same standby (rank 2), never to the replacement.
#[test]
fn a_replacement_some_ranks_have_not_heard_of_is_chosen_by_none() {
    let told = standby_of(1, 6, &set(&[1]), &[1, 0, 0, 0, 0, 0], None, Standby::On);
    let untold = standby_of(1, 6, &set(&[0, 1]), &[0, 0, 0, 0, 0, 0], None, Standby::On);
    assert_eq!(told, Some(2));
    assert_eq!(untold, Some(2));
    // With nodes: the oldest rank elsewhere, even past a lower rank.
    let nodes = [1, 1, 2, 2];
    assert_eq!(
        standby_of(0, 4, &set(&[]), &[0, 0, 1, 0], Some(&nodes), Standby::Auto),
        Some(3)
    );
    // Only replacements left: the oldest of them, then the lowest rank.
    assert_eq!(
        standby_of(0, 4, &set(&[]), &[0, 2, 1, 1], None, Standby::On),
        Some(2)
    );
}

#[test]
fn maximal_paths_are_the_queue_and_the_rest_is_stale_or_recovering() {
    // 0 died holding {0,3}; 1 folded 2's data ({2,4}) into {1,2,4}; 2 still
    // holds it (not released yet); 3 was folded into 0's data and released;
    // 4 is a single original folded into 2's; 5 has not joined.
    let r = reconcile(
        6,
        &[
            h(1, &[1, 2, 4], true),
            h(2, &[2, 4], true),
            h(3, &[3], false),
            h(4, &[4], true),
        ],
    )
    .unwrap();
    assert_eq!(r.stale, vec![2]);
    assert_eq!(r.joined, set(&[1, 2, 3, 4]));
    assert_eq!(
        r.entries,
        vec![
            Entry {
                index: 1,
                path: set(&[1, 2, 4]),
                recovering: false
            },
            Entry {
                index: 3,
                path: set(&[3]),
                recovering: true
            },
        ]
    );
}

#[test]
fn reports_that_break_the_protocol_are_refused() {
    assert_eq!(
        reconcile(2, &[h(2, &[2], true)]),
        Err(RebuildError::OutOfGroup(2))
    );
    assert_eq!(
        reconcile(3, &[h(1, &[1], true), h(1, &[1], true)]),
        Err(RebuildError::Duplicate(1))
    );
    assert_eq!(
        reconcile(3, &[h(1, &[2], true)]),
        Err(RebuildError::NotOwn(1))
    );
    assert_eq!(
        reconcile(4, &[h(1, &[1, 2], true), h(3, &[2, 3], true)]),
        Err(RebuildError::Overlap(1, 3))
    );
}

#[test]
fn takeover_waits_for_every_live_rank_once() {
    let mut t = Takeover::new(4, &set(&[0]));
    assert!(t.is_awaiting());
    assert!(!t.heard(2));
    assert!(!t.heard(2));
    assert!(!t.heard(0)); // the dead master: not awaited
    assert!(!t.heard(1));
    assert!(t.heard(3));
    assert!(!t.is_awaiting());
    assert!(!t.heard(3));
    assert_eq!(Takeover::new(2, &set(&[0, 1])), Takeover::Running);
}

/// A random history of one reduction: joins, folds of two ready data, some
/// releases; then some ranks die. Returns the live members' reports, the
/// ready data held by live ranks, and the dead set.
fn history(
    n: usize,
    ops: &[(usize, usize, bool)],
    dead: &[usize],
) -> (Vec<Holding>, Vec<(usize, RankSet)>, RankSet) {
    let joined: Vec<usize> = (0..n).filter(|i| i % 5 != 4).collect();
    let mut value: Vec<Option<RankSet>> = (0..n)
        .map(|i| joined.contains(&i).then(|| RankSet::single(i)))
        .collect();
    let mut ready: Vec<usize> = joined.clone();
    for &(a, b, release) in ops {
        if ready.len() < 2 {
            break;
        }
        let (i, j) = (ready[a % ready.len()], ready[b % ready.len()]);
        if i == j {
            continue;
        }
        let pj = value[j].clone().unwrap();
        value[i] = Some(value[i].clone().unwrap().union(&pj));
        ready.retain(|&r| r != j);
        if release && pj.len() > 1 {
            value[j] = None;
        }
    }
    let dead: RankSet = dead.iter().map(|d| d % n).collect();
    let holdings = joined
        .iter()
        .filter(|&&i| !dead.contains(i))
        .map(|&i| Holding {
            index: i,
            path: value[i].clone().unwrap_or_else(|| RankSet::single(i)),
            has_value: value[i].is_some(),
        })
        .collect();
    let live_ready = ready
        .iter()
        .filter(|&&i| !dead.contains(i))
        .map(|&i| (i, value[i].clone().unwrap()))
        .collect();
    (holdings, live_ready, dead)
}

proptest! {
    /// Whatever the history and whoever died: the queue is the live ready
    /// data, plus a recovering single for every live member whose original
    /// was only in a dead rank's data; every live joined original is in
    /// exactly one entry, and no original in two.
    #[test]
    fn rebuilt_queue_folds_every_live_original_once(
        n in 2usize..20,
        ops in proptest::collection::vec((0usize..64, 0usize..64, any::<bool>()), 0..40),
        dead in proptest::collection::vec(0usize..64, 0..3),
    ) {
        let (holdings, live_ready, dead) = history(n, &ops, &dead);
        let r = reconcile(n, &holdings).unwrap();
        let mut seen = RankSet::new();
        for e in &r.entries {
            prop_assert!(seen.is_disjoint(&e.path));
            seen = seen.union(&e.path);
        }
        for h in &holdings {
            prop_assert!(seen.contains(h.index));
        }
        // Every live ready data is in the queue as it is.
        for (i, p) in &live_ready {
            let entry = r.entries.iter().find(|e| e.index == *i);
            prop_assert!(entry.is_some_and(|e| e.path == *p && !e.recovering));
        }
        // The queue's data is what live holders hold, and maximal among it.
        let valued: Vec<&Holding> = holdings.iter().filter(|h| h.has_value).collect();
        for e in r.entries.iter().filter(|e| !e.recovering) {
            prop_assert!(valued.iter().any(|h| h.index == e.index && h.path == e.path));
            prop_assert!(!valued.iter().any(|h| h.path != e.path && e.path.is_subset(&h.path)));
        }
        for e in r.entries.iter().filter(|e| e.recovering) {
            prop_assert_eq!(e.path.len(), 1);
            prop_assert!(!valued.iter().any(|h| h.path.contains(e.index)));
        }
        for k in seen.iter() {
            prop_assert!(r.joined.contains(k));
            // A dead rank's original is in only as folded into live data.
            if dead.contains(k) {
                prop_assert!(valued.iter().any(|h| h.path.contains(k)));
            }
        }
    }
}

proptest! {
    /// Two ranks' views that differ only in a replacement of rank `r`
    /// (incarnation `k + 1`) one of them has heard of and the other has
    /// not (it still sees incarnation `k` dead) choose the same standby
    /// whenever some other live rank is of incarnation `k` or older.
    #[test]
    fn views_apart_by_one_admission_agree(
        incs in proptest::collection::vec(0u32..3, 2..10),
        dead_bits in proptest::collection::vec(any::<bool>(), 10),
        r_pick in 0usize..10,
        master_pick in 0usize..10,
        on_nodes in any::<bool>(),
    ) {
        let size = incs.len() as u32;
        let r = (r_pick % incs.len()) as u32;
        let master = (master_pick % incs.len()) as u32;
        prop_assume!(r != master);
        let mut dead: RankSet = (0..incs.len()).filter(|&i| dead_bits[i]).collect();
        dead.insert(master as usize);
        dead.remove(r as usize);
        let nodes: Vec<u64> = (0..size).map(|i| u64::from(i % 2) + 1).collect();
        let nodes = on_nodes.then_some(&nodes[..]);
        let mut told_incs = incs.clone();
        told_incs[r as usize] += 1;
        let mut untold_dead = dead.clone();
        untold_dead.insert(r as usize);
        let k = incs[r as usize];
        let older_live = (0..size).any(|q| {
            q != r && q != master && !dead.contains(q as usize) && incs[q as usize] <= k
                && nodes.is_none_or(|n| n[q as usize] != n[master as usize])
        });
        prop_assume!(older_live);
        let told = standby_of(master, size, &dead, &told_incs, nodes, Standby::On);
        let untold = standby_of(master, size, &untold_dead, &incs, nodes, Standby::On);
        prop_assert_eq!(told, untold);
        prop_assert_ne!(told, Some(r));
    }
}

#[test]
fn an_original_folded_in_whose_position_did_not_report_is_unreported() {
    // 2's original is in 3's data, and 2 reported nothing (a replacement
    // that has not joined since its dead process's original was folded).
    let r = reconcile(4, &[h(1, &[1], true), h(3, &[2, 3], true)]).unwrap();
    assert_eq!(r.joined, set(&[1, 2, 3]));
    assert_eq!(r.unreported, set(&[2]));
    let all = reconcile(
        4,
        &[h(1, &[1], true), h(2, &[2], true), h(3, &[2, 3], true)],
    );
    assert_eq!(all.unwrap().unreported, set(&[]));
}
