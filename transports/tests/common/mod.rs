//! A raw TCP caller for the transports' tests: it speaks the handshake
//! frame by frame, so that a test can prove a key, a wrong one, or replay
//! what another caller sent. (Each test binary uses a part of it.)
#![allow(dead_code)]

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::time::Duration;
use taskfold_core::auth::{Challenge, Handshake, JobKey, Nonce, NONCE_LEN};
use taskfold_transports::tcp::frame::{self, kind, Hello, Role};
use taskfold_transports::version::VERSION;

/// A hello of this build with `nonce`.
pub fn hello(role: Role, job: u64, rank: u32, size: u32, nonce: u8) -> Hello {
    Hello {
        version: VERSION,
        role,
        job,
        rank,
        size,
        addr: None,
        node: 0,
        nonce: [nonce; NONCE_LEN],
        incarnation: 0,
        mac: false,
    }
}

/// What a caller sent and received.
pub struct Call {
    /// Every byte the caller wrote (hello, proof, `then`).
    pub sent: Vec<u8>,
    /// Every byte it read until the listener closed.
    pub back: Vec<u8>,
}

impl Call {
    /// The frames received, in order: `(kind, payload)`.
    pub fn frames(&self) -> Vec<(u8, Vec<u8>)> {
        let mut r = &self.back[..];
        let mut out = Vec::new();
        while let Ok(Some((h, p))) = frame::read_frame_sync(&mut r, 1 << 20) {
            out.push((h.kind, p));
        }
        out
    }

    /// The reason of the refusal among the frames received.
    pub fn refusal(&self) -> String {
        let f = self.frames();
        let (_, p) = f
            .iter()
            .find(|(k, _)| *k == kind::REFUSE)
            .unwrap_or_else(|| panic!("no refusal among {:?}", kinds(&f)));
        String::from_utf8_lossy(p).into_owned()
    }

    /// The kinds of the frames that came back, in order.
    pub fn kinds(&self) -> Vec<u8> {
        kinds(&self.frames())
    }
}

fn kinds(f: &[(u8, Vec<u8>)]) -> Vec<u8> {
    f.iter().map(|(k, _)| *k).collect()
}

/// Calls rank `callee` at `addr` with `hello`, proving `key` (the caller
/// proves it even if the listener's proof does not match, as an attacker
/// would), then (a peer's first frame: no rings, and) `then`, closes its side and reads until the
/// listener closes (at most 15 s).
pub fn call(addr: SocketAddr, hello: &Hello, key: &JobKey, callee: u32, then: &[u8]) -> Call {
    let body = hello.encode();
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    let mut sent = frame::frame(kind::HELLO, &body);
    s.write_all(&sent).expect("hello");
    let (h, p) = frame::read_frame_sync(&mut s, 4096)
        .expect("a frame")
        .expect("a challenge");
    let mut back = h.encode().to_vec();
    back.extend_from_slice(&p);
    if h.kind == kind::CHALLENGE {
        let c = Challenge::decode(&p).expect("a challenge");
        // Our proof, whether or not theirs matched.
        let proof = proof_for(key, &body, callee, Nonce(hello.nonce), &c);
        let mut rest = frame::frame(kind::PROOF, &proof);
        if hello.role == Role::Peer {
            // A peer connection's first frame: no rings.
            rest.extend_from_slice(&frame::frame(kind::RINGS, &[]));
        }
        rest.extend_from_slice(then);
        s.write_all(&rest).expect("proof");
        sent.extend_from_slice(&rest);
    }
    let _ = s.shutdown(Shutdown::Write);
    let _ = s.read_to_end(&mut back);
    Call { sent, back }
}

/// The caller's proof for a challenge, whatever the listener proved.
fn proof_for(key: &JobKey, body: &[u8], callee: u32, n: Nonce, c: &Challenge) -> [u8; 32] {
    caller_side(key, body, callee, n, c).0 .0
}

/// The caller's proof and frame keys for a challenge: a listener of this
/// key would have sent this proof, and a handshake with it gives the
/// caller's answer (the keys depend on the transcript, not the proofs).
fn caller_side(
    key: &JobKey,
    body: &[u8],
    callee: u32,
    n: Nonce,
    c: &Challenge,
) -> (taskfold_core::auth::Proof, taskfold_core::auth::FrameKeys) {
    let (_, genuine) = Handshake::listen(key, body, callee, n, c.nonce);
    let mut hs = Handshake::call(key, body, callee, n);
    let proof = hs.on_challenge(&genuine).expect("a self-made challenge");
    (proof, hs.frame_keys().cloned().expect("authenticated"))
}

/// As [`connect_proven`] for a peer connection, and the MAC of the
/// caller's frames (to seal frames as a rank of the job does with
/// `TASKFOLD_INTEGRITY=mac`), the first frame (no rings) already sealed
/// and sent.
pub fn connect_sealed(
    addr: SocketAddr,
    hello: &Hello,
    key: &JobKey,
    callee: u32,
) -> (TcpStream, taskfold_core::auth::FrameMac) {
    let body = hello.encode();
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    s.write_all(&frame::frame(kind::HELLO, &body))
        .expect("hello");
    let (h, p) = frame::read_frame_sync(&mut s, 4096)
        .expect("a frame")
        .expect("a challenge");
    assert_eq!(h.kind, kind::CHALLENGE, "{}", String::from_utf8_lossy(&p));
    let c = Challenge::decode(&p).expect("a challenge");
    let (proof, keys) = caller_side(key, &body, callee, Nonce(hello.nonce), &c);
    s.write_all(&frame::frame(kind::PROOF, &proof.0))
        .expect("proof");
    expect_accepted(&mut s);
    let mut mac = keys.from_caller();
    let head = frame::Header::new(kind::RINGS, 0).encode();
    let mut first = head.to_vec();
    first.extend_from_slice(&mac.seal(&[&head, &[]]));
    s.write_all(&first).expect("the choice of wire");
    (s, mac)
}

