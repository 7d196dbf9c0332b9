//! What a stranger can do to a rank before proving the job key, with real
//! sockets on 127.0.0.0/8: hold connections open without a word, refuse a
//! rank's registration in the master's name, or send text meant to forge
//! a log line. None of it costs the job anything (see the book's Security
//! chapter, Before the handshake).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use taskfold_core::auth::JobAuth;
use taskfold_transports::auth::fresh_key;
use taskfold_transports::conformance::{expect_message, fresh_dir, fresh_job, tcp_ranks, wait};
use taskfold_transports::tcp::frame::{self, kind};
use taskfold_transports::tcp::gate::{MAX_PENDING, PRE_PROOF_TIMEOUT};
use taskfold_transports::tcp::{MasterAddr, TcpConfig, TcpTransport};
use taskfold_transports::{BufferKey, Event, Rank, Transport, TransportError};

/// Idle connections the stranger holds in the flood test.
const FLOOD: usize = 10_000;

/// Raises this process's limit of open files to `want` if it is lower
/// (the flood's sockets and the job's share this process: a common
/// default of 1024 would stop the stranger, not the rank). Root may raise
/// the hard limit too; otherwise the hard limit must allow it.
fn raise_open_files(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `lim`.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    if lim.rlim_cur >= want {
        return;
    }
    lim.rlim_cur = want;
    lim.rlim_max = lim.rlim_max.max(want);
    // SAFETY: setrlimit reads one rlimit.
    let ok = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } == 0;
    assert!(
        ok,
        "this test needs {want} open files (ulimit -n); raise the hard limit or run as root"
    );
}

/// Open descriptors of this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// A connection from `source` to `to` that says nothing.
fn idle_from(source: Ipv4Addr, to: SocketAddr) -> Option<TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    s.bind(&SocketAddr::new(IpAddr::V4(source), 0).into())
        .ok()?;
    s.connect_timeout(&to.into(), Duration::from_secs(1)).ok()?;
    Some(s.into())
}

/// A stranger holds 10,000 idle connections to rank 0 — the master, whose
/// port is every rank's first contact — from 41 addresses, 127.0.0.1 (the
/// job's own) among them, while a 4-rank job opens its connections,
/// exchanges frames both ways between every pair and reads rank 0's
/// memory: every frame and get arrives, no link goes down, and rank 0
/// never holds more than the gate's bound of unproven connections.
#[test]
fn ten_thousand_idle_connections_do_not_stop_a_job() {
    raise_open_files(FLOOD as u64 + 4096);
    let ts = tcp_ranks(4, &|_| {});
    let victim = ts[0].master_addr();
    let before = open_fds();
    let held = Arc::new(AtomicUsize::new(0));
    let flood = {
        let held = held.clone();
        std::thread::spawn(move || {
            let mut conns = Vec::with_capacity(FLOOD);
            let start = Instant::now();
            for n in 0..FLOOD {
                let source = Ipv4Addr::new(127, 0, 0, 1 + (n % 41) as u8);
                if let Some(c) = idle_from(source, victim) {
                    conns.push(c);
                    held.store(conns.len(), Ordering::Relaxed);
                }
                if start.elapsed() > Duration::from_secs(120) {
                    break;
                }
            }
            conns
        })
    };
    // The job works while the flood comes in.
    while held.load(Ordering::Relaxed) < FLOOD / 10 {
        std::thread::sleep(Duration::from_millis(5));
    }
    run_the_job(&ts);
    let conns = flood.join().expect("the flood");
    assert!(
        conns.len() >= FLOOD * 9 / 10,
        "only {} connections opened",
        conns.len()
    );
    // And again with all of them held.
    run_the_job(&ts);
    // The job's own: a socket per end of its 12 connections, and, the
    // ranks sharing this node, the eventfds of each connection's rings
    // (four per end).
    let job_fds = 12 * 2 * (1 + 4);
    let rank0_holds = open_fds().saturating_sub(before + conns.len() + job_fds);
    assert!(
        rank0_holds <= MAX_PENDING + 64,
        "rank 0 holds {rank0_holds} descriptors beyond the job's"
    );
    for t in &ts {
        for e in t.events().try_iter() {
            assert!(
                !matches!(e, Event::LinkDown { .. }),
                "a link went down: {e:?}"
            );
        }
    }
    drop(conns);
    for t in &ts {
        t.shutdown();
    }
}

/// Every rank sends every other rank 20 frames (opening its connections
/// if need be), and reads 1 MiB that rank 0 exposes.
fn run_the_job(ts: &[Arc<TcpTransport>]) {
    let data = bytes::Bytes::from(vec![5u8; 1 << 20]);
    ts[0].expose(BufferKey(1), data.clone());
    for t in ts {
        for to in ts.iter().filter(|o| o.rank() != t.rank()) {
            for n in 0..20u8 {
                t.send(to.rank(), bytes::Bytes::from(vec![n; 16]))
                    .expect("send");
            }
        }
    }
    for t in ts {
        let mut next = [0u8; 4];
        for _ in 0..20 * (ts.len() - 1) {
            let (from, f) = expect_message(&**t, "a frame of the job");
            assert_eq!(f[0], next[from.0 as usize], "in order");
            next[from.0 as usize] += 1;
        }
    }
    for t in &ts[1..] {
        let got = wait("a get of rank 0's buffer", t.get(Rank(0), BufferKey(1))).expect("get");
        assert_eq!(got.len(), data.len());
    }
}

