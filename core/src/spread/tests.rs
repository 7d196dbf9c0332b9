//! The spread's state machine at every failure instant: before the value
//! exists, while it is being fetched, after some members hold it.

use super::*;
use Action::*;
use Event::*;

/// A spread whose holders serve one member at a time.
fn one(members: impl IntoIterator<Item = u32>, source: u32, dead: &[u32]) -> Spread {
    Spread::serving(members, source, dead, 1)
}

fn fetches(actions: &[Action]) -> Vec<(u32, u32)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Fetch { fetcher, holder } => Some((*fetcher, *holder)),
            _ => None,
        })
        .collect()
}

fn fails(actions: &[Action]) -> Vec<u32> {
    actions
        .iter()
        .filter_map(|a| match a {
            Fail { rank } => Some(*rank),
            _ => None,
        })
        .collect()
}

#[test]
fn ready_first_holders_double_every_round() {
    let mut s = one(0..8, 0, &[]);
    for r in 1..8 {
        assert!(s.on(Want(r)).is_empty(), "no holder before the source");
    }
    // Round 1: the source serves the longest-waiting member.
    assert_eq!(fetches(&s.on(Have(0))), [(1, 0)]);
    // Round 2: the source and rank 1 each serve one.
    assert_eq!(fetches(&s.on(Fetched(1))), [(2, 0), (3, 1)]);
    // Whoever is ready first serves next: rank 3's server before rank 2's.
    assert_eq!(fetches(&s.on(Fetched(3))), [(4, 1), (5, 3)]);
    assert_eq!(fetches(&s.on(Fetched(2))), [(6, 0), (7, 2)]);
    for r in [4, 5, 6] {
        assert!(fetches(&s.on(Fetched(r))).is_empty());
    }
    assert_eq!(
        s.on(Fetched(7)),
        [Finish {
            holders: (0..8).collect()
        }]
    );
    assert_eq!(s.phase(), &Phase::Done);
    assert!(s.is_over());
}

#[test]
fn a_late_member_takes_a_free_holder_at_once() {
    let mut s = one([2, 5, 9], 5, &[]);
    assert!(s.on(Have(5)).is_empty());
    assert_eq!(fetches(&s.on(Want(9))), [(9, 5)]);
    assert!(s.on(Fetched(9)).is_empty());
    assert_eq!(fetches(&s.on(Want(2))), [(2, 5)]);
    assert_eq!(
        s.on(Fetched(2)),
        [Finish {
            holders: vec![2, 5, 9]
        }]
    );
}

#[test]
fn source_dead_before_the_value_exists_fails_every_member_alike() {
    let mut s = one(0..4, 0, &[]);
    assert!(s.on(Want(1)).is_empty());
    assert_eq!(fails(&s.on(Dead(0))), [1]);
    assert_eq!(s.phase(), &Phase::Lost);
    // Members that ask later are told the same.
    assert_eq!(fails(&s.on(Want(2))), [2]);
    assert!(!s.is_over(), "rank 3 has not been told yet");
    assert_eq!(fails(&s.on(Want(3))), [3]);
    assert!(s.is_over());
    // A message from the dead source changes nothing.
    assert!(s.on(Have(0)).is_empty());
}

#[test]
fn a_source_known_dead_at_creation_fails_the_first_member_that_asks() {
    let mut s = one(0..3, 1, &[1]);
    assert_eq!(fails(&s.on(Want(0))), [0]);
}

#[test]
fn source_dead_mid_fetch_waits_for_the_fetchers_word() {
    let mut s = one(0..4, 0, &[]);
    s.on(Want(1));
    s.on(Want(2));
    assert_eq!(fetches(&s.on(Have(0))), [(1, 0)]);
    // The source dies while rank 1 fetches: rank 1 may have the value.
    assert!(s.on(Dead(0)).is_empty());
    assert_eq!(s.phase(), &Phase::Serving);
    // It had: it serves rank 2, and rank 3 when it asks.
    assert_eq!(fetches(&s.on(Fetched(1))), [(2, 1)]);
    assert!(s.on(Fetched(2)).is_empty());
    assert_eq!(fetches(&s.on(Want(3))), [(3, 1)]);
    assert_eq!(
        s.on(Fetched(3)),
        [Finish {
            holders: vec![1, 2, 3]
        }]
    );
}

