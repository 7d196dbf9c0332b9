//! A master that dies with a standby, over the serialising loopback: the
//! standby takes over, rebuilds every live reduction from what the
//! workers hold, and they end with the right result — whether the dead
//! master had joined them or not, and whatever had been folded before
//! (the book's Fault tolerance chapter, A master that dies).

use std::time::{Duration, Instant};
use taskfold::{Config, Durability, LocalCluster, Reduce, ReduceError, Standby, Sum};
use taskfold_tests::faults::{contribution, held, release};

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

/// A master that falls silent (it stops pinging) is replaced like a dead
/// one: within the failure timeout and one ping period every other rank
/// turns to the standby, which then runs the reductions; none hangs.
#[test]
fn a_silent_master_is_replaced_within_the_timeout_and_one_period() {
    use std::sync::Arc;
    use taskfold::Runtime;
    use taskfold_transports::loopback::LoopbackHub;
    use taskfold_transports::Transport;
    let (period, timeout) = (Duration::from_millis(50), Duration::from_millis(400));
    let quiet = Config {
        ping_period: Duration::from_secs(3600),
        finalize_timeout: Duration::from_secs(1),
        ..config(Durability::Sync)
    };
    let watching = Config {
        ping_period: period,
        failure_timeout: timeout,
        ..config(Durability::Sync)
    };
    let (_hub, ts) = LoopbackHub::new(3);
    let t = Instant::now();
    let mut rts: Vec<Runtime> = ts
        .into_iter()
        .enumerate()
        .map(|(r, tr)| {
            let c = if r == 0 { &quiet } else { &watching };
            Runtime::start(tr as Arc<dyn Transport>, c.clone()).unwrap()
        })
        .collect();
    assert!(rts[1].master_stats().is_none(), "rank 1 is no master yet");
    // Reductions over ranks 1 and 2 keep completing: under rank 0, then,
    // once it is found silent, under rank 1.
    let mut n = 0u64;
    while t.elapsed() < timeout + period + Duration::from_millis(600) {
        let opts = |id: String| Reduce::root(2).group(vec![1, 2]).id(id);
        let fs: Vec<_> = [1u32, 2]
            .iter()
            .map(|&r| {
                rts[r as usize]
                    .reduce(Sum(value(r, n)), opts(format!("s{n}")))
                    .unwrap()
            })
            .collect();
        for (r, mut f) in [1u32, 2].into_iter().zip(fs) {
            let got = f.wait_timeout(Duration::from_secs(10)).unwrap();
            if r == 2 {
                assert_eq!(got.unwrap().0, expected(1..3, n), "reduction {n}");
            }
        }
        n += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = rts[1].master_stats().expect("rank 1 runs the master now");
    assert!(stats.reductions_completed > 0, "{stats:?}");
    assert_eq!(stats.dead, vec![0], "{stats:?}");
    // Ranks 1 and 2 finalize together under rank 1; rank 0, replaced,
    // hears from nobody and gives up after its finalize timeout.
    let (r2, r1) = (rts.pop().unwrap(), rts.pop().unwrap());
    let other = std::thread::spawn(move || r2.shutdown());
    r1.shutdown().unwrap();
    other.join().unwrap().unwrap();
    assert!(rts.pop().unwrap().shutdown().is_err());
}

/// Asynchronous durability across nodes, the master (rank 0, node 1) held
/// once its disk copy is written, before its join or its buddy offer left
/// it, and killed there. The standby (rank 2, node 2) cannot read node 1's
/// disk and was never told of the copy; rank 1, the master's node-mate,
/// takes it up and lists it in its report, and the reduction ends exact.
/// Returns what each survivor got, by rank from 1. How rank 1, the
/// node-mate, knows the reduction when the master dies: `Started` (it
/// reduced before the kill), `Ended` (an earlier reduction with the same
/// id completed everywhere; it starts this one after the kill).
fn masters_disk_copy_across_nodes(nodes: Vec<u64>, mate: Mate) -> Vec<Outcome> {
    let job = NodesJob::start(nodes, "dw");
    let hooks = job.hooks.path();
    if mate == Mate::Ended {
        let f0 = job.reduce(0, "dw");
        held(hooks, &[0], "disk-written");
        release(hooks, 0, "disk-written");
        for (r, g) in (1..).zip(job.reduce_on_survivors("dw")) {
            g.unwrap_or_else(|e| panic!("rank {r}, first reduction: {e}"));
        }
        drop(f0);
        for f in ["held-0-disk-written", "release-0-disk-written"] {
            std::fs::remove_file(hooks.join(f)).unwrap();
        }
        // A member's future completes once its data is in; its reduction
        // ends with the master's completion notice, a little later. A
        // copy written before that end (and a coarse tick) could be the
        // earlier reduction's, and is not trusted: the next step comes
        // later, as an application's does.
        std::thread::sleep(Duration::from_millis(50));
    }
    let _f0 = job.reduce(0, "dw");
    held(hooks, &[0], "disk-written");
    let f1 = (mate == Mate::Started).then(|| job.reduce(1, "dw"));
    if f1.is_some() {
        // Its reduction reaches its worker (a command away) before the
        // master dies.
        std::thread::sleep(Duration::from_millis(100));
    }
    job.cluster.kill(0);
    let n = job.cluster.ranks().len() as u32;
    let later = (1..n).filter(|&r| r != 1 || f1.is_none());
    let fs: Vec<_> = later.map(|r| (r, job.reduce(r, "dw"))).collect();
    let mut got: Vec<(u32, Outcome)> = fs
        .into_iter()
        .map(|(r, mut f)| (r, f.wait_timeout(Duration::from_secs(30))))
        .collect();
    if let Some(mut f) = f1 {
        got.push((1, f.wait_timeout(Duration::from_secs(30))));
    }
    got.sort_by_key(|(r, _)| *r);
    got.into_iter().map(|(_, g)| g).collect()
}

/// See [`masters_disk_copy_across_nodes`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mate {
    Started,
    Ended,
    Later,
}

