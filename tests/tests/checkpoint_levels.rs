//! Checkpoints between ranks over the loopback: L2 copies at the partner,
//! L3 parity at the holders, each restored after the failures it survives
//! (and refused after those it does not), damaged pieces skipped at every
//! level, the future's completion while the application computes, and
//! the levels read by the aware and the probing retrieval.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use taskfold::checkpoint::{rank_dir, Failure, Level, Placement, Retrieval};
use taskfold::config::CheckpointConfig;
use taskfold::hooks::{Hook, Point};
use taskfold::rkyv::{Archive, Deserialize, Serialize};
use taskfold::{CheckpointError, Config, LocalCluster, Reduce, Sum};
use taskfold_core::checkpoint::Intervals;

const WAIT: Duration = Duration::from_secs(30);

/// An application's state.
#[derive(Archive, Serialize, Deserialize, Debug, PartialEq, Clone)]
#[rkyv(crate = taskfold::rkyv)]
struct Field {
    step: u64,
    values: Vec<f64>,
}

fn field(rank: u32, step: u64) -> Field {
    Field {
        step,
        // Unequal lengths, so that L3 pads its shards.
        values: (0..100 + u64::from(rank) * 7)
            .map(|i| f64::from(rank) * 1e3 + i as f64 + step as f64 * 0.5)
            .collect(),
    }
}

struct Job {
    _tmp: tempfile::TempDir,
    l1: PathBuf,
    l4: PathBuf,
    every: Intervals,
    cluster: LocalCluster,
}

/// Checkpoints to `l1` (and `l4` if L4 is on), with L3 groups of `k` and
/// `m` parity pieces.
fn config(l1: &Path, l4: &Path, every: [u64; 4], k: u16, m: u16, hooks: Vec<Hook>) -> Config {
    Config {
        checkpoint: CheckpointConfig {
            dir: Some(l1.to_path_buf()),
            shared_dir: (every[3] != 0).then(|| l4.to_path_buf()),
            intervals: Intervals(every),
            group: k,
            parity: m,
            job: Some("levels".into()),
            ..CheckpointConfig::default()
        },
        failure_timeout: Duration::from_secs(1),
        finalize_timeout: Duration::from_secs(10),
        hooks,
        ..Config::default()
    }
}

/// `nodes.len()` ranks, rank `r` on node `nodes[r]`, with L3 groups of
/// `k` and `m` parity pieces.
fn job(nodes: Vec<u64>, every: [u64; 4], k: u16, m: u16, hooks: Vec<Hook>) -> Job {
    let tmp = tempfile::tempdir().unwrap();
    let (l1, l4) = (tmp.path().join("l1"), tmp.path().join("pfs"));
    let config = config(&l1, &l4, every, k, m, hooks);
    let cluster = LocalCluster::with_nodes(nodes, config).unwrap();
    Job {
        _tmp: tmp,
        l1,
        l4,
        every: Intervals(every),
        cluster,
    }
}

impl Job {
    fn placement(&self) -> Placement {
        self.cluster
            .rank(0)
            .checkpoints()
            .placement()
            .unwrap()
            .clone()
    }

    /// Rank `rank`'s local directory.
    fn dir(&self, rank: u32) -> PathBuf {
        rank_dir(&self.l1, self.cluster.rank(0).checkpoints().job(), rank)
    }

    /// Checkpoints `versions` on every rank; each is written at the
    /// levels due.
    fn checkpoint_all(&self, versions: std::ops::RangeInclusive<u64>) {
        for v in versions {
            let futures: Vec<_> = self
                .cluster
                .ranks()
                .iter()
                .map(|rt| rt.checkpoints().save(v, &field(rt.rank(), v)))
                .collect();
            for mut f in futures {
                let written = f.wait_timeout(WAIT).expect("written in time").unwrap();
                assert_eq!(
                    (written.version, written.levels),
                    (v, self.every.levels_at(v))
                );
            }
        }
    }

