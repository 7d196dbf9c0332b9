//! The fabric path against a stranger, and a replacement let in over the
//! fabric: cases run per provider by `conformance_libfabric.rs`, each in a
//! process of its own. The stranger is an endpoint of the same provider
//! outside the job ([`Intruder`]), which knows a rank's endpoint name, as
//! anyone on the fabric may.

use bytes::Bytes;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use taskfold_core::auth::JobAuth;
use taskfold_transports::auth::fresh_key;
use taskfold_transports::conformance::{
    self, events_during, expect_message, libfabric_ranks, next_event, wait,
};
use taskfold_transports::libfabric::intruder::{Intruder, Outcome};
use taskfold_transports::libfabric::seal::{self, Tamper};
use taskfold_transports::libfabric::wire::{self, Msg};
use taskfold_transports::libfabric::{LibfabricConfig, LibfabricTransport};
use taskfold_transports::tcp::{MasterAddr, TcpConfig};
use taskfold_transports::{BufferKey, Event, Rank, Transport};

const SEND_WAIT: Duration = Duration::from_secs(5);

fn encoded(m: Msg<'_>) -> Vec<u8> {
    let mut b = Vec::new();
    m.encode(&mut b);
    b
}

/// A stranger that inserted `victim`'s name.
fn stranger_at(provider: &str, victim: &LibfabricTransport) -> (Intruder, u64) {
    let i = Intruder::open(provider).expect("a foreign endpoint");
    let at = i.insert(victim.endpoint_name()).expect("the victim's name");
    (i, at)
}

