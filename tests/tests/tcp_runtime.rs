//! Runtimes over real TCP sockets (127.0.0.1), several in this process:
//! bad input at the network edge must not disturb the job.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;
use taskfold::{JobKey, MasterAddr, Reduce, Runtime, Settings, StartError, Sum};
use taskfold_transports::auth::fresh_key;
use taskfold_transports::TransportError;

const WAIT: Duration = Duration::from_secs(60);

/// `n` runtimes of job `job`, with `key`.
fn start(n: u32, rendezvous: &Path, job: &str, key: &JobKey) -> Vec<Runtime> {
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let path = rendezvous.to_path_buf();
            let (job, key) = (job.to_string(), key.clone());
            std::thread::spawn(move || {
                Runtime::builder()
                    .settings(Settings::default())
                    .rank(r)
                    .size(n)
                    .master(MasterAddr::Rendezvous(path))
                    .job(job)
                    .job_key(key)
                    .build()
                    .expect("start")
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn master_addr(rendezvous: &Path) -> SocketAddr {
    let text = std::fs::read_to_string(rendezvous).unwrap();
    let addr = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("addr="))
        .expect("addr= in rendezvous file");
    addr.parse().unwrap()
}

fn reduce_all(ranks: &[Runtime], id: &str) -> Vec<f32> {
    let fs: Vec<_> = ranks
        .iter()
        .map(|rt| {
            rt.reduce(
                Sum(vec![rt.rank() as f32 + 1.0; 4096]),
                Reduce::root(1).id(id),
            )
            .unwrap()
        })
        .collect();
    let mut out = None;
    for mut f in fs {
        if let Some(v) = f.wait_timeout(WAIT).unwrap() {
            out = Some(v.0);
        }
    }
    out.expect("the root got a result")
}

fn finish(ranks: Vec<Runtime>) {
    let hs: Vec<_> = ranks
        .into_iter()
        .map(|rt| std::thread::spawn(move || rt.shutdown()))
        .collect();
    for h in hs {
        h.join().unwrap().unwrap();
    }
}

#[test]
fn garbage_and_oversize_frames_are_dropped_while_the_job_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let rv = dir.path().join("master.addr");
    let ranks = start(3, &rv, "garbage-test", &fresh_key().unwrap());
    assert_eq!(reduce_all(&ranks, "before"), vec![6.0; 4096]);
    let addr = master_addr(&rv);
    // Garbage, then a length prefix of 4 GiB, each on its own connection.
    let mut g = TcpStream::connect(addr).unwrap();
    g.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut o = TcpStream::connect(addr).unwrap();
    o.write_all(&[0xff; 64]).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(reduce_all(&ranks, "after"), vec![6.0; 4096]);
    finish(ranks);
}

#[test]
fn processes_that_are_not_part_of_the_job_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let rv = dir.path().join("master.addr");
    let key = fresh_key().unwrap();
    let ranks = start(2, &rv, "refusal-test", &key);
    let addr = master_addr(&rv);
    let intruder = |rank: u32, size: u32, job: &str, key: &JobKey| {
        Runtime::builder()
            .settings(Settings::default())
            .rank(rank)
            .size(size)
            .master(MasterAddr::Addr(addr))
            .job(job)
            .job_key(key.clone())
            .build()
            .err()
    };
    for (rank, size, job, what) in [
        (1, 2, "refusal-test", "a rank already in the job"),
        (1, 3, "refusal-test", "a wrong size"),
        (1, 2, "another-job", "another job"),
    ] {
        match intruder(rank, size, job, &key) {
            Some(StartError::Transport(TransportError::Refused(reason))) => {
                eprintln!("{what}: refused: {reason}")
            }
            other => panic!("{what}: expected a refusal, got {other:?}"),
        }
    }
    // Without the job's key, the master's proof does not match (and the
    // master admits nobody who did not prove the key).
    match intruder(1, 2, "refusal-test", &fresh_key().unwrap()) {
        Some(StartError::Transport(TransportError::Auth(reason))) => {
            assert!(reason.contains("not of this job"), "{reason}")
        }
        other => panic!("a wrong key: expected a refusal, got {other:?}"),
    }
    assert_eq!(reduce_all(&ranks, "still-fine"), vec![3.0; 4096]);
    finish(ranks);
}

#[test]
fn a_runtime_without_a_key_does_not_start_unless_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let rv = dir.path().join("master.addr");
    let build = |insecure: bool| {
        let mut s = Settings::default();
        s.launch.insecure = insecure;
        Runtime::builder()
            .settings(s)
            .rank(0)
            .size(1)
            .master(MasterAddr::Rendezvous(rv.clone()))
            .build()
    };
    let e = build(false).err().expect("no key, no start").to_string();
    for var in [
        "TASKFOLD_JOB_KEY_FILE",
        "TASKFOLD_JOB_KEY",
        "TASKFOLD_INSECURE",
    ] {
        assert!(e.contains(var), "{var} in {e}");
    }
    assert!(!rv.exists(), "the master started");
    let rt = build(true).expect("the insecure mode starts");
    rt.shutdown().unwrap();
}

#[test]
fn an_unreachable_master_is_a_clear_error() {
    // A port nobody listens on: bound, never listening, and held for the
    // whole test, so that no other test's listener can take it (a port
    // bound then closed was once given to another test's rank, whose
    // listener then answered this one).
    let held = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    held.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let addr = held.local_addr().unwrap().as_socket().unwrap();
    let mut cfg = taskfold_transports::tcp::TcpConfig::new(1, 2, 7, MasterAddr::Addr(addr));
    cfg.connect_timeout = Duration::from_millis(500);
    let t = std::time::Instant::now();
    match taskfold_transports::tcp::TcpTransport::start(cfg) {
        Err(TransportError::MasterUnreachable(msg)) => assert!(!msg.is_empty()),
        Err(e) => panic!("expected MasterUnreachable, got {e}"),
        Ok(_) => panic!("expected MasterUnreachable, got a transport"),
    }
    assert!(t.elapsed() < Duration::from_secs(10));
}
