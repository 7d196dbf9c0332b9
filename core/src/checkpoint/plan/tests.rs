use super::*;
use proptest::prelude::*;

/// Four nodes of three ranks; groups of four with two parity pieces.
fn cluster(shared: bool) -> Placement {
    let nodes: Vec<u64> = (0..12).map(|r| r / 3).collect();
    Placement::new(&nodes, 4, 2, shared).unwrap()
}

#[test]
fn a_dead_process_restarts_from_its_own_disk() {
    let p = cluster(true);
    let f = Failure::new([5], []);
    assert_eq!(p.cheapest(5, &f), Some(Level::L1));
    assert_eq!(
        p.probe(5, &f),
        Probe {
            in_vain: vec![],
            found: Some(Level::L1)
        }
    );
}

#[test]
fn a_dead_node_sends_its_ranks_to_their_partners() {
    let p = cluster(true);
    let f = Failure::new([3, 4, 5], [1]);
    for r in [3, 4, 5] {
        assert!(!p.survives(r, Level::L1, &f));
        assert_eq!(p.cheapest(r, &f), Some(Level::L2));
        assert_eq!(p.probe(r, &f).in_vain, vec![Level::L1]);
    }
}

#[test]
fn partner_and_node_lost_falls_to_erasure_then_shared() {
    let p = cluster(true);
    let partner = p.partner(0).unwrap();
    let pn = p.node(partner).unwrap();
    let dead_ranks: Vec<u32> = (0..12)
        .filter(|&r| [0, pn].contains(&p.node(r).unwrap()))
        .collect();
    let f = Failure::new(dead_ranks.clone(), [0, pn]);
    let g = p.group_of(0).unwrap();
    let lost = g
        .members
        .iter()
        .chain(&g.parity)
        .filter(|h| dead_ranks.contains(h))
        .count();
    let expected = if lost <= 2 { Level::L3 } else { Level::L4 };
    assert_eq!(p.cheapest(0, &f), Some(expected));
    let probe = p.probe(0, &f);
    assert_eq!(probe.found, Some(expected));
    assert!(probe.in_vain.starts_with(&[Level::L1, Level::L2]));
    // Without a shared directory and three nodes gone, nothing survives.
    let p = cluster(false);
    let f = Failure::new(0..9, [0, 1, 2]);
    assert_eq!(p.cheapest(0, &f), None);
    assert_eq!(p.probe(0, &f).in_vain, Level::ALL.to_vec());
    assert_eq!(p.surviving(0, &f), vec![]);
    assert!(!p.survives(99, Level::L4, &Failure::default()));
}

/// Whether `rank`'s piece at `level` is reachable, by brute force over the
/// holders (the definition the planner is held to).
fn reachable(p: &Placement, rank: u32, level: Level, f: &Failure) -> bool {
    let alive =
        |h: u32| !f.nodes.contains(&p.node(h).unwrap()) && (h == rank || !f.ranks.contains(&h));
    match level {
        Level::L1 => alive(rank),
        Level::L2 => p.partner(rank).is_some_and(alive),
        Level::L3 => {
            let g = p.group_of(rank).unwrap();
            let have = g
                .members
                .iter()
                .chain(&g.parity)
                .filter(|&&h| alive(h))
                .count();
            have >= g.members.len()
        }
        Level::L4 => p.shared(),
    }
}

proptest! {
    #[test]
    fn the_planner_picks_the_cheapest_level_that_survived(
        nodes in proptest::collection::vec(0u64..6, 1..30),
        k in 1usize..6,
        m in 1usize..4,
        shared in any::<bool>(),
        dead_nodes in proptest::collection::btree_set(0u64..6, 0..3),
        dead_ranks in proptest::collection::btree_set(0u32..30, 0..6),
    ) {
        let p = Placement::new(&nodes, k, m, shared).unwrap();
        let n = nodes.len() as u32;
        let mut f = Failure::new(dead_ranks.into_iter().filter(|&r| r < n), dead_nodes);
        for r in 0..n {
            if f.nodes.contains(&nodes[r as usize]) {
                f.ranks.insert(r);
            }
        }
        for r in 0..n {
            let got = p.cheapest(r, &f);
            let brute = Level::ALL.into_iter().find(|&l| reachable(&p, r, l, &f));
            prop_assert_eq!(got, brute);
            if let Some(l) = got {
                prop_assert!(reachable(&p, r, l, &f), "picked {} whose holders died", l);
            }
            let probe = p.probe(r, &f);
            prop_assert_eq!(probe.found, got);
            prop_assert!(probe.in_vain.iter().all(|&l| !reachable(&p, r, l, &f)));
            let skipped = got.map_or(4, |l| l.number() as usize - 1);
            prop_assert_eq!(probe.in_vain.len(), skipped);
        }
    }

    #[test]
    fn any_m_dead_ranks_of_a_group_leave_it_rebuildable(
        nodes in proptest::collection::vec(0u64..4, 4..30),
        k in 2usize..6,
        m in 1usize..4,
        pick in proptest::collection::vec(any::<proptest::sample::Index>(), 1..4),
        which in any::<proptest::sample::Index>(),
    ) {
        let p = Placement::new(&nodes, k, m, false).unwrap();
        prop_assume!(p.groups().len() > 1);
        let g = &p.groups()[which.index(p.groups().len())];
        let dead: Vec<u32> = pick.iter().take(m).map(|i| g.members[i.index(g.members.len())]).collect();
        let f = Failure::new(dead.clone(), []);
        for &r in &dead {
            prop_assert!(p.survives(r, Level::L3, &f));
        }
    }
}
