//! `TASKFOLD_INTEGRITY=mac` over TCP: what an on-path attacker (who can
//! change, inject or replay bytes on a connection, but holds no key) gets
//! from a rank that seals its frames. The test plays the attacker's part
//! with a connection of its own that proved the key as rank 0: it seals
//! frames as a rank does, then changes or replays them as the path could.
//! Real sockets on 127.0.0.1.

mod common;

use common::{call, connect_sealed, hello};
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;
use taskfold_core::auth::{FrameMac, JobAuth, JobKey};
use taskfold_transports::auth::fresh_key;
use taskfold_transports::conformance::{events_during, next_event, tcp_ranks};
use taskfold_transports::tcp::frame::{kind, Header, Role};
use taskfold_transports::tcp::TcpTransport;
use taskfold_transports::{Event, Rank, Transport};

/// Two ranks sealing their frames, with a key the test knows.
fn sealed_job() -> (Vec<Arc<TcpTransport>>, JobKey) {
    let key = fresh_key().expect("a key");
    let k = key.clone();
    let ts = tcp_ranks(2, &move |c| {
        c.auth = JobAuth::Key(k.clone());
        c.integrity = true;
    });
    (ts, key)
}

/// A control frame as a rank writes it: header, payload, tag.
fn sealed_frame(mac: &mut FrameMac, payload: &[u8]) -> Vec<u8> {
    let head = Header::new(kind::CONTROL, payload.len() as u32).encode();
    let mut f = head.to_vec();
    f.extend_from_slice(payload);
    f.extend_from_slice(&mac.seal(&[&head, payload]));
    f
}

/// Opens rank 0's connection to rank 1 as the attacker's: its frames and
/// their MAC.
fn as_rank_zero(ts: &[Arc<TcpTransport>], key: &JobKey) -> (std::net::TcpStream, FrameMac) {
    let mut h = hello(Role::Peer, ts[1].job(), 0, 2, 7);
    h.mac = true;
    connect_sealed(ts[1].listen_addr(), &h, key, 1)
}

/// Nothing from rank 0 is delivered to rank 1 meanwhile, and its link
/// goes down.
fn refused(t: &dyn Transport) {
    match next_event(t, "rank 0's link down") {
        Event::LinkDown { peer, reason } => {
            assert_eq!(peer, Rank(0));
            assert!(reason.contains("integrity"), "{reason}");
        }
        e => panic!("expected the link down, got {e:?}"),
    }
}

/// A sealed frame is delivered; the same frame with one byte changed on
/// the way is not: the connection ends before the runtime sees it.
#[test]
fn a_frame_changed_on_the_way_is_never_delivered() {
    let (ts, key) = sealed_job();
    let (mut s, mut mac) = as_rank_zero(&ts, &key);
    s.write_all(&sealed_frame(&mut mac, b"genuine"))
        .expect("write");
    match next_event(&*ts[1], "the sealed frame") {
        Event::Message { from, frame } => {
            assert_eq!((from, &frame[..]), (Rank(0), &b"genuine"[..]))
        }
        e => panic!("expected the frame, got {e:?}"),
    }
    let mut changed = sealed_frame(&mut mac, b"transfer 100");
    changed[32 + 9] = b'9';
    s.write_all(&changed).expect("write");
    refused(&*ts[1]);
}

/// A sealed frame replayed on the same connection (a second copy of the
/// bytes, as the path could inject) is not delivered twice.
#[test]
fn a_replayed_frame_is_never_delivered_twice() {
    let (ts, key) = sealed_job();
    let (mut s, mut mac) = as_rank_zero(&ts, &key);
    let f = sealed_frame(&mut mac, b"once");
    s.write_all(&f).expect("write");
    s.write_all(&f).expect("write");
    match next_event(&*ts[1], "the frame") {
        Event::Message { frame, .. } => assert_eq!(&frame[..], b"once"),
        e => panic!("expected the frame, got {e:?}"),
    }
    refused(&*ts[1]);
}

/// A frame injected without a tag (by someone who holds no key) is not
/// delivered.
#[test]
fn an_injected_frame_is_never_delivered() {
    let (ts, key) = sealed_job();
    let (mut s, _) = as_rank_zero(&ts, &key);
    let mut f = Header::new(kind::CONTROL, 8).encode().to_vec();
    f.extend_from_slice(b"injected");
    f.extend_from_slice(&[0u8; 16]);
    s.write_all(&f).expect("write");
    refused(&*ts[1]);
    for e in events_during(&*ts[1], Duration::from_millis(300)) {
        assert!(!matches!(e, Event::Message { .. }), "{e:?}");
    }
}

/// Ranks that disagree on `TASKFOLD_INTEGRITY` are refused once the key
/// is proven, with a reason naming the variable.
#[test]
fn ranks_that_disagree_on_integrity_are_refused() {
    let (ts, key) = sealed_job();
    let h = hello(Role::Peer, ts[1].job(), 0, 2, 9);
    let c = call(ts[1].listen_addr(), &h, &key, 1, &[]);
    let r = c.refusal();
    assert!(r.contains("TASKFOLD_INTEGRITY differs"), "{r}");
}

/// Two sealed ranks work as any: frames both ways and a streamed get of
/// several chunks.
#[test]
fn sealed_ranks_exchange_frames_and_gets() {
    let (ts, _) = sealed_job();
    let data: Vec<u8> = (0..(3 << 20) + 5).map(|i| (i % 253) as u8).collect();
    ts[0].expose(taskfold_transports::BufferKey(1), data.clone().into());
    ts[1]
        .send(Rank(0), bytes::Bytes::from_static(b"hi"))
        .expect("send");
    match next_event(&*ts[0], "a frame") {
        Event::Message { frame, .. } => assert_eq!(&frame[..], b"hi"),
        e => panic!("{e:?}"),
    }
    let got = taskfold_transports::conformance::wait(
        "a sealed get",
        ts[1].get(Rank(0), taskfold_transports::BufferKey(1)),
    )
    .expect("get");
    assert!(got[..] == data[..]);
}
