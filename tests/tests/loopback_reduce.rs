//! Multi-rank reductions in one process over the serialising loopback.

use std::time::Duration;
use taskfold::rkyv::{Archive, Deserialize, Serialize};
use taskfold::{Config, FoldError, LocalCluster, Reduce, ReduceError, ReducerBody, Sum};

const WAIT: Duration = Duration::from_secs(30);

fn contribution(rank: u32, len: usize) -> Vec<i64> {
    (0..len as i64).map(|k| k * 1_000 + rank as i64).collect()
}

fn expected(ranks: &[u32], len: usize) -> Vec<i64> {
    let mut out = vec![0i64; len];
    for &r in ranks {
        for (o, v) in out.iter_mut().zip(contribution(r, len)) {
            *o += v;
        }
    }
    out
}

#[test]
fn every_size_and_every_root() {
    for p in [1u32, 2, 3, 4, 8, 16] {
        let cluster = LocalCluster::new(p).unwrap();
        for root in 0..p {
            let id = format!("p{p}-root{root}");
            let futures: Vec<_> = cluster
                .ranks()
                .iter()
                .map(|rt| {
                    rt.reduce(
                        Sum(contribution(rt.rank(), 257)),
                        Reduce::root(root).id(id.clone()),
                    )
                    .unwrap()
                })
                .collect();
            let all: Vec<u32> = (0..p).collect();
            for (rank, mut f) in futures.into_iter().enumerate() {
                let got = f.wait_timeout(WAIT).unwrap();
                if rank as u32 == root {
                    assert_eq!(got.unwrap().0, expected(&all, 257), "p={p} root={root}");
                } else {
                    assert!(got.is_none());
                }
            }
        }
        cluster.shutdown().unwrap();
    }
}

#[test]
fn subgroups() {
    let cluster = LocalCluster::new(6).unwrap();
    let group = [1u32, 3, 4];
    let futures: Vec<_> = group
        .iter()
        .map(|&r| {
            cluster
                .rank(r)
                .reduce(
                    Sum(contribution(r, 64)),
                    Reduce::root(3).group(group).id("sub"),
                )
                .unwrap()
        })
        .collect();
    // The same id in another group is another reduction.
    let other: Vec<_> = [0u32, 5]
        .iter()
        .map(|&r| {
            cluster
                .rank(r)
                .reduce(
                    Sum(contribution(r, 64)),
                    Reduce::root(0).group([0, 5]).id("sub"),
                )
                .unwrap()
        })
        .collect();
    let results: Vec<_> = futures
        .into_iter()
        .map(|mut f| f.wait_timeout(WAIT).unwrap())
        .collect();
    assert_eq!(results[1].as_ref().unwrap().0, expected(&group, 64));
    assert!(results[0].is_none() && results[2].is_none());
    let r0 = other
        .into_iter()
        .map(|mut f| f.wait_timeout(WAIT).unwrap())
        .next()
        .unwrap();
    assert_eq!(r0.unwrap().0, expected(&[0, 5], 64));
    cluster.shutdown().unwrap();
}

#[test]
fn thirty_two_concurrent_reductions() {
    let p = 4;
    let cluster = LocalCluster::new(p).unwrap();
    let mut futures = Vec::new();
    for rt in cluster.ranks() {
        for k in 0..32u32 {
            let v: Vec<f32> = (0..1024).map(|i| (rt.rank() * 7 + k + i) as f32).collect();
            futures.push((
                rt.rank(),
                k,
                rt.reduce(Sum(v), Reduce::root(k % p).id(format!("c{k}")))
                    .unwrap(),
            ));
        }
    }
    for (rank, k, mut f) in futures {
        let got = f.wait_timeout(WAIT).unwrap();
        if rank == k % p {
            let want: Vec<f32> = (0..1024)
                .map(|i| (0..p).map(|r| (r * 7 + k + i) as f32).sum())
                .collect();
            assert_eq!(got.unwrap().0, want);
        } else {
            assert!(got.is_none());
        }
    }
    let stats = cluster.rank(0).master_stats().unwrap();
    assert_eq!(stats.reductions_completed, 32);
    assert_eq!(
        stats.tasks_per_rank.iter().sum::<u64>(),
        32 * (p as u64 - 1)
    );
    cluster.shutdown().unwrap();
}

