use super::*;

const MIB: usize = 1 << 20;

#[test]
fn a_shared_buffer_changes_only_when_no_bytes_of_it_live() {
    let mut v = AlignedVec::new();
    v.extend_from_slice(&[1, 2, 3]);
    let mut s = SharedBuf::new(v);
    let b = s.bytes();
    assert!(s.get_mut().is_none(), "a live Bytes pins the contents");
    assert_eq!(&b[..], &[1, 2, 3]);
    drop(b);
    s.get_mut().expect("no Bytes left")[0] = 9;
    assert_eq!(&s[..], &[9, 2, 3]);
}

#[test]
fn recycles_a_fitting_buffer() {
    let pool = Pool::new(64 * MIB);
    let mut a = pool.take(4 * MIB);
    a.extend_from_slice(&[7u8; 100]);
    let ptr = a.as_ptr();
    pool.give(a);
    assert_eq!(pool.stats().buffers, 1);
    let b = pool.take(3 * MIB);
    assert_eq!(b.as_ptr(), ptr, "the freed buffer is served again");
    assert!(b.is_empty(), "its old contents are discarded");
    assert_eq!(pool.stats().hits, 1);
    assert_eq!(pool.stats().bytes, 0);
}

#[test]
fn a_filled_buffer_zeroes_only_beyond_the_recycled_length() {
    let pool = Pool::new(64 * MIB);
    let mut a = pool.take(2 * MIB);
    a.resize(MIB, 7);
    let ptr = a.as_ptr();
    pool.give(a);
    let b = pool.take_filled(MIB + 10);
    assert_eq!(b.as_ptr(), ptr, "the freed buffer is served again");
    assert_eq!(b.len(), MIB + 10);
    assert!(b[..MIB].iter().all(|&x| x == 7), "kept as it was");
    assert!(b[MIB..].iter().all(|&x| x == 0), "zeroed beyond");
    pool.give(b);
    assert_eq!(pool.take_filled(MIB).len(), MIB, "cut to the length asked");
    assert!(
        pool.take_filled(3 * MIB).iter().all(|&x| x == 0),
        "fresh: zeroed"
    );
}

#[test]
fn never_serves_a_buffer_too_small_or_more_than_twice_too_large() {
    let pool = Pool::new(64 * MIB);
    pool.give(AlignedVec::with_capacity(2 * MIB));
    pool.give(AlignedVec::with_capacity(16 * MIB));
    assert!(pool.take(3 * MIB).capacity() >= 3 * MIB);
    assert_eq!(pool.stats().buffers, 2, "neither fitted a 3 MiB request");
    assert_eq!(pool.take(9 * MIB).capacity(), 16 * MIB);
    assert_eq!(pool.stats().buffers, 1);
}

#[test]
fn empty_buffers_are_not_kept() {
    let pool = Pool::new(64 * MIB);
    pool.give(AlignedVec::with_capacity(MIN_POOLED - 1));
    assert_eq!(pool.stats().buffers, 0);
    assert_eq!(pool.stats().bytes, 0);
}

#[test]
fn small_buffers_are_kept_and_reused() {
    // A reduction of a few bytes reuses its buffers as a large one does
    // (a fresh heap block costs a page fault, a freed one a system call).
    let pool = Pool::new(64 * MIB);
    for n in [8usize, 40, 1000, 4096] {
        let b = pool.take(n);
        assert!(b.capacity() >= n);
        let at = b.as_ptr();
        pool.give(b);
        let again = pool.take(n);
        assert_eq!(again.as_ptr(), at, "the {n}-byte buffer is reused");
        pool.give(again);
    }
    let s = pool.stats();
    assert_eq!((s.hits, s.misses), (4, 4), "{s:?}");
    // Never one more than twice the request: a 40-byte buffer is not
    // handed out for 8 bytes.
    let pool = Pool::new(64 * MIB);
    pool.give(AlignedVec::with_capacity(40));
    assert!(pool.take(8).capacity() < 40);
    assert_eq!(pool.stats().buffers, 1, "the 40-byte buffer stays");
}

#[test]
fn the_bound_drops_the_oldest() {
    let pool = Pool::new(10 * MIB);
    let first = AlignedVec::with_capacity(4 * MIB);
    let first_ptr = first.as_ptr();
    pool.give(first);
    pool.give(AlignedVec::with_capacity(4 * MIB));
    pool.give(AlignedVec::with_capacity(4 * MIB));
    let s = pool.stats();
    assert_eq!((s.buffers, s.bytes), (2, 8 * MIB));
    assert_ne!(pool.take(4 * MIB).as_ptr(), first_ptr);
    pool.set_limit(0);
    assert_eq!(pool.stats().bytes, 0);
    pool.give(AlignedVec::with_capacity(4 * MIB));
    assert_eq!(pool.stats().buffers, 0, "a zero bound keeps nothing");
}

