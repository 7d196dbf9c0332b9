//! The PMI-1 client against a scripted server that answers as MPICH's
//! Hydra does (one socket pair per rank, one store and barrier for all),
//! and the two exchanges of a start over it. The real launchers are the
//! integration tests' (`tests/tests/pmi.rs`, `tests/tests/slurm.rs`).

use super::pmi1::Pmi1;
use super::{Kvs, StoreMaster, KEY_KEY, MASTER_KEY};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

/// The store and the barrier of a scripted job of `size` ranks.
#[derive(Default)]
struct Job {
    state: Mutex<(HashMap<String, String>, usize, u64)>,
    woken: Condvar,
    size: usize,
}

impl Job {
    fn barrier(&self) {
        let mut s = self.state.lock().unwrap();
        let generation = s.2;
        s.1 += 1;
        if s.1 == self.size {
            s.1 = 0;
            s.2 += 1;
            self.woken.notify_all();
        } else {
            while s.2 == generation {
                s = self.woken.wait(s).unwrap();
            }
        }
    }
}

fn field<'a>(line: &'a str, name: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
        .unwrap_or("")
}

/// Serves one rank's socket as Hydra does, until it finalizes; `answer`
/// may replace the answer to a command (`None`: Hydra's).
fn serve(job: Arc<Job>, sock: UnixStream, answer: fn(&str) -> Option<String>) {
    let mut out = sock.try_clone().unwrap();
    for line in BufReader::new(sock).lines() {
        let Ok(line) = line else { return };
        let cmd = field(&line, "cmd");
        let reply = answer(cmd).unwrap_or_else(|| match cmd {
            "init" => "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0".into(),
            "get_maxes" => "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024".into(),
            "get_my_kvsname" => "cmd=my_kvsname kvsname=kvs_42_0".into(),
            "put" => {
                let (k, v) = (field(&line, "key"), field(&line, "value"));
                let mut s = job.state.lock().unwrap();
                s.0.insert(k.into(), v.into());
                "cmd=put_result rc=0 msg=success".into()
            }
            "barrier_in" => {
                job.barrier();
                "cmd=barrier_out".into()
            }
            "get" => match job.state.lock().unwrap().0.get(field(&line, "key")) {
                Some(v) => format!("cmd=get_result rc=0 msg=success value={v}"),
                None => "cmd=get_result rc=-1 msg=key_not_found".into(),
            },
            "finalize" => "cmd=finalize_ack".into(),
            other => format!("cmd={other} rc=-1 msg=unknown"),
        });
        if reply.is_empty() {
            continue; // never answers
        }
        out.write_all(format!("{reply}\n").as_bytes()).unwrap();
        if cmd == "finalize" {
            return;
        }
    }
}

/// A job of `size` ranks: each rank's client end (kept open by the
/// caller: the client never closes the socket it is given).
fn job(size: usize, answer: fn(&str) -> Option<String>) -> Vec<UnixStream> {
    let job = Arc::new(Job {
        size,
        ..Job::default()
    });
    (0..size)
        .map(|_| {
            let (client, server) = UnixStream::pair().unwrap();
            let job = job.clone();
            std::thread::spawn(move || serve(job, server, answer));
            client
        })
        .collect()
}

fn hydra(_: &str) -> Option<String> {
    None
}

