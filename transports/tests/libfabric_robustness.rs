//! libfabric-specific behaviour beyond the conformance suite: control
//! frames larger than a message (fetched by RMA read) keep their order
//! among small ones, withdrawing or replacing a buffer while peers read it
//! is safe, and start-up errors are clear.

#![cfg(feature = "libfabric")]

use bytes::Bytes;
use std::time::Duration;
use taskfold_transports::conformance::{
    expect_message, fresh_dir, fresh_job, libfabric_ranks, wait,
};
use taskfold_transports::libfabric::{
    available_providers, provider_available, LibfabricConfig, LibfabricTransport,
};
use taskfold_transports::tcp::{MasterAddr, TcpConfig};
use taskfold_transports::{BufferKey, Rank, Transport, TransportError};

/// The providers to run on (skipping, or failing under CI, missing ones).
fn providers() -> Vec<&'static str> {
    ["tcp;ofi_rxm", "shm"]
        .into_iter()
        .filter(|p| {
            let ok = provider_available(p);
            assert!(
                ok || std::env::var_os("CI").is_none(),
                "libfabric provider `{p}` is not available on this machine (CI is set)"
            );
            if !ok {
                eprintln!("skipped: libfabric provider `{p}` is not available here");
            }
            ok
        })
        .collect()
}

fn frame(i: u32, len: usize) -> Bytes {
    let mut v = vec![(i % 251) as u8; len.max(4)];
    v[..4].copy_from_slice(&i.to_le_bytes());
    v.into()
}

#[test]
fn large_frames_keep_their_order_among_small_ones() {
    for p in providers() {
        let ts = libfabric_ranks(2, p, &|_| {});
        let sizes = [
            10usize,
            16 << 10,
            (16 << 10) + 1,
            1 << 20,
            100,
            9 << 20,
            7,
            64 << 10,
        ];
        for (i, &len) in sizes.iter().cycle().take(40).enumerate() {
            ts[0].send(Rank(1), frame(i as u32, len)).expect("send");
        }
        for (i, &len) in sizes.iter().cycle().take(40).enumerate() {
            let (from, f) = expect_message(&*ts[1], "a frame");
            assert_eq!(from, Rank(0));
            assert_eq!(f.len(), len.max(4), "{p}: length of frame {i}");
            assert_eq!(f, frame(i as u32, len), "{p}: frame {i} differs");
        }
        let too_big = Bytes::from(vec![0u8; (64 << 20) + 1]);
        assert!(
            matches!(
                ts[0].send(Rank(1), too_big),
                Err(TransportError::FrameTooLarge { .. })
            ),
            "{p}"
        );
    }
}

#[test]
fn withdrawing_or_replacing_during_reads_is_safe() {
    for p in providers() {
        let ts = libfabric_ranks(2, p, &|c| c.read_chunk = 1 << 20);
        let len = 24 << 20;
        for round in 0..4u8 {
            let data = Bytes::from(vec![round; len]);
            ts[1].expose(BufferKey(1), data);
            let gets: Vec<_> = (0..4).map(|_| ts[0].get(Rank(1), BufferKey(1))).collect();
            std::thread::sleep(Duration::from_millis(u64::from(round)));
            if round % 2 == 0 {
                // The owner drops its last handle on the bytes at once.
                drop(ts[1].withdraw(BufferKey(1)));
            } else {
                ts[1].expose(BufferKey(1), Bytes::from(vec![255u8; 10]));
            }
            for r in wait("gets during a withdraw", futures::future::join_all(gets)) {
                match r {
                    // Served before the withdraw or replace: the old bytes,
                    // whole; after a replace: the new ones.
                    Ok(b) => assert!(
                        (b.len() == len && b.iter().all(|&x| x == round))
                            || (round % 2 == 1 && b[..] == [255u8; 10]),
                        "{p}: a get returned other bytes"
                    ),
                    Err(TransportError::NotExposed { .. }) => {}
                    Err(e) => panic!("{p}: get failed with {e}"),
                }
            }
        }
        // Still fine afterwards.
        ts[1].expose(BufferKey(2), Bytes::from_static(b"after"));
        let b = wait("a get after", ts[0].get(Rank(1), BufferKey(2))).expect("get");
        assert_eq!(&b[..], b"after");
    }
}

