//! Allreduce and broadcast when the master dies with a standby, over the
//! serialising loopback (the book's Architecture chapter, "Allreduce and
//! broadcast", What a peer's failure does): the master coordinates every
//! spread of a value; when it dies, every live member reports what it
//! holds and wants to the standby, which rebuilds the spreads, and every
//! survivor gets the value — before, while and after it exists.

use std::time::{Duration, Instant};
use taskfold::hooks::{Hook, Point};
use taskfold::{Config, Durability, LocalCluster, Reduce, SpreadFuture, Standby, Sum};
use taskfold_tests::faults::{contribution, full_sum, held, hook, release};

const WAIT: Duration = Duration::from_secs(30);
const LEN: usize = 10_000;
const N: u32 = 5;
const ROOT: u32 = 2;

fn cluster(hooks: Vec<Hook>) -> LocalCluster {
    let config = Config {
        standby: Standby::On,
        durability: Durability::Sync,
        finalize_timeout: Duration::from_secs(5),
        hooks,
        ..Config::default()
    };
    LocalCluster::with_config(N, config).unwrap()
}

fn start(c: &LocalCluster, rank: u32, id: &str) -> SpreadFuture<Sum<i64>> {
    c.rank(rank)
        .allreduce(contribution(rank, LEN), Reduce::root(ROOT).id(id))
        .unwrap()
}

/// Waits until the standby (rank 1) has taken over from rank 0.
fn wait_taken_over(c: &LocalCluster) {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if c.rank(1)
            .master_stats()
            .is_some_and(|s| s.dead.contains(&0))
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("the standby never took over");
}

fn expect_sum(mut f: SpreadFuture<Sum<i64>>, rank: u32) {
    match f.wait_timeout(WAIT) {
        Ok(s) => assert_eq!(s.0, full_sum(N, LEN), "rank {rank}"),
        Err(e) => panic!("rank {rank}: {e:?}"),
    }
}

/// Before any member has the result: the root holds it, unshared, when
/// the master dies; the standby rebuilds the spread from the root's
/// report and every survivor gets the full sum.
#[test]
fn the_master_dead_before_the_result_spreads_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c = cluster(vec![hook(ROOT, Point::BeforeShare, "pre", d)]);
    let fs: Vec<_> = (0..N).map(|r| (r, start(&c, r, "pre"))).collect();
    held(d, &[ROOT], "before-share");
    c.kill(0);
    wait_taken_over(&c);
    release(d, ROOT, "before-share");
    for (r, f) in fs.into_iter().filter(|(r, _)| *r != 0) {
        expect_sum(f, r);
    }
}

/// While the result is fetched: some members have it, one is held before
/// its fetch when the master dies; it fetches under the standby.
#[test]
fn the_master_dead_while_a_member_fetches_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let c = cluster(vec![hook(4, Point::BeforeSpreadGet, "mid", d)]);
    let mut fs: Vec<_> = (0..N).map(|r| (r, start(&c, r, "mid"))).collect();
    held(d, &[4], "before-spread-get");
    let rest = fs.split_off(4);
    for (r, f) in fs {
        expect_sum(f, r);
    }
    c.kill(0);
    wait_taken_over(&c);
    release(d, 4, "before-spread-get");
    for (r, f) in rest {
        expect_sum(f, r);
    }
}

/// Before every member joined: the reduction is rebuilt by the standby
/// and its spread starts there; the job then goes on with allreduces
/// over the survivors.
#[test]
fn the_master_dead_before_every_member_joined_loses_nothing() {
    let c = cluster(vec![]);
    let early: Vec<_> = [0, 2, 3]
        .iter()
        .map(|&r| (r, start(&c, r, "late")))
        .collect();
    let mut late = vec![(1, start(&c, 1, "late"))];
    std::thread::sleep(Duration::from_millis(20));
    // Rank 4 has not contributed: the result cannot exist yet.
    c.kill(0);
    wait_taken_over(&c);
    late.push((4, start(&c, 4, "late")));
    for (r, f) in early.into_iter().filter(|(r, _)| *r != 0).chain(late) {
        expect_sum(f, r);
    }
    let group = [1u32, 2, 3, 4];
    for round in 0..3u64 {
        let fs: Vec<_> = group
            .iter()
            .map(|&r| {
                let opts = Reduce::root(ROOT).group(group).id("after");
                c.rank(r)
                    .allreduce(Sum(vec![r as u64 + round; 64]), opts)
                    .unwrap()
            })
            .collect();
        for mut f in fs {
            assert_eq!(f.wait_timeout(WAIT).unwrap().0, vec![10 + 4 * round; 64]);
        }
    }
}

