use super::*;
use proptest::prelude::*;

#[test]
fn a_dead_rank_is_awaited_while_replacements_are_left() {
    let mut r = Respawns::new(4, 1, 0);
    assert_eq!(r.died(2).0, Death::Awaited);
    assert!(r.awaited(2));
    assert_eq!(r.died(3).0, Death::Final, "the budget is spent");
    assert_eq!(r.slot(3), Some(&Slot::Gone(0)));
    assert_eq!(r.left(), 0);
}

#[test]
fn the_master_is_never_awaited() {
    let mut r = Respawns::new(4, 3, 0);
    assert_eq!(r.died(0).0, Death::Final);
    assert_eq!(r.left(), 3);
}

#[test]
fn a_replacement_is_live_once_every_live_rank_let_it_in() {
    let mut r = Respawns::new(4, 2, 0);
    r.died(2);
    assert_eq!(r.asks(2, 1, [0, 1, 3]), Ok(false));
    assert!(!r.let_in(1, 2, 1));
    assert!(!r.let_in(1, 2, 1), "a repeated answer counts once");
    assert!(
        !r.let_in(3, 2, 7),
        "another incarnation's answer is ignored"
    );
    assert!(r.let_in(3, 2, 1));
    assert_eq!(r.slot(2), Some(&Slot::Live(1)));
}

#[test]
fn a_rank_dying_during_an_admission_is_waited_for_no_more() {
    let mut r = Respawns::new(4, 2, 0);
    r.died(2);
    r.asks(2, 1, [1, 3]).unwrap();
    r.let_in(1, 2, 1);
    let (death, done) = r.died(3);
    assert_eq!(death, Death::Awaited);
    assert_eq!(done, vec![(2, 1)]);
    assert_eq!(r.slot(2), Some(&Slot::Live(1)));
}

#[test]
fn replacements_that_are_not_awaited_are_refused() {
    let mut r = Respawns::new(3, 1, 0);
    assert_eq!(
        r.asks(1, 1, [0, 2]),
        Err(Refusal::NotAwaited {
            rank: 1,
            state: "alive"
        })
    );
    assert_eq!(r.asks(9, 1, []), Err(Refusal::NoSuchRank(9)));
    r.died(1);
    assert_eq!(
        r.asks(1, 0, [2]),
        Err(Refusal::Stale {
            rank: 1,
            got: 0,
            dead: 0
        })
    );
    r.asks(1, 1, [2]).unwrap();
    assert!(matches!(r.asks(1, 2, [2]), Err(Refusal::NotAwaited { .. })));
}

#[test]
fn a_wait_given_up_leaves_the_rank_gone() {
    let mut r = Respawns::new(3, 1, 0);
    r.died(1);
    assert!(r.give_up(1));
    assert_eq!(r.slot(1), Some(&Slot::Gone(0)));
    assert!(r.asks(1, 1, [2]).is_err());
    assert!(!r.give_up(1));
}

proptest! {
    /// Whatever the order of deaths, asks and answers: never more
    /// replacements than the budget, the master never awaited, and a
    /// replacement is live only after every live rank let it in.
    #[test]
    fn admissions_keep_their_invariants(
        size in 2u32..8,
        budget in 0u32..4,
        ops in proptest::collection::vec((0u8..4, 0u32..8, 0u32..8), 0..60),
    ) {
        let mut r = Respawns::new(size, budget, 0);
        let mut dead = vec![false; size as usize];
        let mut awaited_ever = 0u32;
        for (op, a, b) in ops {
            let (a, b) = (a % size, b % size);
            match op {
                0 if !dead[a as usize] => {
                    dead[a as usize] = true;
                    if r.died(a).0 == Death::Awaited {
                        awaited_ever += 1;
                    }
                    prop_assert!(a != 0 || !r.awaited(0));
                }
                1 => {
                    let live: Vec<u32> = (0..size).filter(|&x| !dead[x as usize]).collect();
                    if r.asks(a, 1 + b, live).is_ok() {
                        dead[a as usize] = false;
                    }
                }
                2 => {
                    if let Some(Slot::Admitting { incarnation, .. }) = r.slot(a).cloned() {
                        r.let_in(b, a, incarnation);
                    }
                }
                _ => {
                    r.give_up(a);
                }
            }
            prop_assert!(awaited_ever <= budget);
            prop_assert_eq!(r.left(), budget - awaited_ever);
            for x in 0..size {
                if let Some(Slot::Admitting { pending, .. }) = r.slot(x) {
                    prop_assert!(!pending.is_empty());
                }
            }
        }
    }
}