/// Reads the listener's acceptance of our proof, as a rank of the job
/// does before it takes the connection as its own.
fn expect_accepted(s: &mut TcpStream) {
    let (h, p) = frame::read_frame_sync(s, 4096)
        .expect("a frame")
        .expect("the acceptance");
    assert_eq!(h.kind, kind::ACCEPTED, "{}", String::from_utf8_lossy(&p));
}

/// Writes `bytes` as they are to `addr` (a replay), closes our side and
/// returns what came back.
pub fn replay(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    let _ = s.write_all(bytes);
    let _ = s.shutdown(Shutdown::Write);
    let mut back = Vec::new();
    let _ = s.read_to_end(&mut back);
    back
}

/// Calls rank `callee` at `addr` with `hello` and proves `key`, as a rank
/// of the job does, and returns the open connection (for a test whose
/// caller then misbehaves). Panics if the listener does not challenge.
pub fn connect_proven(addr: SocketAddr, hello: &Hello, key: &JobKey, callee: u32) -> TcpStream {
    let mut s = connect_handshaken(addr, hello, key, callee);
    if hello.role == Role::Peer {
        // A peer connection's first frame: no rings, we stay on TCP.
        s.write_all(&frame::frame(kind::RINGS, &[]))
            .expect("the choice of wire");
    }
    s
}

/// As [`connect_proven`], up to the listener's acceptance: a peer
/// connection's first frame (its choice of wire) is the test's to send.
pub fn connect_handshaken(addr: SocketAddr, hello: &Hello, key: &JobKey, callee: u32) -> TcpStream {
    let body = hello.encode();
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    s.write_all(&frame::frame(kind::HELLO, &body))
        .expect("hello");
    let (h, p) = frame::read_frame_sync(&mut s, 4096)
        .expect("a frame")
        .expect("a challenge");
    assert_eq!(h.kind, kind::CHALLENGE, "{}", String::from_utf8_lossy(&p));
    let c = Challenge::decode(&p).expect("a challenge");
    let proof = proof_for(key, &body, callee, Nonce(hello.nonce), &c);
    s.write_all(&frame::frame(kind::PROOF, &proof))
        .expect("proof");
    expect_accepted(&mut s);
    s
}

/// The listener's side of a handshake, as rank `callee` of a job holding
/// `key`: reads the caller's hello, challenges it, and checks its proof.
/// Panics if the caller does not prove the key.
pub fn accept_proven(s: &mut TcpStream, key: &JobKey, callee: u32) {
    let (h, body) = frame::read_frame_sync(s, 4096)
        .expect("a hello")
        .expect("a frame");
    assert_eq!(h.kind, kind::HELLO);
    let hello = Hello::decode(&body).expect("a hello of this build");
    let (mut hs, challenge) = Handshake::listen(
        key,
        &body,
        callee,
        Nonce(hello.nonce),
        Nonce([5; NONCE_LEN]),
    );
    s.write_all(&frame::frame(kind::CHALLENGE, &challenge.encode()))
        .expect("challenge");
    let (h, p) = frame::read_frame_sync(s, 4096)
        .expect("a proof")
        .expect("a frame");
    assert_eq!(h.kind, kind::PROOF);
    let proof = taskfold_core::auth::Proof(p.try_into().expect("a proof's length"));
    hs.on_proof(&proof).expect("the caller proves the key");
    s.write_all(&frame::frame(kind::ACCEPTED, &[]))
        .expect("acceptance");
    if hello.role == Role::Peer {
        // The caller's choice of wire: rings offered are not taken.
        let (h, offer) = frame::read_frame_sync(s, 4096)
            .expect("the choice of wire")
            .expect("a frame");
        assert_eq!(h.kind, kind::RINGS);
        if !offer.is_empty() {
            s.write_all(&frame::frame(kind::RINGS_TAKEN, &[]))
                .expect("declining the rings");
        }
    }
}

/// The process's recorder (one per test binary), for the counters.
pub fn snapshotter() -> &'static Snapshotter {
    static S: OnceLock<Snapshotter> = OnceLock::new();
    S.get_or_init(|| {
        let r = DebuggingRecorder::new();
        let s = r.snapshotter();
        r.install().expect("the only recorder of this test binary");
        s
    })
}

/// The sum of counter `name` over its labels, those with `label` if given.
pub fn counter(name: &str, label: Option<(&str, &str)>) -> u64 {
    snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(k, _, _, _)| k.key().name() == name)
        .filter(|(k, _, _, _)| match label {
            None => true,
            Some((n, v)) => k.key().labels().any(|l| l.key() == n && l.value() == v),
        })
        .map(|(_, _, _, v)| match v {
            DebugValue::Counter(n) => n,
            _ => 0,
        })
        .sum()
}
