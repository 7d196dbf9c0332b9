use super::*;
use proptest::prelude::*;

#[test]
fn a_result_is_offered_to_the_buddy_and_kept_once_stored() {
    let (mut h, next) = Handover::start(Some(2));
    assert_eq!(next, Next::Offer(2));
    assert_eq!(h.answered(3, true, None), Next::Wait, "not the one asked");
    assert_eq!(h.answered(2, true, None), Next::Kept(2));
    assert_eq!(h, Handover::Kept { holder: 2 });
    assert_eq!(h.died(2, Some(3)), Next::Wait, "kept: nothing to redo");
}

#[test]
fn a_refusal_or_a_death_asks_the_next_buddy_up_to_the_bound() {
    let (mut h, _) = Handover::start(Some(1));
    assert_eq!(h.answered(1, false, Some(2)), Next::Offer(2));
    assert_eq!(h.died(2, Some(3)), Next::Offer(3));
    assert_eq!(
        h.answered(3, false, Some(4)),
        Next::Lost,
        "{MAX_HOLDERS} buddies asked"
    );
    assert_eq!(h, Handover::Lost);
    // No buddy at all, or none left after a refusal.
    assert_eq!(Handover::start(None), (Handover::Lost, Next::Lost));
    let (mut h, _) = Handover::start(Some(1));
    assert_eq!(h.answered(1, false, None), Next::Lost);
    let (mut h, _) = Handover::start(Some(1));
    assert_eq!(
        h.answered(1, false, Some(1)),
        Next::Lost,
        "not the refuser again"
    );
}

#[test]
fn a_checkpoint_releases_only_what_was_taken_before_it() {
    let mut l: Ledger<bool> = Ledger::default();
    assert!(l.handed(10, 2, true).is_empty());
    assert!(l.handed(11, 2, false).is_empty());
    assert!(l.handed(12, 3, true).is_empty());
    let snapshot = l.taken(|&taken| taken);
    assert_eq!(snapshot.len(), 2);
    let r = l.release(&snapshot);
    assert_eq!(r.master, vec![10, 12]);
    assert_eq!(r.holders.get(&2), Some(&vec![10]));
    assert_eq!(r.holders.get(&3), Some(&vec![12]));
    assert_eq!(l.len(), 1, "the untaken result stays");
    assert!(l.release(&snapshot).is_empty(), "released once");
}

#[test]
fn a_copy_whose_holder_died_is_made_again_at_the_next_buddy() {
    let mut l: Ledger<()> = Ledger::default();
    l.handed(10, 2, ());
    l.handed(11, 3, ());
    assert_eq!(l.holder_died(2, |_| Some(3)), vec![(10, 3)]);
    assert_eq!(l.get(10).unwrap().holder(), Some(3));
    assert_eq!(l.answered(10, 1, true, None), None, "not asked");
    assert_eq!(l.answered(10, 3, false, Some(4)), Some(Next::Offer(4)));
    // The buddy asked dies before it answers: the next one.
    assert_eq!(l.holder_died(4, |_| Some(5)), vec![(10, 5)]);
    assert_eq!(l.answered(10, 5, true, None), Some(Next::Kept(5)));
    assert_eq!(l.get(10).unwrap().copy, Handover::Kept { holder: 5 });
    // No buddy left: the copy is lost; releasing it still tells the master.
    assert!(l.holder_died(3, |_| None).is_empty());
    assert_eq!(l.get(11).unwrap().copy, Handover::Lost);
    let r = l.release(&[0, 1]);
    assert_eq!(r.master, vec![10, 11]);
    assert_eq!(r.holders.get(&5), Some(&vec![10]));
    assert_eq!(r.holders.len(), 1);
    // Released while being offered again: the offer is dropped too.
    let mut l: Ledger<()> = Ledger::default();
    l.handed(12, 2, ());
    l.holder_died(2, |_| Some(3));
    let r = l.release(&[0]);
    assert_eq!((r.offered, r.holders.get(&3)), (vec![12], Some(&vec![12])));
}