#[test]
fn the_bound_follows_the_peak_in_flight_only_when_asked() {
    let pool = Pool::new(4 * MIB);
    pool.start_flight(16 * MIB);
    let give = |n| {
        for _ in 0..n {
            pool.give(AlignedVec::with_capacity(4 * MIB));
        }
    };
    give(4);
    assert_eq!(pool.stats().buffers, 1, "the limit alone: one buffer");
    pool.follow_peak(true);
    assert_eq!(pool.limit(), 20 * MIB, "the peak and a quarter");
    give(5);
    assert_eq!(pool.stats().bytes, 20 * MIB, "up to the peak in flight");
    // The peak only rises.
    pool.end_flight(8 * MIB);
    assert_eq!(pool.limit(), 20 * MIB);
    // Reductions in flight add up.
    assert_eq!(pool.start_flight(4 * MIB), 12 * MIB);
    assert_eq!(pool.limit(), 20 * MIB);
    assert_eq!(pool.start_flight(12 * MIB), 24 * MIB);
    assert_eq!(pool.limit(), 30 * MIB);
    // Turned off, the pool shrinks to its limit at once.
    pool.follow_peak(false);
    assert_eq!(pool.stats().bytes, 4 * MIB);
}

#[test]
fn reserve_asks_for_what_is_missing_once() {
    let pool = Pool::new(64 * MIB);
    pool.start_flight(16 * MIB);
    assert_eq!(pool.reserve(4 * MIB), 0, "prefill is off");
    pool.set_prefill(true);
    assert_eq!(pool.reserve(MIN_PREFILLED / 2), 0, "too small");
    // Two buffers are out (the contributions), none free.
    let a = pool.take(4 * MIB);
    let b = pool.take(4 * MIB);
    assert_eq!(pool.reserve(4 * MIB), 2, "16 MiB wanted, 8 out");
    assert_eq!(pool.reserve(4 * MIB), 0, "already asked for");
    pool.fill_one(4 * MIB);
    pool.fill_one(4 * MIB);
    let s = pool.stats();
    assert_eq!((s.buffers, s.prefilled), (2, 2));
    assert_eq!(pool.reserve(4 * MIB), 0, "made now");
    // Taken, the made buffers serve requests without zeroing anything:
    // they hold their whole capacity already.
    let c = pool.take_filled(4 * MIB);
    assert_eq!(c.len(), 4 * MIB);
    assert_eq!(pool.stats().misses, 2, "only the first two missed");
    // Given back, a buffer is free again, not out: 16 MiB exist, and
    // more in flight asks for the difference, rounded up.
    pool.give(a);
    pool.start_flight(6 * MIB);
    assert_eq!(pool.reserve(4 * MIB), 2);
    pool.unreserve(2, 4 * MIB);
    assert_eq!(pool.reserve(4 * MIB), 0, "not a new peak");
    pool.start_flight(MIB);
    assert_eq!(pool.reserve(4 * MIB), 2, "given up: asked again");
    drop((b, c));
}

#[test]
fn reserve_asks_only_at_a_new_peak() {
    let pool = Pool::new(64 * MIB);
    pool.set_prefill(true);
    pool.start_flight(8 * MIB);
    assert_eq!(pool.reserve(4 * MIB), 2);
    pool.fill_one(4 * MIB);
    pool.fill_one(4 * MIB);
    // The buffers are lost (dropped elsewhere, evicted): the same
    // demand does not make them again and again.
    drop(pool.take(4 * MIB));
    drop(pool.take(4 * MIB));
    pool.set_limit(0);
    pool.set_limit(64 * MIB);
    assert_eq!(pool.reserve(4 * MIB), 0);
    pool.end_flight(2 * MIB);
    assert_eq!(pool.reserve(4 * MIB), 0);
}

#[test]
fn reserve_stays_within_the_bound() {
    let pool = Pool::new(10 * MIB);
    pool.set_prefill(true);
    pool.start_flight(64 * MIB);
    assert_eq!(pool.reserve(4 * MIB), 2, "room for two");
    pool.fill_one(4 * MIB);
    pool.fill_one(4 * MIB);
    assert_eq!(pool.reserve(4 * MIB), 0, "full");
    assert_eq!(pool.stats().bytes, 8 * MIB);
    // Following the peak, the bound is the peak and a quarter.
    pool.follow_peak(true);
    pool.start_flight(16 * MIB);
    assert_eq!(pool.reserve(4 * MIB), 18, "80 MiB, 8 free");
}

#[test]
fn shared_bytes_return_on_last_drop() {
    let pool: &'static Pool = Box::leak(Box::new(Pool::new(64 * MIB)));
    let mut buf = pool.take(2 * MIB);
    buf.extend_from_slice(&vec![1u8; 2 * MIB]);
    let b = pool.bytes(buf);
    let c = b.slice(10..20);
    drop(b);
    assert_eq!(pool.stats().buffers, 0, "a clone is still alive");
    assert_eq!(&c[..], &[1u8; 10]);
    drop(c);
    assert_eq!(pool.stats().buffers, 1);
}
