//! The conformance suite: the contract of [`Transport`], checked the same
//! way against every implementation.
//!
//! Each case takes a factory that starts a job of `n` ranks and returns a
//! [`Cluster`]; the integration tests of this crate run every case against
//! [`loopback_cluster`] and [`tcp_cluster`] (and `libfabric_cluster` with
//! the feature `libfabric`), and other crates may run them
//! against theirs. Every wait is bounded ([`WAIT`]): a broken transport
//! fails a case, it does not hang it. Cases panic on failure.

mod clusters;

pub use clusters::*;

use crate::{BufferKey, Event, Rank, RecvBuf, Transport, TransportError};
use bytes::Bytes;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn pattern(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect::<Vec<u8>>()
        .into()
}

fn fetch(t: &Arc<dyn Transport>, from: u32, key: u64) -> Result<RecvBuf, TransportError> {
    wait(
        &format!("rank {} getting {key} from rank {from}", t.rank().0),
        t.get(Rank(from), BufferKey(key)),
    )
    .map(crate::Received::into_owned)
}

fn assert_aligned(b: &[u8]) {
    assert_eq!(
        b.as_ptr() as usize % 16,
        0,
        "receive buffer is not 16-byte aligned"
    );
}

/// Every rank sends every rank (itself included) 1,000 frames of varying
/// sizes, from one thread per rank; each receiver gets each sender's frames
/// exactly once, in order.
pub fn ordered_delivery(f: Factory<'_>) {
    const N: u32 = 1000;
    let c = f(3);
    let ts = &c.transports;
    let n = ts.len() as u32;
    std::thread::scope(|s| {
        for t in ts {
            s.spawn(move || {
                for seq in 0..N {
                    for to in 0..n {
                        let mut frame = Vec::with_capacity(8 + 300);
                        frame.extend_from_slice(&t.rank().0.to_le_bytes());
                        frame.extend_from_slice(&seq.to_le_bytes());
                        frame.extend_from_slice(&vec![seq as u8; (seq as usize * 7) % 300]);
                        t.send(Rank(to), frame.into()).expect("send");
                    }
                }
            });
        }
        for t in ts {
            s.spawn(move || {
                let mut next = vec![0u32; n as usize];
                for _ in 0..N * n {
                    let (from, frame) = expect_message(&**t, "an ordered frame");
                    assert!(frame.len() >= 8, "short frame");
                    let sender = u32::from_le_bytes(frame[0..4].try_into().unwrap_or_default());
                    let seq = u32::from_le_bytes(frame[4..8].try_into().unwrap_or_default());
                    assert_eq!(sender, from.0, "frame attributed to the wrong sender");
                    assert_eq!(
                        seq,
                        next[from.0 as usize],
                        "rank {}: frame from rank {} out of order",
                        t.rank().0,
                        from.0
                    );
                    assert_eq!(frame.len(), 8 + (seq as usize * 7) % 300, "frame length");
                    assert!(frame[8..].iter().all(|&b| b == seq as u8), "frame bytes");
                    next[from.0 as usize] += 1;
                }
                let extra = events_during(&**t, Duration::from_millis(200));
                assert!(
                    extra.is_empty(),
                    "rank {}: unexpected events {extra:?}",
                    t.rank().0
                );
            });
        }
    });
}

/// A frame to oneself arrives through the events like any other.
pub fn send_to_self(f: Factory<'_>) {
    let c = f(2);
    for t in &c.transports {
        let frame = Bytes::from_static(b"note to self");
        t.send(t.rank(), frame.clone()).expect("send to self");
        let (from, got) = expect_message(&**t, "a frame from itself");
        assert_eq!(from, t.rank());
        assert_eq!(got, frame);
    }
}