#[test]
fn three_ranks_share_a_fresh_key_and_the_master_through_the_store() {
    let socks = job(3, hydra);
    let addr: std::net::SocketAddr = "127.0.0.1:4242".parse().unwrap();
    let got: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = socks
            .iter()
            .enumerate()
            .map(|(rank, sock)| {
                s.spawn(move || {
                    let kvs = Pmi1::connect(sock.as_raw_fd(), rank as u32, T).unwrap();
                    let store = StoreMaster::over(Box::new(kvs), "pmi1", rank as u32, T);
                    assert_eq!(store.job_name(), "kvs_42_0");
                    let key = store
                        .share_key(false)
                        .unwrap()
                        .expect("a key from the store");
                    let master = if rank == 0 {
                        store.publish(addr).unwrap();
                        addr
                    } else {
                        store.lookup().unwrap()
                    };
                    (key, master)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(got.iter().all(|g| g == &got[0]), "ranks disagree");
    assert_eq!(got[0].1, addr);
    // A lookup asks the store once (it was finalized): the same answer.
    drop(socks);
}

#[test]
fn a_rank_without_a_key_is_told_when_rank_0_had_its_own() {
    let socks = job(3, hydra);
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = socks
            .iter()
            .enumerate()
            .map(|(rank, sock)| {
                s.spawn(move || {
                    let kvs = Pmi1::connect(sock.as_raw_fd(), rank as u32, T).unwrap();
                    let store = StoreMaster::over(Box::new(kvs), "pmi1", rank as u32, T);
                    // Ranks 0 and 1 were given a key; rank 2 was not.
                    store.share_key(rank < 2).map_err(|e| e.to_string())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(results[0], Ok(None));
    assert_eq!(results[1], Ok(None));
    let e = results[2].clone().unwrap_err();
    assert!(
        e.contains("rank 0 was given the job's key") && e.contains("TASKFOLD_JOB_KEY"),
        "{e}"
    );
}

#[test]
fn a_refusal_of_the_launcher_is_reported_with_its_message() {
    fn refuse_puts(cmd: &str) -> Option<String> {
        (cmd == "put").then(|| "cmd=put_result rc=-1 msg=duplicate_key".into())
    }
    let socks = job(1, refuse_puts);
    let mut kvs = Pmi1::connect(socks[0].as_raw_fd(), 0, T).unwrap();
    let e = kvs.put(MASTER_KEY, "127.0.0.1:1").unwrap_err();
    assert!(e.contains("rc=-1") && e.contains("duplicate_key"), "{e}");
    let e = kvs.get(0, KEY_KEY).unwrap_err();
    assert!(e.contains("key_not_found"), "{e}");
    // What cannot travel as a word of a line is refused before it is sent.
    let e = kvs.put("a key", "v").unwrap_err();
    assert!(e.contains("cannot be sent"), "{e}");
    let e = kvs.put("k", &"v".repeat(1025)).unwrap_err();
    assert!(e.contains("longer than 1024"), "{e}");
}

#[test]
fn a_fence_that_never_ends_fails_in_time_naming_the_fence() {
    fn silent_barrier(cmd: &str) -> Option<String> {
        (cmd == "barrier_in").then(String::new)
    }
    let socks = job(2, silent_barrier);
    let mut kvs = Pmi1::connect(socks[0].as_raw_fd(), 0, T).unwrap();
    let started = std::time::Instant::now();
    let e = kvs.fence(Duration::from_millis(300)).unwrap_err();
    assert!(started.elapsed() < T, "{e}");
    assert!(
        e.contains("barrier_in") && e.contains("reach the fence"),
        "{e}"
    );
}

#[test]
fn answers_that_are_not_pmi_are_errors_not_hangs() {
    fn garbage(cmd: &str) -> Option<String> {
        (cmd == "init").then(|| "HTTP/1.1 400 Bad Request".into())
    }
    let socks = job(1, garbage);
    let e = Pmi1::connect(socks[0].as_raw_fd(), 0, T)
        .err()
        .expect("refused");
    assert!(e.contains("expected cmd=response_to_init"), "{e}");
    fn endless(cmd: &str) -> Option<String> {
        (cmd == "init").then(|| "x".repeat(10_000))
    }
    let socks = job(1, endless);
    let e = Pmi1::connect(socks[0].as_raw_fd(), 0, T)
        .err()
        .expect("refused");
    assert!(e.contains("longer than"), "{e}");
    // The launcher went away.
    let (client, server) = UnixStream::pair().unwrap();
    drop(server);
    let e = Pmi1::connect(client.as_raw_fd(), 0, T)
        .err()
        .expect("refused");
    assert!(
        e.contains("closed the connection") || e.contains("Broken pipe"),
        "{e}"
    );
}

#[test]
fn a_pmi_fd_that_is_no_socket_is_refused_naming_it() {
    let file = tempfile_fd();
    let e = Pmi1::connect(file.as_raw_fd(), 3, T)
        .err()
        .expect("refused");
    assert!(e.contains(&format!("PMI_FD={}", file.as_raw_fd())), "{e}");
    assert!(e.contains("not an open socket"), "{e}");
    let e = Pmi1::connect(-1, 3, T).err().expect("refused");
    assert!(e.contains("PMI_FD=-1"), "{e}");
}

fn tempfile_fd() -> std::fs::File {
    std::fs::File::open("/proc/self/stat").unwrap()
}

#[test]
fn a_process_opens_its_store_once() {
    let socks = job(1, hydra);
    let fd = socks[0].as_raw_fd();
    let first = super::open(super::Protocol::Pmi1 { fd }, 0, T);
    assert!(first.is_ok(), "{:?}", first.err());
    let e = super::open(super::Protocol::Pmi1 { fd }, 0, T)
        .err()
        .expect("a second start is refused");
    assert!(
        e.contains("a second runtime needs TASKFOLD_MASTER or TASKFOLD_RENDEZVOUS"),
        "{e}"
    );
}