#[test]
fn source_dead_mid_fetch_and_the_fetch_failed_fails_everyone() {
    let mut s = one(0..4, 0, &[]);
    s.on(Want(1));
    s.on(Want(2));
    s.on(Have(0));
    assert!(s.on(Dead(0)).is_empty());
    let a = s.on(FetchFailed(1));
    assert_eq!(fails(&a), [1, 2], "every waiting member, the same");
    assert_eq!(fails(&s.on(Want(3))), [3]);
    assert!(s.is_over());
}

#[test]
fn a_fetcher_that_dies_frees_its_holder() {
    let mut s = one(0..3, 0, &[]);
    s.on(Have(0));
    assert_eq!(fetches(&s.on(Want(1))), [(1, 0)]);
    s.on(Want(2));
    assert_eq!(fetches(&s.on(Dead(1))), [(2, 0)]);
    assert_eq!(
        s.on(Fetched(2)),
        [Finish {
            holders: vec![0, 2]
        }]
    );
}

#[test]
fn after_the_value_spread_a_source_death_loses_nothing() {
    let mut s = one(0..4, 0, &[]);
    s.on(Have(0));
    s.on(Want(1));
    s.on(Fetched(1));
    assert!(s.on(Dead(0)).is_empty());
    assert_eq!(fetches(&s.on(Want(2))), [(2, 1)]);
    assert_eq!(fetches(&s.on(Want(3))), []);
    // Rank 1 dies mid-serve: rank 2 is told by its failed fetch, then
    // rank 2 and 3 have no holder: lost alike.
    assert!(s.on(Dead(1)).is_empty());
    let a = s.on(FetchFailed(2));
    assert_eq!(fails(&a), [2, 3]);
}

#[test]
fn a_failed_fetch_from_a_live_holder_tries_another_holder_first() {
    let mut s = one(0..4, 0, &[]);
    s.on(Have(0));
    s.on(Want(1));
    s.on(Fetched(1));
    assert_eq!(fetches(&s.on(Want(2))), [(2, 0)]);
    assert_eq!(fetches(&s.on(FetchFailed(2))), [(2, 1)]);
}

#[test]
fn non_members_and_duplicates_change_nothing() {
    let mut s = one([1, 2], 1, &[]);
    assert!(s.on(Have(7)).is_empty());
    assert!(s.on(Want(7)).is_empty());
    assert!(s.on(Want(1)).is_empty(), "the source does not ask");
    assert!(s.on(Have(2)).is_empty(), "only the source announces");
    assert_eq!(s.phase(), &Phase::Awaiting);
    s.on(Want(2));
    s.on(Want(2));
    assert_eq!(fetches(&s.on(Have(1))), [(2, 1)]);
    assert!(s.on(Fetched(7)).is_empty());
    assert!(s.on(Dead(7)).is_empty());
}

#[test]
fn every_member_dead_but_the_source_is_done_once_it_holds() {
    let mut s = one(0..3, 0, &[1, 2]);
    assert!(!s.is_over());
    assert_eq!(s.on(Have(0)), [Finish { holders: vec![0] }]);
}

#[test]
fn two_at_once_a_stalled_fetcher_holds_up_nobody_else() {
    let mut s = Spread::new(0..6, 0, &[]);
    for r in 1..6 {
        s.on(Want(r));
    }
    // The source serves two at once; rank 1 never answers.
    assert_eq!(fetches(&s.on(Have(0))), [(1, 0), (2, 0)]);
    assert_eq!(fetches(&s.on(Fetched(2))), [(3, 0), (4, 2), (5, 2)]);
    for r in [3, 4] {
        assert!(s.on(Fetched(r)).is_empty());
    }
    assert!(s.on(Fetched(5)).is_empty(), "rank 1 still fetching");
    // Rank 1's holder dies: it fails, and is sent to another holder.
    assert!(s.on(Dead(0)).is_empty());
    let again = fetches(&s.on(FetchFailed(1)));
    assert!(matches!(again[..], [(1, h)] if h != 0), "{again:?}");
    assert_eq!(
        s.on(Fetched(1)),
        [Finish {
            holders: vec![1, 2, 3, 4, 5]
        }]
    );
}