#[test]
fn an_unknown_provider_is_a_clear_error() {
    let dir = fresh_dir();
    let tcp = TcpConfig::new(0, 1, fresh_job(), MasterAddr::Rendezvous(dir.join("m")));
    let e = LibfabricTransport::start(LibfabricConfig::new(tcp, Some("no-such-provider".into())))
        .expect_err("an unknown provider");
    let msg = e.to_string();
    assert!(msg.contains("`no-such-provider` is not available"), "{msg}");
    for p in available_providers() {
        assert!(msg.contains(&p), "{msg} does not list {p}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ranks_on_different_providers_refuse_each_other() {
    if providers().len() < 2 {
        return;
    }
    let dir = fresh_dir();
    let job = fresh_job();
    let master = MasterAddr::Rendezvous(dir.join("m"));
    let results: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = ["tcp;ofi_rxm", "shm"]
            .iter()
            .enumerate()
            .map(|(r, p)| {
                let mut tcp = TcpConfig::new(r as u32, 2, job, master.clone());
                tcp.connect_timeout = Duration::from_secs(10);
                let cfg = LibfabricConfig::new(tcp, Some(p.to_string()));
                s.spawn(move || LibfabricTransport::start(cfg).map(|_| ()))
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("join")).collect()
    });
    // Each refuses the other, or sees it leave after refusing.
    let refused = |r: &Result<(), TransportError>| matches!(r, Err(TransportError::Refused(m)) if m.contains("provider"));
    assert!(results.iter().any(refused), "{results:?}");
    for r in &results {
        assert!(
            refused(r)
                || matches!(r, Err(TransportError::LinkDown { reason, .. }) if reason.contains("start-up")),
            "{results:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The libfabric transport starts over an authenticated TCP bootstrap: a
/// rank with another job key never learns an endpoint name (the master's
/// proof does not match its key), and the ranks with the key run.
#[test]
fn a_rank_with_another_key_is_kept_out_of_the_bootstrap() {
    use taskfold_core::auth::JobAuth;
    use taskfold_transports::auth::fresh_key;
    let Some(&provider) = providers().first() else {
        return;
    };
    let dir = fresh_dir();
    let job = fresh_job();
    let master = MasterAddr::Rendezvous(dir.join("m"));
    let right = JobAuth::Key(fresh_key().expect("a key"));
    let config = |rank: u32, auth: &JobAuth, wait: u64| {
        let mut tcp = TcpConfig::new(rank, 2, job, master.clone());
        tcp.auth = auth.clone();
        tcp.connect_timeout = Duration::from_secs(wait);
        LibfabricConfig::new(tcp, Some(provider.to_string()))
    };
    let cfg0 = config(0, &right, 20);
    let r0 = std::thread::spawn(move || LibfabricTransport::start(cfg0));
    let wrong = JobAuth::Key(fresh_key().expect("a key"));
    match LibfabricTransport::start(config(1, &wrong, 5)) {
        Err(TransportError::Auth(e)) => assert!(e.contains("not of this job"), "{e}"),
        other => panic!("expected the master's proof to fail, got {:?}", other.err()),
    }
    let t1 = LibfabricTransport::start(config(1, &right, 20)).expect("rank 1");
    let t0 = r0.join().expect("no panic").expect("rank 0");
    t1.send(Rank(0), Bytes::from_static(b"in")).expect("send");
    assert_eq!(expect_message(&*t0, "rank 1's frame").0, Rank(1));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A receiver that does not take its events holds at most the event
/// channel's bound of a sender's frames: the sender runs out of credits
/// and waits, and every frame arrives, in order, once the receiver reads.
#[test]
fn frames_not_taken_wait_with_their_sender_and_none_is_lost() {
    const BOUND: usize = 4096;
    const FRAMES: u32 = 3 * BOUND as u32;
    for p in providers() {
        let ts = libfabric_ranks(2, p, &|_| {});
        let events = ts[1].events();
        for i in 0..FRAMES {
            ts[0].send(Rank(1), frame(i, 64)).expect("send");
        }
        // The channel fills up to its bound, and no further.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while events.len() < BOUND {
            assert!(
                std::time::Instant::now() < deadline,
                "{p}: the channel never filled"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(300));
        assert!(events.len() <= BOUND, "{p}: {} events held", events.len());
        for i in 0..FRAMES {
            let (from, f) = expect_message(&*ts[1], "a frame");
            assert_eq!(from, Rank(0));
            assert_eq!(f, frame(i, 64), "{p}: frame {i}");
        }
        // Gets are served meanwhile and after.
        ts[0].expose(BufferKey(1), Bytes::from(vec![3u8; 1 << 16]));
        let got = wait("a get", ts[1].get_within(Rank(0), BufferKey(1), 1 << 16));
        assert_eq!(got.expect("served").len(), 1 << 16);
        for t in &ts {
            t.shutdown();
        }
    }
}