/// A job on simulated nodes with a replica directory each, asynchronous
/// durability, rank 0 held once its disk copy of `id` is written.
struct NodesJob {
    hooks: tempfile::TempDir,
    replicas: tempfile::TempDir,
    cluster: LocalCluster,
}

impl NodesJob {
    fn start(nodes: Vec<u64>, id: &str) -> NodesJob {
        use taskfold::hooks::{Hook, Point};
        let (hooks, replicas) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let config = Config {
            replica_dir: Some(replicas.path().to_path_buf()),
            hooks: vec![Hook {
                rank: 0,
                point: Point::DiskWritten,
                id: id.into(),
                dir: hooks.path().to_path_buf(),
            }],
            ..config(Durability::Async)
        };
        let cluster = LocalCluster::with_nodes(nodes, config).unwrap();
        // File times come from a coarse clock (a tick of a few ms): a copy
        // written within a tick of the ranks' start could pass for an
        // older file, and is not trusted. A real job's bootstrap takes
        // longer.
        std::thread::sleep(Duration::from_millis(50));
        NodesJob {
            hooks,
            replicas,
            cluster,
        }
    }

    fn reduce(&self, r: u32, id: &str) -> taskfold::ReduceFuture<Sum<i64>> {
        let opts = Reduce::root(2).id(id);
        self.cluster
            .rank(r)
            .reduce(contribution(r, 1000), opts)
            .unwrap()
    }

    /// Every rank but 0 reduces `id`; what each got, by rank from 1.
    fn reduce_on_survivors(&self, id: &str) -> Vec<Outcome> {
        let n = self.cluster.ranks().len() as u32;
        let fs: Vec<_> = (1..n).map(|r| self.reduce(r, id)).collect();
        fs.into_iter()
            .map(|mut f| f.wait_timeout(Duration::from_secs(30)))
            .collect()
    }

    /// Where rank 0 keeps its disk copy of `id` (node 1's directory).
    fn masters_copy(&self, id: &str) -> std::path::PathBuf {
        let id = taskfold_core::ReductionId::new(id).unwrap();
        let n = self.cluster.ranks().len() as u32;
        let key = taskfold_core::ReductionKey::of(&id, &taskfold_core::Group::world(n)).0;
        self.replicas
            .path()
            .join(format!("node-1/rank-0/{key:016x}-0.replica"))
    }
}

type Outcome = Result<Option<Sum<i64>>, ReduceError>;

fn exact(got: Vec<Outcome>) {
    for (r, g) in (1..).zip(got) {
        let g = g.unwrap_or_else(|e| panic!("rank {r}: {e}"));
        if r == 2 {
            let sum = g.expect("the root holds the result").0;
            assert_eq!(sum, taskfold_tests::faults::full_sum(N, 1000));
        }
    }
}

fn lost_rank_0(got: Vec<Outcome>) {
    for (r, g) in (1..).zip(got) {
        match g {
            Err(ReduceError::RanksLost { ranks, .. }) => assert_eq!(ranks, vec![0], "rank {r}"),
            other => panic!("rank {r}: expected RanksLost naming rank 0, got {other:?}"),
        }
    }
}

#[test]
fn across_nodes_the_masters_disk_copy_is_taken_up_by_its_node_mate() {
    exact(masters_disk_copy_across_nodes(
        vec![1, 1, 2, 2, 2],
        Mate::Started,
    ));
}

