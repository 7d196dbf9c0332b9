//! A rank's checkpoint engine facing untrusted peers: rank 0 runs a
//! runtime, ranks 1 and 2 are bare loopback transports that send it
//! checkpoint messages of their own making. Copies from a rank it is not
//! the partner of, of another job, owner or version, or damaged, are
//! refused with their reason; questions about another rank's pieces, or
//! of another type, are refused; nothing panics, and a good copy is
//! stored and served back to its owner alone.

use std::sync::Arc;
use std::time::{Duration, Instant};
use taskfold::checkpoint::{rank_dir, JobId, Level};
use taskfold::config::CheckpointConfig;
use taskfold::{Config, Runtime};
use taskfold_core::checkpoint::piece::{self, Expect, Header};
use taskfold_core::wire::checkpoint::{buffer_key, Body, CheckpointMsg};
use taskfold_core::wire::{self, Msg};
use taskfold_core::Rank;
use taskfold_transports::loopback::{LoopbackHub, LoopbackTransport};
use taskfold_transports::{BufferKey, Bytes, Event, Transport};

const WAIT: Duration = Duration::from_secs(30);

fn send(t: &LoopbackTransport, msg: CheckpointMsg) {
    let frame = wire::encode(&Msg::Checkpoint(msg));
    t.send(Rank(0), Bytes::from(frame)).unwrap();
}

/// The next checkpoint message rank 0 sends to `t` (others skipped).
fn answer(t: &LoopbackTransport) -> CheckpointMsg {
    let until = Instant::now() + WAIT;
    let events = t.events();
    loop {
        let ev = events.recv_deadline(until).expect("an answer in time");
        if let Event::Message { frame, .. } = ev {
            if let Ok(Msg::Checkpoint(m)) = wire::decode(&frame) {
                return m;
            }
        }
    }
}

fn l2_piece(job: JobId, owner: u32, version: u64) -> Vec<u8> {
    let header = Header {
        job,
        owner,
        version,
        type_tag: 77,
        level: Level::L2,
        shard: None,
    };
    piece::encode(&header, b"the owner's state").unwrap()
}

/// `t` (rank `owner`) offers `bytes` as its L2 copy of `version`; the
/// answer's `(ok, reason)`.
fn offer(t: &LoopbackTransport, owner: u32, version: u64, bytes: Vec<u8>) -> (bool, String) {
    let len = bytes.len() as u64;
    t.expose(
        BufferKey(buffer_key(Body::Copy, owner, version, 0)),
        Bytes::from(bytes),
    );
    send(t, CheckpointMsg::Offer { version, len });
    match answer(t) {
        CheckpointMsg::Stored {
            level: 2,
            version: v,
            ok,
            reason,
            ..
        } if v == version => (ok, reason),
        other => panic!("{other:?}"),
    }
}

fn missing(t: &LoopbackTransport, msg: CheckpointMsg) -> String {
    send(t, msg);
    match answer(t) {
        CheckpointMsg::Missing { reason, .. } => reason,
        other => panic!("expected a refusal: {other:?}"),
    }
}

/// Rank 0's runtime, ranks 1 and 2 bare, and the directory root.
struct Peers {
    hub: Arc<LoopbackHub>,
    t1: Arc<LoopbackTransport>,
    t2: Arc<LoopbackTransport>,
    rt: Option<Runtime>,
    job: JobId,
    tmp: tempfile::TempDir,
}

impl Drop for Peers {
    fn drop(&mut self) {
        self.hub.kill(Rank(1));
        self.hub.kill(Rank(2));
        drop(self.rt.take());
    }
}

fn peers() -> Peers {
    let tmp = tempfile::tempdir().unwrap();
    let config = Config {
        checkpoint: CheckpointConfig {
            dir: Some(tmp.path().to_path_buf()),
            job: Some("wire".into()),
            ..CheckpointConfig::default()
        },
        failure_timeout: Duration::from_secs(60),
        ..Config::default()
    };
    let (hub, mut ts) = LoopbackHub::new(3);
    let (t2, t1) = (ts.pop().unwrap(), ts.pop().unwrap());
    let rt = Runtime::start(ts.pop().unwrap() as Arc<dyn Transport>, config).unwrap();
    // Interleaved 0, 1, 2 on three nodes: rank 0 is rank 2's partner only.
    assert_eq!(rt.checkpoints().placement().unwrap().partner(2), Some(0));
    let job = rt.checkpoints().job();
    Peers {
        hub,
        t1,
        t2,
        rt: Some(rt),
        job,
        tmp,
    }
}

