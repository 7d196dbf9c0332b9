//! A buddy on the owner's node maps the owner's disk copy instead of
//! copying the bytes, and recovers a dead rank's original from that
//! mapping even after the file itself is gone. Large buffers are recycled,
//! and the pool's metrics say so.

use metrics_util::debugging::DebuggingRecorder;
use std::time::Duration;
use taskfold::hooks::{Hook, Point};
use taskfold::{metrics as names, Config, Durability, LocalCluster, Reduce, Sum};
use taskfold_tests::faults::{held, release, root_result};

const WAIT: Duration = Duration::from_secs(30);
/// 1.6 MB per contribution: above the size from which buffers are pooled.
const LEN: i64 = 200_000;

fn value(rank: u32) -> Sum<i64> {
    Sum((0..LEN).map(|i| i * 10 + rank as i64 + 1).collect())
}

#[test]
fn a_same_node_buddy_maps_the_disk_copy_and_recovers_from_it() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");

    let hooks_dir = tempfile::tempdir().unwrap();
    let d = hooks_dir.path();
    let replicas = tempfile::tempdir().unwrap();
    let hook = |rank| Hook {
        rank,
        point: Point::BeforeFold,
        id: "mapped".into(),
        dir: d.to_path_buf(),
    };
    // Synchronous durability: every join waits for its buddy's copy, so
    // each non-root rank's copy exists before any task runs.
    let c = LocalCluster::with_config(
        4,
        Config {
            durability: Durability::Sync,
            replica_dir: Some(replicas.path().to_path_buf()),
            finalize_timeout: Duration::from_secs(5),
            // Pings update the pool's gauges: make them frequent.
            ping_period: Duration::from_millis(20),
            hooks: vec![hook(2), hook(3)],
            ..Config::default()
        },
    )
    .unwrap();
    let start = |r: u32| {
        c.rank(r)
            .reduce(value(r), Reduce::root(1).id("mapped"))
            .unwrap()
    };
    let mut fs = vec![(2, start(2)), (3, start(3))];
    // One of the pair is about to fold the other's data: kill it there, and
    // take its disk copy away first. Only its buddy's mapping is left.
    let victim = held(d, &[2, 3], "before-fold");
    let mut removed = 0;
    for e in std::fs::read_dir(replicas.path().join(format!("rank-{victim}"))).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
        removed += 1;
    }
    assert_eq!(removed, 1, "the victim's disk copy");
    c.kill(victim);
    release(d, 5 - victim, "before-fold");
    fs.push((0, start(0)));
    fs.push((1, start(1)));
    let want: Vec<i64> = (0..LEN).map(|i| 4 * i * 10 + 1 + 2 + 3 + 4).collect();
    assert_eq!(
        root_result(fs, victim, 1, WAIT).0,
        want,
        "recovered from the mapped copy"
    );

    let counter = |name: &str| taskfold_tests::counter(&snapshotter, name);
    let mapped = counter(names::REPLICAS_MAPPED);
    assert!(
        mapped >= 3,
        "ranks 0, 2 and 3 offered their disk copies to buddies on this node: {mapped}"
    );
    let stats = c.rank(0).master_stats().unwrap();
    assert!(
        stats
            .task_log
            .iter()
            .any(|t| t.provider_path == [victim] && t.task_id > 0),
        "the victim's original was fetched again: {:?}",
        stats.task_log
    );

    // Every rank allocated large buffers (originals, receive buffers) and
    // gave some back; a ping within a few periods reports it.
    let deadline = std::time::Instant::now() + WAIT;
    while counter(names::BUFFER_POOL_REQUESTS) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        counter(names::BUFFER_POOL_REQUESTS) > 0,
        "the pool's requests are reported"
    );
}
