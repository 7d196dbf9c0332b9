//! Failures during a reduction, made deterministic with test hooks, over the
//! serialising loopback (the book's Architecture chapter, Failures during a
//! reduction): the three places a failure can strike are recovered;
//! unrecoverable failures end with typed errors.

use std::path::Path;
use std::time::{Duration, Instant};
use taskfold::hooks::{Hook, Point};
use taskfold::{Config, Durability, LocalCluster, Reduce, ReduceError, ReduceFuture, Sum};
use taskfold_tests::faults::{contribution, full_sum, held, hook, release, root_result};

const WAIT: Duration = Duration::from_secs(30);
const LEN: usize = 10_000;

fn config(hooks: Vec<Hook>) -> Config {
    Config {
        finalize_timeout: Duration::from_secs(5),
        durability: Durability::Sync,
        hooks,
        ..Config::default()
    }
}

fn start(c: &LocalCluster, rank: u32, id: &str) -> ReduceFuture<Sum<i64>> {
    c.rank(rank)
        .reduce(contribution(rank, LEN), Reduce::root(1).id(id))
        .unwrap()
}

fn wait_dead(c: &LocalCluster, rank: u32) {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if c.rank(0)
            .master_stats()
            .is_some_and(|s| s.dead.contains(&rank))
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("rank {rank} was not declared failed");
}

/// Ranks 2 and 3 contribute first and are paired; the test then acts on
/// the pair; ranks 0 and 1 (the root) contribute afterwards.
fn survivors_get_the_full_sum(
    c: &LocalCluster,
    futures: Vec<(u32, ReduceFuture<Sum<i64>>)>,
    dead: u32,
) {
    let sum = root_result(futures, dead, 1, WAIT);
    assert_eq!(sum.0, full_sum(4, LEN), "the recovered result is exact");
    let _ = c;
}

#[test]
fn place_2_the_receiver_dies_while_folding() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c = LocalCluster::with_config(
        4,
        config(vec![
            hook(2, Point::BeforeFold, "p2", d),
            hook(3, Point::BeforeFold, "p2", d),
        ]),
    )
    .unwrap();
    let mut fs = vec![(2, start(&c, 2, "p2")), (3, start(&c, 3, "p2"))];
    let victim = held(d, &[2, 3], "before-fold");
    c.kill(victim);
    // The survivor of the pair may receive a task later: let it fold.
    release(d, 5 - victim, "before-fold");
    fs.push((0, start(&c, 0, "p2")));
    fs.push((1, start(&c, 1, "p2")));
    survivors_get_the_full_sum(&c, fs, victim);
}

#[test]
fn place_3_the_provider_dies_while_the_receiver_fetches() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c = LocalCluster::with_config(
        4,
        config(vec![
            hook(2, Point::BeforeGet, "p3", d),
            hook(3, Point::BeforeGet, "p3", d),
        ]),
    )
    .unwrap();
    let mut fs = vec![(2, start(&c, 2, "p3")), (3, start(&c, 3, "p3"))];
    let receiver = held(d, &[2, 3], "before-get");
    let provider = 5 - receiver;
    c.kill(provider);
    wait_dead(&c, provider);
    release(d, receiver, "before-get");
    fs.push((0, start(&c, 0, "p3")));
    fs.push((1, start(&c, 1, "p3")));
    survivors_get_the_full_sum(&c, fs, provider);
    let stats = c.rank(0).master_stats().unwrap();
    assert!(
        stats
            .task_log
            .iter()
            .any(|t| t.provider == provider && t.provider_path == [provider] && t.task_id > 0),
        "the dead provider's original was fetched again, from its replica: {:?}",
        stats.task_log
    );
}

#[test]
fn place_1_the_receiver_is_dead_when_its_task_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c = LocalCluster::with_config(4, config(vec![hook(2, Point::AfterJoin, "p1", d)])).unwrap();
    let mut fs = vec![(2, start(&c, 2, "p1"))];
    held(d, &[2], "after-join");
    c.kill(2);
    wait_dead(&c, 2);
    for r in [3, 0, 1] {
        fs.push((r, start(&c, r, "p1")));
    }
    survivors_get_the_full_sum(&c, fs, 2);
}