#[test]
fn holders_are_always_members_and_a_live_holder_means_no_failure() {
    // Every order of a small set of events: whenever a member is told
    // the spread failed, no live member holds the value.
    let events = [
        Have(0),
        Want(1),
        Want(2),
        Fetched(1),
        FetchFailed(2),
        Dead(0),
        Fetched(2),
        Dead(1),
    ];
    for seed in 0u64..2000 {
        let mut s = Spread::new(0..3, 0, &[]);
        if seed % 2 == 1 {
            // Ranks 0 and 1 on one node: near fetches take no slot.
            s = s.with_nodes([(0, 1), (1, 1), (2, 2)]);
        }
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut holding = std::collections::BTreeSet::new();
        let mut failed = std::collections::BTreeSet::new();
        let mut dead = std::collections::BTreeSet::new();
        for _ in 0..12 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let ev = events[(x % events.len() as u64) as usize];
            let fetching_before: Vec<u32> = s.fetching.keys().copied().collect();
            match ev {
                Have(r) if !dead.contains(&r) => {
                    holding.insert(r);
                }
                Fetched(r) if fetching_before.contains(&r) && !dead.contains(&r) => {
                    holding.insert(r);
                }
                Dead(r) => {
                    dead.insert(r);
                }
                _ => {}
            }
            for a in s.on(ev) {
                if let Fail { rank } = a {
                    failed.insert(rank);
                }
            }
            let live_holders: Vec<_> = holding.difference(&dead).collect();
            assert!(
                failed.is_empty() || live_holders.is_empty(),
                "seed {seed}: failed {failed:?} while {live_holders:?} hold"
            );
        }
    }
}

#[test]
fn a_node_that_holds_serves_all_its_members_at_once() {
    // Ranks 0-3 on node 1, 4-7 on node 2.
    let nodes = (0..8).map(|r| (r, if r < 4 { 1 } else { 2 }));
    let mut s = Spread::new(0..8, 0, &[]).with_nodes(nodes);
    for r in 1..8 {
        s.on(Want(r));
    }
    // The source's node fetches at once; the other node's two
    // longest-waiting members take the source's two slots.
    assert_eq!(
        fetches(&s.on(Have(0))),
        [(1, 0), (2, 0), (3, 0), (4, 0), (5, 0)]
    );
    // Once node 2 holds, its last members fetch there, from rank 4.
    assert_eq!(fetches(&s.on(Fetched(4))), [(6, 4), (7, 4)]);
    for r in [1, 2, 3, 5, 6] {
        assert!(s.on(Fetched(r)).is_empty());
    }
    assert_eq!(
        s.on(Fetched(7)),
        [Finish {
            holders: (0..8).collect()
        }]
    );
}

#[test]
fn near_fetches_go_to_the_nodes_first_holder_and_retry_elsewhere() {
    let mut s = Spread::new(0..6, 0, &[]).with_nodes((0..6).map(|r| (r, 9)));
    s.on(Have(0));
    assert_eq!(fetches(&s.on(Want(1))), [(1, 0)]);
    s.on(Fetched(1));
    // The first holder there, however many it serves: the value lies in
    // its own memory (rank 1 may hold a view of rank 0's).
    assert_eq!(fetches(&s.on(Want(2))), [(2, 0)]);
    assert_eq!(fetches(&s.on(Want(3))), [(3, 0)]);
    // A failed fetch goes to another holder.
    assert_eq!(fetches(&s.on(FetchFailed(2))), [(2, 1)]);
    // A dead holder serves nobody: its fetcher's retry goes elsewhere.
    s.on(Dead(1));
    assert_eq!(fetches(&s.on(FetchFailed(3))), [(3, 0)]);
    assert_eq!(fetches(&s.on(FetchFailed(2))), [(2, 0)]);
}

#[test]
fn unknown_nodes_are_taken_for_remote_ones() {
    // Node 0 is unknown: no near fetch, one slot each as before.
    let mut s = Spread::serving(0..4, 0, &[], 1).with_nodes((0..4).map(|r| (r, 0)));
    for r in 1..4 {
        s.on(Want(r));
    }
    assert_eq!(fetches(&s.on(Have(0))), [(1, 0)]);
}

/// A coordinator that took over: the spread is rebuilt from the members'
/// reports, with every live member's report awaited.
fn rebuilt(members: u32, source: u32, dead: &[u32]) -> Spread {
    Spread::new(0..members, source, dead).awaiting_reports(0..members)
}

#[test]
fn after_a_takeover_reports_of_holders_serve_the_members_that_want() {
    let mut s = rebuilt(4, 1, &[0]);
    assert!(s.on(Want(3)).is_empty(), "nobody holds it yet");
    assert!(s.on(Reported(3)).is_empty());
    // The source's report: it holds the value; rank 3 is served at once.
    assert_eq!(fetches(&s.on(Holds(1))), [(3, 1)]);
    assert!(s.on(Reported(1)).is_empty());
    // Rank 2 had fetched it under the dead coordinator.
    assert!(fetches(&s.on(Holds(2))).is_empty());
    assert!(s.on(Reported(2)).is_empty());
    assert_eq!(
        s.on(Fetched(3)),
        [Finish {
            holders: vec![1, 2, 3]
        }]
    );
    assert!(s.is_over());
}

