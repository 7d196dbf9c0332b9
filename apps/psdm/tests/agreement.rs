//! The agreement on a version to resume from, when a rank is dead before
//! it voted: a rank with nothing to resume from starts afresh (versions
//! count from 0, so the least is 0 whatever was lost), and another rank's
//! agreement whose root is dead is not this rank's concern.

use std::time::Duration;
use taskfold::{Config, LocalCluster, ReduceError};
use taskfold_psdm::checkpoint::resume::agree;

/// Three ranks; rank 1 dies before the agreement, and is declared failed
/// at once (its links drop).
fn cluster_without_rank_1() -> LocalCluster {
    let config = Config {
        failure_timeout: Duration::from_millis(500),
        ..Config::default()
    };
    let cluster = LocalCluster::with_config(3, config).expect("a cluster");
    cluster.kill(1);
    cluster
}

#[test]
fn ranks_with_nothing_to_resume_start_afresh_when_a_vote_is_lost() {
    let cluster = cluster_without_rank_1();
    let agreed: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = [0, 2]
            .map(|r| {
                let rt = cluster.rank(r);
                s.spawn(move || agree(rt, 0))
            })
            .into_iter()
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(agreed, vec![Ok(0), Ok(0)]);
}

#[test]
fn a_rank_with_a_version_still_needs_every_vote() {
    // Rank 2 holds version 5: a lost vote might have been older, so it
    // cannot decide alone (the error, not a guess).
    let cluster = cluster_without_rank_1();
    let agreed: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = [(0, 0), (2, 5)]
            .map(|(r, mine)| {
                let rt = cluster.rank(r);
                s.spawn(move || agree(rt, mine))
            })
            .into_iter()
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(agreed[0], Ok(0));
    assert!(
        matches!(agreed[1], Err(ReduceError::RanksLost { .. })),
        "{:?}",
        agreed[1]
    );
}