/// Messages of the stranger's as rank 1: none is taken.
fn forge(i: &Intruder, at: u64, msgs: &[Msg<'_>]) {
    for m in msgs {
        // Sent, or refused by the provider: either way, nothing taken.
        let _ = i.send(at, wire::tag_of(1), &encoded(m.clone()), SEND_WAIT);
    }
}

/// No frame from `from` reaches `t` meanwhile, and its link stays up.
fn nothing_from(t: &dyn Transport, from: u32, d: Duration) {
    for e in events_during(t, d) {
        match e {
            Event::Message { from: f, frame } if f.0 == from => {
                panic!(
                    "a forged frame was taken: {:?}",
                    String::from_utf8_lossy(&frame)
                )
            }
            Event::LinkDown { peer, reason } if peer.0 == from => {
                panic!("a forged message brought the link down: {reason}")
            }
            _ => {}
        }
    }
}

/// A stranger claiming rank 1 sends rank 0 a control frame, a goodbye, a
/// get request and credits: rank 0 takes none of them (its source is no
/// rank's address-vector entry), and rank 1's link and frames are as
/// before.
pub fn a_forged_sender_is_dropped(provider: &str) {
    let ts = libfabric_ranks(2, provider, &|_| {});
    ts[0].expose(BufferKey(7), Bytes::from(vec![7u8; 4096]));
    let (i, at) = stranger_at(provider, &ts[0]);
    forge(
        &i,
        at,
        &[
            Msg::Control {
                seq: 0,
                frame: b"forged",
            },
            Msg::GetReq { req: 1, key: 7 },
            Msg::Credit { n: 1 << 40 },
            Msg::Bye { seq: 1 },
        ],
    );
    nothing_from(&*ts[0], 1, Duration::from_secs(1));
    ts[1]
        .send(Rank(0), Bytes::from_static(b"genuine"))
        .expect("send");
    let (from, frame) = expect_message(&*ts[0], "rank 1's frame");
    assert_eq!((from, &frame[..]), (Rank(1), &b"genuine"[..]));
    ts[0]
        .send(Rank(1), Bytes::from_static(b"back"))
        .expect("rank 1 is up");
    let (from, frame) = expect_message(&*ts[1], "rank 0's frame");
    assert_eq!((from, &frame[..]), (Rank(0), &b"back"[..]));
}

/// A stranger claiming rank 1 sends the sequence numbers rank 1 will
/// use next, ahead of it: rank 1's own frames are all delivered, in
/// order, and the forged ones never.
pub fn a_forged_sequence_number_does_not_displace_the_real_frame(provider: &str) {
    let ts = libfabric_ranks(2, provider, &|_| {});
    let (i, at) = stranger_at(provider, &ts[0]);
    let forged: Vec<Msg<'_>> = (0..4)
        .map(|seq| Msg::Control {
            seq,
            frame: b"forged",
        })
        .collect();
    forge(&i, at, &forged);
    for n in 0..4u8 {
        ts[1].send(Rank(0), Bytes::from(vec![n; 3])).expect("send");
    }
    for n in 0..4u8 {
        let (from, frame) = expect_message(&*ts[0], "rank 1's frames in order");
        assert_eq!((from, &frame[..]), (Rank(1), &[n; 3][..]));
    }
    nothing_from(&*ts[0], 1, Duration::from_millis(500));
}

/// A stranger reads a rank's memory that a peer is reading, guessing the
/// key (small numbers, as a counter would give) at offset 0 and at
/// nearby addresses: no read returns the exposed bytes, and the peers'
/// gets go on.
pub fn a_guessed_memory_key_reads_nothing(provider: &str) {
    let ts = libfabric_ranks(2, provider, &|_| {});
    let secret: Vec<u8> = (0..65536u32).map(|i| (i * 7 + 3) as u8).collect();
    ts[0].expose(BufferKey(9), Bytes::from(secret.clone()));
    // Registered on the first request: a peer reads it first.
    let got = wait("rank 1's get", ts[1].get(Rank(0), BufferKey(9))).expect("get");
    assert_eq!(&got[..], &secret[..]);
    let (i, at) = stranger_at(provider, &ts[0]);
    for key in 0..=16u64 {
        let (out, bytes) = i.read(at, 0, key, 4096, Duration::from_secs(2));
        assert!(
            out != Outcome::Done || bytes[..] != secret[..4096],
            "key {key} read the exposed bytes"
        );
    }
    let got = wait("rank 1's get after", ts[1].get(Rank(0), BufferKey(9))).expect("get");
    assert_eq!(&got[..], &secret[..]);
}

/// Rank 2 dies; its replacement (incarnation 1) registers through the
/// TCP bootstrap, rank 1 lets it in (`readmit`), rank 0 — the master —
/// admits it: the replacement starts, and frames and gets flow both
/// ways between it and every rank over the fabric.
pub fn a_replacement_is_let_in_over_the_fabric(provider: &str) {
    replacement_let_in(provider, false);
}

/// As [`a_replacement_is_let_in_over_the_fabric`], every message sealed
/// (`TASKFOLD_INTEGRITY=mac`): the replacement's messages are sealed with
/// keys of its own process (its nonce came in its name frame).
pub fn a_sealed_replacement_is_let_in_over_the_fabric(provider: &str) {
    replacement_let_in(provider, true);
}

fn replacement_let_in(provider: &str, sealed: bool) {
    let seen: Mutex<Option<LibfabricConfig>> = Mutex::new(None);
    let ts = libfabric_ranks(3, provider, &|c| {
        c.tcp.integrity = sealed;
        if c.tcp.rank == 2 {
            *seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(c.clone());
        }
    });
    let mut cfg = seen
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .expect("rank 2's config");
    ts[2]
        .send(Rank(0), Bytes::from_static(b"old"))
        .expect("send");
    assert_eq!(
        &expect_message(&*ts[0], "the old rank 2's frame").1[..],
        b"old"
    );
    ts[2].abort();
    for t in &ts[..2] {
        match next_event(&**t, "rank 2's link down") {
            Event::LinkDown { peer, .. } => assert_eq!(peer, Rank(2)),
            e => panic!("expected rank 2's link down, got {e:?}"),
        }
    }
    cfg.tcp.incarnation = 1;
    cfg.tcp.master = MasterAddr::Addr(ts[0].tcp().listen_addr());
    let starting = std::thread::spawn(move || LibfabricTransport::start(cfg));
    let addr = match next_event(&*ts[0], "the replacement's request") {
        Event::Replacement {
            peer,
            incarnation,
            addr,
            ..
        } => {
            assert_eq!((peer, incarnation), (Rank(2), 1));
            addr
        }
        e => panic!("expected the replacement, got {e:?}"),
    };
    ts[1].readmit(Rank(2), 1, &addr).expect("rank 1 lets it in");
    ts[0].admit(Rank(2), 1, &[]).expect("the master admits it");
    let new: Arc<LibfabricTransport> = starting
        .join()
        .expect("the replacement's thread")
        .expect("the replacement starts");
    assert_eq!(new.incarnation(), 1);
    for t in &ts[..2] {
        t.send(Rank(2), Bytes::from(vec![t.rank().0 as u8; 5]))
            .expect("send");
        new.send(t.rank(), Bytes::from_static(b"new"))
            .expect("send");
    }
    let mut from: Vec<u32> = (0..2)
        .map(|_| {
            let (f, frame) = expect_message(&*new, "frames to the replacement");
            assert_eq!(&frame[..], &[f.0 as u8; 5]);
            f.0
        })
        .collect();
    from.sort_unstable();
    assert_eq!(from, [0, 1]);
    for t in &ts[..2] {
        let (f, frame) = expect_message(&**t, "the replacement's frame");
        assert_eq!((f, &frame[..]), (Rank(2), &b"new"[..]));
    }
    new.expose(BufferKey(3), Bytes::from(vec![3u8; 100_000]));
    ts[0].expose(BufferKey(4), Bytes::from(vec![4u8; 100_000]));
    let got = wait(
        "a get from the replacement",
        ts[1].get(Rank(2), BufferKey(3)),
    )
    .expect("get");
    assert!(got.len() == 100_000 && got.iter().all(|&b| b == 3));
    let got = wait("the replacement's get", new.get(Rank(0), BufferKey(4))).expect("get");
    assert!(got.len() == 100_000 && got.iter().all(|&b| b == 4));
    // Letting the same incarnation in again changes nothing.
    ts[1]
        .readmit(Rank(2), 1, &addr)
        .expect("a repeated readmit");
    ts[1]
        .send(Rank(2), Bytes::from_static(b"still"))
        .expect("send");
    assert_eq!(
        &expect_message(&*new, "after a repeated readmit").1[..],
        b"still"
    );
    new.shutdown();
}

/// Two ranks sealing their fabric messages (`TASKFOLD_INTEGRITY=mac`).
fn sealed(provider: &str) -> Vec<Arc<LibfabricTransport>> {
    libfabric_ranks(2, provider, &|c| c.tcp.integrity = true)
}

/// Waits for rank 0's link to rank 1 to go down for a failed integrity
/// check; no frame of rank 1's is delivered meanwhile.
fn refused_from_rank_one(t: &dyn Transport, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        match next_event(t, what) {
            Event::Message { from, frame } if from.0 == 1 => panic!(
                "a frame failing its check was delivered: {:?}",
                String::from_utf8_lossy(&frame)
            ),
            Event::LinkDown { peer, reason } if peer.0 == 1 => {
                assert!(reason.contains("integrity"), "{reason}");
                return;
            }
            _ => {}
        }
    }
    panic!("{what}: rank 1's link did not go down");
}