#[test]
fn a_node_mate_takes_up_the_masters_copy_of_a_reduction_it_starts_later() {
    // It knows the id's group from the earlier reduction: its own.
    exact(masters_disk_copy_across_nodes(
        vec![1, 1, 2, 2, 2],
        Mate::Ended,
    ));
}

#[test]
fn a_node_mate_takes_up_nothing_of_a_reduction_it_never_saw() {
    // The key may be a group's without rank 1 (it cannot tell), whose
    // earlier reduction could have left the file: not taken.
    lost_rank_0(masters_disk_copy_across_nodes(
        vec![1, 1, 2, 2, 2],
        Mate::Later,
    ));
}

#[test]
fn across_nodes_the_masters_disk_copy_alone_on_its_node_is_lost() {
    // No rank left on its node: nobody can read the copy.
    lost_rank_0(masters_disk_copy_across_nodes(
        vec![1, 2, 2, 2, 2],
        Mate::Started,
    ));
}

#[test]
fn a_stale_disk_copy_of_the_dead_master_is_not_taken_up() {
    // Rank 0's copy of "dw" is saved while the reduction runs, and put
    // back (its time unchanged) once the reduction completed everywhere;
    // then rank 0 dies, and the others reduce "dw" again without it. The
    // file predates the completion its node-mate saw: it may be (it is)
    // the earlier reduction's, and is not taken for the new one's.
    let job = NodesJob::start(vec![1, 1, 2, 2, 2], "dw");
    let path = job.masters_copy("dw");
    let saved = job.replicas.path().join("saved");
    let f0 = job.reduce(0, "dw");
    held(job.hooks.path(), &[0], "disk-written");
    std::fs::copy(&path, &saved).unwrap();
    release(job.hooks.path(), 0, "disk-written");
    for (r, g) in (1..).zip(job.reduce_on_survivors("dw")) {
        g.unwrap_or_else(|e| panic!("rank {r}, first reduction: {e}"));
    }
    drop(f0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while path.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5)); // its removal
    }
    std::fs::rename(&saved, &path).unwrap();
    job.cluster.kill(0);
    for (r, g) in (1..).zip(job.reduce_on_survivors("dw")) {
        match g {
            Err(ReduceError::RanksLost { ranks, .. }) => assert_eq!(ranks, vec![0], "rank {r}"),
            other => panic!("rank {r}: expected RanksLost naming rank 0, got {other:?}"),
        }
    }
}

/// The master (rank 0) and its standby (rank 1) die close together, and
/// rank 3 saw both deaths first: it reports to rank 2, the next standby,
/// while rank 2 still follows rank 0 and names rank 1 its successor.
/// Rank 2 keeps that report, takes over once it hears of the deaths, and
/// goes on; dropped, the report would never come again and the takeover
/// would wait for it as long as rank 3 lives. Rank 3 is played here by
/// its transport alone, so that its report is sent exactly then.
#[test]
fn a_report_that_reaches_the_next_standby_before_it_heard_of_the_deaths_is_kept() {
    use std::sync::Arc;
    use taskfold::Runtime;
    use taskfold_core::wire::{self, Msg, Rejoin};
    use taskfold_core::Rank;
    use taskfold_transports::loopback::LoopbackHub;
    use taskfold_transports::Transport;
    let c = Config {
        failure_timeout: Duration::from_secs(60),
        finalize_timeout: Duration::from_secs(2),
        ..config(Durability::Sync)
    };
    let (hub, mut ts) = LoopbackHub::new(4);
    let puppet = ts.pop().unwrap();
    let rts: Vec<Runtime> = ts
        .into_iter()
        .map(|t| Runtime::start(t as Arc<dyn Transport>, c.clone()).unwrap())
        .collect();
    let report = Rejoin {
        rank: 3,
        lost: 1,
        ..Rejoin::default()
    };
    let frame = wire::encode(&Msg::Rejoin(report));
    puppet.send(Rank(2), frame.into()).unwrap();
    // Rank 2 takes the report in while rank 0 is its master.
    std::thread::sleep(Duration::from_millis(300));
    assert!(rts[2].master_stats().is_none(), "rank 2 is no master yet");
    hub.kill(Rank(0));
    hub.kill(Rank(1));
    // Under rank 2, once every live rank's report is in, a reduction of
    // its own completes.
    let opts = Reduce::root(2).group(vec![2]).id("after");
    let mut f = rts[2].reduce(Sum(value(2, 0)), opts).unwrap();
    let got = f.wait_timeout(Duration::from_secs(10));
    assert_eq!(got.unwrap().unwrap().0, expected(2..3, 0));
    let stats = rts[2].master_stats().expect("rank 2 runs the master now");
    assert_eq!(stats.dead, vec![0, 1], "{stats:?}");
    hub.kill(Rank(3));
    for r in rts {
        let _ = r.shutdown();
    }
}
