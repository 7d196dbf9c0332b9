//! The master's notice board over the serialising loopback (every rank in
//! one process, so every rank maps it): members other than the root take
//! their reduction's completion there; the id is free again at once; with
//! the board off, everything comes by message and works the same.

use std::time::Duration;
use taskfold::{Config, LocalCluster, Reduce, Sum};
use taskfold_tests::faults::{contribution, full_sum};

const LEN: usize = 1000;

fn cluster(board: bool) -> LocalCluster {
    LocalCluster::with_config(
        4,
        Config {
            finalize_timeout: Duration::from_secs(5),
            notice_board: board,
            ..Config::default()
        },
    )
    .unwrap()
}

/// `rounds` reductions in a row on every rank, all with the same id (each
/// starts as soon as the rank's last one returned); checks the root's sum
/// and returns how many futures completed through the board.
fn same_id_in_a_row(c: &LocalCluster, rounds: usize) -> u64 {
    std::thread::scope(|s| {
        for rank in 0..4u32 {
            let rt = c.rank(rank);
            s.spawn(move || {
                for round in 0..rounds {
                    let f = rt
                        .reduce(contribution(rank, LEN), Reduce::root(1).id("same"))
                        .unwrap_or_else(|e| panic!("rank {rank}, round {round}: {e}"));
                    let got: Option<Sum<i64>> = f.get().unwrap();
                    match got {
                        Some(sum) => {
                            assert_eq!(rank, 1);
                            assert_eq!(sum.0, full_sum(4, LEN), "round {round}");
                        }
                        None => assert_ne!(rank, 1),
                    }
                }
            });
        }
    });
    (0..4)
        .map(|r| c.rank(r).local_stats().reductions_by_board)
        .sum()
}

#[test]
fn members_complete_through_the_board_and_reuse_the_id_at_once() {
    let c = cluster(true);
    // The first reduction may start before a rank mapped the board; over
    // forty, the members (ranks 0, 2 and 3) take most completions there.
    let by_board = same_id_in_a_row(&c, 40);
    assert!(by_board > 0, "no future completed through the board");
    assert!(by_board <= 3 * 40, "the root never completes through it");
    c.shutdown().unwrap();
}

#[test]
fn with_the_board_off_every_completion_comes_by_message() {
    let c = cluster(false);
    assert_eq!(same_id_in_a_row(&c, 10), 0);
    c.shutdown().unwrap();
}

#[test]
fn a_failed_reduction_is_never_taken_from_the_board() {
    // The board only says "completed": members of a reduction that fails
    // (no copies, and rank 3 dies before it contributes) hear the failure
    // by message, after forty completions posted with the same id.
    let c = LocalCluster::with_config(
        4,
        Config {
            finalize_timeout: Duration::from_secs(5),
            durability: taskfold::Durability::Off,
            ..Config::default()
        },
    )
    .unwrap();
    assert!(same_id_in_a_row(&c, 40) > 0);
    let f0 = c
        .rank(0)
        .reduce(contribution(0, LEN), Reduce::root(1).id("same"))
        .unwrap();
    let f2 = c
        .rank(2)
        .reduce(contribution(2, LEN), Reduce::root(1).id("same"))
        .unwrap();
    let f1 = c
        .rank(1)
        .reduce(contribution(1, LEN), Reduce::root(1).id("same"))
        .unwrap();
    c.kill(3);
    for (rank, f) in [(0, f0), (1, f1), (2, f2)] {
        match f.get() {
            Err(taskfold::ReduceError::RanksLost { ranks, .. }) => {
                assert_eq!(ranks, vec![3], "rank {rank}")
            }
            other => panic!("rank {rank}: {other:?}"),
        }
    }
}