#[test]
fn automatic_ids_follow_call_order() {
    let cluster = LocalCluster::new(3).unwrap();
    let futures: Vec<Vec<_>> = cluster
        .ranks()
        .iter()
        .map(|rt| {
            (0..5)
                .map(|k| {
                    rt.reduce(Sum(vec![k as u64 + rt.rank() as u64]), Reduce::root(0))
                        .unwrap()
                })
                .collect()
        })
        .collect();
    for (rank, fs) in futures.into_iter().enumerate() {
        for (k, mut f) in fs.into_iter().enumerate() {
            let got = f.wait_timeout(WAIT).unwrap();
            if rank == 0 {
                assert_eq!(got.unwrap().0, vec![3 * k as u64 + 3]);
            }
        }
    }
}

#[test]
fn mismatched_lengths_fail_on_every_rank() {
    let cluster = LocalCluster::new(4).unwrap();
    let futures: Vec<_> = cluster
        .ranks()
        .iter()
        .map(|rt| {
            let len = if rt.rank() == 2 { 99 } else { 100 };
            rt.reduce(Sum(vec![1.0f32; len]), Reduce::root(1).id("bad"))
                .unwrap()
        })
        .collect();
    for mut f in futures {
        match f.wait_timeout(WAIT) {
            Err(ReduceError::Mismatched { id, detail }) => {
                assert_eq!(id, "bad");
                assert!(detail.contains("mismatched lengths"), "{detail}");
            }
            other => panic!("expected a mismatch error, got {other:?}"),
        }
    }
    // The runtime keeps working afterwards.
    let fs: Vec<_> = cluster
        .ranks()
        .iter()
        .map(|rt| {
            rt.reduce(Sum(vec![1u32]), Reduce::root(0).id("after"))
                .unwrap()
        })
        .collect();
    let r: Vec<_> = fs
        .into_iter()
        .map(|mut f| f.wait_timeout(WAIT).unwrap())
        .collect();
    assert_eq!(r[0].as_ref().unwrap().0, vec![4]);
}

/// A reducer without a shape check: the fold itself must catch the mismatch.
#[derive(Archive, Serialize, Deserialize, Debug, PartialEq)]
#[rkyv(crate = taskfold::rkyv)]
struct Loose(Vec<u32>);

impl ReducerBody for Loose {
    fn fold(&mut self, other: &ArchivedLoose) -> Result<(), FoldError> {
        if other.0.len() != self.0.len() {
            return Err(FoldError::Mismatch {
                mine: self.0.len() as u64,
                theirs: other.0.len() as u64,
            });
        }
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a += b.to_native();
        }
        Ok(())
    }
}

#[test]
fn fold_errors_reach_every_rank() {
    let cluster = LocalCluster::new(3).unwrap();
    let futures: Vec<_> = cluster
        .ranks()
        .iter()
        .map(|rt| {
            rt.reduce(
                Loose(vec![1; 3 + rt.rank() as usize]),
                Reduce::root(0).id("loose"),
            )
            .unwrap()
        })
        .collect();
    for mut f in futures {
        assert!(matches!(
            f.wait_timeout(WAIT),
            Err(ReduceError::Fold {
                error: FoldError::Mismatch { .. },
                ..
            })
        ));
    }
}