/// Every rank knows every rank's node, alike: the table the bootstrap
/// spread (over sockets it always exists; the loopback's is optional). On
/// one machine every rank is on the same node.
pub fn nodes_known(f: Factory<'_>) {
    let c = f(3);
    let tables: Vec<Option<Vec<u64>>> = c
        .transports
        .iter()
        .map(|t| t.nodes().map(<[u64]>::to_vec))
        .collect();
    let first = &tables[0];
    assert!(tables.iter().all(|t| t == first), "{tables:?}");
    let over_sockets = c.transports[0].name() != "loopback";
    match first {
        Some(t) => {
            assert_eq!(t.len(), 3, "{t:?}");
            assert!(t.iter().all(|n| *n == t[0]), "one machine, one node: {t:?}");
        }
        None => assert!(!over_sockets, "{} knows no nodes", c.transports[0].name()),
    }
}

/// Sends to and gets from a rank outside the job fail with `NoSuchRank`.
pub fn send_to_unknown_rank(f: Factory<'_>) {
    let c = f(2);
    let t = &c.transports[0];
    for r in [2, 7, u32::MAX] {
        assert_eq!(
            t.send(Rank(r), Bytes::from_static(b"x")),
            Err(TransportError::NoSuchRank(r))
        );
        assert_eq!(fetch(t, r, 1).err(), Some(TransportError::NoSuchRank(r)));
    }
}

/// Gets of buffers of 0, 1, 4 KiB + 3 and 9 MiB bytes return exactly the
/// exposed bytes, 16-byte aligned; from a peer and from oneself.
pub fn get_sizes(f: Factory<'_>) {
    let c = f(2);
    let (t0, t1) = (&c.transports[0], &c.transports[1]);
    let sizes = [0usize, 1, 4096 + 3, 9 << 20];
    for (i, want) in expose_patterns(t1, 100, &sizes) {
        let len = want.len();
        for t in [t0, t1] {
            let got = fetch(t, 1, 100 + i as u64).expect("get of an exposed buffer");
            assert_eq!(got.len(), len, "length of buffer {i}");
            assert!(got.as_slice() == &want[..], "bytes of buffer {i} differ");
            if len > 0 {
                assert_aligned(&got);
            }
        }
    }
}

/// `get` returns exactly the exposed bytes, 16-byte aligned, for the
/// sizes of [`get_sizes`], also where they come as a loan (a view of a
/// same-node owner's memory): a loan stays readable and unchanged after
/// the owner withdraws and drops its buffer, until the loan is dropped.
pub fn loans(f: Factory<'_>) {
    let c = f(2);
    let (t0, t1) = (&c.transports[0], &c.transports[1]);
    let sizes = [0usize, 1, 4096 + 3, 3 << 20, 9 << 20];
    for (i, &len) in sizes.iter().enumerate() {
        t1.expose(BufferKey(200 + i as u64), pattern(len, i as u8));
    }
    for (i, &len) in sizes.iter().enumerate() {
        let want = pattern(len, i as u8);
        let t = t0.clone();
        let got = wait("get", async move {
            t.get(Rank(1), BufferKey(200 + i as u64)).await
        })
        .expect("loan of an exposed buffer");
        assert_eq!(got.len(), len, "length of loan {i}");
        if len > 0 {
            assert_eq!(got.as_ptr() as usize % 16, 0, "loan {i} is not aligned");
        }
        // The owner lets go of its buffer: the loan must still hold it.
        drop(t1.withdraw(BufferKey(200 + i as u64)));
        assert!(got[..] == want[..], "bytes of loan {i} differ");
        let owned = got.into_owned();
        assert!(owned[..] == want[..], "bytes of loan {i} differ once owned");
    }
}

/// A segmented get hands over the exposed bytes in order, in segments that
/// start at 0, follow each other and add up to the whole, each 16-byte
/// aligned, for the sizes of [`get_sizes`]; from a peer and from oneself.
/// A key that is not exposed fails with `NotExposed` and hands over
/// nothing.
pub fn segmented_gets(f: Factory<'_>) {
    let c = f(2);
    let (t0, t1) = (&c.transports[0], &c.transports[1]);
    let sizes = [0usize, 1, 4096 + 3, (3 << 20) + 64];
    for (i, want) in expose_patterns(t1, 300, &sizes) {
        let len = want.len();
        for t in [t0, t1] {
            let got = segments(t, 1, 300 + i as u64).expect("segmented get");
            assert!(!got.is_empty(), "at least one segment, even when empty");
            let mut at = 0;
            for s in &got {
                assert_eq!(s.offset, at, "segments in order, without gaps");
                assert_eq!(s.total, len, "total of buffer {i}");
                assert!(
                    s.bytes[..] == want[at..at + s.bytes.len()],
                    "bytes of buffer {i}"
                );
                if !s.bytes.is_empty() {
                    assert_aligned(&s.bytes);
                }
                at += s.bytes.len();
            }
            assert_eq!(at, len, "segments of buffer {i} add up to it");
        }
    }
    let got = segments(t0, 1, 399);
    assert_eq!(
        got.err(),
        Some(TransportError::NotExposed { peer: 1, key: 399 })
    );
}

