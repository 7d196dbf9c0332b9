//! `Completion::Contributed` over the serialising loopback: a member's
//! future completes once its data was folded in, before the reduction
//! ends; the runtime still keeps its original, so a later failure is
//! recovered; with the default completion nothing completes early.

use std::time::{Duration, Instant};
use taskfold::{
    Completion, Config, Durability, LocalCluster, Reduce, ReduceError, ReduceFuture, Sum,
};
use taskfold_tests::faults::{contribution, full_sum};

const WAIT: Duration = Duration::from_secs(30);
const LEN: usize = 10_000;

fn cluster() -> LocalCluster {
    LocalCluster::with_config(
        4,
        Config {
            finalize_timeout: Duration::from_secs(5),
            durability: Durability::Sync,
            ..Config::default()
        },
    )
    .unwrap()
}

fn start(c: &LocalCluster, rank: u32, completion: Completion) -> ReduceFuture<Sum<i64>> {
    c.rank(rank)
        .reduce(
            contribution(rank, LEN),
            Reduce::root(1).id("early").completion(completion),
        )
        .unwrap()
}

/// Ranks 2 and 3 contribute alone, so the master pairs them: one fetches
/// the other's data and folds it. Returns (provider, receiver) once the
/// provider's future completed, or `None` if neither did within `wait`.
fn provider_done(
    f2: &ReduceFuture<Sum<i64>>,
    f3: &ReduceFuture<Sum<i64>>,
    wait: Duration,
) -> Option<(u32, u32)> {
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        match (f2.is_done(), f3.is_done()) {
            (true, false) => return Some((2, 3)),
            (false, true) => return Some((3, 2)),
            (true, true) => panic!("the receiver's data still has to reach the root"),
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    None
}

/// Ranks 0 and 1 (the root) contribute last, with the default completion:
/// (the root's outcome, rank 0's).
fn the_rest_contribute(c: &LocalCluster) -> (Outcome, Outcome) {
    let mut f0 = start(c, 0, Completion::Result);
    let mut f1 = start(c, 1, Completion::Result);
    (f1.wait_timeout(WAIT), f0.wait_timeout(WAIT))
}

type Outcome = Result<Option<Sum<i64>>, ReduceError>;

#[test]
fn a_member_whose_data_was_folded_in_is_done_before_the_root_contributes() {
    let c = cluster();
    let f2 = start(&c, 2, Completion::Contributed);
    let f3 = start(&c, 3, Completion::Contributed);
    let (provider, _) = provider_done(&f2, &f3, WAIT).expect("the provider completes early");
    let (mut fp, mut fr) = if provider == 2 { (f2, f3) } else { (f3, f2) };
    assert_eq!(fp.wait_timeout(WAIT), Ok(None));
    // Ranks 0 and 1 have not even called reduce: the reduction goes on.
    let (root, r0) = the_rest_contribute(&c);
    assert_eq!(root.unwrap().unwrap().0, full_sum(4, LEN));
    assert_eq!(r0, Ok(None));
    assert_eq!(fr.wait_timeout(WAIT), Ok(None));
    c.shutdown().unwrap();
}

#[test]
fn by_default_no_member_is_done_before_the_root_holds_the_result() {
    let c = cluster();
    let f2 = start(&c, 2, Completion::Result);
    let f3 = start(&c, 3, Completion::Result);
    // Bounded: the pair's fold takes well under a millisecond here.
    assert_eq!(provider_done(&f2, &f3, Duration::from_millis(500)), None);
    let (root, r0) = the_rest_contribute(&c);
    assert_eq!(root.unwrap().unwrap().0, full_sum(4, LEN));
    assert_eq!(r0, Ok(None));
    for mut f in [f2, f3] {
        assert_eq!(f.wait_timeout(WAIT), Ok(None));
    }
    c.shutdown().unwrap();
}

#[test]
fn the_original_of_a_member_that_is_done_still_recovers_a_dead_receiver() {
    let c = cluster();
    let f2 = start(&c, 2, Completion::Contributed);
    let f3 = start(&c, 3, Completion::Contributed);
    let (provider, receiver) = provider_done(&f2, &f3, WAIT).expect("the provider completes early");
    // The receiver holds the only live data with the provider's original
    // in it: its death needs that original again, from the provider's
    // runtime (or its copy), although the provider's future is done.
    c.kill(receiver);
    let deadline = Instant::now() + WAIT;
    while !c
        .rank(0)
        .master_stats()
        .is_some_and(|s| s.dead.contains(&receiver))
    {
        assert!(
            Instant::now() < deadline,
            "rank {receiver} not declared failed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let (root, r0) = the_rest_contribute(&c);
    assert_eq!(
        root.unwrap().unwrap().0,
        full_sum(4, LEN),
        "rank {provider}'s original and rank {receiver}'s copy are folded in again"
    );
    assert_eq!(r0, Ok(None));
    drop((f2, f3));
}

#[test]
fn a_member_that_is_done_hears_of_no_later_failure_while_the_root_does() {
    let c = LocalCluster::with_config(
        4,
        Config {
            finalize_timeout: Duration::from_secs(5),
            durability: Durability::Off,
            ..Config::default()
        },
    )
    .unwrap();
    let f2 = start(&c, 2, Completion::Contributed);
    let f3 = start(&c, 3, Completion::Contributed);
    let (provider, receiver) = provider_done(&f2, &f3, WAIT).expect("the provider completes early");
    let mut fp = if provider == 2 { f2 } else { f3 };
    // Without copies, the receiver's death loses both originals.
    c.kill(receiver);
    let (root, r0) = the_rest_contribute(&c);
    match root {
        Err(ReduceError::RanksLost { ranks, .. }) => assert!(ranks.contains(&receiver)),
        other => panic!("the root must hear what was lost: {other:?}"),
    }
    assert!(matches!(r0, Err(ReduceError::RanksLost { .. })));
    assert_eq!(fp.wait_timeout(WAIT), Ok(None), "done before the loss");
}
