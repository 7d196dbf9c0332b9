//! A root's results kept for a replacement root (the book's chapter
//! Surviving failures of the application, A replaced root), over the
//! loopback: while replacements may come under local restart, each result
//! of a root (the master's rank's too) is kept at its buddy until the
//! application took it and then wrote a checkpoint; a copy nobody can keep
//! is refused loudly and the result stays exact; with the switch off,
//! nothing is kept. (A replacement's redo needs real processes: see
//! `respawn_root.rs`.)

use std::time::{Duration, Instant};
use taskfold::config::{RespawnConfig, Restart};
use taskfold::{Config, LocalCluster, Reduce, ReduceFuture, Sum};

const LEN: usize = 1000;

fn config(budget: u32, restart: Restart) -> Config {
    Config {
        respawn: RespawnConfig {
            budget,
            restart,
            ..RespawnConfig::default()
        },
        ..Config::default()
    }
}

/// Reduction `i` over every rank to `root`: the root's future (the others
/// are waited for).
fn reduce(cluster: &LocalCluster, root: u32, i: u32) -> ReduceFuture<Sum<f64>> {
    let mut root_future = None;
    let mut others = Vec::new();
    for rt in cluster.ranks() {
        let v = Sum(vec![f64::from(rt.rank() + i); LEN]);
        let f = rt
            .reduce(v, Reduce::root(root).id(format!("k{i}")))
            .unwrap();
        match rt.rank() == root {
            true => root_future = Some(f),
            false => others.push(f),
        }
    }
    for f in others {
        assert_eq!(f.get().unwrap(), None);
    }
    root_future.unwrap()
}

/// The exact sum of reduction `i` over `n` ranks.
fn exact(n: u32, i: u32) -> Vec<f64> {
    vec![(0..n).map(|r| f64::from(r + i)).sum(); LEN]
}

