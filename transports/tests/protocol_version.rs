//! One protocol version, checked when processes first meet: a peer of
//! another version is refused at the handshake, on both sides, with an
//! error that names both versions. Real sockets on 127.0.0.1 only.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::{Duration, Instant};
use taskfold_core::auth::{Handshake, JobKey, Nonce, Proof, CHALLENGE_LEN, NONCE_LEN};
use taskfold_transports::conformance::{fresh_dir, fresh_job, tcp_ranks};
use taskfold_transports::tcp::frame::{self, kind, Header, Hello, Role};
use taskfold_transports::tcp::{MasterAddr, TcpConfig, TcpTransport};
use taskfold_transports::version::VERSION;
use taskfold_transports::TransportError;

const OTHER: u16 = VERSION + 1;

/// Sends a hello of version `OTHER` to `addr` and returns the refusal.
fn hello_of_another_version(addr: std::net::SocketAddr, role: Role, job: u64, rank: u32) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    let hello = frame::hello_frame(&Hello {
        version: OTHER,
        role,
        job,
        rank,
        size: 2,
        addr: Some(addr),
        node: 0,
        nonce: [0; NONCE_LEN],
        incarnation: 0,
        mac: false,
    });
    s.write_all(&hello).expect("hello");
    let _ = s.shutdown(Shutdown::Write);
    let (h, p) = frame::read_frame_sync(&mut s, 4096)
        .expect("a frame")
        .expect("an answer");
    assert_eq!(h.kind, kind::REFUSE, "a refusal");
    String::from_utf8_lossy(&p).into_owned()
}

fn names_both(text: &str) {
    assert!(
        text.contains(&format!("version {VERSION}")) && text.contains(&format!("version {OTHER}")),
        "the refusal names both versions: {text}"
    );
}

/// The master refuses a registration of another version, and a rank a
/// peer's connection of another version, before anyone proved the job
/// key: the refusal names the caller's version, and neither the
/// listener's version nor its rank (its log names both versions).
#[test]
fn a_hello_of_another_version_is_refused_without_the_listeners_rank_or_version() {
    let ts = tcp_ranks(2, &|_| {});
    let job = ts[0].job();
    for (addr, role) in [
        (ts[0].master_addr(), Role::Register),
        (ts[1].listen_addr(), Role::Peer),
    ] {
        let r = hello_of_another_version(addr, role, job, 1);
        assert!(r.contains(&format!("speaks version {OTHER}")), "{r}");
        assert!(!r.contains(&format!("version {VERSION}")), "{r}");
        assert!(!r.contains("rank"), "{r}");
    }
}

/// A rank refuses a master of another version (its address table says
/// which), and fails at start with an error naming both.
#[test]
fn a_master_of_another_version_is_refused_by_the_rank() {
    let fake = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = fake.local_addr().expect("address");
    let master = std::thread::spawn(move || {
        let (mut s, _) = fake.accept().expect("the rank registers");
        let (h, body) = frame::read_frame_sync(&mut s, 4096)
            .expect("a frame")
            .expect("a hello");
        assert_eq!(h.kind, kind::HELLO);
        let hello = Hello::decode(&body).expect("a hello of this build");
        assert_eq!(hello.version, VERSION, "the rank says its version");
        // It proves the key (of the insecure mode, as the rank's) first.
        let (mut hs, c) = Handshake::listen(
            &JobKey::PUBLIC,
            &body,
            0,
            Nonce(hello.nonce),
            Nonce([3; NONCE_LEN]),
        );
        frame::write_frame_sync(
            &mut s,
            Header::new(kind::CHALLENGE, CHALLENGE_LEN as u32),
            &c.encode(),
        )
        .expect("the challenge");
        let (h, proof) = frame::read_frame_sync(&mut s, 4096)
            .expect("a frame")
            .expect("a proof");
        assert_eq!(h.kind, kind::PROOF);
        let proof = Proof(proof.try_into().expect("32 bytes"));
        hs.on_proof(&proof).expect("the rank proves the key");
        frame::write_frame_sync(&mut s, Header::new(kind::ACCEPTED, 0), &[])
            .expect("the acceptance");
        // The table of a master of another version.
        let table = frame::encode_table(&[
            frame::Entry {
                addr,
                node: 0,
                incarnation: 0,
                dead: false,
            },
            frame::Entry {
                addr: hello.addr.expect("its address"),
                node: hello.node,
                incarnation: 0,
                dead: false,
            },
        ]);
        let hdr = Header {
            a: 2,
            b: u64::from(OTHER),
            ..Header::new(kind::TABLE, table.len() as u32)
        };
        frame::write_frame_sync(&mut s, hdr, &table).expect("the table");
        let _ = s.read_to_end(&mut Vec::new());
    });
    let mut cfg = TcpConfig::new(1, 2, fresh_job(), MasterAddr::Addr(addr));
    cfg.connect_timeout = Duration::from_secs(10);
    match TcpTransport::start(cfg) {
        Err(e @ TransportError::Version { ours, theirs, .. }) => {
            assert_eq!((ours, theirs), (VERSION, OTHER));
            names_both(&e.to_string());
        }
        other => panic!("expected a version mismatch, got {other:?}"),
    }
    master.join().expect("the fake master");
}

/// A rendezvous file of this job written by a master of another version
/// is refused at once (not waited out as a stale file), naming both.
#[test]
fn a_rendezvous_file_of_another_version_is_refused_at_once() {
    let dir = fresh_dir();
    let path = dir.join("master");
    let job = fresh_job();
    taskfold_transports::private::write_atomic(
        &path,
        format!("taskfold-rendezvous {OTHER} job={job:#x} addr=127.0.0.1:9 master=0\n").as_bytes(),
    )
    .expect("the file");
    let mut cfg = TcpConfig::new(1, 2, job, MasterAddr::Rendezvous(path));
    cfg.connect_timeout = Duration::from_secs(20);
    let t0 = Instant::now();
    match TcpTransport::start(cfg) {
        Err(e @ TransportError::Version { ours, theirs, .. }) => {
            assert_eq!((ours, theirs), (VERSION, OTHER));
            let text = e.to_string();
            names_both(&text);
            assert!(text.contains("rendezvous file"), "{text}");
        }
        other => panic!("expected a version mismatch, got {other:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(10), "refused at once");
}