#[test]
fn invalid_options_and_duplicate_ids() {
    let cluster = LocalCluster::new(3).unwrap();
    let rt = cluster.rank(0);
    assert!(matches!(
        rt.reduce(Sum(vec![1u32]), Reduce::root(5)),
        Err(ReduceError::InvalidOptions(_))
    ));
    assert!(matches!(
        rt.reduce(Sum(vec![1u32]), Reduce::root(1).group([1, 2])),
        Err(ReduceError::InvalidOptions(_))
    ));
    assert!(matches!(
        rt.reduce(Sum(vec![1u32]), Reduce::root(0).group([0, 0])),
        Err(ReduceError::InvalidOptions(_))
    ));
    assert!(matches!(
        rt.reduce(Sum(vec![1u32]), Reduce::root(0).id("")),
        Err(ReduceError::InvalidOptions(_))
    ));
    // A 100 KB id is refused with an error of a line, not echoed whole.
    match rt.reduce(Sum(vec![1u32]), Reduce::root(0).id("x".repeat(100_000))) {
        Err(e @ ReduceError::InvalidOptions(_)) => {
            let text = e.to_string();
            assert!(text.len() < 200, "{} bytes: {text}", text.len());
            assert!(text.contains("100000 bytes"), "{text}");
        }
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
    let live = rt
        .reduce(Sum(vec![1u32]), Reduce::root(0).id("dup"))
        .unwrap();
    assert_eq!(
        rt.reduce(Sum(vec![1u32]), Reduce::root(0).id("dup")).err(),
        Some(ReduceError::DuplicateId("dup".into()))
    );
    // Finish it; then the id is free again.
    let others: Vec<_> = [1, 2]
        .iter()
        .map(|&r| {
            cluster
                .rank(r)
                .reduce(Sum(vec![1u32]), Reduce::root(0).id("dup"))
                .unwrap()
        })
        .collect();
    let mut live = live;
    assert_eq!(live.wait_timeout(WAIT).unwrap().unwrap().0, vec![3]);
    for mut f in others {
        f.wait_timeout(WAIT).unwrap();
    }
    assert!(rt
        .reduce(Sum(vec![1u32]), Reduce::root(0).id("dup"))
        .is_ok());
}

#[test]
fn ranks_that_disagree_on_the_root_get_an_error() {
    let cluster = LocalCluster::new(2).unwrap();
    let a = cluster
        .rank(0)
        .reduce(Sum(vec![1u32]), Reduce::root(0).id("r"))
        .unwrap();
    let b = cluster
        .rank(1)
        .reduce(Sum(vec![1u32]), Reduce::root(1).id("r"))
        .unwrap();
    for mut f in [a, b] {
        assert!(matches!(
            f.wait_timeout(WAIT),
            Err(ReduceError::Mismatched { .. })
        ));
    }
}

#[test]
fn a_dead_rank_ends_the_reductions_that_need_it_without_a_hang() {
    let cluster = LocalCluster::with_config(
        4,
        Config {
            finalize_timeout: Duration::from_secs(5),
            ..Config::default()
        },
    )
    .unwrap();
    // Ranks 0, 1, 2 contribute; rank 3 dies before contributing.
    let futures: Vec<_> = (0..3)
        .map(|r| {
            cluster
                .rank(r)
                .reduce(Sum(vec![1u32; 8]), Reduce::root(1).id("x"))
                .unwrap()
        })
        .collect();
    cluster.kill(3);
    for mut f in futures {
        match f.wait_timeout(WAIT) {
            Err(ReduceError::RanksLost { ranks, .. }) => assert_eq!(ranks, vec![3]),
            other => panic!("expected RanksLost, got {other:?}"),
        }
    }
    // Reductions over the survivors still work.
    let fs: Vec<_> = (0..3)
        .map(|r| {
            cluster
                .rank(r)
                .reduce(Sum(vec![1u32]), Reduce::root(2).group([0, 1, 2]).id("y"))
                .unwrap()
        })
        .collect();
    let got: Vec<_> = fs
        .into_iter()
        .map(|mut f| f.wait_timeout(WAIT).unwrap())
        .collect();
    assert_eq!(got[2].as_ref().unwrap().0, vec![3]);
}

#[test]
fn futures_can_be_awaited() {
    let cluster = LocalCluster::new(2).unwrap();
    let fs: Vec<_> = cluster
        .ranks()
        .iter()
        .map(|rt| {
            rt.reduce(Sum(vec![2.5f64]), Reduce::root(0).id("await"))
                .unwrap()
        })
        .collect();
    let results = futures_lite_block_on(fs);
    assert_eq!(results[0].as_ref().unwrap().0, vec![5.0]);
}

fn futures_lite_block_on(fs: Vec<taskfold::ReduceFuture<Sum<f64>>>) -> Vec<Option<Sum<f64>>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut out = Vec::new();
        for f in fs {
            out.push(
                tokio::time::timeout(WAIT, f)
                    .await
                    .expect("timed out")
                    .unwrap(),
            );
        }
        out
    })
}