/// A broadcast whose root has the value when the master dies, before any
/// other member asked: every survivor gets it under the standby.
#[test]
fn a_broadcast_survives_the_master() {
    let c = cluster(vec![]);
    let value = vec![2.5f64; 40_000];
    let root = c
        .rank(ROOT)
        .broadcast(Some(value.clone()), Reduce::root(ROOT).id("b"))
        .unwrap();
    let mut first = c
        .rank(3)
        .broadcast::<Vec<f64>>(None, Reduce::root(ROOT).id("b"))
        .unwrap();
    assert_eq!(first.wait_timeout(WAIT).unwrap(), value);
    c.kill(0);
    wait_taken_over(&c);
    for r in [1, 4] {
        let mut f = c
            .rank(r)
            .broadcast::<Vec<f64>>(None, Reduce::root(ROOT).id("b"))
            .unwrap();
        assert_eq!(f.wait_timeout(WAIT).unwrap(), value, "rank {r}");
    }
    assert_eq!(root.get().unwrap(), value);
}

/// Every rank runs `STEPS` allreduces one after the other, each from a
/// thread of its own, and the master is killed `kill_after` into the
/// run (`None`: never). Each step's outcomes at the survivors: all the
/// full sum, or all the same typed error (the master had not joined).
fn run_steps(kill_after: Option<Duration>) -> (Duration, Vec<Result<(), String>>) {
    const STEPS: u32 = 4;
    let owned = cluster(vec![]);
    let c = &owned;
    let killed = std::sync::atomic::AtomicBool::new(false);
    let killed = &killed;
    let started = Instant::now();
    let outcomes = std::thread::scope(|s| {
        let threads: Vec<_> = (1..N)
            .map(|r| {
                s.spawn(move || {
                    (0..STEPS)
                        .map(|i| {
                            let opts = Reduce::root(ROOT).id(format!("s{i}"));
                            let f = c.rank(r).allreduce(contribution(r, LEN), opts);
                            f.map_err(|e| format!("{e:?}"))
                                .and_then(|mut f| {
                                    f.wait_timeout(WAIT).map_err(|e| format!("{e:?}"))
                                })
                                .map(|s| s.0)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let master = s.spawn(move || {
            for i in 0..STEPS {
                let opts = Reduce::root(ROOT).id(format!("s{i}"));
                let Ok(f) = c.rank(0).allreduce(contribution(0, LEN), opts) else {
                    return;
                };
                // A killed rank's future never ends: stop waiting then.
                let until = Instant::now() + WAIT;
                while !f.is_done() && Instant::now() < until {
                    if killed.load(std::sync::atomic::Ordering::SeqCst) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
        if let Some(after) = kill_after {
            std::thread::sleep(after);
            c.kill(0);
            killed.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let got: Vec<Vec<_>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        master.join().unwrap();
        got
    });
    let took = started.elapsed();
    let steps = (0..STEPS as usize)
        .map(|i| {
            let first = &outcomes[0][i];
            if outcomes.iter().any(|o| &o[i] != first) {
                return Err(format!("step {i}: survivors differ"));
            }
            match first {
                Ok(sum) if *sum == full_sum(N, LEN) => Ok(()),
                Ok(_) => Err(format!("step {i}: a wrong sum")),
                Err(e) if e.starts_with("RanksLost") => Ok(()),
                Err(e) => Err(format!("step {i}: {e}")),
            }
        })
        .collect();
    (took, steps)
}

/// The master dies at instants drawn over the whole run of allreduces
/// (before, while and after each value exists): every survivor ends every
/// step alike, with the full sum or, for a step the master had not
/// joined, the same typed error — never a hang, a wrong sum or
/// `MasterLost`.
#[test]
fn the_master_dead_at_any_instant_leaves_every_survivor_alike() {
    let (span, steps) = run_steps(None);
    assert!(steps.iter().all(Result::is_ok), "failure-free: {steps:?}");
    // A fixed seed: the same instants on every run.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for trial in 0..40 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let at = span.mul_f64((x % 1000) as f64 / 1000.0);
        let (_, steps) = run_steps(Some(at));
        for s in steps {
            assert!(
                s.is_ok(),
                "trial {trial}, kill at {at:?} of {span:?}: {s:?}"
            );
        }
    }
}
