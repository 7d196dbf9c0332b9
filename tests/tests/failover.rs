//! A master that dies with a standby, over the serialising loopback: the
//! standby takes over, rebuilds every live reduction from what the
//! workers hold, and they end with the right result — whether the dead
//! master had joined them or not, and whatever had been folded before
//! (the book's Fault tolerance chapter, A master that dies).

use std::time::{Duration, Instant};
use taskfold::{Config, Durability, LocalCluster, Reduce, ReduceError, Standby, Sum};

const N: u32 = 5;

fn config(durability: Durability) -> Config {
    Config {
        standby: Standby::On,
        durability,
        finalize_timeout: Duration::from_secs(20),
        ..Config::default()
    }
}

fn value(rank: u32, round: u64) -> Vec<u64> {
    (0..256)
        .map(|i| (rank as u64 + 1) * 1000 + i + round)
        .collect()
}

fn expected(ranks: impl Iterator<Item = u32> + Clone, round: u64) -> Vec<u64> {
    (0..256)
        .map(|i| {
            ranks
                .clone()
                .map(|r| (r as u64 + 1) * 1000 + i + round)
                .sum()
        })
        .collect()
}

/// Every rank reduces `rounds` times to root 2; rank 0 (the master) dies
/// after `kill_after` rounds were started on every rank and its
/// contributions were safe (at once with synchronous durability; with
/// asynchronous, once its futures say so). Every reduction rank 0 joined
/// ends with the sum over every rank (its original comes from its buddy's
/// copy); those it never joined end with `RanksLost` naming it; none
/// hangs.
fn master_dies_mid_run(durability: Durability, kill_after: usize, rounds: usize) {
    let cluster = LocalCluster::with_config(N, config(durability)).unwrap();
    let mut futures = Vec::new();
    for round in 0..rounds {
        if round == kill_after {
            for (_, _, f) in futures.iter().filter(|(_, r, _)| *r == 0) {
                let f: &taskfold::ReduceFuture<Sum<u64>> = f;
                f.wait_safe_timeout(Duration::from_secs(10)).unwrap();
            }
            cluster.kill(0);
        }
        let starters = if round < kill_after { 0..N } else { 1..N };
        for r in starters {
            let opts = Reduce::root(2).id(format!("round-{round}"));
            let f = cluster
                .rank(r)
                .reduce(Sum(value(r, round as u64)), opts)
                .unwrap();
            futures.push((round, r, f));
        }
    }
    let t = Instant::now();
    for (round, r, mut f) in futures {
        if r == 0 {
            continue; // the dead rank's own futures
        }
        let got = f.wait_timeout(Duration::from_secs(30));
        match got {
            Ok(Some(sum)) => {
                assert_eq!(r, 2, "only the root holds the result");
                assert!(round < kill_after, "round {round}: rank 0 never joined it");
                assert_eq!(sum.0, expected(0..N, round as u64), "round {round}");
            }
            Ok(None) => assert!(round < kill_after, "round {round} at rank {r}"),
            Err(ReduceError::RanksLost { ranks, .. }) => {
                assert!(
                    round >= kill_after,
                    "round {round} at rank {r} lost {ranks:?}"
                );
                assert_eq!(ranks, vec![0]);
            }
            Err(e) => panic!("round {round} at rank {r}: {e}"),
        }
    }
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    // The job goes on under the standby, over the survivors.
    let survivors: Vec<u32> = (1..N).collect();
    let fs: Vec<_> = survivors
        .iter()
        .map(|&r| {
            let opts = Reduce::root(2).group(survivors.clone()).id("after");
            cluster.rank(r).reduce(Sum(value(r, 7)), opts).unwrap()
        })
        .collect();
    for (r, mut f) in survivors.iter().zip(fs) {
        let got = f.wait_timeout(Duration::from_secs(30)).unwrap();
        if *r == 2 {
            assert_eq!(got.unwrap().0, expected(1..N, 7));
        }
    }
}

#[test]
fn in_flight_reductions_finish_under_the_standby_sync() {
    master_dies_mid_run(Durability::Sync, 3, 5);
}

#[test]
fn in_flight_reductions_finish_under_the_standby_async() {
    master_dies_mid_run(Durability::Async, 2, 4);
}

#[test]
fn a_master_that_dies_before_anything_is_replaced() {
    master_dies_mid_run(Durability::Sync, 0, 2);
}

/// The root joins only after the master died: every other rank's data was
/// being folded together under the dead master (the master's own data may
/// hold others' originals, which are then read again from their ranks).
fn root_joins_after_the_master_died(durability: Durability, rounds: u64) {
    let cluster = LocalCluster::with_config(N, config(durability)).unwrap();
    let mut early = Vec::new();
    for round in 0..rounds {
        for r in (0..N).filter(|&r| r != 2) {
            let opts = Reduce::root(2).id(format!("late-root-{round}"));
            early.push((
                r,
                cluster.rank(r).reduce(Sum(value(r, round)), opts).unwrap(),
            ));
        }
    }
    for (_, f) in early.iter().filter(|(r, _)| *r == 0) {
        f.wait_safe_timeout(Duration::from_secs(10)).unwrap();
    }
    // Let folds happen among the early members under the master.
    std::thread::sleep(Duration::from_millis(30));
    cluster.kill(0);
    let mut roots = Vec::new();
    for round in 0..rounds {
        let opts = Reduce::root(2).id(format!("late-root-{round}"));
        roots.push(cluster.rank(2).reduce(Sum(value(2, round)), opts).unwrap());
    }
    for (round, mut f) in roots.into_iter().enumerate() {
        let sum = f.wait_timeout(Duration::from_secs(30)).unwrap().unwrap();
        assert_eq!(sum.0, expected(0..N, round as u64), "round {round}");
    }
    for (r, mut f) in early.into_iter().filter(|(r, _)| *r != 0) {
        assert_eq!(
            f.wait_timeout(Duration::from_secs(30)).unwrap(),
            None,
            "rank {r}"
        );
    }
}

#[test]
fn folds_made_under_the_dead_master_are_kept_or_redone_sync() {
    root_joins_after_the_master_died(Durability::Sync, 6);
}

#[test]
fn folds_made_under_the_dead_master_are_kept_or_redone_async() {
    root_joins_after_the_master_died(Durability::Async, 6);
}
