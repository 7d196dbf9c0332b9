//! Checkpoints of the application's state over the loopback: versions,
//! damaged and foreign pieces, a lost local directory, and writes that go
//! on while the application computes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use taskfold::checkpoint::{rank_dir, FileStore, JobId, Level};
use taskfold::config::CheckpointConfig;
use taskfold::hooks::{Hook, Point};
use taskfold::rkyv::{Archive, Deserialize, Serialize};
use taskfold::{Config, LocalCluster, Reduce, Sum};
use taskfold_core::checkpoint::{type_tag, Header, Intervals};

const WAIT: Duration = Duration::from_secs(30);

/// An application's state.
#[derive(Archive, Serialize, Deserialize, Debug, PartialEq, Clone)]
#[rkyv(crate = taskfold::rkyv)]
struct Field {
    step: u64,
    values: Vec<f64>,
}

/// Another type, of another layout.
#[derive(Archive, Serialize, Deserialize, Debug, PartialEq)]
#[rkyv(crate = taskfold::rkyv)]
struct Other {
    name: String,
}

fn field(rank: u32, step: u64) -> Field {
    Field {
        step,
        values: (0..100)
            .map(|i| f64::from(rank) * 1e3 + i as f64 + step as f64 * 0.5)
            .collect(),
    }
}

fn config(l1: &Path, shared: Option<&Path>, job: &str, every: [u64; 4]) -> Config {
    Config {
        checkpoint: CheckpointConfig {
            dir: Some(l1.to_path_buf()),
            shared_dir: shared.map(Path::to_path_buf),
            intervals: Intervals(every),
            job: Some(job.to_string()),
            ..CheckpointConfig::default()
        },
        ..Config::default()
    }
}

/// Checkpoints versions `versions` on every rank and waits for them.
fn checkpoint_all(cluster: &LocalCluster, versions: std::ops::RangeInclusive<u64>) {
    for v in versions {
        let futures: Vec<_> = cluster
            .ranks()
            .iter()
            .map(|rt| rt.checkpoints().save(v, &field(rt.rank(), v)))
            .collect();
        for mut f in futures {
            let written = f.wait_timeout(WAIT).expect("written in time").unwrap();
            assert_eq!(written.version, v);
            assert!(written.levels.contains(&Level::L1));
        }
    }
}

/// The warnings logged on this thread while `f` runs, and its result.
fn logged<R>(f: impl FnOnce() -> R) -> (R, String) {
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let out = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::WARN)
        .with_ansi(false)
        .with_writer(move || out.clone())
        .finish();
    let r = {
        let _on_this_thread = tracing_subscriber::util::SubscriberInitExt::set_default(subscriber);
        f()
    };
    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    (r, text)
}

/// The file of rank `rank`'s L1 piece of `version`.
fn piece_file(root: &Path, job: JobId, rank: u32, version: u64) -> PathBuf {
    rank_dir(root, job, rank).join(format!("r{rank}-L1-v{version}.tfck"))
}

#[test]
fn the_newest_of_three_versions_is_restored_and_old_ones_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let l1 = tmp.path().join("l1");
    let cluster = LocalCluster::with_config(3, config(&l1, None, "three", [1, 0, 0, 0])).unwrap();
    for rt in cluster.ranks() {
        assert_eq!(
            rt.checkpoints().restore::<Field>().unwrap(),
            None,
            "nothing yet"
        );
    }
    checkpoint_all(&cluster, 1..=3);
    for rt in cluster.ranks() {
        let (v, state) = rt
            .checkpoints()
            .restore::<Field>()
            .unwrap()
            .expect("a version");
        assert_eq!((v, state), (3, field(rt.rank(), 3)));
        // The default keeps two versions.
        let dir = rank_dir(&l1, rt.checkpoints().job(), rt.rank());
        let store = FileStore::open(&dir, 2).unwrap();
        assert_eq!(store.versions(rt.rank(), Level::L1).unwrap(), vec![3, 2]);
    }
    cluster.shutdown().unwrap();
}

#[test]
fn a_damaged_newest_piece_gives_the_version_before_with_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let l1 = tmp.path().join("l1");
    let cluster = LocalCluster::with_config(2, config(&l1, None, "damaged", [1, 0, 0, 0])).unwrap();
    checkpoint_all(&cluster, 1..=3);
    let rt = cluster.rank(1);
    let path = piece_file(&l1, rt.checkpoints().job(), 1, 3);
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&path, bytes).unwrap();
    let (restored, log) = logged(|| rt.checkpoints().restore::<Field>().unwrap());
    assert_eq!(restored, Some((2, field(1, 2))));
    assert!(log.contains("checksum mismatch"), "{log}");
    assert!(log.contains("version=3"), "{log}");
    // Rank 0's pieces are whole.
    assert_eq!(
        cluster.rank(0).checkpoints().restore::<Field>().unwrap(),
        Some((3, field(0, 3)))
    );
    cluster.shutdown().unwrap();
}

