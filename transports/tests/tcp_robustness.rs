//! TCP-specific robustness: bad input on the listeners, refusals at the
//! bootstrap, launcher reports. Everything binds 127.0.0.1 only.

mod common;

use bytes::Bytes;
use common::{call, hello};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};
use taskfold_core::auth::JobAuth;
use taskfold_core::wire::{decode, Msg};
use taskfold_transports::auth::fresh_key;
use taskfold_transports::conformance::{
    events_during, expect_message, fresh_dir, fresh_job, next_event, tcp_ranks, wait,
};
use taskfold_transports::tcp::frame::{self, kind, Header, Role};
use taskfold_transports::tcp::{report_rank_exit, MasterAddr, TcpConfig, TcpTransport};
use taskfold_transports::version::VERSION;
use taskfold_transports::{BufferKey, Event, Rank, Transport, TransportError, LAUNCHER};

const QUICK: Duration = Duration::from_secs(5);

/// Writes `bytes` to `addr` and checks that the server closes the
/// connection; returns what it sent back.
fn poke(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    // The server may close before everything is written.
    let _ = s.write_all(bytes);
    // Without this, input shorter than a header waits for the hello timeout.
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut back = Vec::new();
    match s.read_to_end(&mut back) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("server kept a bad connection open: {e}"),
    }
    back
}

/// What a refusal frame says.
fn refusal(back: &[u8]) -> String {
    let (h, p) = frame::read_frame_sync(&mut &back[..], 4096)
        .expect("a frame")
        .expect("a refusal");
    assert_eq!(h.kind, kind::REFUSE);
    String::from_utf8_lossy(&p).into_owned()
}

/// Rank 0 and rank 1 still exchange a frame and a get, and saw no failure.
fn still_works(ts: &[Arc<TcpTransport>]) {
    ts[1].expose(BufferKey(3), Bytes::from(vec![7u8; 100_000]));
    let got = wait("get after bad input", ts[0].get(Rank(1), BufferKey(3))).expect("get");
    assert!(got.iter().all(|&b| b == 7) && got.len() == 100_000);
    ts[0]
        .send(Rank(1), Bytes::from_static(b"ping"))
        .expect("send");
    ts[1]
        .send(Rank(0), Bytes::from_static(b"pong"))
        .expect("send");
    assert_eq!(
        expect_message(&*ts[1], "ping").1,
        Bytes::from_static(b"ping")
    );
    assert_eq!(
        expect_message(&*ts[0], "pong").1,
        Bytes::from_static(b"pong")
    );
    for t in ts {
        let evs = events_during(&**t, Duration::from_millis(100));
        assert!(evs.is_empty(), "unexpected events {evs:?}");
    }
}