#[test]
fn the_ledger_is_bounded_and_releases_its_oldest_beyond() {
    let mut l: Ledger<()> = Ledger::new(2);
    l.handed(1, 5, ());
    l.handed(2, 5, ());
    let r = l.handed(3, 6, ());
    assert_eq!(r.master, vec![1]);
    assert_eq!(r.holders.get(&5), Some(&vec![1]));
    assert_eq!(l.len(), 2);
}

#[test]
fn the_book_answers_a_replay_from_the_holder_until_released() {
    let mut b = Book::default();
    assert!(b.kept(7, 1, 2).is_empty());
    assert_eq!(b.lookup(7, 1), Lookup::At(2));
    assert_eq!(b.lookup(7, 3), Lookup::Unknown, "another root's join");
    assert_eq!(b.lookup(8, 1), Lookup::Unknown);
    b.released(7, 3); // not its root: ignored
    assert_eq!(b.lookup(7, 1), Lookup::At(2));
    b.released(7, 1);
    assert_eq!(b.lookup(7, 1), Lookup::Unknown);
    assert!(b.is_empty());
}

#[test]
fn a_dead_holder_or_a_reused_id_makes_the_replay_an_error() {
    let mut b = Book::default();
    b.kept(7, 1, 2);
    assert_eq!(b.holder_died(2), 1);
    assert_eq!(b.lookup(7, 1), Lookup::Lost);
    assert_eq!(b.without_copy(), 1);
    // Its live root copies it again elsewhere: answered from there.
    assert!(!b.rekept(7, 3, 4), "not its root");
    assert!(b.rekept(7, 1, 4));
    assert_eq!(b.lookup(7, 1), Lookup::At(4));
    // The same id completed again before the first was released: neither
    // copy can answer a replay (which one is redone?), both are dropped.
    let mut b = Book::default();
    b.kept(9, 1, 2);
    let drops = b.kept(9, 1, 3);
    assert_eq!(
        drops,
        vec![
            Drop {
                holder: 2,
                root: 1,
                key: 9
            },
            Drop {
                holder: 3,
                root: 1,
                key: 9
            }
        ]
    );
    assert_eq!(b.lookup(9, 1), Lookup::Lost);
    b.released(9, 1);
    assert_eq!(b.lookup(9, 1), Lookup::Lost, "one of two released");
    assert!(!b.rekept(9, 1, 4), "still ambiguous");
    b.released(9, 1);
    assert_eq!(b.lookup(9, 1), Lookup::Unknown);
    // Released first, then again: the new result answers.
    b.kept(9, 1, 2);
    assert_eq!(b.lookup(9, 1), Lookup::At(2));
}

/// The root died; its holder copied the result on to a second rank: the
/// holder's death then costs nothing (the second copy answers), and a
/// release drops the second copy too.
#[test]
fn a_second_copy_made_after_the_roots_death_outlives_the_holder() {
    let mut b = Book::default();
    b.kept(7, 1, 2);
    assert!(!b.also_kept(7, 3, 4), "not its root's");
    assert!(
        b.also_kept(7, 1, 2),
        "the holder itself: its copy is the record's"
    );
    assert_eq!(b.second_copies(), 0, "and is no further copy");
    assert!(!b.also_kept(8, 1, 4), "unknown");
    assert!(b.also_kept(7, 1, 4));
    assert_eq!(b.second_copies(), 1);
    assert_eq!(b.lookup(7, 1), Lookup::At(2));
    assert_eq!(b.holder_died(2), 0, "the second copy takes its place");
    assert_eq!(b.second_copies(), 0);
    assert_eq!(b.lookup(7, 1), Lookup::At(4));
    assert_eq!(b.holder_died(4), 1);
    assert_eq!(b.lookup(7, 1), Lookup::Lost);
    // Made after the holder died: it is the holder.
    assert!(b.also_kept(7, 1, 5));
    assert_eq!(b.lookup(7, 1), Lookup::At(5));
    // The spare dies first: the holder still answers.
    let mut b = Book::default();
    b.kept(7, 1, 2);
    assert!(b.also_kept(7, 1, 4));
    assert_eq!(b.holder_died(4), 0);
    assert_eq!(b.lookup(7, 1), Lookup::At(2));
    // Released: the second copy is dropped by the master.
    assert!(b.also_kept(7, 1, 4));
    assert_eq!(
        b.released(7, 1),
        vec![Drop {
            holder: 4,
            root: 1,
            key: 7
        }]
    );
    assert!(b.is_empty());
    // A reused id drops both copies; a cleared book names both.
    b.kept(9, 1, 2);
    assert!(b.also_kept(9, 1, 4));
    assert_eq!(b.clear().len(), 2);
    b.kept(9, 1, 2);
    assert!(b.also_kept(9, 1, 4));
    assert_eq!(b.kept(9, 1, 3).len(), 3);
    assert!(!b.also_kept(9, 1, 5), "ambiguous: no copy answers");
}