/// Exposes a pattern of each of `sizes` on `t` under keys `base`,
/// `base + 1`, ...; returns each buffer's index and its bytes.
fn expose_patterns(t: &Arc<dyn Transport>, base: u64, sizes: &[usize]) -> Vec<(usize, Bytes)> {
    sizes
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            let bytes = pattern(len, i as u8);
            t.expose(BufferKey(base + i as u64), bytes.clone());
            (i, bytes)
        })
        .collect()
}

/// The segments of a get of `from`'s `key`, in the order handed over.
pub fn segments(
    t: &Arc<dyn Transport>,
    from: u32,
    key: u64,
) -> Result<Vec<crate::Segment>, TransportError> {
    let got = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = got.clone();
    let t = t.clone();
    wait("get_segments", async move {
        t.get_segments(
            Rank(from),
            BufferKey(key),
            Box::new(move |s| sink.lock().unwrap().push(s)),
        )
        .await
    })?;
    let v = std::mem::take(&mut *got.lock().unwrap());
    Ok(v)
}

/// A get of a key that is not exposed fails with `NotExposed`.
pub fn get_not_exposed(f: Factory<'_>) {
    let c = f(2);
    let t0 = &c.transports[0];
    c.transports[1].expose(BufferKey(1), pattern(10, 1));
    assert_eq!(
        fetch(t0, 1, 2).err(),
        Some(TransportError::NotExposed { peer: 1, key: 2 })
    );
    // The link still works afterwards.
    assert_eq!(fetch(t0, 1, 1).map(|b| b.len()), Ok(10));
}

/// A get within a bound: a buffer no longer than the bound arrives whole
/// (also in segments); a longer one is refused with `Protocol`, naming
/// its length (a streaming transport drops the link to that peer, so this
/// comes last).
pub fn gets_within(f: Factory<'_>) {
    let c = f(2);
    let t0 = c.transports[0].clone();
    let data = pattern(300_000, 4);
    c.transports[1].expose(BufferKey(4), data.clone());
    let got = wait(
        "a get within its bound",
        t0.get_within(Rank(1), BufferKey(4), 300_000),
    );
    assert_eq!(&got.expect("within the bound")[..], &data[..]);
    let got = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = got.clone();
    let t = t0.clone();
    wait("segments within their bound", async move {
        t.get_segments_within(
            Rank(1),
            BufferKey(4),
            300_000,
            Box::new(move |s| sink.lock().unwrap().extend_from_slice(&s.bytes)),
        )
        .await
    })
    .expect("within the bound");
    assert_eq!(&got.lock().unwrap()[..], &data[..]);
    match wait(
        "a get beyond its bound",
        t0.get_within(Rank(1), BufferKey(4), 299_999),
    ) {
        Err(TransportError::Protocol { peer: 1, detail }) => {
            assert!(detail.contains("300000 bytes"), "{detail}")
        }
        other => panic!("expected a refusal, got {:?}", other.map(|r| r.len())),
    }
}

/// After `withdraw`, gets fail with `NotExposed`.
pub fn withdraw_then_get(f: Factory<'_>) {
    let c = f(2);
    let (t0, t1) = (&c.transports[0], &c.transports[1]);
    t1.expose(BufferKey(5), pattern(100, 5));
    assert_eq!(fetch(t0, 1, 5).map(|b| b.len()), Ok(100));
    assert_eq!(t1.withdraw(BufferKey(5)), Some(pattern(100, 5)));
    assert_eq!(t1.withdraw(BufferKey(5)), None);
    assert_eq!(
        fetch(t0, 1, 5).err(),
        Some(TransportError::NotExposed { peer: 1, key: 5 })
    );
}