/// A sealed message changed on the way (one byte of its frame, after it
/// was sealed) is never delivered: it is refused and counted, and the
/// peer's link goes down, as a TCP connection whose frame fails ends.
pub fn a_changed_message_is_refused(provider: &str) {
    let ts = sealed(provider);
    ts[1]
        .send(Rank(0), Bytes::from_static(b"genuine"))
        .expect("send");
    assert_eq!(&expect_message(&*ts[0], "a sealed frame").1[..], b"genuine");
    let before = seal::refused();
    ts[1].tamper(Rank(0), Tamper::Message).expect("armed");
    ts[1]
        .send(Rank(0), Bytes::from_static(b"transfer 100"))
        .expect("send");
    refused_from_rank_one(&*ts[0], "the changed frame refused");
    assert!(seal::refused() > before, "the refusal is counted");
    // Rank 1, which still believes rank 0 up, leaves first: libfabric
    // 1.17's `shm` provider crashes a process that sends to a peer whose
    // endpoint closed meanwhile (see `conformance_libfabric.rs`).
    ts[1].shutdown();
    ts[0].shutdown();
}

/// A sealed message sent twice (replayed on the way) is taken once: the
/// copy is refused and counted, and the link stays up.
pub fn a_replayed_message_is_refused(provider: &str) {
    let ts = sealed(provider);
    let before = seal::refused();
    ts[1].tamper(Rank(0), Tamper::Replay).expect("armed");
    ts[1]
        .send(Rank(0), Bytes::from_static(b"once"))
        .expect("send");
    ts[1]
        .send(Rank(0), Bytes::from_static(b"after"))
        .expect("send");
    assert_eq!(&expect_message(&*ts[0], "the frame").1[..], b"once");
    assert_eq!(&expect_message(&*ts[0], "the next frame").1[..], b"after");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while seal::refused() == before && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        seal::refused() > before,
        "the replay is refused and counted"
    );
    nothing_from(&*ts[0], 1, Duration::from_millis(1500));
}

