//! A lost master over the serialising loopback: every other rank ends its
//! live reductions, and everything it asks of the master later, with
//! `MasterLost` — at once when the master dies, within the failure
//! timeout and one ping period when it falls silent (the book's Fault
//! tolerance chapter, A lost master).

use std::sync::Arc;
use std::time::{Duration, Instant};
use taskfold::{Config, LocalCluster, Reduce, ReduceError, ReduceFuture, Runtime, Sum};
use taskfold_transports::loopback::LoopbackHub;
use taskfold_transports::Transport;

/// Ranks 1..n start a reduction rank 0 never joins (it cannot complete).
fn in_flight(ranks: &[&Runtime]) -> Vec<ReduceFuture<Sum<u64>>> {
    ranks
        .iter()
        .map(|rt| {
            rt.reduce(Sum(vec![rt.rank() as u64; 64]), Reduce::root(1).id("stuck"))
                .unwrap()
        })
        .collect()
}

fn master_lost<T: std::fmt::Debug>(r: Result<T, ReduceError>, reason: &str) {
    match r {
        Err(ReduceError::MasterLost(why)) => assert!(why.contains(reason), "{why}"),
        other => panic!("expected MasterLost ({reason}): {other:?}"),
    }
}

/// Every later request of `rt` fails at once with `MasterLost`.
fn later_requests_fail_at_once(rt: Runtime, reason: &str) {
    let t = Instant::now();
    let f = rt
        .reduce(Sum(vec![1u64]), Reduce::root(1).id("later"))
        .unwrap();
    master_lost(f.get(), reason);
    master_lost(rt.barrier(), reason);
    master_lost(rt.shutdown(), reason);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

#[test]
fn a_dead_master_ends_every_reduction_and_every_later_request_at_once() {
    let config = Config {
        finalize_timeout: Duration::from_secs(60),
        ..Config::default()
    };
    let (hub, ts) = LoopbackHub::new(3);
    let mut rts: Vec<Runtime> = ts
        .into_iter()
        .map(|t| Runtime::start(t as Arc<dyn Transport>, config.clone()).unwrap())
        .collect();
    let rank2 = rts.pop().unwrap();
    let rank1 = rts.pop().unwrap();
    let mut fs = in_flight(&[&rank1, &rank2]).into_iter();
    std::thread::sleep(Duration::from_millis(50));
    let t = Instant::now();
    hub.kill(taskfold_core::Rank(0));
    // One through `get`, one through `wait_timeout`.
    master_lost(fs.next().unwrap().get(), "went down");
    master_lost(
        fs.next().unwrap().wait_timeout(Duration::from_secs(60)),
        "went down",
    );
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    later_requests_fail_at_once(rank1, "went down");
    later_requests_fail_at_once(rank2, "went down");
    drop(rts);
}

#[test]
fn a_silent_master_is_lost_within_the_timeout_and_one_period() {
    // Rank 0 pings once an hour: to the others, it falls silent.
    let (period, timeout) = (Duration::from_millis(50), Duration::from_millis(400));
    let quiet = Config {
        ping_period: Duration::from_secs(3600),
        finalize_timeout: Duration::from_secs(1),
        ..Config::default()
    };
    let watching = Config {
        ping_period: period,
        failure_timeout: timeout,
        ..Config::default()
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
    let rank2 = rts.pop().unwrap();
    let rank1 = rts.pop().unwrap();
    for f in in_flight(&[&rank1, &rank2]) {
        master_lost(f.get(), "no ping from the master");
        let after = t.elapsed();
        assert!(after > timeout, "declared before the timeout: {after:?}");
        // The bound is timeout + period; 3 s more for a busy machine.
        assert!(
            after < timeout + period + Duration::from_secs(3),
            "{after:?}"
        );
    }
    later_requests_fail_at_once(rank1, "no ping from the master");
    later_requests_fail_at_once(rank2, "no ping from the master");
    // Rank 0 never hears the others finalize: its own shutdown times out.
    let r0 = rts.pop().unwrap();
    assert!(matches!(r0.shutdown(), Err(ReduceError::Timeout(_))));
}

#[test]
fn a_master_that_pings_is_never_lost() {
    let config = Config {
        ping_period: Duration::from_millis(20),
        failure_timeout: Duration::from_millis(300),
        finalize_timeout: Duration::from_secs(10),
        ..Config::default()
    };
    let c = LocalCluster::with_config(3, config).unwrap();
    // Several timeouts long, reductions keep completing.
    let end = Instant::now() + Duration::from_millis(1200);
    let mut n = 0;
    while Instant::now() < end {
        let id = format!("r{n}");
        let fs: Vec<_> = c
            .ranks()
            .iter()
            .map(|rt| {
                rt.reduce(Sum(vec![1u64]), Reduce::root(0).id(id.clone()))
                    .unwrap()
            })
            .collect();
        for f in fs {
            f.get().unwrap();
        }
        n += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    c.shutdown().unwrap();
}