/// Exposing a key again replaces the older bytes.
pub fn expose_replaces(f: Factory<'_>) {
    let c = f(2);
    let (t0, t1) = (&c.transports[0], &c.transports[1]);
    t1.expose(BufferKey(9), pattern(1000, 1));
    assert!(fetch(t0, 1, 9).expect("first get").as_slice() == &pattern(1000, 1)[..]);
    t1.expose(BufferKey(9), pattern(77, 2));
    assert!(fetch(t0, 1, 9).expect("second get").as_slice() == &pattern(77, 2)[..]);
}

/// Two ranks each issue 16 concurrent gets of the same 3 MiB buffer.
pub fn concurrent_gets(f: Factory<'_>) {
    let c = f(3);
    let len = (3 << 20) + 5;
    let want = pattern(len, 3);
    c.transports[2].expose(BufferKey(1), want.clone());
    std::thread::scope(|s| {
        for t in &c.transports[..2] {
            let want = &want;
            s.spawn(move || {
                let gets: Vec<_> = (0..16).map(|_| t.get(Rank(2), BufferKey(1))).collect();
                let all = wait("16 concurrent gets", futures::future::join_all(gets));
                for r in all {
                    let b = r.expect("concurrent get");
                    assert!(b[..] == want[..], "concurrent get returned other bytes");
                    assert_aligned(&b);
                }
            });
        }
    });
}

/// Every pair exchanges a frame both ways and a get, so that every link
/// exists (transports may connect lazily).
fn warm_up(c: &Cluster) {
    let ts = &c.transports;
    for t in ts {
        t.expose(BufferKey(1), pattern(64, t.rank().0 as u8));
    }
    for a in ts {
        for b in ts {
            if a.rank() != b.rank() {
                a.send(b.rank(), Bytes::from_static(b"warm-up"))
                    .expect("warm-up send");
                assert_eq!(fetch(a, b.rank().0, 1).map(|b| b.len()), Ok(64));
            }
        }
    }
    for t in ts {
        for _ in 1..ts.len() {
            expect_message(&**t, "a warm-up frame");
        }
    }
}

/// Crashing a rank: each survivor gets exactly one `LinkDown` for it within
/// [`WAIT`]; gets in flight and later gets fail or finish (never hang),
/// later sends fail; the survivors still talk to each other.
pub fn crash_reports_link_down(f: Factory<'_>) {
    let c = f(3);
    warm_up(&c);
    let ts = &c.transports;
    ts[2].expose(BufferKey(7), pattern(32 << 20, 7));
    let in_flight: Vec<_> = (0..4).map(|_| ts[0].get(Rank(2), BufferKey(7))).collect();
    (c.crash)(Rank(2));
    for t in &ts[..2] {
        let deadline = Instant::now() + WAIT;
        loop {
            match t.events().recv_deadline(deadline) {
                Ok(Event::LinkDown { peer: Rank(2), .. }) => break,
                Ok(Event::LinkDown { peer, reason }) => {
                    panic!(
                        "rank {}: LinkDown for live rank {peer}: {reason}",
                        t.rank().0
                    )
                }
                Ok(Event::Message { .. } | Event::Replacement { .. }) => {}
                Err(_) => panic!("rank {}: no LinkDown for the crashed rank", t.rank().0),
            }
        }
    }
    for r in wait(
        "gets in flight at the crash",
        futures::future::join_all(in_flight),
    ) {
        if let Err(e) = r {
            assert!(
                matches!(e, TransportError::LinkDown { peer: 2, .. }),
                "get in flight failed with {e:?}"
            );
        }
    }
    for t in &ts[..2] {
        assert!(matches!(
            fetch(t, 2, 1),
            Err(TransportError::LinkDown { peer: 2, .. })
        ));
        assert!(matches!(
            t.send(Rank(2), Bytes::from_static(b"hello?")),
            Err(TransportError::LinkDown { peer: 2, .. })
        ));
    }
    // Survivors still talk, and nobody reports the crash twice.
    ts[0]
        .send(Rank(1), Bytes::from_static(b"still here"))
        .expect("send between survivors");
    assert_eq!(fetch(&ts[1], 0, 1).map(|b| b.len()), Ok(64));
    let mut got = false;
    for e in events_during(&*ts[1], Duration::from_millis(300)) {
        match e {
            Event::Message { from, frame } if from == Rank(0) && &frame[..] == b"still here" => {
                got = true
            }
            Event::Message { .. } => {}
            e => panic!("rank 1: unexpected {e:?} after the crash"),
        }
    }
    assert!(got, "frame between survivors lost");
    for e in events_during(&*ts[0], Duration::from_millis(100)) {
        assert!(
            matches!(e, Event::Message { .. }),
            "rank 0: unexpected {e:?}"
        );
    }
}

