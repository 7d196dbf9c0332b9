//! The runtime's metrics are recorded through the `metrics` crate: install
//! a recorder, reduce, and read them back.

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use std::time::Duration;
use taskfold::{metrics as names, LocalCluster, Reduce, Sum};

#[test]
fn tasks_bytes_latency_and_master_load_are_recorded() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");

    let cluster = LocalCluster::new(4).unwrap();
    let futures: Vec<_> = cluster
        .ranks()
        .iter()
        .flat_map(|rt| {
            (0..4).map(move |k| {
                rt.reduce(Sum(vec![1.0f32; 4096]), Reduce::root(1).id(format!("m{k}")))
                    .unwrap()
            })
        })
        .collect();
    for mut f in futures {
        f.wait_timeout(Duration::from_secs(30)).unwrap();
    }
    cluster.shutdown().unwrap();

    let snapshot = snapshotter.snapshot().into_vec();
    let total = |name: &str| -> u64 {
        snapshot
            .iter()
            .filter(|(k, ..)| k.key().name() == name)
            .map(|(.., v)| match v {
                DebugValue::Counter(c) => *c,
                DebugValue::Histogram(h) => h.len() as u64,
                DebugValue::Gauge(_) => 1,
            })
            .sum()
    };
    assert_eq!(total(names::TASKS), 4 * 3, "p - 1 tasks per reduction");
    assert!(total(names::BYTES_FETCHED) >= 12 * 4096 * 4);
    assert_eq!(total(names::TASK_SECONDS), 12);
    assert_eq!(total(names::REDUCTION_SECONDS), 4);
    assert_eq!(total(names::REDUCTIONS_COMPLETED), 4);
    assert!(
        total(names::MASTER_MSGS_IN) >= 4 * (4 + 3),
        "joins and task ends reach the master"
    );
    assert!(
        total(names::MASTER_MSGS_OUT) >= 4 * (3 + 4),
        "tasks and completions leave it"
    );
    assert!(total(names::MASTER_BYTES_IN) > 0 && total(names::MASTER_BYTES_OUT) > 0);
    assert!(total(names::MASTER_QUEUE_DEPTH) > 0);
    assert!(
        total(names::REPLICA_BYTES_WRITTEN) > 0,
        "originals are written to the replica store"
    );
}