/// Bulk bytes changed on the way (one byte of what a get read) are never
/// handed over: the get fails with a protocol error; the next get of the
/// same buffer reads it intact.
pub fn a_changed_bulk_read_is_refused(provider: &str) {
    let ts = sealed(provider);
    let data: Vec<u8> = (0..(1 << 20) + 3).map(|i| (i % 251) as u8).collect();
    ts[1].expose(BufferKey(5), Bytes::from(data.clone()));
    let before = seal::refused();
    ts[0].tamper(Rank(1), Tamper::Bulk).expect("armed");
    let t = ts[0].clone();
    let got = wait("a changed get", async move {
        t.get(Rank(1), BufferKey(5)).await
    });
    match got {
        Err(e) => assert!(e.to_string().contains("integrity"), "{e}"),
        Ok(_) => panic!("changed bulk bytes were handed over"),
    }
    assert!(seal::refused() > before, "the refusal is counted");
    let t = ts[0].clone();
    let got = wait("an intact get", async move {
        t.get(Rank(1), BufferKey(5)).await
    });
    assert!(got.expect("the intact bytes")[..] == data[..]);
    // A control frame too large to go inline is read by RMA and checked
    // the same way.
    let large = Bytes::from(vec![0x42u8; 100 << 10]);
    ts[1].send(Rank(0), large.clone()).expect("send");
    assert!(expect_message(&*ts[0], "a large sealed frame").1 == large);
}

/// Ranks that disagree on `TASKFOLD_INTEGRITY` over libfabric do not
/// start together: the one refused names the variable.
pub fn ranks_that_disagree_on_integrity_are_refused(provider: &str) {
    let dir = conformance::fresh_dir();
    let master = MasterAddr::Rendezvous(dir.join("master"));
    let (job, key) = (conformance::fresh_job(), fresh_key().expect("a key"));
    let results: Vec<Result<Arc<LibfabricTransport>, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2u32)
            .map(|r| {
                let mut tcp = TcpConfig::new(r, 2, job, master.clone());
                tcp.auth = JobAuth::Key(key.clone());
                tcp.integrity = r == 0;
                tcp.connect_timeout = Duration::from_secs(5);
                let cfg = LibfabricConfig::new(tcp, Some(provider.to_string()));
                s.spawn(move || LibfabricTransport::start(cfg).map_err(|e| e.to_string()))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect()
    });
    let errors: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        errors.iter().any(|e| e.contains("TASKFOLD_INTEGRITY")),
        "a refusal naming the variable: {errors:?}"
    );
    for t in results.iter().flatten() {
        t.abort();
    }
    assert!(results.iter().any(|r| r.is_err()), "not both started");
}