#[test]
fn replacements_that_joined_before_count_against_the_budget() {
    let mut r = Respawns::joined(&[0, 2, 1], 4, 0);
    assert_eq!(r.left(), 1);
    assert_eq!(r.slot(1), Some(&Slot::Live(2)));
    assert_eq!(r.died(2).0, Death::Awaited);
    assert_eq!(
        r.asks(2, 1, [0, 1]),
        Err(Refusal::Stale {
            rank: 2,
            got: 1,
            dead: 1
        })
    );
    assert_eq!(r.died(1).0, Death::Final, "the budget is spent");
    assert_eq!(Respawns::joined(&[3, 3], 2, 0).left(), 0);
}

/// A standby took over while rank 2's replacement (incarnation 1) was
/// being let in: the view it took over with names incarnation 1, so the
/// book starts with it live; when it asks again, it is let in again
/// without a second replacement taken from the budget.
#[test]
fn a_cut_admission_is_reopened_without_spending_the_budget() {
    let mut r = Respawns::joined(&[0, 0, 1, 0], 2, 0);
    assert_eq!(r.left(), 1);
    assert_eq!(r.reopen(2, 1), Some(vec![]));
    assert_eq!(r.asks(2, 1, [1, 3]), Ok(false));
    assert_eq!(r.reopen(2, 1), None, "being let in: not reopened");
    assert!(r.let_in(1, 2, 1) || r.let_in(3, 2, 1));
    assert_eq!(r.left(), 1);
}

/// A death declared of the cut replacement is never undone: asking
/// again is refused as any dead incarnation is.
#[test]
fn a_cut_admission_declared_dead_stays_dead() {
    let mut r = Respawns::joined(&[0, 0, 1, 0], 2, 0);
    assert_eq!(r.died(2).0, Death::Awaited);
    assert_eq!(r.reopen(2, 1), None);
    assert_eq!(
        r.asks(2, 1, [1, 3]),
        Err(Refusal::Stale {
            rank: 2,
            got: 1,
            dead: 1
        })
    );
    assert_eq!(r.reopen(3, 0), None, "an original is never reopened");
    assert_eq!(
        r.reopen(1, 1),
        None,
        "another incarnation than the one known"
    );
}

/// Ranks 6 and 7 died, then the master (0) and its standby (1), then the
/// master that took over (2): rank 3 takes over with a view that names
/// the replacements of 0, 1 and 7 live at incarnation 1 (the dead master
/// 2 had told the ranks to let them in), though none of them runs (a
/// `bench chaos` trial). They ask again, one by one, and 2's replacement
/// asks: none waits for another of them, which cannot let anyone in
/// before it is in itself; ranks 4, 5 and 6 (which runs) let them in.
#[test]
fn cut_admissions_do_not_wait_for_each_other() {
    let mut r = Respawns::joined(&[1, 1, 0, 0, 0, 0, 1, 1], 8, 3);
    assert_eq!(r.died(2).0, Death::Awaited);
    let live = [0, 1, 3, 4, 5, 6, 7];
    assert_eq!(r.reopen(0, 1), Some(vec![]));
    assert_eq!(r.asks(0, 1, live), Ok(false));
    // 7 and 1 still seemed to run when 0 asked: reopened, they are
    // waited for no more.
    assert_eq!(r.reopen(7, 1), Some(vec![]));
    assert_eq!(r.asks(7, 1, live), Ok(false));
    assert_eq!(r.reopen(1, 1), Some(vec![]));
    assert_eq!(r.asks(1, 1, live), Ok(false));
    assert_eq!(r.asks(2, 1, live), Ok(false));
    for rank in [0, 1, 2, 7] {
        let Some(Slot::Admitting { pending, .. }) = r.slot(rank) else {
            panic!("rank {rank}: {:?}", r.slot(rank));
        };
        let pending: Vec<usize> = pending.iter().collect();
        assert_eq!(pending, [4, 5, 6], "rank {rank}");
        assert!(!r.let_in(4, rank, 1) && !r.let_in(5, rank, 1));
        assert!(r.let_in(6, rank, 1));
        assert_eq!(r.slot(rank), Some(&Slot::Live(1)));
    }
}

/// A reopened replacement that was the last one an admission waited for
/// completes it.
#[test]
fn reopening_the_last_awaited_rank_completes_an_admission() {
    let mut r = Respawns::joined(&[0, 0, 0, 1], 4, 0);
    assert_eq!(r.died(2).0, Death::Awaited);
    assert_eq!(r.asks(2, 1, [1, 3]), Ok(false));
    assert!(!r.let_in(1, 2, 1));
    assert_eq!(r.reopen(3, 1), Some(vec![(2, 1)]));
    assert_eq!(r.slot(2), Some(&Slot::Live(1)));
}
