//! Ranks of one node move their connections off the socket onto
//! shared-memory rings after the handshake (`TcpConfig::rings`, the book's
//! Transports chapter): every frame and get arrives as over TCP, in order,
//! sealed or not; `rings: false` keeps every connection on TCP, and a
//! connection moves only if both its sides have rings on. Real
//! ranks of this process, so of one node.

mod common;

use bytes::Bytes;
use common::counter;
use std::sync::{Arc, Mutex};
use taskfold_core::auth::JobAuth;
use taskfold_transports::auth::fresh_key;
use taskfold_transports::conformance::{expect_message, tcp_ranks, wait};
use taskfold_transports::tcp::metrics::RING_CONNECTIONS;
use taskfold_transports::tcp::TcpTransport;
use taskfold_transports::{BufferKey, Rank, Transport};

/// Held by each test while it counts: the counters are the process's, and
/// the tests of this file run at once.
static COUNTING: Mutex<()> = Mutex::new(());

/// Connections moved to rings so far, by `side`.
fn on_rings(side: &str) -> u64 {
    counter(RING_CONNECTIONS, Some(("side", side)))
}

/// A frame of `len` bytes from `from`, the `n`th to its peer.
fn payload(from: u32, n: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(7).wrapping_add(from * 31 + n) as u8)
        .collect()
}

/// Every rank sends every other rank frames from 1 byte to 3 times a
/// ring's capacity, and rank 0 gets a small and a large buffer of rank 1;
/// everything arrives whole and in order.
fn exchange(ts: &[Arc<TcpTransport>]) {
    let lens = [1usize, 64, 4000, 70_000, 200_000, 16];
    for t in ts {
        for to in ts.iter().filter(|o| o.rank() != t.rank()) {
            for (n, &len) in lens.iter().enumerate() {
                let p = payload(t.rank().0, n as u32, len);
                t.send(to.rank(), Bytes::from(p)).expect("send");
            }
        }
    }
    for t in ts {
        let mut next = vec![0u32; ts.len()];
        for _ in 0..lens.len() * (ts.len() - 1) {
            let (from, frame) = expect_message(&**t, "a frame");
            let n = next[from.0 as usize];
            let want = payload(from.0, n, lens[n as usize]);
            assert!(
                frame[..] == want[..],
                "frame {n} from {from:?} arrives whole"
            );
            next[from.0 as usize] += 1;
        }
    }
    let small = Bytes::from(payload(9, 9, 1000));
    let large = Bytes::from(payload(8, 8, 3 << 20));
    ts[1].expose(BufferKey(1), small.clone());
    ts[1].expose(BufferKey(2), large.clone());
    let got = wait("a small get", ts[0].get(Rank(1), BufferKey(1))).expect("get");
    assert!(got[..] == small[..]);
    let got = wait("a large get", ts[0].get(Rank(1), BufferKey(2))).expect("get");
    assert!(got[..] == large[..]);
}

#[test]
fn ranks_of_one_node_talk_over_rings_unless_turned_off() {
    // Three ranks: six connections (each rank's own to each other rank).
    let _counting = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    for (rings, sealed) in [(true, false), (true, true), (false, false)] {
        let before = (on_rings("caller"), on_rings("peer"));
        let key = fresh_key().expect("a key");
        let ts = tcp_ranks(3, &move |c| {
            c.rings = rings;
            c.integrity = sealed;
            c.auth = JobAuth::Key(key.clone());
        });
        exchange(&ts);
        let moved = (on_rings("caller") - before.0, on_rings("peer") - before.1);
        let want = if rings { (6, 6) } else { (0, 0) };
        assert_eq!(moved, want, "rings {rings}, sealed {sealed}");
        for t in &ts {
            t.shutdown();
        }
    }
}

#[test]
fn a_connection_moves_to_rings_only_if_both_sides_have_them_on() {
    // Rank 0 has rings off: it offers none on its own two connections,
    // and declines the offers of ranks 1 and 2 (each decline counted by
    // both sides); only the two connections between ranks 1 and 2 move.
    let _counting = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    let before = ["caller", "peer", "declined"].map(on_rings);
    let ts = tcp_ranks(3, &|c| c.rings = c.rank != 0);
    exchange(&ts);
    let after = ["caller", "peer", "declined"].map(on_rings);
    let moved: Vec<u64> = (0..3).map(|i| after[i] - before[i]).collect();
    assert_eq!(moved, [2, 2, 4], "caller, peer, declined");
    for t in &ts {
        t.shutdown();
    }
}