#[test]
fn another_jobs_or_types_pieces_are_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let l1 = tmp.path().join("l1");
    let cluster = LocalCluster::with_config(1, config(&l1, None, "mine", [1, 0, 0, 0])).unwrap();
    let rt = cluster.rank(0);
    checkpoint_all(&cluster, 1..=2);
    // Newer pieces in this rank's directory: another job's Field, and
    // this job's piece of another type (with a valid Field archive).
    let store = FileStore::open(&rank_dir(&l1, rt.checkpoints().job(), 0), 5).unwrap();
    let archive = taskfold::rkyv::to_bytes::<taskfold::rkyv::rancor::Error>(&field(0, 99)).unwrap();
    let header = |job, version, tag| Header {
        job,
        owner: 0,
        version,
        type_tag: tag,
        level: Level::L1,
        shard: None,
    };
    let field_tag = type_tag(std::any::type_name::<Field>());
    store
        .write(&header(JobId::named("theirs"), 8, field_tag), &archive)
        .unwrap();
    store
        .write(
            &header(rt.checkpoints().job(), 9, type_tag("Other")),
            &archive,
        )
        .unwrap();
    let (restored, log) = logged(|| rt.checkpoints().restore::<Field>().unwrap());
    assert_eq!(restored, Some((2, field(0, 2))));
    assert!(log.contains("another job's piece"), "{log}");
    assert!(log.contains("type tag"), "{log}");
    // Restored as another type, the job's Fields are refused as well.
    assert_eq!(rt.checkpoints().restore::<Other>().unwrap(), None);
    cluster.shutdown().unwrap();
}

#[test]
fn with_the_local_directory_lost_the_shared_one_is_read() {
    let tmp = tempfile::tempdir().unwrap();
    let (l1, l4) = (tmp.path().join("l1"), tmp.path().join("pfs"));
    // L1 every version, L4 every second one.
    let cfg = config(&l1, Some(&l4), "lost-node", [1, 0, 0, 2]);
    let cluster = LocalCluster::with_config(2, cfg.clone()).unwrap();
    checkpoint_all(&cluster, 1..=3);
    // Before: L1 has the newest.
    assert_eq!(
        cluster.rank(0).checkpoints().restore::<Field>().unwrap(),
        Some((3, field(0, 3)))
    );
    cluster.shutdown().unwrap();
    // The node is lost with its disk; the job restarts elsewhere.
    std::fs::remove_dir_all(&l1).unwrap();
    let cluster = LocalCluster::with_config(2, cfg).unwrap();
    for rt in cluster.ranks() {
        let restored = rt.checkpoints().restore::<Field>().unwrap();
        assert_eq!(
            restored,
            Some((2, field(rt.rank(), 2))),
            "rank {}",
            rt.rank()
        );
    }
    cluster.shutdown().unwrap();
}

#[test]
fn a_local_directory_removed_meanwhile_is_made_again() {
    let tmp = tempfile::tempdir().unwrap();
    let l1 = tmp.path().join("l1");
    let cluster = LocalCluster::with_config(1, config(&l1, None, "scratch", [1, 0, 0, 0])).unwrap();
    let rt = cluster.rank(0);
    checkpoint_all(&cluster, 1..=2);
    std::fs::remove_dir_all(&l1).unwrap();
    assert_eq!(
        rt.checkpoints().restore::<Field>().unwrap(),
        None,
        "nothing left"
    );
    checkpoint_all(&cluster, 3..=3);
    assert_eq!(
        rt.checkpoints().restore::<Field>().unwrap(),
        Some((3, field(0, 3)))
    );
    cluster.shutdown().unwrap();
}

#[test]
fn the_application_computes_while_its_checkpoint_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let (l1, marks) = (tmp.path().join("l1"), tmp.path().join("marks"));
    std::fs::create_dir(&marks).unwrap();
    let mut cfg = config(&l1, None, "busy", [1, 0, 0, 0]);
    // Rank 0's writer is held before it writes version 1.
    cfg.hooks = vec![Hook {
        rank: 0,
        point: Point::Checkpoint,
        id: "1".into(),
        dir: marks.clone(),
    }];
    let cluster = LocalCluster::with_config(2, cfg).unwrap();
    let rt = cluster.rank(0);
    let mut pending = rt.checkpoints().save(1, &field(0, 1));
    let held = marks.join("held-0-checkpoint");
    let start = Instant::now();
    while !held.exists() {
        assert!(start.elapsed() < WAIT, "the writer never reached version 1");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!pending.is_done());
    // The application goes on: a reduction over both ranks completes.
    let futures: Vec<_> = cluster
        .ranks()
        .iter()
        .map(|r| {
            r.reduce(Sum(vec![1i64; 8]), Reduce::root(0).id("meanwhile"))
                .unwrap()
        })
        .collect();
    for mut f in futures {
        f.wait_timeout(WAIT).unwrap();
    }
    assert!(pending.wait_timeout(Duration::from_millis(50)).is_none());
    std::fs::write(marks.join("release-0-checkpoint"), b"").unwrap();
    let written = pending
        .wait_timeout(WAIT)
        .expect("written once released")
        .unwrap();
    assert_eq!(written.levels, vec![Level::L1]);
    // The future can be awaited too.
    let next = rt.checkpoints().save(2, &field(0, 2));
    let tokio = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert_eq!(tokio.block_on(next).unwrap().version, 2);
    assert_eq!(
        rt.checkpoints().restore::<Field>().unwrap(),
        Some((2, field(0, 2)))
    );
    cluster.shutdown().unwrap();
}

#[test]
fn without_a_directory_a_private_one_serves_the_process() {
    let cluster = LocalCluster::new(1).unwrap();
    let rt = cluster.rank(0);
    // Version 5 is due at L1 only (no shared directory).
    let written = rt.checkpoints().save(5, &field(0, 5)).wait().unwrap();
    assert_eq!(written.levels, vec![Level::L1]);
    assert_eq!(
        rt.checkpoints().restore::<Field>().unwrap(),
        Some((5, field(0, 5)))
    );
    cluster.shutdown().unwrap();
}