/// The master's count of kept results, once it is `want` (within 20 s).
fn kept_becomes(cluster: &LocalCluster, want: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let kept = cluster.rank(0).master_stats().unwrap().results_kept;
        if kept == want || Instant::now() > deadline {
            return kept;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The master's statistics once `want` holds of them (within 20 s; as
/// they are then, if it never does).
fn stats_once(
    cluster: &LocalCluster,
    want: &dyn Fn(&taskfold::MasterStats) -> bool,
) -> taskfold::MasterStats {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = cluster.rank(0).master_stats().unwrap();
        if want(&s) || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The master's count of kept results a little later (for what must not
/// change).
fn kept_still(cluster: &LocalCluster) -> u64 {
    std::thread::sleep(Duration::from_millis(200));
    cluster.rank(0).master_stats().unwrap().results_kept
}

#[test]
fn results_are_kept_until_taken_and_checkpointed_past() {
    let cluster = LocalCluster::with_config(4, config(1, Restart::Local)).unwrap();
    let root = cluster.rank(1);
    let mut futures: Vec<_> = (0..6).map(|i| reduce(&cluster, 1, i)).collect();
    // Every result is kept before the root's future completes.
    assert!(futures.iter().all(|f| f.is_done()));
    assert_eq!(kept_becomes(&cluster, 6), 6);
    let later = futures.split_off(4);
    for (i, f) in futures.into_iter().enumerate() {
        assert_eq!(f.get().unwrap().unwrap().0, exact(4, i as u32));
    }
    // Another rank's checkpoint releases nothing of the root's.
    cluster.rank(2).checkpoints().save(1, &1u32).wait().unwrap();
    assert_eq!(kept_still(&cluster), 6);
    // The root's checkpoint after taking four releases those four.
    root.checkpoints().save(1, &4u32).wait().unwrap();
    assert_eq!(kept_becomes(&cluster, 2), 2);
    // A result taken after a checkpoint call is not in that state.
    let [f4, f5]: [ReduceFuture<Sum<f64>>; 2] = later.try_into().ok().unwrap();
    let pending = root.checkpoints().save(2, &5u32);
    assert_eq!(f4.get().unwrap().unwrap().0, exact(4, 4));
    pending.wait().unwrap();
    assert_eq!(kept_still(&cluster), 2);
    root.checkpoints().save(3, &5u32).wait().unwrap();
    assert_eq!(kept_becomes(&cluster, 1), 1);
    // A result dropped unread will never be taken: released as taken.
    drop(f5);
    root.checkpoints().save(4, &6u32).wait().unwrap();
    assert_eq!(kept_becomes(&cluster, 0), 0);
    cluster.shutdown().unwrap();
}

/// The master's rank is replaced once a standby took over: its results
/// are kept as any root's.
#[test]
fn the_masters_own_results_are_kept_too() {
    let cluster = LocalCluster::with_config(3, config(1, Restart::Local)).unwrap();
    let f = reduce(&cluster, 0, 0);
    assert_eq!(f.get().unwrap().unwrap().0, exact(3, 0));
    assert_eq!(kept_becomes(&cluster, 1), 1);
    cluster.shutdown().unwrap();
}

/// Without replacements nothing is kept. Under global restart results
/// are kept as under local restart: once a rank finalized, a death no
/// longer rolls the job back, and a replacement root redoes its completed
/// reductions (a rollback drops them all: `master::tests::rollback`).
#[test]
fn a_switch_off_keeps_nothing_and_global_restart_keeps_too() {
    for (budget, restart, want) in [(0, Restart::Local, 0), (1, Restart::Global, 3)] {
        let cluster = LocalCluster::with_config(3, config(budget, restart)).unwrap();
        let futures: Vec<_> = (0..3).map(|i| reduce(&cluster, 1, i)).collect();
        let kept = kept_becomes(&cluster, want);
        assert_eq!(kept, want, "budget {budget}, {restart:?}");
        assert_eq!(kept_still(&cluster), want, "budget {budget}, {restart:?}");
        for (i, f) in futures.into_iter().enumerate() {
            assert_eq!(f.get().unwrap().unwrap().0, exact(3, i as u32));
        }
        cluster.shutdown().unwrap();
    }
}

#[test]
fn a_copy_beyond_the_bound_is_refused_and_the_result_stays_exact() {
    // Room for no result: every buddy asked refuses.
    let config = Config {
        replica_limit: 64,
        ..config(1, Restart::Local)
    };
    let cluster = LocalCluster::with_config(4, config).unwrap();
    for i in 0..3 {
        let f = reduce(&cluster, 2, i);
        assert_eq!(f.get().unwrap().unwrap().0, exact(4, i));
    }
    assert_eq!(kept_still(&cluster), 0);
    cluster.shutdown().unwrap();
}

#[test]
fn a_copy_whose_holder_dies_is_made_again_by_its_live_root() {
    let cluster = LocalCluster::with_config(4, config(1, Restart::Local)).unwrap();
    // Not taken: their copies must outlive their holder, rank 2 (the
    // root's buddy).
    let futures: Vec<_> = (0..3).map(|i| reduce(&cluster, 1, i)).collect();
    assert_eq!(kept_becomes(&cluster, 3), 3);
    cluster.kill(2);
    let deadline = Instant::now() + Duration::from_secs(20);
    let stats = loop {
        let s = cluster.rank(0).master_stats().unwrap();
        if s.dead.contains(&2) && s.results_without_copy == 0 || Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(stats.dead.contains(&2), "{stats:?}");
    assert_eq!(
        (stats.results_kept, stats.results_without_copy),
        (3, 0),
        "every copy made again at the next buddy"
    );
    for (i, f) in futures.into_iter().enumerate() {
        assert_eq!(f.get().unwrap().unwrap().0, exact(4, i as u32));
    }
}

/// The root dies with its results not yet taken back; its holder copies
/// each on to a second rank, so that the holder's own death before the
/// root's replacement came leaves every result a copy (without the second
/// copy, all three would be lost: `results_without_copy` 3).
#[test]
fn a_dead_roots_holder_copies_its_results_on_before_it_dies_too() {
    let cluster = LocalCluster::with_config(5, config(2, Restart::Local)).unwrap();
    let futures: Vec<_> = (0..3).map(|i| reduce(&cluster, 1, i)).collect();
    assert_eq!(kept_becomes(&cluster, 3), 3);
    drop(futures);
    cluster.kill(1);
    let stats = |want: &dyn Fn(&taskfold::MasterStats) -> bool| stats_once(&cluster, want);
    let s = stats(&|s| s.dead.contains(&1) && s.results_second_copies == 3);
    assert_eq!(s.results_second_copies, 3, "{s:?}");
    // The holder, rank 2 (the root's buddy), dies too.
    cluster.kill(2);
    let s = stats(&|s| s.dead.contains(&2));
    assert!(s.dead.contains(&2), "{s:?}");
    assert_eq!(
        (s.results_kept, s.results_without_copy),
        (3, 0),
        "every result still has a copy: {s:?}"
    );
}

/// Where two replacements may come, each result gets its second copy at
/// once, before any death: the root and its holder killed back to back
/// still leave every result a copy. With one replacement, no second copy
/// is made (it would cost without a failure it could cover).
#[test]
fn with_two_replacements_a_result_outlives_its_root_and_holder_dying_at_once() {
    let cluster = LocalCluster::with_config(5, config(2, Restart::Local)).unwrap();
    let futures: Vec<_> = (0..3).map(|i| reduce(&cluster, 1, i)).collect();
    assert_eq!(kept_becomes(&cluster, 3), 3);
    let deadline = Instant::now() + Duration::from_secs(20);
    let second = loop {
        let s = cluster.rank(0).master_stats().unwrap();
        if s.results_second_copies == 3 || Instant::now() > deadline {
            break s.results_second_copies;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(second, 3, "a second copy of each, with every rank alive");
    drop(futures);
    // The root and its buddy, rank 2, which holds the first copies.
    cluster.kill(1);
    cluster.kill(2);
    let deadline = Instant::now() + Duration::from_secs(20);
    let s = loop {
        let s = cluster.rank(0).master_stats().unwrap();
        let both = s.dead.contains(&1) && s.dead.contains(&2);
        if both || Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(s.dead.contains(&1) && s.dead.contains(&2), "{s:?}");
    assert_eq!(
        (s.results_kept, s.results_without_copy),
        (3, 0),
        "every result still has a copy: {s:?}"
    );

    let one = LocalCluster::with_config(5, config(1, Restart::Local)).unwrap();
    let futures: Vec<_> = (0..3).map(|i| reduce(&one, 1, i)).collect();
    assert_eq!(kept_becomes(&one, 3), 3);
    assert_eq!(kept_still(&one), 3);
    let s = one.rank(0).master_stats().unwrap();
    assert_eq!(s.results_second_copies, 0, "{s:?}");
    drop(futures);
}

/// Where three replacements may come, each result gets two further
/// copies at once, each on a rank of its own: the root and both holders
/// killed back to back still leave every result its third copy.
#[test]
fn with_three_replacements_a_result_outlives_its_root_and_two_holders() {
    let cluster = LocalCluster::with_config(6, config(3, Restart::Local)).unwrap();
    let futures: Vec<_> = (0..3).map(|i| reduce(&cluster, 1, i)).collect();
    assert_eq!(kept_becomes(&cluster, 3), 3);
    let stats = |want: &dyn Fn(&taskfold::MasterStats) -> bool| stats_once(&cluster, want);
    let s = stats(&|s| s.results_further_copies == 6);
    assert_eq!(
        s.results_further_copies, 6,
        "two further copies of each: {s:?}"
    );
    drop(futures);
    // The root, its buddy (the first copies) and the next rank (the
    // second copies); the third copies are on rank 4.
    for rank in [1, 2, 3] {
        cluster.kill(rank);
    }
    let s = stats(&|s| [1, 2, 3].iter().all(|r| s.dead.contains(r)));
    assert!([1, 2, 3].iter().all(|r| s.dead.contains(r)), "{s:?}");
    assert_eq!(
        (s.results_kept, s.results_without_copy),
        (3, 0),
        "every result still has a copy: {s:?}"
    );
}

/// A root's result on its way to its copy, over the loopback: rank 0 (the
/// master) and rank 1 (the other member, the root's buddy, and the
/// standby) are played by their transports alone; rank 2 is the root.
mod puppets {
    use super::*;
    use bytes::Bytes;
    use std::sync::Arc;
    use taskfold::{Broadcastable, Runtime};
    use taskfold_core::wire::results::ResultMsg;
    use taskfold_core::wire::{self, DataSource, Msg, Task};
    use taskfold_core::{Rank, RankSet};
    use taskfold_transports::loopback::LoopbackHub;
    use taskfold_transports::{BufferKey, Event, Transport};

    /// The first message rank 2 sends `t` within `wait` that `pick` takes.
    fn heard<T>(
        t: &dyn Transport,
        wait: Duration,
        mut pick: impl FnMut(Msg) -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + wait;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            let step = left.min(Duration::from_millis(50));
            if let Ok(Event::Message { frame, .. }) = t.events().recv_timeout(step) {
                if let Some(got) = wire::decode(&frame).ok().and_then(&mut pick) {
                    return Some(got);
                }
            }
        }
        None
    }

    struct Job {
        hub: Arc<LoopbackHub>,
        master: Arc<dyn Transport>,
        buddy: Arc<dyn Transport>,
        rt: Runtime,
        f: ReduceFuture<Sum<f64>>,
        key: u64,
    }

    /// Rank 2 folds rank 1's data: its value is whole, and it offers the
    /// result to its buddy, which does not answer yet.
    fn offered() -> Job {
        let (hub, ts) = LoopbackHub::new(3);
        let master: Arc<dyn Transport> = ts[0].clone();
        let buddy: Arc<dyn Transport> = ts[1].clone();
        let config = Config {
            standby: taskfold::config::Standby::On,
            failure_timeout: Duration::from_secs(60),
            finalize_timeout: Duration::from_secs(1),
            ..config(1, Restart::Local)
        };
        let rt = Runtime::start(ts[2].clone() as Arc<dyn Transport>, config).unwrap();
        let opts = Reduce::root(2).group(vec![1, 2]).id("r");
        let f = rt.reduce(Sum(vec![1.0f64; 64]), opts).unwrap();
        let join = heard(&*master, Duration::from_secs(10), |m| match m {
            Msg::Join(j) => Some(j.key),
            _ => None,
        });
        let key = join.expect("rank 2 joins");
        let data = Sum(vec![2.0f64; 64]).encode_value().unwrap();
        buddy.expose(BufferKey(key), Bytes::copy_from_slice(&data));
        let task = Msg::Task(Task {
            key,
            task_id: 0,
            provider: 1,
            provider_path: RankSet::single(0),
            receiver_path: RankSet::single(1),
            restore: false,
            source: DataSource::Data,
            direct: None,
            more: Vec::new(),
        });
        master.send(Rank(2), wire::encode(&task).into()).unwrap();
        let offer = |m| matches!(m, Msg::Results(ResultMsg::Offer { key: k, .. }) if k == key);
        let offered = heard(&*buddy, Duration::from_secs(10), |m| offer(m).then_some(()));
        assert!(offered.is_some(), "rank 2 offers its result");
        Job {
            hub,
            master,
            buddy,
            rt,
            f,
            key,
        }
    }

    impl Job {
        /// The buddy says it keeps the copy.
        fn stored(&self) {
            let stored = Msg::Results(ResultMsg::Stored {
                key: self.key,
                ok: true,
            });
            let frame = wire::encode(&stored).into();
            self.buddy.send(Rank(2), frame).unwrap();
        }

        fn end(mut self) {
            let got = self
                .f
                .wait_timeout(Duration::from_secs(5))
                .expect("completes");
            assert_eq!(got.unwrap().0, vec![3.0f64; 64]);
            self.hub.kill(Rank(0));
            self.hub.kill(Rank(1));
            let _ = self.rt.shutdown();
        }
    }

    /// The master dies while a root's result is on its way to its copy:
    /// the root's report to the new master waits until the copy is kept,
    /// and then names the reduction ended here, its copy told first.
    /// Reported whole before that, the new master would complete the
    /// reduction at once, every member would release its original, and
    /// the root's death before the copy was made would leave its
    /// replacement `ResultLost`.
    #[test]
    fn a_roots_report_to_a_new_master_waits_for_its_results_copy() {
        let job = offered();
        let key = job.key;
        job.hub.kill(Rank(0));
        // Rank 2 turns to rank 1: no report while the copy is being made.
        let early = heard(&*job.buddy, Duration::from_millis(500), |m| match m {
            Msg::Rejoin(r) => Some(r),
            _ => None,
        });
        assert!(early.is_none(), "reported before its copy: {early:?}");
        job.stored();
        // The copy's notice, then the report, naming the reduction ended.
        let mut kept = false;
        let report = heard(&*job.buddy, Duration::from_secs(5), |m| match m {
            Msg::Results(ResultMsg::Kept { key: k, holder: 1 }) if k == key => {
                kept = true;
                None
            }
            Msg::Rejoin(r) => Some((kept, r)),
            _ => None,
        });
        let (kept_first, report) = report.expect("rank 2 reports");
        assert!(kept_first, "the copy is told before the report");
        let held = report.holding.iter().any(|h| h.joining.key == key);
        assert!(!held, "{report:?}");
        assert!(report.ended.contains(&(key, None)), "{report:?}");
        job.end();
    }

    /// The master's completion notice comes while the root's result is
    /// on its way to its copy: the root's future waits for the copy, so
    /// that the application never has a result no copy of which exists.
    #[test]
    fn a_completion_that_comes_before_the_roots_copy_waits_for_it() {
        let job = offered();
        let complete = Msg::Complete {
            key: job.key,
            error: None,
            number: Some(1),
        };
        let frame = wire::encode(&complete).into();
        job.master.send(Rank(2), frame).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(!job.f.is_done(), "completed before its copy");
        job.stored();
        let key = job.key;
        let kept = heard(&*job.master, Duration::from_secs(5), |m| match m {
            Msg::Results(ResultMsg::Kept { key: k, holder: 1 }) if k == key => Some(()),
            _ => None,
        });
        assert!(kept.is_some(), "the copy is told to the master");
        job.end();
    }

    /// A copy of a root's result in its wire form, and its length and
    /// checksum as an offer names them.
    fn result_copy(value: f64) -> (Bytes, u64, u32) {
        use taskfold_core::replica::{stored_crc, write_header, HEADER_LEN};
        let payload = Sum(vec![value; 64]).encode_value().unwrap();
        let mut buf = vec![0u8; HEADER_LEN + payload.len()];
        let (head, body) = buf.split_at_mut(HEADER_LEN);
        body.copy_from_slice(&payload);
        write_header(head, body);
        let crc = stored_crc(&buf).unwrap();
        let len = buf.len() as u64;
        (Bytes::from(buf), len, crc)
    }

    /// Where the job may replace two ranks, a root's first holder relays
    /// its copy on at once, and answers the root only once the second
    /// holder keeps it (or died): the root's application sees its result
    /// once two copies exist, so the root and its first holder dying
    /// together then lose nothing. Rank 2 is the first holder; the master
    /// (0), the root (1) and the second holder (3) are played by their
    /// transports.
    #[test]
    fn a_first_holder_answers_the_root_once_the_second_copy_is_kept() {
        use taskfold_core::results::result_key;
        let (hub, ts) = LoopbackHub::new(4);
        let (root, second) = (ts[1].clone(), ts[3].clone());
        let config = Config {
            failure_timeout: Duration::from_secs(60),
            finalize_timeout: Duration::from_secs(1),
            ..config(2, Restart::Local)
        };
        let rt = Runtime::start(ts[2].clone() as Arc<dyn Transport>, config).unwrap();
        let offer = |key: u64, value: f64| {
            let (bytes, len, crc) = result_copy(value);
            root.expose(BufferKey(result_key(key)), bytes);
            let msg = Msg::Results(ResultMsg::Offer { key, len, crc });
            root.send(Rank(2), wire::encode(&msg).into()).unwrap();
        };
        let stored = |key: u64, wait: Duration| {
            heard(&*root, wait, |m| match m {
                Msg::Results(ResultMsg::Stored { key: k, ok }) if k == key => Some(ok),
                _ => None,
            })
        };
        let relayed = |key: u64| {
            heard(&*second, Duration::from_secs(10), |m| match m {
                Msg::Results(ResultMsg::Relay {
                    root: 1, key: k, ..
                }) if k == key => Some(()),
                _ => None,
            })
        };
        offer(41, 3.0);
        assert!(relayed(41).is_some(), "rank 2 relays its copy on at once");
        let early = stored(41, Duration::from_millis(300));
        assert!(
            early.is_none(),
            "the root is answered before the second copy"
        );
        let kept = Msg::Results(ResultMsg::AlsoKept {
            root: 1,
            key: 41,
            first: 2,
        });
        second.send(Rank(2), wire::encode(&kept).into()).unwrap();
        assert_eq!(stored(41, Duration::from_secs(5)), Some(true));
        // A second holder that dies does not hold the answer up.
        offer(42, 4.0);
        assert!(relayed(42).is_some());
        hub.kill(Rank(3));
        assert_eq!(stored(42, Duration::from_secs(5)), Some(true));
        hub.kill(Rank(0));
        hub.kill(Rank(1));
        let _ = rt.shutdown();
    }
}