#[test]
fn a_rebuilt_spread_is_not_lost_while_a_live_member_has_not_reported() {
    // The source died with the coordinator; rank 2 may hold the value.
    let mut s = rebuilt(4, 1, &[0, 1]);
    assert!(s.on(Want(3)).is_empty());
    assert!(s.on(Reported(3)).is_empty());
    assert!(fails(&s.on(Dead(1))).is_empty(), "rank 2 has not reported");
    assert_eq!(fetches(&s.on(Holds(2))), [(3, 2)]);
    assert_eq!(s.phase(), &Phase::Serving);

    // The same, but rank 2 reports holding nothing: lost, everyone told.
    let mut s = rebuilt(4, 1, &[0, 1]);
    assert!(s.on(Want(3)).is_empty());
    assert!(s.on(Reported(3)).is_empty());
    assert!(s.on(Want(2)).is_empty());
    assert_eq!(fails(&s.on(Reported(2))), [3, 2]);
    assert_eq!(s.phase(), &Phase::Lost);
}

#[test]
fn an_unreported_member_that_dies_is_reported_no_more() {
    let mut s = rebuilt(4, 1, &[0, 1]);
    assert!(s.on(Want(3)).is_empty());
    assert!(s.on(Reported(3)).is_empty());
    assert_eq!(fails(&s.on(Dead(2))), [3]);
}

#[test]
fn a_fetch_an_earlier_coordinator_sent_is_waited_for() {
    // Rank 3 fetches from rank 2, which dies: until rank 3 says how its
    // fetch ended, the value may be at rank 3.
    let mut s = rebuilt(4, 1, &[0, 1]);
    assert!(s
        .on(Fetching {
            fetcher: 3,
            holder: 2
        })
        .is_empty());
    assert!(s.on(Reported(3)).is_empty());
    assert!(s.on(Dead(2)).is_empty(), "the fetch is still out");
    assert_eq!(
        s.on(Fetched(3)),
        [Finish { holders: vec![3] }],
        "every live member holds it"
    );

    let mut s = rebuilt(4, 1, &[0, 1]);
    s.on(Fetching {
        fetcher: 3,
        holder: 2,
    });
    s.on(Reported(3));
    assert!(s.on(Dead(2)).is_empty());
    assert_eq!(fails(&s.on(FetchFailed(3))), [3]);
}

#[test]
fn a_spread_reported_finished_lets_every_holder_go() {
    let mut s = rebuilt(4, 1, &[0]);
    assert!(s.on(Holds(1)).is_empty());
    // Rank 3 was told by the dead coordinator: everybody held it then.
    assert_eq!(s.on(Finished(3)), [Finish { holders: vec![1] }]);
    assert!(s.is_over());
    // A holder reporting later is told at once.
    assert_eq!(s.on(Holds(2)), [Finish { holders: vec![2] }]);
}

#[test]
fn a_fetch_sent_by_an_earlier_coordinator_makes_a_holder() {
    let mut s = Spread::new(0..3, 0, &[]);
    assert!(s.on(Want(2)).is_empty());
    // Rank 1 never asked this coordinator, yet it fetched the value.
    assert_eq!(fetches(&s.on(Fetched(1))), [(2, 1)]);
    assert!(s.on(Have(0)).is_empty());
    assert_eq!(
        s.on(Fetched(2)),
        [Finish {
            holders: vec![0, 1, 2]
        }]
    );
}