#[test]
fn a_rank_and_its_buddy_dying_together_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c = LocalCluster::with_config(4, config(vec![hook(2, Point::AfterJoin, "b", d)])).unwrap();
    let f2 = start(&c, 2, "b");
    held(d, &[2], "after-join");
    // Rank 2's original lives only on rank 2 and its buddy, rank 3.
    c.kill(2);
    c.kill(3);
    drop(f2);
    for r in [0, 1] {
        match start(&c, r, "b").wait_timeout(WAIT) {
            Err(ReduceError::RanksLost { ranks, .. }) => {
                assert!(ranks.contains(&2) && ranks.contains(&3), "{ranks:?}")
            }
            other => panic!("rank {r}: expected RanksLost, got {other:?}"),
        }
    }
}

/// A joined original whose buddy dies is copied again to the next buddy:
/// rank 2's copy is at rank 3; once rank 3 died, rank 2 offers its
/// original to rank 0, so that rank 2 dying afterwards loses nothing.
#[test]
fn an_original_whose_buddy_died_is_copied_to_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c = LocalCluster::with_config(
        4,
        config(vec![
            hook(2, Point::AfterJoin, "rb", d),
            hook(3, Point::AfterJoin, "rb", d),
        ]),
    )
    .unwrap();
    let f2 = start(&c, 2, "rb");
    let f3 = start(&c, 3, "rb");
    held(d, &[2], "after-join");
    held(d, &[3], "after-join");
    c.kill(3);
    wait_dead(&c, 3);
    release(d, 2, "after-join");
    // Time for rank 0 to take the new copy before its owner dies.
    std::thread::sleep(Duration::from_secs(1));
    c.kill(2);
    wait_dead(&c, 2);
    drop((f2, f3));
    let mut f0 = start(&c, 0, "rb");
    let mut f1 = start(&c, 1, "rb");
    let sum = f1
        .wait_timeout(WAIT)
        .unwrap_or_else(|e| panic!("rank 1: {e}"))
        .expect("the root holds the result");
    assert_eq!(sum.0, full_sum(4, LEN), "the recovered result is exact");
    f0.wait_timeout(WAIT).expect("rank 0 ends its reduction");
}

#[test]
fn losing_the_root_is_a_typed_error_on_every_survivor() {
    let c = LocalCluster::with_config(4, config(vec![])).unwrap();
    let fs: Vec<_> = [0, 2, 3]
        .iter()
        .map(|&r| (r, start(&c, r, "root")))
        .collect();
    c.kill(1);
    for (r, mut f) in fs {
        match f.wait_timeout(WAIT) {
            Err(ReduceError::RootLost { root, .. }) => assert_eq!(root, 1),
            other => panic!("rank {r}: expected RootLost, got {other:?}"),
        }
    }
}

#[test]
fn reductions_after_a_failure_use_the_survivors() {
    let c = LocalCluster::with_config(4, config(vec![])).unwrap();
    c.kill(3);
    wait_dead(&c, 3);
    let fs: Vec<_> = [0, 1, 2]
        .iter()
        .map(|&r| {
            c.rank(r)
                .reduce(
                    Sum(vec![r as u64 + 1]),
                    Reduce::root(0).group([0, 1, 2]).id("after"),
                )
                .unwrap()
        })
        .collect();
    let got: Vec<_> = fs
        .into_iter()
        .map(|mut f| f.wait_timeout(WAIT).unwrap())
        .collect();
    assert_eq!(got[0].as_ref().unwrap().0, vec![6]);
}