#[test]
fn garbage_is_dropped() {
    let ts = tcp_ranks(2, &|_| {});
    // An idle connection that never says anything must not bother anyone.
    let _idle = TcpStream::connect(ts[1].listen_addr()).expect("connect");
    for t in &ts {
        let back = poke(t.listen_addr(), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(back.is_empty(), "answered garbage with {back:?}");
        poke(t.listen_addr(), &[0xff; 5000]);
        poke(t.listen_addr(), b"tf");
        // A valid magic with an unknown kind.
        poke(t.listen_addr(), &Header::new(42, 0).encode());
    }
    still_works(&ts);
}

#[test]
fn oversize_length_prefix_is_dropped() {
    let ts = tcp_ranks(2, &|_| {});
    for t in &ts {
        let mut huge_hello = Header::new(kind::HELLO, u32::MAX).encode().to_vec();
        huge_hello.extend_from_slice(&[0; 64]);
        poke(t.listen_addr(), &huge_hello);
        // A control frame before any hello, with a 2 GiB length.
        poke(
            t.listen_addr(),
            &Header::new(kind::CONTROL, 1 << 31).encode(),
        );
    }
    still_works(&ts);
}

#[test]
fn oversize_control_frames_are_refused() {
    // Rank 1 accepts frames of at most 1 KiB; rank 0 the default.
    let ts = tcp_ranks(2, &|c: &mut TcpConfig| {
        if c.rank == 1 {
            c.max_frame = 1024;
        }
    });
    assert_eq!(
        ts[1].send(Rank(0), Bytes::from(vec![0u8; 2048])),
        Err(TransportError::FrameTooLarge {
            len: 2048,
            max: 1024
        })
    );
    ts[1]
        .send(Rank(0), Bytes::from(vec![0u8; 1024]))
        .expect("a frame at the limit");
    assert_eq!(expect_message(&*ts[0], "frame at the limit").1.len(), 1024);
    // Rank 0 sends more than rank 1 accepts: rank 1 drops the link.
    ts[0]
        .send(Rank(1), Bytes::from(vec![0u8; 2048]))
        .expect("queued");
    match next_event(&*ts[1], "a link down") {
        Event::LinkDown { peer, reason } => {
            assert_eq!(peer, Rank(0));
            assert!(reason.contains("exceeds"), "{reason}");
        }
        e => panic!("expected a link down, got {e:?}"),
    }
}

/// `n` ranks of a job whose key the test knows.
fn keyed(n: u32) -> (Vec<Arc<TcpTransport>>, JobAuth) {
    let auth = JobAuth::Key(fresh_key().expect("a key"));
    let a = auth.clone();
    (
        tcp_ranks(n, &move |c: &mut TcpConfig| c.auth = a.clone()),
        auth,
    )
}

/// The master's table carries every rank's node token to every rank.
#[test]
fn every_rank_learns_every_ranks_node() {
    let ts = tcp_ranks(3, &|_| {});
    let here = taskfold_transports::shared_file::node_token();
    assert_ne!(here, 0, "this machine has a boot id");
    for t in &ts {
        assert_eq!(t.nodes(), Some(&[here; 3][..]), "rank {}", t.rank());
    }
}

/// Callers that proved the job key but claim what is not so are refused
/// with the reason.
#[test]
fn bad_peer_hellos_are_refused() {
    let (ts, auth) = keyed(2);
    let (job, addr, key) = (ts[0].job(), ts[1].listen_addr(), auth.key());
    let r = call(addr, &hello(Role::Peer, job ^ 1, 0, 2, 1), key, 1, &[]).refusal();
    assert!(r.contains("wrong job id"), "{r}");
    let r = call(addr, &hello(Role::Peer, job, 9, 2, 2), key, 1, &[]).refusal();
    assert!(r.contains("rank 9"), "{r}");
    let r = call(addr, &hello(Role::Peer, job, 1, 2, 3), key, 1, &[]).refusal();
    assert!(r.contains("rank 1"), "{r}");
    let r = call(addr, &hello(Role::Register, job, 1, 2, 4), key, 1, &[]).refusal();
    assert!(r.contains("not the master"), "{r}");
    // Another protocol version: refused before the handshake, telling
    // nothing of the listener (neither its rank nor its version).
    let mut old = Header::new(kind::HELLO, 2).encode().to_vec();
    old.extend_from_slice(&99u16.to_le_bytes());
    let r = refusal(&poke(addr, &old));
    assert!(
        r.contains("protocol version mismatch")
            && !r.contains(&format!("version {VERSION}"))
            && !r.contains("rank 1")
            && r.contains("the caller speaks version 99"),
        "{r}"
    );
    still_works(&ts);
}

/// A rank of the job (it holds the key) started with other claims.
fn intruder(
    rank: u32,
    size: u32,
    job: u64,
    auth: &JobAuth,
    master: SocketAddr,
) -> Result<(), TransportError> {
    let mut cfg = TcpConfig::new(rank, size, job, MasterAddr::Addr(master));
    cfg.auth = auth.clone();
    cfg.connect_timeout = QUICK;
    TcpTransport::start(cfg).map(|_| ())
}

#[test]
fn wrong_job_is_refused() {
    let (ts, auth) = keyed(2);
    match intruder(1, 2, ts[0].job() ^ 0xff, &auth, ts[0].master_addr()) {
        Err(TransportError::Refused(r)) => assert!(r.contains("wrong job id"), "{r}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    still_works(&ts);
}

#[test]
fn wrong_size_is_refused() {
    let (ts, auth) = keyed(2);
    match intruder(1, 3, ts[0].job(), &auth, ts[0].master_addr()) {
        Err(TransportError::Refused(r)) => assert!(r.contains("wrong rank counts"), "{r}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    still_works(&ts);
}

#[test]
fn registered_rank_is_refused_after_the_bootstrap() {
    let (ts, auth) = keyed(2);
    match intruder(1, 2, ts[0].job(), &auth, ts[0].master_addr()) {
        Err(TransportError::Refused(r)) => assert!(r.contains("already registered"), "{r}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // A raw registration claiming rank 0 (the master itself).
    let mut h = hello(Role::Register, ts[0].job(), 0, 2, 5);
    h.addr = Some(ts[1].listen_addr());
    let r = call(ts[0].master_addr(), &h, auth.key(), 0, &[]).refusal();
    assert!(r.contains("rank 0 is already registered"), "{r}");
    h.rank = 5;
    let r = call(ts[0].master_addr(), &h, auth.key(), 0, &[]).refusal();
    assert!(r.contains("out of range"), "{r}");
    still_works(&ts);
}

#[test]
fn registered_rank_is_refused_during_the_bootstrap() {
    let dir = fresh_dir();
    let master = MasterAddr::Rendezvous(dir.join("master"));
    let job = fresh_job();
    let auth = JobAuth::Key(fresh_key().expect("a key"));
    let start = |rank: u32| {
        let mut cfg = TcpConfig::new(rank, 3, job, master.clone());
        cfg.auth = auth.clone();
        cfg.connect_timeout = Duration::from_secs(15);
        std::thread::spawn(move || TcpTransport::start(cfg))
    };
    let r0 = start(0);
    let (a, b) = (start(1), start(1));
    // One of the two claims of rank 1 is refused while rank 2 is missing.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !a.is_finished() && !b.is_finished() {
        assert!(Instant::now() < deadline, "no refusal of the second rank 1");
        std::thread::sleep(Duration::from_millis(10));
    }
    let r2 = start(2);
    let results: Vec<_> = [a, b]
        .into_iter()
        .map(|h| h.join().expect("no panic"))
        .collect();
    let refused: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(refused.len(), 1, "{results:?}");
    assert!(
        matches!(refused[0], TransportError::Refused(r) if r.contains("already registered")),
        "{refused:?}"
    );
    let t0 = r0.join().expect("no panic").expect("rank 0");
    let t2 = r2.join().expect("no panic").expect("rank 2");
    t2.send(Rank(0), Bytes::from_static(b"in")).expect("send");
    assert_eq!(expect_message(&*t0, "a frame from rank 2").0, Rank(2));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn missing_ranks_are_named() {
    let dir = fresh_dir();
    let master = MasterAddr::Rendezvous(dir.join("master"));
    let job = fresh_job();
    let handles: Vec<_> = (0..2)
        .map(|rank| {
            let mut cfg = TcpConfig::new(rank, 3, job, master.clone());
            cfg.connect_timeout = Duration::from_secs(1);
            std::thread::spawn(move || TcpTransport::start(cfg))
        })
        .collect();
    for (rank, h) in handles.into_iter().enumerate() {
        let err = h.join().expect("no panic").expect_err("rank 2 never came");
        assert!(err.to_string().contains("[2]"), "rank {rank}: {err}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn unreachable_master_times_out() {
    // A port nobody listens on: bound, never listening, and held for the
    // whole test, so that no other test's listener can take it meanwhile.
    let held =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("a socket");
    held.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .expect("a free port");
    let addr = held
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .expect("its address");
    let mut cfg = TcpConfig::new(1, 2, fresh_job(), MasterAddr::Addr(addr));
    cfg.connect_timeout = Duration::from_millis(300);
    assert!(matches!(
        TcpTransport::start(cfg),
        Err(TransportError::MasterUnreachable(_))
    ));
}

#[test]
fn launcher_reports_reach_the_master() {
    let (ts, auth) = keyed(2);
    let master = MasterAddr::Addr(ts[0].master_addr());
    report_rank_exit(&master, ts[0].job(), &auth, (1, 0), -1, 9, QUICK).expect("report");
    match next_event(&*ts[0], "the launcher's report") {
        Event::Message { from, frame } => {
            assert_eq!(from, LAUNCHER);
            assert_eq!(
                decode(&frame),
                Ok(Msg::RankExited {
                    rank: 1,
                    code: -1,
                    signal: 9,
                    incarnation: 0
                })
            );
        }
        e => panic!("expected the report, got {e:?}"),
    }
    match report_rank_exit(&master, ts[0].job() ^ 1, &auth, (1, 0), 0, 0, QUICK) {
        Err(TransportError::Refused(r)) => assert!(r.contains("wrong job id"), "{r}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Rank 1 proves the key as rank 1, not as the master.
    let not_master = MasterAddr::Addr(ts[1].listen_addr());
    match report_rank_exit(&not_master, ts[0].job(), &auth, (1, 0), 0, 0, QUICK) {
        Err(TransportError::Auth(r)) => assert!(r.contains("not of this job"), "{r}"),
        other => panic!("expected the master's proof to fail, got {other:?}"),
    }
    // A launcher without the key: refused, and the master hears nothing.
    let other = JobAuth::Key(fresh_key().expect("a key"));
    match report_rank_exit(&master, ts[0].job(), &other, (1, 0), 0, 9, QUICK) {
        Err(TransportError::Auth(r)) => assert!(r.contains("not of this job"), "{r}"),
        other => panic!("expected the master's proof to fail, got {other:?}"),
    }
    still_works(&ts);
}

#[test]
fn launcher_finds_the_master_through_the_rendezvous_file() {
    let dir = fresh_dir();
    let master = MasterAddr::Rendezvous(dir.join("master"));
    let job = fresh_job();
    let auth = JobAuth::Key(fresh_key().expect("a key"));
    let mut cfg = TcpConfig::new(0, 1, job, master.clone());
    cfg.auth = auth.clone();
    let t0 = TcpTransport::start(cfg).expect("rank 0");
    report_rank_exit(&master, job, &auth, (0, 0), 3, 0, QUICK).expect("report");
    let (from, frame) = expect_message(&*t0, "the launcher's report");
    assert_eq!(from, LAUNCHER);
    assert!(matches!(
        decode(&frame),
        Ok(Msg::RankExited { code: 3, .. })
    ));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn dead_rank_found_at_first_connect_is_reported_once() {
    let ts = tcp_ranks(3, &|_| {});
    // No link between 0 and 2 exists yet.
    ts[2].abort();
    ts[0]
        .send(Rank(2), Bytes::from_static(b"anyone?"))
        .expect("queued");
    let get = ts[0].get(Rank(2), BufferKey(1));
    match next_event(&*ts[0], "a link down") {
        Event::LinkDown { peer, .. } => assert_eq!(peer, Rank(2)),
        e => panic!("expected a link down, got {e:?}"),
    }
    assert!(matches!(
        wait("a get to a dead rank", get),
        Err(TransportError::LinkDown { peer: 2, .. })
    ));
    assert!(matches!(
        ts[0].send(Rank(2), Bytes::from_static(b"x")),
        Err(TransportError::LinkDown { peer: 2, .. })
    ));
    let evs = events_during(&*ts[0], Duration::from_millis(200));
    assert!(evs.is_empty(), "{evs:?}");
    // Rank 1 never talked to rank 2: it has nothing to report.
    assert!(events_during(&*ts[1], Duration::from_millis(50)).is_empty());
    assert_eq!(
        ts[2].send(Rank(0), Bytes::new()),
        Err(TransportError::Closed)
    );
}