/// A connection that proves nothing is closed by the listener within the
/// pre-handshake timeout.
#[test]
fn an_idle_connection_is_closed_before_long() {
    let ts = tcp_ranks(2, &|_| {});
    let mut s = TcpStream::connect(ts[1].listen_addr()).expect("connect");
    s.set_read_timeout(Some(PRE_PROOF_TIMEOUT * 10))
        .expect("timeout");
    let t0 = Instant::now();
    let mut b = [0u8; 16];
    let n = s.read(&mut b).unwrap_or(0);
    assert_eq!(n, 0, "closed without a word");
    assert!(
        t0.elapsed() < PRE_PROOF_TIMEOUT * 5,
        "closed after {:?}",
        t0.elapsed()
    );
}

/// A listener at the master's address that refuses every registration
/// before proving the key, with `reason`; counts the attempts.
fn refusing_master(reason: Vec<u8>) -> (SocketAddr, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("address");
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming().take(1000) {
            let Ok(mut s) = s else { break };
            count.fetch_add(1, Ordering::Relaxed);
            let _ = s.write_all(&frame::frame(kind::REFUSE, &reason));
        }
    });
    (addr, seen)
}

/// A stranger at the master's address refuses a rank's registration
/// before any proof, with 4 KiB of control characters: the rank keeps
/// trying until its connect timeout, and its error then quotes the text
/// (escaped, bounded), on one line.
#[test]
fn a_refusal_before_the_proof_ends_nothing_and_is_quoted() {
    let mut nasty = b"fake\n2026-01-01 ERROR forged line \x1b[31m".to_vec();
    nasty.resize(4096, 0x07);
    let (addr, seen) = refusing_master(nasty);
    let mut cfg = TcpConfig::new(1, 2, fresh_job(), MasterAddr::Addr(addr));
    cfg.auth = JobAuth::Key(fresh_key().expect("a key"));
    cfg.connect_timeout = Duration::from_secs(2);
    let t0 = Instant::now();
    let e = match TcpTransport::start(cfg) {
        Err(e @ TransportError::Refused(_)) => e.to_string(),
        other => panic!("expected the refusal, got {other:?}"),
    };
    assert!(t0.elapsed() >= Duration::from_secs(2), "kept trying");
    assert!(seen.load(Ordering::Relaxed) > 1, "tried again");
    assert!(
        !e.contains('\n') && !e.contains('\x1b') && !e.contains('\x07'),
        "{e:?}"
    );
    assert!(e.len() < 600, "{} bytes: {e}", e.len());
    assert!(
        e.contains("before proving the job key") && e.contains("\\n"),
        "{e}"
    );
}

/// A stranger answers a rank's first registration with a refusal, then
/// the real master answers: the rank registers and the job starts.
#[test]
fn a_rank_refused_by_a_stranger_registers_with_the_master() {
    let dir = fresh_dir();
    let rendezvous = dir.join("master");
    let job = fresh_job();
    let key = fresh_key().expect("a key");
    // A proxy in front of the master: its first connection is refused.
    let proxy = TcpListener::bind("127.0.0.1:0").expect("bind");
    let front = proxy.local_addr().expect("address");
    let file = rendezvous.clone();
    std::thread::spawn(move || {
        for (n, s) in proxy.incoming().take(50).enumerate() {
            let Ok(mut s) = s else { break };
            if n == 0 {
                let _ = s.write_all(&frame::frame(kind::REFUSE, b"go away"));
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let Some(master) = text
                .split_whitespace()
                .find_map(|w| w.strip_prefix("addr=")?.parse::<SocketAddr>().ok())
            else {
                continue;
            };
            let Ok(up) = TcpStream::connect(master) else {
                continue;
            };
            let (mut a, mut b) = (
                s.try_clone().expect("clone"),
                up.try_clone().expect("clone"),
            );
            std::thread::spawn(move || std::io::copy(&mut a, &mut b));
            std::thread::spawn(move || std::io::copy(&mut { up }, &mut s));
        }
    });
    let start = |rank: u32, master: MasterAddr| {
        let mut cfg = TcpConfig::new(rank, 2, job, master);
        cfg.auth = JobAuth::Key(key.clone());
        cfg.connect_timeout = Duration::from_secs(20);
        std::thread::spawn(move || TcpTransport::start(cfg))
    };
    let r0 = start(0, MasterAddr::Rendezvous(rendezvous));
    let r1 = start(1, MasterAddr::Addr(front));
    let r1 = r1.join().expect("rank 1").expect("rank 1 registers");
    let r0 = r0.join().expect("rank 0").expect("rank 0 starts");
    r1.send(Rank(0), bytes::Bytes::from_static(b"in"))
        .expect("send");
    assert_eq!(&expect_message(&*r0, "rank 1's frame").1[..], b"in");
    r1.shutdown();
    r0.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