/// `Durability::Off`: a reduction makes no copies (no replica file, no
/// buddy), still gives the exact sum, and a rank that dies before its
/// contribution was folded ends the reduction with a typed error naming it.
#[test]
fn durability_off_makes_no_copies_and_a_loss_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let replicas = tempfile::tempdir().unwrap();
    let c = LocalCluster::with_config(
        4,
        Config {
            durability: Durability::Off,
            replica_dir: Some(replicas.path().to_path_buf()),
            ..config(vec![
                hook(2, Point::BeforeFold, "off-2", d),
                hook(3, Point::BeforeFold, "off-2", d),
            ])
        },
    )
    .unwrap();
    let fs: Vec<_> = (0..4).map(|r| (r, start(&c, r, "off-1"))).collect();
    survivors_get_the_full_sum(&c, fs, u32::MAX);
    let files = walk_files(replicas.path());
    assert!(files.is_empty(), "no copies with durability off: {files:?}");

    let mut fs = vec![(2, start(&c, 2, "off-2")), (3, start(&c, 3, "off-2"))];
    let victim = held(d, &[2, 3], "before-fold");
    c.kill(victim);
    release(d, 5 - victim, "before-fold");
    fs.push((0, start(&c, 0, "off-2")));
    fs.push((1, start(&c, 1, "off-2")));
    for (r, mut f) in fs.into_iter().filter(|(r, _)| *r != victim) {
        match f.wait_timeout(WAIT) {
            Err(ReduceError::RanksLost { ranks, .. }) => {
                assert!(ranks.contains(&victim), "rank {r}: {ranks:?}")
            }
            other => panic!("rank {r}: expected RanksLost, got {other:?}"),
        }
    }
}

fn walk_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// What a survivor's reduction ended with.
type Outcome = Result<Option<Sum<i64>>, ReduceError>;

/// Asynchronous durability; rank 2 is held once its original is on its
/// disk, before its join and its buddy offer leave it, and is killed there.
/// Returns what the survivors got and the master's count of inferred copies.
fn killed_after_the_disk_write(replica_dir: Option<std::path::PathBuf>) -> (Vec<Outcome>, u64) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c = LocalCluster::with_config(
        4,
        Config {
            durability: Durability::Async,
            replica_dir,
            ..config(vec![hook(2, Point::DiskWritten, "dw", d)])
        },
    )
    .unwrap();
    let _f2 = start(&c, 2, "dw");
    held(d, &[2], "disk-written");
    let fs: Vec<_> = [0, 1, 3].iter().map(|&r| start(&c, r, "dw")).collect();
    c.kill(2);
    let got = fs.into_iter().map(|mut f| f.wait_timeout(WAIT)).collect();
    (got, c.rank(0).master_stats().unwrap().disk_copies_inferred)
}

#[test]
fn with_a_shared_replica_directory_an_unannounced_disk_copy_is_inferred() {
    let replicas = tempfile::tempdir().unwrap();
    let (got, inferred) = killed_after_the_disk_write(Some(replicas.path().to_path_buf()));
    for (i, g) in got.into_iter().enumerate() {
        let g = g.unwrap_or_else(|e| panic!("survivor {i}: {e}"));
        if i == 1 {
            assert_eq!(
                g.unwrap().0,
                full_sum(4, LEN),
                "the recovered result is exact"
            );
        }
    }
    assert_eq!(inferred, 1);
}

#[test]
fn with_per_process_replica_directories_an_unannounced_disk_copy_is_lost() {
    // The default: each rank's directory is its own; the master cannot
    // know where a dead rank's copy is, so the original is lost.
    let (got, inferred) = killed_after_the_disk_write(None);
    for g in got {
        match g {
            Err(ReduceError::RanksLost { ranks, .. }) => assert_eq!(ranks, vec![2]),
            other => panic!("expected RanksLost, got {other:?}"),
        }
    }
    assert_eq!(inferred, 0);
}

/// Place 2 again, with contributions built in their wire form: the dead
/// receiver's original comes back from its buddy, the survivor reloads its
/// own, and the root's `InPlace` result is exact.
#[test]
fn in_place_contributions_recover_like_vectors() {
    use taskfold::InPlace;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c = LocalCluster::with_config(
        4,
        config(vec![
            hook(2, Point::BeforeFold, "ip", d),
            hook(3, Point::BeforeFold, "ip", d),
        ]),
    )
    .unwrap();
    let start = |r: u32| {
        c.rank(r)
            .reduce(
                InPlace::<Sum<i64>>::from_slice(&contribution(r, LEN).0),
                Reduce::root(1).id("ip"),
            )
            .unwrap()
    };
    let mut fs = vec![(2, start(2)), (3, start(3))];
    let victim = held(d, &[2, 3], "before-fold");
    c.kill(victim);
    release(d, 5 - victim, "before-fold");
    fs.push((0, start(0)));
    fs.push((1, start(1)));
    assert_eq!(
        root_result(fs, victim, 1, WAIT).to_vec(),
        full_sum(4, LEN),
        "the recovered result is exact"
    );
}