#[test]
fn foreign_or_damaged_copies_are_refused_and_a_good_one_stored() {
    let p = peers();
    let (t1, t2, job) = (&p.t1, &p.t2, p.job);
    let (ok, why) = offer(t1, 1, 1, l2_piece(job, 1, 1));
    assert!(!ok && why.contains("not rank 1's partner"), "{why}");
    let (ok, why) = offer(t2, 2, 1, l2_piece(JobId::named("theirs"), 2, 1));
    assert!(!ok && why.contains("of this job"), "{why}");
    let (ok, why) = offer(t2, 2, 1, l2_piece(job, 1, 1));
    assert!(!ok && why.contains("owner 1"), "{why}");
    let (ok, why) = offer(t2, 2, 1, l2_piece(job, 2, 9));
    assert!(!ok && why.contains("version 9"), "{why}");
    let mut damaged = l2_piece(job, 2, 1);
    damaged[50] ^= 1;
    let (ok, why) = offer(t2, 2, 1, damaged);
    assert!(!ok && why.contains("checksum"), "{why}");
    let (ok, why) = offer(t2, 2, 1, b"not a piece".to_vec());
    assert!(!ok && why.contains("bad magic"), "{why}");
    let held = rank_dir(p.tmp.path(), job, 0).join("held-r2");
    assert!(
        !held.join("r2-L2-v1.tfck").exists(),
        "nothing refused is stored"
    );
    let (ok, why) = offer(t2, 2, 1, l2_piece(job, 2, 1));
    assert!(ok, "{why}");
    assert!(held.join("r2-L2-v1.tfck").is_file());
    // A shard to a rank that is no group's encoder here: refused.
    send(
        t1,
        CheckpointMsg::Shard {
            version: 1,
            group: 7,
            len: 10,
            type_tag: 77,
        },
    );
    assert!(matches!(answer(t1), CheckpointMsg::CodingFailed { .. }));
}

#[test]
fn a_copy_is_served_to_its_owner_alone_and_as_its_type() {
    let p = peers();
    let (t1, t2, job) = (&p.t1, &p.t2, p.job);
    assert!(offer(t2, 2, 1, l2_piece(job, 2, 1)).0);
    // Rank 1 may not list or fetch rank 2's copy; nor ask of a level 9.
    let query = |req, level, owner| CheckpointMsg::Query {
        req,
        level,
        owner,
        group: 0,
    };
    assert!(missing(t1, query(1, 2, 2)).contains("may not ask"));
    assert!(missing(t1, query(2, 9, 1)).contains("may not ask"));
    let fetch = |req, owner, type_tag| CheckpointMsg::Fetch {
        req,
        level: 2,
        owner,
        group: 0,
        index: 0,
        version: 1,
        type_tag,
    };
    assert!(missing(t1, fetch(3, 2, 77)).contains("may not ask"));
    // Rank 2 asking for another type: refused, with the reason.
    assert!(missing(t2, fetch(4, 2, 78)).contains("type tag"));
    // Rank 2's own copy: listed, lent, intact.
    send(t2, query(5, 2, 2));
    assert_eq!(
        answer(t2),
        CheckpointMsg::Holding {
            req: 5,
            pieces: vec![(1, 0)]
        }
    );
    send(t2, fetch(6, 2, 77));
    let len = match answer(t2) {
        CheckpointMsg::Piece { req: 6, len } => len,
        other => panic!("{other:?}"),
    };
    let key = BufferKey(buffer_key(Body::Fetched, 2, 6, 0));
    let got = block(t2.get_within(Rank(0), key, len));
    let expect = Expect {
        job,
        type_tag: 77,
        owner: Some(2),
        version: Some(1),
        level: Some(Level::L2),
    };
    assert_eq!(
        piece::check(&got, &expect).unwrap().payload,
        b"the owner's state"
    );
}

/// Waits for a loopback get (ready at once).
fn block(f: taskfold_transports::GetFuture) -> Vec<u8> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(f).unwrap().to_vec()
}