#[test]
fn across_a_takeover_nobody_is_failed_while_a_live_member_holds() {
    // Random truths (who holds the value, who fetches from whom when the
    // coordinator dies, who dies), reports and deaths in random order:
    // whenever a member is told the spread failed, no live member holds
    // the value; once every live member reported, a member that wants it
    // is sent to fetch it if any live member holds it.
    for seed in 0u64..3000 {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let n = 5u32;
        // 0: wants, 1: holds, 2: fetches from a holder.
        let state: Vec<u64> = (0..n).map(|_| next() % 3).collect();
        let holders: Vec<u32> = (0..n).filter(|&r| state[r as usize] == 1).collect();
        let mut s = rebuilt(n, 0, &[]);
        let mut order: Vec<(u32, bool)> = (0..n).map(|r| (r, false)).collect();
        order.extend((0..n).filter(|_| next() % 3 == 0).map(|r| (r, true)));
        for i in (1..order.len()).rev() {
            order.swap(i, (next() % (i as u64 + 1)) as usize);
        }
        let mut dead = std::collections::BTreeSet::new();
        let mut failed = std::collections::BTreeSet::new();
        let mut sent = std::collections::BTreeSet::new();
        for (r, dies) in order {
            if dead.contains(&r) {
                continue;
            }
            let mut acts = Vec::new();
            if dies {
                dead.insert(r);
                acts.extend(s.on(Dead(r)));
            } else {
                match (state[r as usize], holders.first()) {
                    (1, _) => acts.extend(s.on(Holds(r))),
                    // The source wants nothing: it holds the value, or
                    // its reduction has not ended yet.
                    _ if r == 0 => {}
                    (2, Some(&h)) => acts.extend(s.on(Fetching {
                        fetcher: r,
                        holder: h,
                    })),
                    _ => acts.extend(s.on(Want(r))),
                }
                acts.extend(s.on(Reported(r)));
            }
            failed.extend(fails(&acts));
            sent.extend(fetches(&acts).into_iter().map(|(f, _)| f));
            let live_holding = holders.iter().any(|h| !dead.contains(h));
            assert!(
                failed.is_empty() || !live_holding,
                "seed {seed}: {failed:?} failed while a live member holds"
            );
        }
        // Every fetch sent ends well: those waiting for a slot are sent.
        let mut done = std::collections::BTreeSet::new();
        for _ in 0..n {
            let out: Vec<u32> = sent.difference(&done).copied().collect();
            for f in out {
                done.insert(f);
                sent.extend(fetches(&s.on(Fetched(f))).into_iter().map(|(f, _)| f));
            }
        }
        let live_holding = holders.iter().any(|h| !dead.contains(h));
        for r in (1..n).filter(|r| state[*r as usize] == 0 && !dead.contains(r)) {
            if live_holding {
                assert!(sent.contains(&r), "seed {seed}: {r} never sent to fetch");
            }
        }
    }
}

/// After a takeover a replacement reports that it wants a spread before
/// any member reports that the dead coordinator had finished it: once one
/// does, the replacement is told it came too late, not left waiting.
#[test]
fn a_member_waiting_for_a_spread_reported_finished_is_told_too_late() {
    let mut s = Spread::new(0..4, 1, &[]).awaiting_reports(0..4);
    assert!(s.on(Want(3)).is_empty());
    assert!(s.on(Reported(3)).is_empty());
    assert_eq!(
        s.on(Finished(2)),
        [Finish { holders: vec![] }, TooLate { rank: 3 }]
    );
    assert!(s.is_over());
    // A fetch out on an earlier coordinator's word ends the same way.
    let mut s = Spread::new(0..4, 1, &[]).awaiting_reports(0..4);
    assert!(s
        .on(Fetching {
            fetcher: 2,
            holder: 0
        })
        .is_empty());
    assert_eq!(
        s.on(Finished(0)),
        [Finish { holders: vec![] }, TooLate { rank: 2 }]
    );
}

/// A member dies while the others fetch; its replacement, redoing the
/// call, asks before the spread is over: it is served as any member, and
/// the spread finishes with it among the holders.
#[test]
fn a_dead_members_replacement_that_asks_is_served() {
    let mut s = one(0..4, 1, &[]);
    assert!(s.on(Want(2)).is_empty());
    assert!(s.on(Want(3)).is_empty());
    assert_eq!(fetches(&s.on(Have(1))), [(2, 1)]);
    assert!(s.on(Dead(3)).is_empty());
    // Rank 0 has not asked yet: the spread is not over.
    assert!(s.on(Want(3)).is_empty(), "waits for a free holder");
    assert_eq!(fetches(&s.on(Fetched(2))), [(3, 1)]);
    assert!(fetches(&s.on(Want(0))).len() == 1);
    s.on(Fetched(3));
    let end = s.on(Fetched(0));
    assert_eq!(
        end,
        [Finish {
            holders: vec![0, 1, 2, 3]
        }]
    );
}

/// A lost spread tells a dead member's replacement that asks, too.
#[test]
fn a_dead_members_replacement_hears_the_loss() {
    let mut s = Spread::new(0..3, 1, &[]);
    assert!(s.on(Want(2)).is_empty());
    assert_eq!(fails(&s.on(Dead(1))), [2]);
    assert!(s.on(Dead(2)).is_empty());
    assert_eq!(fails(&s.on(Want(2))), [2], "told again: a new process");
}
