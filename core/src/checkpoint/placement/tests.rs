use super::*;
use proptest::prelude::*;
use std::collections::BTreeSet;

#[test]
fn interleaving_takes_one_rank_per_node_in_turn() {
    assert_eq!(interleaved(&[7, 7, 7, 3, 3, 9]), vec![0, 3, 5, 1, 4, 2]);
    assert_eq!(interleaved(&[]), Vec::<u32>::new());
}

#[test]
fn partners_are_on_other_nodes_and_each_holds_one_copy() {
    // Block placement: two nodes of two ranks.
    let p = partners(&[10, 10, 20, 20]);
    assert_eq!(p, vec![Some(2), Some(3), Some(1), Some(0)]);
    // One node: the next rank.
    assert_eq!(partners(&[1, 1, 1]), vec![Some(1), Some(2), Some(0)]);
    assert_eq!(partners(&[1]), vec![None]);
    // Unbalanced nodes: the lone rank of node 2 is everyone's partner
    // that can find no other node.
    let p = partners(&[1, 1, 1, 2]);
    assert!(p
        .iter()
        .enumerate()
        .all(|(r, q)| (r == 3) != (q == &Some(3))));
}

#[test]
fn groups_spread_over_nodes_and_keep_parity_outside() {
    // Four nodes of three ranks, groups of four, two parity pieces.
    let nodes: Vec<u64> = (0..12).map(|r| r / 3).collect();
    let gs = groups(&nodes, 4, 2).unwrap();
    assert_eq!(gs.len(), 3);
    for g in &gs {
        let on: BTreeSet<u64> = g.members.iter().map(|&r| nodes[r as usize]).collect();
        assert_eq!(on.len(), 4, "one member per node: {g:?}");
        assert_eq!(g.parity.len(), 2);
        assert!(g.parity.iter().all(|h| !g.members.contains(h)));
        assert_ne!(g.parity[0], g.parity[1]);
    }
    // Ten ranks in groups of at most four: sizes 4, 3, 3.
    let sizes: Vec<usize> = groups(&[0; 10], 4, 1)
        .unwrap()
        .iter()
        .map(|g| g.members.len())
        .collect();
    assert_eq!(sizes, vec![4, 3, 3]);
    // A single group keeps its parity inside it.
    let g = groups(&[0, 1, 2], 4, 2).unwrap();
    assert_eq!(g.len(), 1);
    assert!(g[0].parity.iter().all(|h| g[0].members.contains(h)));
    assert_eq!(groups(&[], 4, 2), Err(PlacementError::NoRanks));
    assert!(groups(&[0], 0, 2).is_err());
    assert!(groups(&[0], 4, 0).is_err());
}

#[test]
fn placement_answers_per_rank() {
    let p = Placement::new(&[0, 0, 1, 1], 2, 1, true).unwrap();
    assert_eq!(p.ranks(), 4);
    assert_eq!(p.node(2), Some(1));
    assert_eq!(p.node(9), None);
    assert_eq!(p.partner(0), Some(2));
    let g = p.group_of(3).unwrap();
    assert!(g.members.contains(&3));
    assert!(p.shared());
    assert_eq!(p.groups().len(), 2);
}

proptest! {
    #[test]
    fn placement_rules_hold(
        nodes in proptest::collection::vec(0u64..5, 1..40),
        k in 1usize..7,
        m in 1usize..4,
    ) {
        let n = nodes.len();
        let spans = nodes.iter().collect::<BTreeSet<_>>().len() > 1;
        let p = partners(&nodes);
        for (r, q) in p.iter().enumerate() {
            match q {
                None => prop_assert_eq!(n, 1),
                Some(q) => {
                    prop_assert_ne!(*q as usize, r);
                    if spans {
                        prop_assert_ne!(nodes[*q as usize], nodes[r]);
                    }
                }
            }
        }
        let gs = groups(&nodes, k, m).unwrap();
        let mut seen = vec![0; n];
        for g in &gs {
            prop_assert!(!g.members.is_empty() && g.members.len() <= k);
            prop_assert_eq!(g.parity.len(), m);
            for &r in &g.members {
                seen[r as usize] += 1;
            }
            if gs.len() > 1 {
                prop_assert!(g.parity.iter().all(|h| !g.members.contains(h)));
            }
            let distinct: BTreeSet<_> = g.parity.iter().collect();
            let pool = if gs.len() > 1 { n - g.members.len() } else { n };
            prop_assert_eq!(distinct.len(), m.min(pool));
        }
        prop_assert!(seen.iter().all(|&c| c == 1), "every rank in one group");
        let sizes: BTreeSet<usize> = gs.iter().map(|g| g.members.len()).collect();
        prop_assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1);
    }
}
