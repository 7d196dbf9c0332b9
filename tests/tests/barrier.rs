//! `Runtime::barrier` end to end over the serialising loopback: every rank
//! tells the master and waits for its answer; a dead rank or a lost master
//! ends the wait with a typed error, never a hang.

use std::time::Duration;
use taskfold::{Config, LocalCluster, ReduceError};

fn cluster(n: u32) -> LocalCluster {
    LocalCluster::with_config(
        n,
        Config {
            finalize_timeout: Duration::from_secs(5),
            ..Config::default()
        },
    )
    .unwrap()
}

/// Runs `barrier` on `ranks` of `c` at once, on threads of their own.
fn barrier_on(c: &LocalCluster, ranks: &[u32]) -> Vec<Result<(), ReduceError>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .iter()
            .map(|&r| {
                let rt = c.rank(r);
                s.spawn(move || rt.barrier())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn barriers_in_a_row_release_every_rank() {
    let c = cluster(4);
    for _ in 0..10 {
        assert_eq!(barrier_on(&c, &[0, 1, 2, 3]), vec![Ok(()); 4]);
    }
    c.shutdown().unwrap();
}

#[test]
fn a_job_of_one_rank_passes_its_barriers() {
    let c = cluster(1);
    for _ in 0..3 {
        assert_eq!(c.rank(0).barrier(), Ok(()));
    }
    c.shutdown().unwrap();
}

#[test]
fn a_rank_that_dies_fails_the_barrier_on_the_others() {
    let c = cluster(4);
    assert_eq!(barrier_on(&c, &[0, 1, 2, 3]), vec![Ok(()); 4]);
    let results = std::thread::scope(|s| {
        let waiting = s.spawn(|| barrier_on(&c, &[0, 1, 2]));
        // Rank 3 never comes: it dies while the others wait.
        std::thread::sleep(Duration::from_millis(50));
        c.kill(3);
        waiting.join().unwrap()
    });
    for r in results {
        match r {
            Err(ReduceError::RanksLost { id, ranks }) => {
                assert_eq!((id.as_str(), ranks), ("barrier-1", vec![3]))
            }
            other => panic!("expected RanksLost naming rank 3: {other:?}"),
        }
    }
    // And the next one fails at once: no barrier can wait for rank 3.
    assert!(barrier_on(&c, &[1])
        .iter()
        .all(|r| matches!(r, Err(ReduceError::RanksLost { .. }))));
}

#[test]
fn a_lost_master_fails_the_barrier() {
    let c = cluster(3);
    let results = std::thread::scope(|s| {
        let waiting = s.spawn(|| barrier_on(&c, &[1, 2]));
        // Whether the ranks reached the barrier before the master died
        // or after, the answer is the same.
        std::thread::sleep(Duration::from_millis(50));
        c.kill(0);
        waiting.join().unwrap()
    });
    for r in results {
        assert!(
            matches!(r, Err(ReduceError::MasterLost(_))),
            "expected MasterLost: {r:?}"
        );
    }
    // A barrier after the master's death fails at once.
    let late = c.rank(1).barrier();
    assert!(matches!(late, Err(ReduceError::MasterLost(_))), "{late:?}");
}

/// `n` barriers on every rank of `c`; returns how many of the ranks'
/// releases were read on the master's notice board.
fn releases_by_board(c: &LocalCluster, n: u64) -> u64 {
    for _ in 0..n {
        assert_eq!(barrier_on(c, &[0, 1, 2, 3]), vec![Ok(()); 4]);
    }
    (0..4)
        .map(|r| c.rank(r).local_stats().barriers_by_board)
        .sum()
}

#[test]
fn the_notice_board_releases_ranks_and_can_be_turned_off() {
    // On (the default): the master posts each release on its board. The
    // first barrier may come before a rank has mapped the board (it then
    // gets its release by message), but the master's `Msg::Board` reaches
    // every rank before that release: from then on every release is read
    // on the board, none is sent. 140 barriers go round the board's ring
    // of 64 slots twice, and the answers of released barriers that each
    // rank's actors drop at its next barrier cannot pile up (a debug
    // assertion there).
    let c = cluster(4);
    let first = releases_by_board(&c, 1);
    let on = releases_by_board(&c, 140) - first;
    c.shutdown().unwrap();
    assert_eq!(on, 4 * 140, "releases read on the notice board");
    // Off: every release comes by message, and barriers work the same.
    let c = LocalCluster::with_config(
        4,
        Config {
            finalize_timeout: Duration::from_secs(5),
            notice_board: false,
            ..Config::default()
        },
    )
    .unwrap();
    assert_eq!(releases_by_board(&c, 10), 0);
    c.shutdown().unwrap();
}