/// Counts archived folds, to show that ranks other than the root use them.
static ARCHIVED_FOLDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A user type with the optional archived fold.
#[derive(Archive, Serialize, Deserialize, Debug, PartialEq)]
#[rkyv(crate = taskfold::rkyv)]
struct Tally(Vec<u64>);

impl ReducerBody for Tally {
    fn fold(&mut self, other: &ArchivedTally) -> Result<(), FoldError> {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a += b.to_native();
        }
        Ok(())
    }

    fn shape(&self) -> Option<u64> {
        Some(self.0.len() as u64)
    }

    const FOLDS_ARCHIVES: bool = true;

    fn fold_archived(
        mine: taskfold::rkyv::seal::Seal<'_, ArchivedTally>,
        other: &ArchivedTally,
    ) -> Result<(), FoldError> {
        ARCHIVED_FOLDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        taskfold::rkyv::munge::munge!(let ArchivedTally(mine) = mine);
        let mut mine = taskfold::rkyv::vec::ArchivedVec::as_slice_seal(mine);
        for (a, b) in mine.iter_mut().zip(other.0.iter()) {
            *a = (a.to_native() + b.to_native()).into();
        }
        Ok(())
    }
}

#[test]
fn user_types_that_fold_archives_reduce_correctly() {
    let p = 8u32;
    let cluster = LocalCluster::new(p).unwrap();
    let len = 100_000;
    for round in 0..4u64 {
        let root = (round as u32 * 3) % p;
        let futures: Vec<_> = cluster
            .ranks()
            .iter()
            .map(|rt| {
                let v = (0..len as u64).map(|k| k * 10 + rt.rank() as u64).collect();
                rt.reduce(Tally(v), Reduce::root(root).id(format!("tally-{round}")))
                    .unwrap()
            })
            .collect();
        let want: Vec<u64> = (0..len as u64).map(|k| k * 10 * p as u64 + 28).collect();
        for (rank, mut f) in futures.into_iter().enumerate() {
            let got = f.wait_timeout(WAIT).unwrap();
            if rank as u32 == root {
                assert_eq!(got.unwrap().0, want, "round {round}");
            } else {
                assert!(got.is_none());
            }
        }
    }
    cluster.shutdown().unwrap();
    // Seven tasks per reduction and the root receives only some of them:
    // the others ran as archived folds on non-root ranks.
    assert!(ARCHIVED_FOLDS.load(std::sync::atomic::Ordering::Relaxed) > 0);
}

#[test]
fn in_place_arrays_reduce_like_vectors() {
    use taskfold::InPlace;
    for p in [1u32, 2, 5, 8] {
        let cluster = LocalCluster::new(p).unwrap();
        for root in [0, p - 1] {
            let futures: Vec<_> = cluster
                .ranks()
                .iter()
                .map(|rt| {
                    let mut mine = InPlace::<Sum<i64>>::zeroed(3000);
                    mine.as_mut_slice()
                        .copy_from_slice(&contribution(rt.rank(), 3000));
                    rt.reduce(mine, Reduce::root(root).id(format!("in-place-{p}-{root}")))
                        .unwrap()
                })
                .collect();
            let all: Vec<u32> = (0..p).collect();
            for (rank, mut f) in futures.into_iter().enumerate() {
                let got = f.wait_timeout(WAIT).unwrap();
                if rank as u32 == root {
                    assert_eq!(
                        got.unwrap().to_vec(),
                        expected(&all, 3000),
                        "p={p} root={root}"
                    );
                } else {
                    assert!(got.is_none());
                }
            }
        }
        cluster.shutdown().unwrap();
    }
}

