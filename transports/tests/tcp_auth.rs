//! An authenticated job over TCP: every connection proves the job key,
//! both ways, before anything else crosses it. Real sockets on 127.0.0.1.

mod common;

use bytes::Bytes;
use common::{call, hello, replay};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use taskfold_core::auth::{JobAuth, REFUSAL};
use taskfold_core::wire::{decode, encode, Msg};
use taskfold_transports::auth::fresh_key;
use taskfold_transports::conformance::{
    events_during, expect_message, fresh_dir, fresh_job, tcp_ranks, wait,
};
use taskfold_transports::tcp::frame::{self, kind, Header, Role};
use taskfold_transports::tcp::{MasterAddr, TcpConfig, TcpTransport};
use taskfold_transports::{BufferKey, Rank, Transport, TransportError, LAUNCHER};

fn key() -> JobAuth {
    JobAuth::Key(fresh_key().expect("a key"))
}

/// `n` ranks of a job whose key the test knows.
fn keyed(n: u32) -> (Vec<Arc<TcpTransport>>, JobAuth) {
    let auth = key();
    let a = auth.clone();
    (
        tcp_ranks(n, &move |c: &mut TcpConfig| c.auth = a.clone()),
        auth,
    )
}

fn config(rank: u32, size: u32, job: u64, master: &MasterAddr, auth: &JobAuth) -> TcpConfig {
    let mut cfg = TcpConfig::new(rank, size, job, master.clone());
    cfg.auth = auth.clone();
    cfg.connect_timeout = Duration::from_secs(20);
    cfg
}

/// A refusal that says why and gives nothing away: no job id (in any
/// spelling), no size, no number at all.
fn discreet(reason: &str, job: u64) {
    assert_eq!(reason, REFUSAL);
    assert!(!reason.contains(&format!("{job:x}")), "{reason}");
    assert!(!reason.contains(&job.to_string()), "{reason}");
    assert!(!reason.chars().any(|c| c.is_ascii_digit()), "{reason}");
}

/// Rank 1 and rank 0 exchange a frame both ways.
fn talk(t0: &TcpTransport, t1: &TcpTransport) {
    t1.send(Rank(0), Bytes::from_static(b"up")).expect("send");
    assert_eq!(expect_message(t0, "rank 1's frame").0, Rank(1));
    t0.send(Rank(1), Bytes::from_static(b"down")).expect("send");
    assert_eq!(expect_message(t1, "rank 0's frame").0, Rank(0));
}