/// A graceful shutdown: the rank's later calls fail with `Closed`, its
/// peers see no `LinkDown`, and their sends and gets to it fail (soon)
/// instead of hanging.
pub fn graceful_shutdown(f: Factory<'_>) {
    let c = f(3);
    warm_up(&c);
    let ts = &c.transports;
    ts[2].shutdown();
    assert_eq!(
        ts[2].send(Rank(0), Bytes::from_static(b"x")),
        Err(TransportError::Closed)
    );
    assert_eq!(fetch(&ts[2], 0, 1).err(), Some(TransportError::Closed));
    for t in &ts[..2] {
        let events = events_during(&**t, Duration::from_millis(500));
        assert!(
            events.is_empty(),
            "rank {}: unexpected {events:?} after a graceful shutdown",
            t.rank().0
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while t.send(Rank(2), Bytes::from_static(b"bye?")).is_ok() {
            assert!(
                Instant::now() < deadline,
                "sends to a departed rank keep succeeding"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            fetch(t, 2, 1).is_err(),
            "get from a departed rank succeeded"
        );
    }
    ts[1]
        .send(Rank(0), Bytes::from_static(b"still here"))
        .expect("send between survivors");
    let (from, _) = expect_message(&*ts[0], "a frame between survivors");
    assert_eq!(from, Rank(1));
    for t in &ts[..2] {
        let link_downs: Vec<_> = events_during(&**t, Duration::from_millis(200))
            .into_iter()
            .filter(|e| matches!(e, Event::LinkDown { .. }))
            .collect();
        assert!(link_downs.is_empty(), "rank {}: {link_downs:?}", t.rank().0);
    }
}

/// Same-node reads, where a transport offers them ([`Transport::same_node`]),
/// read nothing they cannot check: memory outside a shared heap is not
/// located (these tests install no shared heap), and a locator of another
/// node, or of a rank outside the job, is not viewed.
pub fn same_node_refusals(f: Factory<'_>) {
    use crate::same_node::{self, Place};
    let c = f(2);
    let Some(s0) = c.transports[0].same_node() else {
        return;
    };
    let data = pattern(1 << 20, 9);
    c.transports[1].expose(BufferKey(1), data.clone());
    if let Some(s1) = c.transports[1].same_node() {
        assert!(s1.locate(&data).is_none(), "not in a shared heap");
    }
    let mut place = Place::decode(&crate::Locator([0; taskfold_core::wire::LOCATOR_LEN]));
    place.node = same_node::node_token() ^ 2;
    place.pid = std::process::id();
    place.len = 4096;
    let elsewhere = place.encode();
    assert!(s0.view(Rank(1), &elsewhere).is_none(), "another node");
    assert!(
        s0.view_retained(Rank(1), &elsewhere).is_none(),
        "another node"
    );
    place.node = same_node::node_token();
    assert!(s0.view(Rank(7), &place.encode()).is_none(), "no such rank");
    assert_eq!(Place::decode(&same_node::heap_of(&place.encode())).len, 0);
    // Nothing was read in place: a get still fetches the bytes.
    assert!(fetch(&c.transports[0], 1, 1).expect("get")[..] == data[..]);
}
