//! A misbehaving peer is bounded: what it announces is checked against
//! what the receiver accepts before anything is allocated, its link is
//! dropped and counted, and the other ranks keep being served. Real
//! sockets, 127.0.0.1 only; the misbehaving rank speaks the wire protocol
//! by hand.

mod common;

use common::counter;

use bytes::Bytes;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use taskfold_core::auth::{JobAuth, JobKey};
use taskfold_transports::auth::fresh_key;
use taskfold_transports::conformance::{fresh_dir, fresh_job, next_event, wait};
use taskfold_transports::tcp::frame::{self, kind, Header, Role};
use taskfold_transports::tcp::metrics::{BAD_CONNECTIONS, BOUNDS_HIT, RING_CONNECTIONS};
use taskfold_transports::tcp::{MasterAddr, TcpConfig, TcpTransport};
use taskfold_transports::{BufferKey, Event, Rank, Transport, TransportError};

const QUICK: Duration = Duration::from_secs(10);

/// The master's address, once rank 0 wrote its rendezvous file.
fn master_addr(path: &Path) -> SocketAddr {
    let deadline = Instant::now() + QUICK;
    loop {
        if let Some(a) = std::fs::read_to_string(path).ok().and_then(|t| {
            t.split_whitespace()
                .find_map(|w| w.strip_prefix("addr="))
                .and_then(|a| a.parse().ok())
        }) {
            return a;
        }
        assert!(Instant::now() < deadline, "no rendezvous file");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A job of three ranks: rank 0 and rank 2 real, rank 1 registered by
/// hand (on the node of token `node`) and listening on the returned
/// listener.
fn job_with_a_rogue(node: u64) -> (Arc<TcpTransport>, Arc<TcpTransport>, TcpListener, JobKey) {
    let dir = fresh_dir();
    let path = dir.join("master");
    let job = fresh_job();
    let key = fresh_key().expect("a key");
    let start = |rank: u32| {
        let mut cfg = TcpConfig::new(rank, 3, job, MasterAddr::Rendezvous(path.clone()));
        cfg.connect_timeout = Duration::from_secs(20);
        cfg.loans = false;
        cfg.auth = JobAuth::Key(key.clone());
        std::thread::spawn(move || TcpTransport::start(cfg).expect("a real rank"))
    };
    let (r0, r2) = (start(0), start(2));
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    // Rank 1 holds the key: a rank of the job that misbehaves.
    let mut hello = common::hello(Role::Register, job, 1, 3, 7);
    hello.addr = Some(listener.local_addr().expect("address"));
    hello.node = node;
    let mut s = common::connect_proven(master_addr(&path), &hello, &key, 0);
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let (h, _) = frame::read_frame_sync(&mut s, 4096)
        .expect("the table")
        .expect("a frame");
    assert_eq!(h.kind, kind::TABLE);
    let (t0, t2) = (r0.join().expect("rank 0"), r2.join().expect("rank 2"));
    let _ = std::fs::remove_dir_all(dir);
    (t0, t2, listener, key)
}

/// Rank 1's side: accepts rank 0's connection, answers its get request
/// with a chunk announcing `total` bytes, and returns whether rank 0 then
/// closed the connection (within [`QUICK`]).
fn rogue_answers(listener: TcpListener, key: JobKey, total: u64) -> std::thread::JoinHandle<bool> {
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("rank 0 connects");
        s.set_read_timeout(Some(QUICK)).expect("timeout");
        common::accept_proven(&mut s, &key, 1);
        let (req, _) = frame::read_frame_sync(&mut s, 4096)
            .expect("request")
            .expect("a frame");
        assert_eq!(req.kind, kind::GET_REQ);
        let chunk = Header {
            kind: kind::GET_CHUNK,
            len: 64,
            a: req.a,
            b: 0,
            c: total,
        };
        frame::write_frame_sync(&mut s, chunk, &[7u8; 64]).expect("the chunk");
        // Rank 0 drops the link: the end of the stream, or a reset (not a
        // timeout).
        match s.read_to_end(&mut Vec::new()) {
            Ok(_) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    })
}

/// Rank 0 asks the rogue rank 1 for a buffer (within `max` if given);
/// the get fails, the link to rank 1 goes down, and rank 2 still serves
/// rank 0.
fn refused_then_others_served(total: u64, max: Option<u64>) {
    let (t0, t2, listener, key) = job_with_a_rogue(0);
    let bad_before = counter(BAD_CONNECTIONS, None);
    let hits_before = counter(BOUNDS_HIT, Some(("bound", "get_total")));
    let rogue = rogue_answers(listener, key, total);
    let get = match max {
        Some(m) => t0.get_within(Rank(1), BufferKey(7), m),
        None => t0.get(Rank(1), BufferKey(7)),
    };
    // Reaching the answer at all shows nothing of `total` bytes was
    // allocated: the process would have failed first.
    match wait("the get from the rogue", get) {
        Err(TransportError::Protocol { peer: 1, detail }) => {
            assert!(detail.contains(&format!("{total} bytes")), "{detail}");
            assert!(detail.contains("more than"), "{detail}");
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
    assert!(
        rogue.join().expect("the rogue"),
        "rank 0 closed the connection"
    );
    match next_event(&*t0, "the rogue's link going down") {
        Event::LinkDown { peer: Rank(1), .. } => {}
        e => panic!("expected rank 1's link down, got {e:?}"),
    }
    assert!(counter(BAD_CONNECTIONS, None) > bad_before);
    assert!(counter(BOUNDS_HIT, Some(("bound", "get_total"))) > hits_before);
    // Rank 2 is still served, and still serves.
    let data = Bytes::from(vec![5u8; 3 << 20]);
    t2.expose(BufferKey(9), data.clone());
    let got = wait(
        "rank 2's buffer",
        t0.get_within(Rank(2), BufferKey(9), 3 << 20),
    );
    assert_eq!(&got.expect("rank 2 serves rank 0")[..], &data[..]);
    t0.send(Rank(2), Bytes::from_static(b"still here"))
        .expect("send");
    match next_event(&*t2, "rank 0's frame") {
        Event::Message {
            from: Rank(0),
            frame,
        } => assert_eq!(&frame[..], b"still here"),
        e => panic!("expected rank 0's frame, got {e:?}"),
    }
    t0.shutdown();
    t2.shutdown();
}

#[test]
fn a_huge_announced_total_is_refused_and_its_peer_dropped() {
    // A petabyte: far beyond the default maximum (and any node's memory).
    refused_then_others_served(1 << 50, None);
}

#[test]
fn a_total_beyond_what_the_caller_expects_is_refused() {
    // A megabyte is within the transport's maximum, not the caller's.
    refused_then_others_served(1 << 20, Some(4096));
}

/// A peer that sends get requests without reading the answers is no
/// longer read once its connection's queue is full, and other ranks are
/// served meanwhile.
#[test]
fn a_peer_that_never_reads_is_not_read_either() {
    let (t0, t2, listener, key) = job_with_a_rogue(0);
    drop(listener);
    let big = Bytes::from(vec![1u8; 1 << 20]);
    t0.expose(BufferKey(3), big.clone());
    let hits_before = counter(BOUNDS_HIT, Some(("bound", "writer")));
    // Rank 1 connects to rank 0 as a peer and asks, and asks.
    let hello = common::hello(Role::Peer, t0.job(), 1, 3, 9);
    let mut s = common::connect_proven(t0.listen_addr(), &hello, &key, 0);
    let mut req = Header::new(kind::GET_REQ, 0);
    req.b = 3;
    let mut sent = 0u64;
    s.set_write_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let deadline = Instant::now() + QUICK;
    // Until rank 0 stops reading (our writes block), or enough to fill
    // its queue many times over.
    while sent < 20_000 && Instant::now() < deadline {
        req.a = sent;
        if s.write_all(&req.encode()).is_err() {
            break;
        }
        sent += 1;
    }
    let deadline = Instant::now() + QUICK;
    while counter(BOUNDS_HIT, Some(("bound", "writer"))) == hits_before {
        assert!(
            Instant::now() < deadline,
            "the writer's bound was never reached"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Rank 2 is served while rank 1 is held back.
    let got = wait("rank 0's buffer", t2.get(Rank(0), BufferKey(3)));
    assert_eq!(&got.expect("rank 0 serves rank 2")[..], &big[..]);
    drop(s);
    t0.shutdown();
    t2.shutdown();
}

/// Rank 1's side: accepts rank 0's connection and answers its get
/// request with a loan of `total` bytes at `addr` in process `pid`; then
/// returns whether rank 0 closed the connection (`false`: it returned
/// the loan instead).
fn rogue_lends(
    listener: TcpListener,
    key: JobKey,
    pid: u32,
    addr: u64,
    total: u64,
) -> std::thread::JoinHandle<bool> {
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("rank 0 connects");
        s.set_read_timeout(Some(QUICK)).expect("timeout");
        common::accept_proven(&mut s, &key, 1);
        let (req, _) = frame::read_frame_sync(&mut s, 4096)
            .expect("request")
            .expect("a frame");
        assert_eq!(req.kind, kind::GET_REQ);
        let lend = Header {
            kind: kind::GET_LEND,
            len: frame::LEND_LEN,
            a: req.a,
            b: addr,
            c: total,
        };
        frame::write_frame_sync(&mut s, lend, &u64::from(pid).to_le_bytes()).expect("the loan");
        match frame::read_frame_sync(&mut s, 4096) {
            Ok(Some((h, _))) => {
                assert_eq!(h.kind, kind::GET_RETURN);
                assert_eq!(h.a, req.a);
                false
            }
            Ok(None) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    })
}

/// A loan naming a process that does not hold the connection (another
/// process of the user, whose memory rank 0 would read) is refused before
/// anything is read: the link is dropped and counted.
#[test]
fn a_loan_naming_another_process_is_refused_and_its_peer_dropped() {
    let (t0, t2, listener, key) = job_with_a_rogue(0);
    let mut victim = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("another process");
    let bad_before = counter(BAD_CONNECTIONS, None);
    let rogue = rogue_lends(listener, key, victim.id(), 0x40_0000, 1 << 16);
    let got = wait("the get from the rogue", t0.get(Rank(1), BufferKey(7)));
    assert!(got.is_err(), "nothing is read: {got:?}");
    assert!(
        rogue.join().expect("the rogue"),
        "rank 0 closed the connection"
    );
    match next_event(&*t0, "the rogue's link going down") {
        Event::LinkDown {
            peer: Rank(1),
            reason,
        } => assert!(reason.contains("does not hold the connection"), "{reason}"),
        e => panic!("expected rank 1's link down, got {e:?}"),
    }
    assert!(counter(BAD_CONNECTIONS, None) > bad_before);
    let _ = victim.kill();
    let _ = victim.wait();
    t0.shutdown();
    t2.shutdown();
}

/// A loan from the process that holds the connection is read (here the
/// rogue's thread lives in this test's process, and lends a buffer of it).
#[test]
fn a_loan_from_the_process_that_holds_the_connection_is_read() {
    let (t0, t2, listener, key) = job_with_a_rogue(0);
    let data: Vec<u8> = (0..1u32 << 16).map(|i| (i % 251) as u8).collect();
    let at = data.as_ptr() as u64;
    let rogue = rogue_lends(listener, key, std::process::id(), at, data.len() as u64);
    let got = wait("the loan", t0.get(Rank(1), BufferKey(7)));
    assert_eq!(&got.expect("the loan is read")[..], &data[..]);
    assert!(!rogue.join().expect("the rogue"), "the loan came back");
    t0.shutdown();
    t2.shutdown();
}

/// A peer sends 24 frames of 32 MiB to a rank that takes none: the rank
/// holds at most the event bytes' bound of them (eight), and the rest
/// wait in the peer's queues; once the runtime takes them, all 24 arrive,
/// in order. Over TCP here; the libfabric transport shares the bound.
#[test]
fn frames_are_bounded_in_bytes_as_well_as_in_number() {
    use taskfold_transports::link::MAX_EVENT_BYTES;
    const BIG: usize = 32 << 20;
    let ts = taskfold_transports::conformance::tcp_ranks(2, &|_| {});
    let frame = bytes::Bytes::from(vec![7u8; BIG]);
    for n in 0..24u8 {
        let mut f = frame.to_vec();
        f[0] = n;
        ts[1].send(Rank(0), f.into()).expect("send");
    }
    // Give the frames time to come as far as they may.
    std::thread::sleep(Duration::from_secs(3));
    let queued = ts[0].events().len();
    assert!(
        queued as u64 <= MAX_EVENT_BYTES / BIG as u64,
        "{queued} frames of 32 MiB held"
    );
    for n in 0..24u8 {
        match ts[0].events().recv_timeout(Duration::from_secs(20)) {
            Ok(Event::Message { from, frame }) => {
                assert_eq!((from, frame[0], frame.len()), (Rank(1), n, BIG));
            }
            other => panic!("expected frame {n}, got {other:?}"),
        }
    }
}

/// An offer of rings naming a process that does not hold the connection
/// (another process of the user, whose descriptors rank 0 would take) is
/// declined before anything is taken: the connection stays on TCP, and
/// its frames are delivered.
#[test]
fn rings_offered_for_another_process_are_declined_and_tcp_goes_on() {
    let (t0, _t2, listener, key) = job_with_a_rogue(taskfold_transports::same_node::node_token());
    drop(listener);
    let mut victim = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("another process");
    let declined = || counter(RING_CONNECTIONS, Some(("side", "declined")));
    let before = declined();
    let hello = common::hello(Role::Peer, t0.job(), 1, 3, 9);
    let mut s = common::connect_handshaken(t0.listen_addr(), &hello, &key, 0);
    s.set_read_timeout(Some(QUICK)).expect("timeout");
    let mut offer = victim.id().to_le_bytes().to_vec();
    offer.extend_from_slice(&65536u64.to_le_bytes());
    for fd in [3i32, 4, 5, 6, 7] {
        offer.extend_from_slice(&fd.to_le_bytes());
    }
    frame::write_frame_sync(&mut s, Header::new(kind::RINGS, 32), &offer).expect("the offer");
    let (h, _) = frame::read_frame_sync(&mut s, 4096)
        .expect("the answer")
        .expect("a frame");
    assert_eq!((h.kind, h.a), (kind::RINGS_TAKEN, 0), "declined");
    frame::write_frame_sync(&mut s, Header::new(kind::CONTROL, 5), b"hello").expect("a frame");
    match next_event(&*t0, "the rogue's frame over TCP") {
        Event::Message { from, frame } => assert_eq!((from, &frame[..]), (Rank(1), &b"hello"[..])),
        e => panic!("expected the frame, got {e:?}"),
    }
    assert_eq!(declined(), before + 1);
    let _ = victim.kill();
    let _ = victim.wait();
}
