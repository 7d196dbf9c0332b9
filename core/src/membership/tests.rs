use super::*;
use proptest::prelude::*;

fn failed(rank: u32, incarnation: u32) -> Change {
    Change::Failed { rank, incarnation }
}

fn replaced(rank: u32, incarnation: u32, node: u64) -> Change {
    Change::Replaced {
        rank,
        incarnation,
        node,
    }
}

#[test]
fn a_death_then_a_replacement_on_another_node() {
    let mut m = Membership::new(&[7, 7, 8, 8], &[], 0);
    assert!(m.apply(failed(2, 0)));
    assert!(m.is_dead(2) && m.is_unreachable(2));
    assert_eq!(m.dead(), RankSet::single(2));
    assert!(!m.apply(failed(2, 0)), "repeated");
    assert!(m.apply(replaced(2, 1, 9)));
    assert_eq!(
        m.member(2),
        Some(&Member {
            incarnation: 1,
            node: 9,
            status: Status::Live
        })
    );
    assert_eq!(m.nodes(), vec![7, 7, 9, 8]);
    assert_eq!(m.replacements(), 1);
    assert_eq!(m.version(), 2);
}

#[test]
fn stale_changes_never_undo_a_newer_incarnation() {
    let mut m = Membership::fresh(3);
    m.apply(replaced(1, 2, 0));
    assert!(!m.apply(failed(1, 1)), "an older incarnation's death");
    assert!(!m.apply(failed(1, 3)), "a newer one not let in yet");
    assert!(!m.apply(replaced(1, 2, 5)), "the same incarnation again");
    assert!(!m.apply(replaced(1, 1, 5)), "an older one");
    assert!(!m.is_dead(1));
    assert_eq!(m.member(1).map(|x| x.node), Some(0));
}

#[test]
fn an_unreachable_rank_is_asked_nothing_until_the_master_decides() {
    let mut m = Membership::fresh(3);
    assert!(m.apply(Change::Unreachable {
        rank: 2,
        incarnation: 0
    }));
    assert!(m.is_unreachable(2) && !m.is_dead(2));
    assert_eq!(m.live().collect::<Vec<_>>(), vec![0, 1, 2]);
    assert!(m.apply(failed(2, 0)));
    assert!(!m.apply(Change::Unreachable {
        rank: 2,
        incarnation: 0
    }));
    assert!(m.apply(replaced(2, 1, 0)));
    assert!(!m.is_unreachable(2));
}

#[test]
fn the_master_moves_and_ranks_outside_the_job_change_nothing() {
    let mut m = Membership::fresh(4);
    assert!(m.apply(Change::MasterMoved { to: 2, term: 1 }));
    assert_eq!((m.master(), m.term()), (2, 1));
    assert!(!m.apply(Change::MasterMoved { to: 2, term: 1 }));
    assert!(!m.apply(Change::MasterMoved { to: 3, term: 1 }), "stale");
    assert!(!m.apply(Change::MasterMoved { to: 9, term: 2 }));
    assert!(!m.apply(failed(9, 0)));
    assert!(m.is_dead(9), "outside the job counts as dead");
}

/// One event at the master, drawn as numbers and made valid against the
/// master's view when applied.
#[derive(Clone, Debug)]
enum Event {
    Fail(u32),
    Replace(u32, u64),
    Move(u32),
}

fn event(size: u32) -> impl Strategy<Value = Event> {
    prop_oneof![
        3 => (0..size).prop_map(Event::Fail),
        3 => (0..size, 0u64..4).prop_map(|(r, n)| Event::Replace(r, n)),
        1 => (0..size).prop_map(Event::Move),
    ]
}

/// The master's notices for `events`, and its view after each.
fn notices(size: u32, events: &[Event]) -> (Vec<Change>, Vec<Membership>) {
    let mut master = Membership::fresh(size);
    let mut log = Vec::new();
    let mut views = vec![master.clone()];
    for e in events {
        let c = match *e {
            Event::Fail(r) => failed(r, master.incarnation(r)),
            Event::Replace(r, node) if master.is_dead(r) => {
                replaced(r, master.incarnation(r) + 1, node)
            }
            Event::Replace(..) => continue,
            Event::Move(to) if !master.is_dead(to) => Change::MasterMoved {
                to,
                term: master.term() + 1,
            },
            Event::Move(_) => continue,
        };
        if master.apply(c) {
            log.push(c);
            views.push(master.clone());
        }
    }
    (log, views)
}