    /// Kills `rank` and waits until `by` knows it dead.
    fn kill(&self, rank: u32, by: u32) {
        self.cluster.kill(rank);
        let start = Instant::now();
        while !self
            .cluster
            .rank(by)
            .checkpoints()
            .failure()
            .ranks
            .contains(&rank)
        {
            assert!(
                start.elapsed() < WAIT,
                "rank {by} never learnt of {rank}'s death"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Flips a byte in the middle of `path`.
fn damage(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(path, bytes).unwrap();
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

fn node_of(p: &Placement, ranks: &[u32]) -> Vec<u64> {
    ranks.iter().map(|&r| p.node(r).unwrap()).collect()
}

#[test]
fn l2_is_restored_from_the_partner_once_l1_is_wiped() {
    let j = job((0..4).collect(), [1, 1, 0, 0], 4, 2, vec![]);
    j.checkpoint_all(1..=3);
    let p = j.placement();
    let partner = p.partner(1).unwrap();
    assert_ne!(p.node(partner), p.node(1));
    let held = j.dir(partner).join("held-r1");
    assert!(held.join("r1-L2-v3.tfck").is_file(), "the partner's copy");
    assert!(
        !held.join("r1-L2-v1.tfck").exists(),
        "only `keep` versions kept"
    );
    std::fs::remove_dir_all(j.dir(1)).unwrap();
    let rt = j.cluster.rank(1);
    // Not knowing the failure: L1 is read (empty), then the partner's copy.
    let r = rt
        .checkpoints()
        .restore_with::<Field>(&Retrieval::Aware(Failure::default()))
        .unwrap()
        .unwrap();
    assert_eq!((r.version, &r.state, r.level), (3, &field(1, 3), Level::L2));
    assert_eq!(r.tried, vec![Level::L1, Level::L2]);
    // Knowing its node was lost: straight to the partner.
    let failure = Failure::new([1], node_of(&p, &[1]));
    let r = rt
        .checkpoints()
        .restore_with::<Field>(&Retrieval::Aware(failure.clone()))
        .unwrap()
        .unwrap();
    assert_eq!((r.version, r.tried), (3, vec![Level::L2]));
    // A damaged newest copy at the partner: the version before.
    damage(&held.join("r1-L2-v3.tfck"));
    let (restored, log) = logged(|| rt.checkpoints().restore_after::<Field>(&failure).unwrap());
    assert_eq!(restored, Some((2, field(1, 2))));
    assert!(log.contains("checksum mismatch"), "{log}");
}

#[test]
fn a_restarted_job_reads_the_copy_its_partner_kept_on_disk() {
    let nodes: Vec<u64> = (0..3).collect();
    let j = job(nodes.clone(), [1, 1, 0, 0], 4, 2, vec![]);
    j.checkpoint_all(1..=2);
    let Job {
        _tmp,
        l1,
        l4,
        cluster,
        ..
    } = j;
    cluster.shutdown().unwrap();
    // Rank 2's node is lost; the job restarts, rank 2 elsewhere.
    let job_id = taskfold::checkpoint::JobId::named("levels");
    std::fs::remove_dir_all(rank_dir(&l1, job_id, 2)).unwrap();
    let again = config(&l1, &l4, [1, 1, 0, 0], 4, 2, vec![]);
    let cluster = LocalCluster::with_nodes(nodes, again).unwrap();
    let rt = cluster.rank(2);
    let failure = Failure::new([2], [2]);
    let got = rt
        .checkpoints()
        .restore_with::<Field>(&Retrieval::Aware(failure))
        .unwrap()
        .unwrap();
    assert_eq!(
        (got.version, &got.state, got.level),
        (2, &field(2, 2), Level::L2)
    );
    assert_eq!(got.tried, [Level::L2]);
    // The others read their own directories.
    let got = cluster.rank(0).checkpoints().restore::<Field>().unwrap();
    assert_eq!(got, Some((2, field(0, 2))));
    cluster.shutdown().unwrap();
}

#[test]
fn a_dead_partner_fails_l2_alone_and_the_future_names_it() {
    let j = job((0..4).collect(), [1, 1, 0, 0], 4, 2, vec![]);
    let partner = j.placement().partner(2).unwrap();
    assert_ne!(partner, 0, "the master survives");
    j.kill(partner, 2);
    let err = j
        .cluster
        .rank(2)
        .checkpoints()
        .save(1, &field(2, 1))
        .wait()
        .unwrap_err();
    match &err {
        CheckpointError::Levels {
            version,
            written,
            failed,
        } => {
            assert_eq!((*version, &written[..]), (1, &[Level::L1][..]));
            assert_eq!(failed.len(), 1, "{err}");
            assert_eq!(failed[0].0, Level::L2);
            assert!(failed[0].1.contains(&partner.to_string()), "{err}");
        }
        other => panic!("{other}"),
    }
    // The level written still counts.
    let restored = j.cluster.rank(2).checkpoints().restore::<Field>().unwrap();
    assert_eq!(restored, Some((1, field(2, 1))));
}

/// Six ranks on six nodes: two groups of three, two parity pieces each.
fn six() -> Job {
    job((0..6).collect(), [1, 0, 1, 2], 3, 2, vec![])
}

/// A rank of `p`'s groups other than rank 0, and `n` other ranks holding
/// its group's shards or parity, none of them rank 0.
fn victims(p: &Placement, n: usize) -> (u32, Vec<u32>) {
    for g in p.groups() {
        let holders: Vec<u32> = g.members.iter().chain(&g.parity).copied().collect();
        for &r in g.members.iter().filter(|&&r| r != 0) {
            let mut others: Vec<u32> = holders
                .iter()
                .copied()
                .filter(|&h| h != r && h != 0)
                .collect();
            others.dedup();
            if others.len() >= n {
                others.truncate(n);
                return (r, others);
            }
        }
    }
    panic!("no group fits");
}

#[test]
fn l3_rebuilds_a_rank_after_the_loss_of_m_shards_of_its_group() {
    let j = six();
    j.checkpoint_all(1..=3);
    let p = j.placement();
    // m = 2 lost: the rank's own disk, and one other holder.
    let (r, others) = victims(&p, 1);
    std::fs::remove_dir_all(j.dir(r)).unwrap();
    j.kill(others[0], r);
    let mut lost = vec![r, others[0]];
    let failure = Failure::new(lost.clone(), node_of(&p, &lost));
    assert_eq!(p.cheapest(r, &failure), Some(Level::L3));
    let rt = j.cluster.rank(r);
    let got = rt
        .checkpoints()
        .restore_with::<Field>(&Retrieval::Aware(failure))
        .unwrap()
        .unwrap();
    assert_eq!(
        (got.version, &got.state, got.level),
        (3, &field(r, 3), Level::L3)
    );
    assert_eq!(got.tried, vec![Level::L3], "straight to L3");
    // What the runtime learnt itself: L1 (empty) first, then L3.
    let got = rt
        .checkpoints()
        .restore_with::<Field>(&Retrieval::Aware(rt.checkpoints().failure()))
        .unwrap()
        .unwrap();
    assert_eq!((got.version, got.tried), (3, vec![Level::L1, Level::L3]));
    // Two damaged pieces of version 3: too few left, version 2 instead.
    lost.sort();
    let g = p.group_of(r).unwrap();
    let damaged: Vec<PathBuf> = g
        .parity
        .iter()
        .enumerate()
        .filter(|(_, h)| !lost.contains(h))
        .map(|(i, &h)| {
            let index = g.members.len() + i;
            let dir = j.dir(h).join(format!("held-g{}", g.index));
            dir.join(format!("r{h}-L3-g{}-s{index}-v3.tfck", g.index))
        })
        .chain(g.members.iter().filter(|m| !lost.contains(m)).map(|&m| {
            let index = g.members.iter().position(|&x| x == m).unwrap();
            j.dir(m)
                .join(format!("r{m}-L3-g{}-s{index}-v3.tfck", g.index))
        }))
        .take(2)
        .collect();
    for path in &damaged {
        damage(path);
    }
    let failure = Failure::new(lost.clone(), node_of(&p, &lost));
    let (got, log) = logged(|| rt.checkpoints().restore_after::<Field>(&failure).unwrap());
    assert_eq!(got, Some((2, field(r, 2))));
    assert!(log.contains("checksum mismatch"), "{log}");
}

#[test]
fn one_loss_more_than_m_is_refused_at_l3_and_l4_is_read() {
    let j = six();
    // L3 keeps versions 4 and 3, L4 versions 4 and 2.
    j.checkpoint_all(1..=4);
    let p = j.placement();
    let (r, others) = victims(&p, 2);
    std::fs::remove_dir_all(j.dir(r)).unwrap();
    for &o in &others {
        j.kill(o, r);
    }
    let lost: Vec<u32> = [r].into_iter().chain(others).collect();
    let failure = Failure::new(lost.clone(), node_of(&p, &lost));
    let rt = j.cluster.rank(r);
    let got = rt
        .checkpoints()
        .restore_with::<Field>(&Retrieval::Aware(failure.clone()))
        .unwrap()
        .unwrap();
    assert_eq!(
        (got.version, got.level, got.tried),
        (4, Level::L4, vec![Level::L4])
    );
    // Probing tries L3 too, and refuses it: too few shards.
    let got = rt
        .checkpoints()
        .restore_with::<Field>(&Retrieval::Probing)
        .unwrap()
        .unwrap();
    assert_eq!((got.version, got.level), (4, Level::L4));
    assert_eq!(got.tried, vec![Level::L1, Level::L3, Level::L4]);
    // A damaged newest L4 piece: the version before, from L4.
    let l4 = |v: u64| rank_dir(&j.l4, rt.checkpoints().job(), r).join(format!("r{r}-L4-v{v}.tfck"));
    damage(&l4(4));
    let (got, log) = logged(|| rt.checkpoints().restore_after::<Field>(&failure).unwrap());
    assert_eq!(got, Some((2, field(r, 2))));
    assert!(log.contains("checksum mismatch"), "{log}");
    // Both damaged: nothing fit is left, and nothing is restored.
    damage(&l4(2));
    assert_eq!(
        rt.checkpoints().restore_after::<Field>(&failure).unwrap(),
        None
    );
}

#[test]
fn aware_retrieval_goes_straight_to_l3_where_probing_visits_every_level() {
    // Eight ranks, two per node: the rank's node and its partner's lost.
    let nodes: Vec<u64> = (0..8).map(|r| r / 2).collect();
    let j = job(nodes, [1, 1, 1, 0], 4, 2, vec![]);
    j.checkpoint_all(1..=2);
    let p = j.placement();
    let pick = (1..8u32).find(|&r| {
        let partner = p.partner(r).unwrap();
        let dead_nodes = node_of(&p, &[r, partner]);
        let dead: Vec<u32> = (0..8)
            .filter(|&x| dead_nodes.contains(&p.node(x).unwrap()))
            .collect();
        let failure = Failure::new(dead.clone(), dead_nodes);
        !dead.contains(&0) && p.cheapest(r, &failure) == Some(Level::L3)
    });
    let r = pick.expect("a rank whose loss leaves L3");
    let dead_nodes = node_of(&p, &[r, p.partner(r).unwrap()]);
    let dead: Vec<u32> = (0..8)
        .filter(|&x| dead_nodes.contains(&p.node(x).unwrap()))
        .collect();
    std::fs::remove_dir_all(j.dir(r)).unwrap();
    for &d in dead.iter().filter(|&&d| d != r) {
        j.kill(d, r);
    }
    let failure = Failure::new(dead, dead_nodes);
    let rt = j.cluster.rank(r);
    let aware = rt
        .checkpoints()
        .restore_with::<Field>(&Retrieval::Aware(failure))
        .unwrap()
        .unwrap();
    assert_eq!((aware.version, &aware.state), (2, &field(r, 2)));
    assert_eq!(aware.tried, vec![Level::L3]);
    let probing = rt
        .checkpoints()
        .restore_with::<Field>(&Retrieval::Probing)
        .unwrap()
        .unwrap();
    assert_eq!((probing.version, &probing.state), (2, &field(r, 2)));
    assert_eq!(probing.tried, vec![Level::L1, Level::L2, Level::L3]);
}

#[test]
fn remote_levels_complete_while_the_application_computes() {
    let marks = tempfile::tempdir().unwrap();
    let (nodes, ranks): (Vec<u64>, u32) = ((0..3).collect(), 3);
    let partner_of_0 = Placement::new(&nodes, 3, 1, false)
        .unwrap()
        .partner(0)
        .unwrap();
    // The partner's engine is held before it writes its own version 1,
    // so rank 0's copy waits behind it.
    let hold = Hook {
        rank: partner_of_0,
        point: Point::Checkpoint,
        id: "1".into(),
        dir: marks.path().to_path_buf(),
    };
    let j = job(nodes, [1, 1, 1, 0], 3, 1, vec![hold]);
    let mut pending: Vec<_> = (0..ranks)
        .map(|r| j.cluster.rank(r).checkpoints().save(1, &field(r, 1)))
        .collect();
    let held = marks.path().join(format!("held-{partner_of_0}-checkpoint"));
    let start = Instant::now();
    while !held.exists() {
        assert!(
            start.elapsed() < WAIT,
            "the partner's engine never reached version 1"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The application goes on: a reduction over every rank completes.
    let futures: Vec<_> = j
        .cluster
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
    assert!(
        pending[0].wait_timeout(Duration::from_millis(50)).is_none(),
        "L2 awaits the partner"
    );
    std::fs::write(
        marks
            .path()
            .join(format!("release-{partner_of_0}-checkpoint")),
        b"",
    )
    .unwrap();
    for (r, f) in pending.iter_mut().enumerate() {
        let written = f
            .wait_timeout(WAIT)
            .expect("written once released")
            .unwrap();
        assert_eq!(
            written.levels,
            vec![Level::L1, Level::L2, Level::L3],
            "rank {r}"
        );
    }
    // The future can be awaited too.
    let tokio = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let next: Vec<_> = (0..ranks)
        .map(|r| j.cluster.rank(r).checkpoints().save(2, &field(r, 2)))
        .collect();
    for f in next {
        assert_eq!(tokio.block_on(f).unwrap().version, 2);
    }
}