/// Three copies of one result (`Config::further_result_copies`): the
/// holder and the first further copy die, the last answers; each copy is
/// counted once however often it is told; a release drops every further
/// copy.
#[test]
fn a_third_copy_outlives_the_holder_and_the_second() {
    let mut b = Book::default();
    b.kept(7, 1, 2);
    assert!(b.also_kept(7, 1, 3));
    assert!(b.also_kept(7, 1, 4));
    assert!(b.also_kept(7, 1, 4), "told again: counted once");
    assert_eq!((b.second_copies(), b.further_copies()), (1, 2));
    assert!(b.kept_at(7, 1, 4));
    assert_eq!(b.holder_died(2), 0);
    assert_eq!(
        b.lookup(7, 1),
        Lookup::At(3),
        "the oldest further copy first"
    );
    assert_eq!(b.holder_died(3), 0);
    assert_eq!(b.lookup(7, 1), Lookup::At(4));
    assert_eq!(b.further_copies(), 0);
    assert_eq!(b.holder_died(4), 1);
    assert_eq!(b.lookup(7, 1), Lookup::Lost);
    // A further copy that dies first leaves the others in order.
    let mut b = Book::default();
    b.kept(8, 1, 2);
    assert!(b.also_kept(8, 1, 3) && b.also_kept(8, 1, 4));
    assert_eq!(b.holder_died(3), 0);
    assert_eq!(b.holder_died(2), 0);
    assert_eq!(b.lookup(8, 1), Lookup::At(4));
    // Released: every further copy is dropped by the master.
    let mut b = Book::default();
    b.kept(9, 1, 2);
    assert!(b.also_kept(9, 1, 3) && b.also_kept(9, 1, 4));
    let holders: Vec<u32> = b.released(9, 1).iter().map(|d| d.holder).collect();
    assert_eq!(holders, vec![3, 4]);
    assert!(b.is_empty());
}

#[test]
fn the_book_is_bounded_and_drops_its_oldest_copy() {
    let mut b = Book::new(2);
    b.kept(1, 1, 2);
    b.kept(2, 1, 2);
    b.released(1, 1);
    assert!(b.kept(3, 1, 2).is_empty(), "room left by the release");
    let drops = b.kept(4, 1, 3);
    assert_eq!(
        drops,
        vec![Drop {
            holder: 2,
            root: 1,
            key: 2
        }]
    );
    assert_eq!(b.len(), 2);
    assert_eq!(b.evicted, 1);
    assert_eq!(b.lookup(2, 1), Lookup::Unknown);
    assert_eq!(b.lookup(4, 1), Lookup::At(3));
    assert_eq!(b.clear().len(), 2);
    assert!(b.is_empty());
}

#[test]
fn result_keys_are_distinct_from_each_other() {
    let k = 0x1234_5678_9abc_def0;
    assert_ne!(result_key(k), k);
    assert_ne!(result_key(k), crate::replica::original_key(k));
    assert_ne!(held_result_key(k, 1), held_result_key(k, 2));
    assert_ne!(held_result_key(k, 1), crate::replica::replica_key(k, 1));
}

