//! Checkpoints between ranks over real TCP sockets (127.0.0.1), four
//! runtimes in this process: L2 copies and L3 parity travel by one-sided
//! gets served by the transport, and a rank whose directory is wiped
//! restores from its partner, then from its group.

use std::path::Path;
use std::time::Duration;
use taskfold::checkpoint::{rank_dir, Failure, Level, Retrieval};
use taskfold::config::CheckpointConfig;
use taskfold::rkyv::{Archive, Deserialize, Serialize};
use taskfold::{MasterAddr, Runtime, Settings};
use taskfold_core::checkpoint::Intervals;
use taskfold_transports::auth::fresh_key;

const WAIT: Duration = Duration::from_secs(60);

#[derive(Archive, Serialize, Deserialize, Debug, PartialEq)]
#[rkyv(crate = taskfold::rkyv)]
struct State {
    rank: u32,
    bytes: Vec<u8>,
}

fn state(rank: u32, version: u64) -> State {
    State {
        rank,
        // Large enough to take several reads on a socket.
        bytes: (0..300_000 + rank as usize * 1000)
            .map(|i| (i as u64 ^ version) as u8)
            .collect(),
    }
}

fn start(n: u32, rendezvous: &Path, dir: &Path) -> Vec<Runtime> {
    let key = fresh_key().unwrap();
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let (path, key) = (rendezvous.to_path_buf(), key.clone());
            let mut settings = Settings::default();
            settings.runtime.checkpoint = CheckpointConfig {
                dir: Some(dir.to_path_buf()),
                intervals: Intervals([1, 1, 1, 0]),
                group: 2,
                parity: 1,
                job: Some("tcp-levels".into()),
                ..CheckpointConfig::default()
            };
            std::thread::spawn(move || {
                Runtime::builder()
                    .settings(settings)
                    .rank(r)
                    .size(n)
                    .master(MasterAddr::Rendezvous(path))
                    .job("tcp-levels")
                    .job_key(key)
                    .build()
                    .expect("start")
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn l2_and_l3_travel_over_tcp_and_restore_a_wiped_rank() {
    let tmp = tempfile::tempdir().unwrap();
    let (rv, dir) = (tmp.path().join("master.addr"), tmp.path().join("l1"));
    let ranks = start(4, &rv, &dir);
    for v in 1..=2 {
        let fs: Vec<_> = ranks
            .iter()
            .map(|rt| rt.checkpoints().save(v, &state(rt.rank(), v)))
            .collect();
        for mut f in fs {
            let written = f.wait_timeout(WAIT).expect("in time").unwrap();
            assert_eq!(written.levels, [Level::L1, Level::L2, Level::L3]);
        }
    }
    let rt = &ranks[3];
    let job = rt.checkpoints().job();
    let partner = rt.checkpoints().placement().unwrap().partner(3).unwrap();
    std::fs::remove_dir_all(rank_dir(&dir, job, 3)).unwrap();
    // Its disk wiped: L1 is empty, the partner's copy is read.
    let aware = Retrieval::Aware(Failure::default());
    let got = rt
        .checkpoints()
        .restore_with::<State>(&aware)
        .unwrap()
        .unwrap();
    assert_eq!(
        (got.version, got.level, &got.state),
        (2, Level::L2, &state(3, 2))
    );
    assert_eq!(got.tried, [Level::L1, Level::L2]);
    // The copy lost too: the group's other shard and its parity, decoded.
    std::fs::remove_dir_all(rank_dir(&dir, job, partner).join("held-r3")).unwrap();
    let got = rt
        .checkpoints()
        .restore_with::<State>(&aware)
        .unwrap()
        .unwrap();
    assert_eq!(
        (got.version, got.level, &got.state),
        (2, Level::L3, &state(3, 2))
    );
    assert_eq!(got.tried, [Level::L1, Level::L2, Level::L3]);
    let hs: Vec<_> = ranks
        .into_iter()
        .map(|rt| std::thread::spawn(move || rt.shutdown()))
        .collect();
    for h in hs {
        h.join().unwrap().unwrap();
    }
}