#[test]
fn a_rank_with_a_wrong_key_is_refused_and_the_job_runs_with_the_right_one() {
    let dir = fresh_dir();
    let master = MasterAddr::Rendezvous(dir.join("master"));
    let (job, right) = (fresh_job(), key());
    let cfg0 = config(0, 2, job, &master, &right);
    let r0 = std::thread::spawn(move || TcpTransport::start(cfg0));
    // The wrong key: the master's proof does not match it, and the master
    // takes in nobody who did not prove its own.
    let mut wrong = config(1, 2, job, &master, &key());
    wrong.connect_timeout = Duration::from_secs(5);
    match TcpTransport::start(wrong) {
        Err(TransportError::Auth(e)) => {
            assert!(e.contains("not of this job"), "{e}");
            assert!(!e.contains(&format!("{job:x}")), "{e}");
        }
        other => panic!("expected the master's proof to fail, got {other:?}"),
    }
    // The insecure mode is no key of this job either.
    let mut open = config(1, 2, job, &master, &JobAuth::Insecure);
    open.connect_timeout = Duration::from_secs(5);
    assert!(matches!(
        TcpTransport::start(open),
        Err(TransportError::Auth(_))
    ));
    let t1 = TcpTransport::start(config(1, 2, job, &master, &right)).expect("rank 1");
    let t0 = r0.join().expect("no panic").expect("rank 0");
    talk(&t0, &t1);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_caller_claiming_a_rank_without_the_key_is_refused_and_the_real_rank_gets_in() {
    let dir = fresh_dir();
    let path = dir.join("master");
    let master = MasterAddr::Rendezvous(path.clone());
    let (job, right) = (fresh_job(), key());
    let cfg0 = config(0, 2, job, &master, &right);
    let r0 = std::thread::spawn(move || TcpTransport::start(cfg0));
    // The master's address, as a process that reads the rendezvous file.
    let addr = wait_for_master(&path);
    // It claims rank 1 of this very job (id and size right), with a key
    // of its own: refused, in terms that give nothing away.
    let mut claim = hello(Role::Register, job, 1, 2, 1);
    claim.addr = Some("127.0.0.1:9".parse().expect("address"));
    let stranger = fresh_key().expect("a key");
    let intruder = call(addr, &claim, &stranger, 0, &[]);
    let kinds: Vec<u8> = intruder.frames().iter().map(|(k, _)| *k).collect();
    assert_eq!(kinds, [kind::CHALLENGE, kind::REFUSE], "no table");
    discreet(&intruder.refusal(), job);
    // The real rank 1 gets in.
    let t1 = TcpTransport::start(config(1, 2, job, &master, &right)).expect("rank 1");
    let t0 = r0.join().expect("no panic").expect("rank 0");
    talk(&t0, &t1);
    let _ = std::fs::remove_dir_all(dir);
}

/// A launcher's report, recorded as it crossed the wire and replayed on a
/// new connection (to the master, or to another rank), is refused: the
/// listener's nonce is new each time.
#[test]
fn a_replayed_handshake_is_refused() {
    let (ts, auth) = keyed(2);
    let job = ts[0].job();
    let report = encode(&Msg::RankExited {
        rank: 1,
        code: 0,
        signal: 9,
        incarnation: 0,
    });
    let mut then = frame::frame(kind::CONTROL, &report);
    then.extend_from_slice(&Header::new(kind::GOODBYE, 0).encode());
    let who = hello(Role::Launcher, job, LAUNCHER.0, 0, 7);
    let genuine = call(ts[0].master_addr(), &who, auth.key(), 0, &then);
    assert_eq!(genuine.kinds(), [kind::CHALLENGE, kind::ACCEPTED]);
    let (from, frame) = expect_message(&*ts[0], "the genuine report");
    assert_eq!(from, LAUNCHER);
    assert!(matches!(
        decode(&frame),
        Ok(Msg::RankExited { rank: 1, .. })
    ));
    for addr in [ts[0].master_addr(), ts[1].listen_addr()] {
        let back = replay(addr, &genuine.sent);
        let mut r = &back[..];
        let (h, _) = frame::read_frame_sync(&mut r, 4096)
            .expect("a frame")
            .expect("a challenge");
        assert_eq!(h.kind, kind::CHALLENGE);
        let (h, p) = frame::read_frame_sync(&mut r, 4096)
            .expect("a frame")
            .expect("a refusal");
        assert_eq!(h.kind, kind::REFUSE);
        discreet(&String::from_utf8_lossy(&p), job);
    }
    // Nothing reached either rank.
    for t in &ts {
        let evs = events_during(&**t, Duration::from_millis(200));
        assert!(evs.is_empty(), "rank {}: {evs:?}", t.rank());
    }
}

/// A caller posing as rank 2 without the key asks rank 1 for an exposed
/// buffer: it gets the challenge and a refusal, never the data; with the
/// key, the same request is served; the job goes on.
#[test]
fn a_peer_without_the_key_reads_nothing() {
    let (ts, auth) = keyed(3);
    let job = ts[0].job();
    ts[1].expose(BufferKey(5), Bytes::from(vec![9u8; 4096]));
    let mut get = Header {
        a: 1,
        b: 5,
        ..Header::new(kind::GET_REQ, 0)
    }
    .encode()
    .to_vec();
    // The goodbye after the request lets the answer out before the close.
    get.extend_from_slice(&Header::new(kind::GOODBYE, 0).encode());
    let who = hello(Role::Peer, job, 2, 3, 3);
    let other = fresh_key().expect("a key");
    let c = call(ts[1].listen_addr(), &who, &other, 1, &get);
    let kinds: Vec<u8> = c.frames().iter().map(|(k, _)| *k).collect();
    assert_eq!(kinds, [kind::CHALLENGE, kind::REFUSE]);
    discreet(&c.refusal(), job);
    // With the key, the same request is served.
    let c = call(ts[1].listen_addr(), &who, auth.key(), 1, &get);
    assert!(
        c.frames()
            .iter()
            .any(|(k, _)| *k == kind::GET_CHUNK || *k == kind::GET_LEND),
        "{:?}",
        c.frames().iter().map(|(k, _)| *k).collect::<Vec<_>>()
    );
    // Ranks 0 and 1 still work.
    let got = wait("a get", ts[0].get(Rank(1), BufferKey(5))).expect("get");
    assert_eq!(got.len(), 4096);
}

/// Waits (bounded) for rank 0 to write the rendezvous file; its address.
fn wait_for_master(path: &std::path::Path) -> SocketAddr {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(a) = std::fs::read_to_string(path).ok().and_then(|t| {
            t.split_whitespace()
                .find_map(|w| w.strip_prefix("addr=").and_then(|a| a.parse().ok()))
        }) {
            return a;
        }
        assert!(std::time::Instant::now() < deadline, "no rendezvous file");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Only a connection that proved the key as the launcher's delivers
/// frames from [`LAUNCHER`]: a report of an exit sent by a rank (with the
/// key) comes from that rank, which the runtime's master does not take
/// from anyone but the launcher.
#[test]
fn a_rank_cannot_speak_as_the_launcher() {
    let (ts, auth) = keyed(3);
    let report = encode(&Msg::RankExited {
        rank: 1,
        code: 0,
        signal: 9,
        incarnation: 0,
    });
    let mut then = frame::frame(kind::CONTROL, &report);
    then.extend_from_slice(&Header::new(kind::GOODBYE, 0).encode());
    // Rank 2's stand-in (it holds the key) sends the report as a peer.
    let who = hello(Role::Peer, ts[0].job(), 2, 3, 9);
    let c = call(ts[0].master_addr(), &who, auth.key(), 0, &then);
    assert_eq!(c.kinds(), [kind::CHALLENGE, kind::ACCEPTED]);
    let (from, frame) = expect_message(&*ts[0], "the report sent by a rank");
    assert_eq!(from, Rank(2));
    assert!(matches!(decode(&frame), Ok(Msg::RankExited { .. })));
    // A launcher's hello followed by the proof of that rank's connection
    // (made for another role and another nonce of the master's): refused,
    // nothing delivered. (That a proof binds the role alone is the core's
    // property test `every_binding_counts`.)
    let body = who.encode();
    let back = replay(ts[0].master_addr(), &{
        let mut h = hello(Role::Launcher, ts[0].job(), LAUNCHER.0, 0, 9);
        h.nonce = who.nonce;
        let mut v = frame::frame(kind::HELLO, &h.encode());
        v.extend_from_slice(&c.sent[frame::HEADER_LEN + body.len()..]);
        v
    });
    let mut r = &back[..];
    let kinds: Vec<u8> = std::iter::from_fn(|| {
        frame::read_frame_sync(&mut r, 4096)
            .ok()
            .flatten()
            .map(|(h, _)| h.kind)
    })
    .collect();
    assert_eq!(kinds, [kind::CHALLENGE, kind::REFUSE]);
    let evs = events_during(&*ts[0], Duration::from_millis(200));
    assert!(evs.is_empty(), "{evs:?}");
}