/// One step of a root's life, as the master and the root see it.
#[derive(Clone, Debug)]
enum Op {
    /// A reduction with id `key` completed at the root, kept at `holder`.
    Complete { key: u64, holder: u32 },
    /// The application takes the oldest result not taken.
    Take,
    /// A checkpoint is called now and becomes durable.
    Checkpoint,
    /// A holder dies.
    HolderDies(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u64..5, 1u32..4).prop_map(|(key, holder)| Op::Complete { key, holder }),
        Just(Op::Take),
        Just(Op::Checkpoint),
        (1u32..4).prop_map(Op::HolderDies),
    ]
}

proptest! {
    /// Whatever happens, a replay is answered with a copy only if exactly
    /// one unreleased result of that id exists and lies there, at a live
    /// holder; with no reuse and no death, every unreleased one is.
    #[test]
    fn a_replay_never_gets_another_results_copy(ops in proptest::collection::vec(op(), 0..60)) {
        const ROOT: u32 = 0;
        let mut book = Book::new(16);
        let mut ledger: Ledger<usize> = Ledger::new(64);
        // The model: every result handed, with whether it was taken,
        // released, and where its copy lies (None: dropped).
        struct R { key: u64, taken: bool, released: bool, copy: Option<u32> }
        let mut all: Vec<R> = Vec::new();
        let mut dead = std::collections::HashSet::new();
        for op in ops {
            match op {
                Op::Complete { key, holder } => {
                    if dead.contains(&holder) {
                        continue;
                    }
                    all.push(R { key, taken: false, released: false, copy: Some(holder) });
                    for d in book.kept(key, ROOT, holder) {
                        for r in all.iter_mut().filter(|r| r.key == d.key && r.copy == Some(d.holder)) {
                            r.copy = None;
                        }
                    }
                    // (Both bounds are above what 60 steps over 5 ids fill.)
                    prop_assert!(ledger.handed(key, holder, all.len() - 1).is_empty());
                }
                Op::Take => {
                    if let Some(r) = all.iter_mut().find(|r| !r.taken && !r.released) {
                        r.taken = true;
                    }
                }
                Op::Checkpoint => {
                    let seqs = ledger.taken(|&i| all[i].taken);
                    let rel = ledger.release(&seqs);
                    for &k in &rel.master {
                        book.released(k, ROOT);
                    }
                    for r in all.iter_mut().filter(|r| r.taken) {
                        r.released = true;
                    }
                }
                Op::HolderDies(h) => {
                    dead.insert(h);
                    book.holder_died(h);
                    for r in all.iter_mut().filter(|r| r.copy == Some(h)) {
                        r.copy = None;
                    }
                    // The root copies each again to a live buddy, which
                    // stores it; the master takes it if it can.
                    let live = (1u32..4).find(|b| !dead.contains(b));
                    for (key, b) in ledger.holder_died(h, |_| live) {
                        prop_assert_eq!(ledger.answered(key, b, true, None), Some(Next::Kept(b)));
                        let i = ledger.get(key).map(|x| x.slot).unwrap();
                        if book.rekept(key, ROOT, b) {
                            all[i].copy = Some(b);
                        }
                    }
                }
            }
            for key in 0..5u64 {
                let open: Vec<&R> = all.iter().filter(|r| r.key == key && !r.released).collect();
                match book.lookup(key, ROOT) {
                    Lookup::At(h) => {
                        prop_assert_eq!(open.len(), 1, "key {}", key);
                        prop_assert_eq!(open[0].copy, Some(h));
                        prop_assert!(!dead.contains(&h));
                    }
                    _ => prop_assert!(
                        !(open.len() == 1
                            && open[0].copy.is_some()
                            && all.iter().filter(|r| r.key == key).count() == 1),
                        "a lone unreleased result with its copy is answered"
                    ),
                }
            }
        }
    }
}