proptest! {
    /// A rank that starts from the master's view at any point (a
    /// replacement's table) and then hears every later notice, some twice
    /// and some old ones again, ends with the master's view; and no
    /// notice ever brings a dead incarnation back or kills a newer one.
    #[test]
    fn every_rank_ends_with_the_masters_view(
        size in 2u32..10,
        events in proptest::collection::vec(event(10), 0..40),
        start in any::<prop::sample::Index>(),
        noise in proptest::collection::vec((any::<prop::sample::Index>(), any::<bool>()), 0..20),
    ) {
        let events: Vec<Event> = events.into_iter().filter(|e| match *e {
            Event::Fail(r) | Event::Replace(r, _) | Event::Move(r) => r < size,
        }).collect();
        let (log, views) = notices(size, &events);
        let from = start.index(views.len());
        let mut rank = views[from].clone();
        let mut delivered: Vec<Change> = log[from..].to_vec();
        // Duplicates and stale re-deliveries, inserted after the original.
        for (at, again) in noise {
            if log.is_empty() {
                break;
            }
            let old = log[at.index(log.len())];
            let pos = delivered.iter().position(|c| *c == old).map_or(0, |p| p + 1);
            let pos = if again { pos } else { delivered.len() };
            delivered.insert(pos.min(delivered.len()), old);
        }
        for c in delivered {
            let before = rank.clone();
            rank.apply(c);
            for r in 0..size {
                prop_assert!(rank.incarnation(r) >= before.incarnation(r));
                if rank.incarnation(r) == before.incarnation(r) && before.is_dead(r) {
                    prop_assert!(rank.is_dead(r), "a dead incarnation came back");
                }
            }
        }
        let master = views.last().expect("at least the start");
        for r in 0..size {
            prop_assert_eq!(rank.member(r), master.member(r));
        }
        prop_assert_eq!(rank.master(), master.master());
        prop_assert_eq!(rank.term(), master.term());
        prop_assert_eq!(rank.replacements(), master.replacements());
    }
}

/// The master (rank 0) and rank 1 die together on node 7, then the
/// standby that took over (rank 2, node 8): whether a rank knows of rank
/// 1's death, saw its link break, or knows nothing of it, it turns to the
/// same rank (3: the first off rank 0's node), not to rank 1, nor to a
/// rank chosen from the node of the standby it happened to try.
#[test]
fn the_standby_passes_over_a_rank_this_rank_cannot_reach() {
    use crate::settings::Standby;
    let nodes = [7, 7, 8, 8, 9, 9];
    let mut m = Membership::new(&nodes, &[], 0);
    let term = m.term() + 1;
    m.apply(failed(0, 0));
    m.apply(Change::MasterMoved { to: 2, term });
    // Rank 2, the new master, dies too.
    m.apply(failed(2, 0));
    let mut knew = m.clone();
    knew.apply(failed(1, 0));
    let mut saw_link = m.clone();
    saw_link.apply(Change::Unreachable {
        rank: 1,
        incarnation: 0,
    });
    for (view, what) in [
        (&m, "knows nothing of 1"),
        (&knew, "knew"),
        (&saw_link, "saw"),
    ] {
        assert_eq!(view.standby(Some(&nodes), Standby::On), Some(3), "{what}");
    }
    // A rank that turned to rank 1 (it knew nothing of its death) and was
    // refused: the same choice again, not one off rank 1's node.
    let mut tried_1 = m.clone();
    tried_1.apply(Change::MasterMoved {
        to: 1,
        term: term + 1,
    });
    tried_1.apply(Change::Unreachable {
        rank: 1,
        incarnation: 0,
    });
    assert_eq!(tried_1.standby(Some(&nodes), Standby::On), Some(3));
}
