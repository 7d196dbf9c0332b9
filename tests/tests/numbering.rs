//! Calls numbered in call order (unnamed reductions, the spreads of an
//! allreduce or a broadcast under one id) stay in step on every member
//! after a call refused at once on one of them: the refused call takes no
//! number (the book's chapter on reductions, "Ids"). Without that, the
//! member's next call names another reduction than the others' and waits
//! for ever; here it would time out.

use std::time::Duration;
use taskfold::{Config, LocalCluster, Reduce, ReduceError, ReduceFuture, Sum};

const WAIT: Duration = Duration::from_secs(20);

/// Every rank's `allreduce` of `rank + 1` under `id`, waited for.
fn allreduce_everywhere(c: &LocalCluster, id: &str) {
    let fs: Vec<_> = c
        .ranks()
        .iter()
        .map(|rt| {
            rt.allreduce(Sum(vec![rt.rank() as u64 + 1]), Reduce::root(0).id(id))
                .unwrap()
        })
        .collect();
    for mut f in fs {
        assert_eq!(f.wait_timeout(WAIT).unwrap().0, vec![6]);
    }
}

#[test]
fn an_allreduce_refused_on_one_rank_leaves_the_next_one_in_step() {
    let c = LocalCluster::new(3).unwrap();
    let first = c
        .rank(0)
        .allreduce(Sum(vec![1u64]), Reduce::root(0).id("grad"))
        .unwrap();
    // The same id again while the first is live: refused here only.
    assert!(matches!(
        c.rank(0)
            .allreduce(Sum(vec![1u64]), Reduce::root(0).id("grad")),
        Err(ReduceError::DuplicateId(_))
    ));
    let rest: Vec<_> = [1, 2]
        .map(|r| {
            c.rank(r)
                .allreduce(Sum(vec![r as u64 + 1]), Reduce::root(0).id("grad"))
                .unwrap()
        })
        .into_iter()
        .chain([first])
        .collect();
    for mut f in rest {
        assert_eq!(f.wait_timeout(WAIT).unwrap().0, vec![6]);
    }
    // The id used again: every member's second call of it.
    allreduce_everywhere(&c, "grad");
    allreduce_everywhere(&c, "grad");
}

#[test]
fn an_unnamed_reduction_refused_on_one_rank_leaves_the_next_one_in_step() {
    let config = Config {
        max_reductions: 1,
        ..Config::default()
    };
    let c = LocalCluster::with_config(3, config).unwrap();
    let mut first = c.rank(2).reduce(Sum(vec![3u64]), Reduce::root(0)).unwrap();
    assert!(matches!(
        c.rank(2).reduce(Sum(vec![3u64]), Reduce::root(0)),
        Err(ReduceError::TooManyReductions { limit: 1 })
    ));
    let others = sum_of_others(&c);
    assert!(first.wait_timeout(WAIT).is_ok());
    check(others);
    for _ in 0..2 {
        let others = sum_of_others(&c);
        let mut mine = c.rank(2).reduce(Sum(vec![3u64]), Reduce::root(0)).unwrap();
        assert!(mine.wait_timeout(WAIT).is_ok());
        check(others);
    }
}

/// Ranks 0 (the root) and 1 start their next unnamed reduction.
fn sum_of_others(c: &LocalCluster) -> Vec<ReduceFuture<Sum<u64>>> {
    (0..2)
        .map(|r| {
            c.rank(r)
                .reduce(Sum(vec![r as u64 + 1]), Reduce::root(0))
                .unwrap()
        })
        .collect()
}

/// The root's result is the sum of all three ranks.
fn check(fs: Vec<ReduceFuture<Sum<u64>>>) {
    let mut fs = fs.into_iter();
    let sum = fs.next().unwrap().wait_timeout(WAIT).unwrap();
    assert_eq!(sum.map(|s| s.0), Some(vec![6]));
    assert!(fs.next().unwrap().wait_timeout(WAIT).is_ok());
}