/// The root's future completes when its last fold makes its value whole,
/// before the master's completion notice reaches it. A root that reuses
/// the id at once must get a new reduction that the old notice does not
/// end: every round's result is exact.
#[test]
fn a_root_that_reuses_an_id_at_once_is_not_ended_by_the_old_notice() {
    let p = 4u32;
    let root = 2u32;
    let cluster = LocalCluster::new(p).unwrap();
    let start = |rank: u32, round: i64| {
        let v: Vec<i64> = contribution(rank, 300)
            .into_iter()
            .map(|x| x + round)
            .collect();
        cluster
            .rank(rank)
            .reduce(Sum(v), Reduce::root(root).id("again"))
            .unwrap()
    };
    let all: Vec<u32> = (0..p).collect();
    let mut futures: Vec<_> = (0..p).map(|r| start(r, 0)).collect();
    for round in 0..30i64 {
        let got = futures[root as usize].wait_timeout(WAIT).unwrap().unwrap();
        let want: Vec<i64> = expected(&all, 300)
            .into_iter()
            .map(|x| x + round * i64::from(p))
            .collect();
        assert_eq!(got.0, want, "round {round}");
        // The root goes on at once; the others once their round ended.
        let last = round == 29;
        if !last {
            futures[root as usize] = start(root, round + 1);
        }
        for r in (0..p).filter(|&r| r != root) {
            assert!(futures[r as usize].wait_timeout(WAIT).unwrap().is_none());
            if !last {
                futures[r as usize] = start(r, round + 1);
            }
        }
    }
    cluster.shutdown().unwrap();
}

#[test]
fn reductions_beyond_the_limit_are_refused_and_the_live_ones_complete() {
    let cluster = LocalCluster::with_config(
        3,
        Config {
            max_reductions: 2,
            ..Config::default()
        },
    )
    .unwrap();
    let too_many = |r: Result<Option<Sum<u32>>, ReduceError>| {
        matches!(r, Err(ReduceError::TooManyReductions { limit: 2 }))
    };
    // On rank 1: two live reductions (rank 2 has not joined them), and a
    // third is refused at once.
    let open = |id: &str| {
        cluster
            .rank(1)
            .reduce(Sum(vec![1u32]), Reduce::root(1).group([1, 2]).id(id))
    };
    let (mut a, mut b) = (open("a").unwrap(), open("b").unwrap());
    assert!(matches!(
        open("c"),
        Err(ReduceError::TooManyReductions { limit: 2 })
    ));
    // Rank 0 has none live, but the master has two (once rank 1's joins
    // reached it: each waits in its queue for rank 2): its third fails.
    let deadline = std::time::Instant::now() + WAIT;
    while cluster.rank(0).master_stats().map_or(0, |m| m.queue_depth) < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "rank 1's joins never came"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let mut c = cluster
        .rank(0)
        .reduce(Sum(vec![1u32]), Reduce::root(0).group([0, 2]).id("c"))
        .unwrap();
    assert!(too_many(c.wait_timeout(WAIT)));
    // The live ones complete.
    let join = |id: &str, root: u32| {
        cluster
            .rank(2)
            .reduce(Sum(vec![2u32]), Reduce::root(root).group([1, 2]).id(id))
            .unwrap()
    };
    let (mut a2, mut b2) = (join("a", 1), join("b", 1));
    for f in [&mut a, &mut b] {
        assert_eq!(f.wait_timeout(WAIT).unwrap().unwrap().0, vec![3]);
    }
    for f in [&mut a2, &mut b2] {
        assert!(f.wait_timeout(WAIT).unwrap().is_none());
    }
    // The refused one's other member hears the same.
    let mut c2 = cluster
        .rank(2)
        .reduce(Sum(vec![1u32]), Reduce::root(0).group([0, 2]).id("c"))
        .unwrap();
    assert!(too_many(c2.wait_timeout(WAIT)));
    // Room again: a new reduction completes.
    let fs: Vec<_> = (0..3)
        .map(|r| {
            cluster
                .rank(r)
                .reduce(Sum(vec![1u32]), Reduce::root(0).id("d"))
                .unwrap()
        })
        .collect();
    let got: Vec<_> = fs
        .into_iter()
        .map(|mut f| f.wait_timeout(WAIT).unwrap())
        .collect();
    assert_eq!(got[0].as_ref().unwrap().0, vec![3]);
}
