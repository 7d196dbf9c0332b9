//! A replacement's connection that reaches a rank before the master's
//! notice that it was let in: the master admits a replacement and may
//! send it to a rank at once (its kept result, a copy to read), on
//! another link than the notice. That rank waits a little for the notice
//! rather than refusing the replacement for good. Everything binds
//! 127.0.0.1 only.

use bytes::Bytes;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use taskfold_transports::conformance::{expect_message, next_event, tcp_ranks, wait};
use taskfold_transports::tcp::{MasterAddr, TcpConfig, TcpTransport};
use taskfold_transports::{BufferKey, Event, Rank, Transport};

#[test]
fn a_replacement_that_comes_before_its_notice_is_served_once_let_in() {
    let seen: Mutex<Option<TcpConfig>> = Mutex::new(None);
    let ts = tcp_ranks(3, &|c| {
        if c.rank == 2 {
            *seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(c.clone());
        }
    });
    let mut cfg = seen
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .expect("rank 2's config");
    // Connected both ways, so that both see it die.
    for t in &ts[..2] {
        ts[2]
            .send(t.rank(), Bytes::from_static(b"old"))
            .expect("send");
        let (from, _) = expect_message(&**t, "the old rank 2's frame");
        assert_eq!(from, Rank(2));
    }
    ts[2].abort();
    for t in &ts[..2] {
        match next_event(&**t, "rank 2's link down") {
            Event::LinkDown { peer, .. } => assert_eq!(peer, Rank(2)),
            e => panic!("expected rank 2's link down, got {e:?}"),
        }
    }
    cfg.incarnation = 1;
    cfg.master = MasterAddr::Addr(ts[0].listen_addr());
    let starting = std::thread::spawn(move || TcpTransport::start(cfg));
    let addr = match next_event(&*ts[0], "the replacement's request") {
        Event::Replacement { peer, addr, .. } => {
            assert_eq!(peer, Rank(2));
            addr
        }
        e => panic!("expected the replacement, got {e:?}"),
    };
    // The deaths the master knows go with the admission (the transport
    // carries its word; the runtime's membership view acts on it).
    ts[0].admit(Rank(2), 1, &[1]).expect("the master admits it");
    let new: Arc<TcpTransport> = starting
        .join()
        .expect("the replacement's thread")
        .expect("the replacement starts");
    assert_eq!(new.dead_at_join(), vec![1]);
    assert!(ts[1].dead_at_join().is_empty(), "none at the job's start");
    // Rank 1 has not heard of it yet: the replacement's get reaches it
    // first, and is served once rank 1 lets it in.
    ts[1].expose(BufferKey(7), Bytes::from(vec![7u8; 10_000]));
    let get = new.get(Rank(1), BufferKey(7));
    let late = ts[1].clone();
    let notice = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        late.readmit(Rank(2), 1, &addr).expect("rank 1 lets it in");
    });
    let got = wait("the replacement's get", get).expect("served once let in");
    assert!(got.len() == 10_000 && got.iter().all(|&b| b == 7));
    notice.join().expect("the notice");
    new.shutdown();
}

/// Rank 2 registers and dies while the job starts, and its replacement
/// registers before the last rank does: the replacement is not refused as
/// a second rank 2, but asks to join once the job runs, as after the
/// bootstrap, and starts once the master lets it in.
#[test]
fn a_replacement_that_comes_during_the_bootstrap_asks_once_the_job_runs() {
    use taskfold_transports::conformance::{fresh_dir, fresh_job};
    let dir = fresh_dir();
    let master = MasterAddr::Rendezvous(dir.join("master"));
    let (job, key) = (
        fresh_job(),
        taskfold_transports::auth::fresh_key().expect("a job key"),
    );
    let config = |rank: u32, incarnation: u32| {
        let mut c = TcpConfig::new(rank, 3, job, master.clone());
        c.auth = taskfold_core::auth::JobAuth::Key(key.clone());
        c.connect_timeout = Duration::from_secs(30);
        c.incarnation = incarnation;
        c
    };
    let start = |c: TcpConfig| std::thread::spawn(move || TcpTransport::start(c));
    let pause = || std::thread::sleep(Duration::from_millis(600));
    let r0 = start(config(0, 0));
    let old2 = start(config(2, 0));
    pause();
    let new2 = start(config(2, 1));
    pause();
    let r1 = start(config(1, 0));
    let t0 = r0.join().expect("rank 0").expect("rank 0 starts");
    let _t1 = r1.join().expect("rank 1").expect("rank 1 starts");
    let old2 = old2.join().expect("rank 2").expect("rank 2 starts");
    old2.abort();
    loop {
        match next_event(&*t0, "rank 2's replacement") {
            Event::Replacement {
                peer, incarnation, ..
            } => {
                assert_eq!((peer, incarnation), (Rank(2), 1));
                break;
            }
            Event::LinkDown { .. } => continue,
            e => panic!("expected rank 2's replacement, got {e:?}"),
        }
    }
    t0.admit(Rank(2), 1, &[]).expect("the master admits it");
    let new2 = new2.join().expect("the replacement's thread");
    assert!(new2.is_ok(), "{:?}", new2.err());
    let _ = std::fs::remove_dir_all(dir);
}
