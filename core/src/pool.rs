//! A bounded, process-wide pool of aligned buffers (reduction data).
//!
//! Why: a reduction of `n` bytes allocates several `n`-byte buffers on every
//! rank (the serialised original, each receive buffer, each folded value).
//! Freed, a large block goes back to the kernel (glibc maps every block
//! above its mmap threshold, at most 32 MiB, on its own); allocated again,
//! the kernel faults in and zeroes every page of it. At 32 MiB that mapping
//! work was over 40% of a reduction's CPU time. Recycled buffers keep their
//! pages mapped. Small buffers are kept too ([`MIN_POOLED`]): in the shared
//! heap, each one is a block that a fresh allocation faults in and a free
//! gives back to the kernel. The pool holds at
//! most [`limit`] bytes (default [`DEFAULT_LIMIT`], changed with
//! [`set_limit`]; the runtime sets it from `TASKFOLD_BUFFER_POOL`), oldest
//! buffer dropped first. A request takes the smallest free buffer that fits
//! and is at most twice its size, so that a small request never pins a huge
//! block.
//!
//! [`bytes()`] wraps a buffer as [`Bytes`] that gives it back when its last
//! clone is dropped; [`give`] gives back a buffer that is owned outright.
//!
//! **Prefill.** A process that starts more reductions at once than ever
//! before needs more buffers than the pool has seen, and would fault each
//! one in (the kernel zeroing every page) inside a fold, the first time
//! it holds that many. [`reserve`] tells it how many buffers to make ahead
//! instead, and [`fill_one`] makes one, pages touched, outside the
//! reductions' path (the runtime does it on a thread of its own).

use bytes::Bytes;
use rkyv::util::AlignedVec;
use std::sync::{Mutex, MutexGuard};

/// Buffers of every size are kept (only an empty one is not): every one
/// is made as the pool's (see [`allocating`]), so that it lies in the
/// shared heap.
///
/// Why every size: a fresh block of the shared heap is faulted in (zeroed
/// by the kernel) page by page, and a freed one, beyond the few the heap
/// keeps with their pages, gives its pages back with a system call
/// (`MADV_REMOVE`). A buffer that is not kept pays both on every
/// reduction: any floor here makes the time per reduction grow with
/// the size up to it and fall past it, and below one page the fault and
/// the call still cost more than the data.
pub const MIN_POOLED: usize = 1;

/// Prefill ([`Pool::reserve`]) makes no buffers below this: many small
/// buffers ahead would cost more pool bookkeeping than their faults.
const MIN_PREFILLED: usize = 128 << 10;

thread_local! {
    /// Set while [`Pool::take`] allocates a fresh buffer.
    static ALLOCATING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the allocation being made on this thread is a fresh buffer of
/// the pool (reduction data, of any size): a global allocator that puts
/// large blocks in shared memory (`taskfold_transports::shm::SharedHeap`)
/// also puts these there, where the application's own allocations of that
/// size stay with the system allocator. Never allocates (callable from
/// inside an allocator).
///
/// Why every size: a contribution outside the shared heap can neither be
/// read in place by a same-node receiver nor viewed where it lies by a
/// same-node buddy, so it gets a disk copy, an offer to the buddy and a
/// get over the loopback instead: a cost that does not shrink with the
/// data. See the book's Architecture chapter, Small contributions.
pub fn allocating() -> bool {
    ALLOCATING.try_with(|a| a.get()).unwrap_or(false)
}

/// A fresh buffer of `capacity` bytes, marked as the pool's while it is
/// allocated (see [`allocating`]).
fn fresh(capacity: usize) -> AlignedVec {
    let _ = ALLOCATING.try_with(|a| a.set(true));
    let buf = AlignedVec::with_capacity(capacity);
    let _ = ALLOCATING.try_with(|a| a.set(false));
    buf
}

/// Default bound on the bytes the pool keeps: 256 MiB.
pub const DEFAULT_LIMIT: usize = 256 << 20;

/// The bound that follows the peak in flight keeps a 1/`PEAK_SLACK` more.
///
/// Why: the peak counts bytes of data, the pool counts buffers' capacity,
/// which is larger (a replica header before the data, and a request may be
/// served by a buffer up to twice its size). Held to the peak exactly, 28
/// concurrent 8 MiB reductions (56 buffers of 8 MiB and a few bytes each,
/// against a peak of 56 × 8 MiB) evicted a buffer or more per repetition,
/// and every eviction was a fresh 8 MiB buffer to fault in and zero later,
/// inside the reductions.
const PEAK_SLACK: usize = 4;

/// Free buffers and their total capacity.
#[derive(Debug)]
pub struct Pool {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Oldest first.
    free: Vec<AlignedVec>,
    bytes: usize,
    limit: usize,
    /// The most bytes of reduction data in flight at once in this process
    /// (see [`Pool::start_flight`]).
    peak: usize,
    /// Bytes of reduction data in flight now, over every runtime of the
    /// process ([`Pool::start_flight`]).
    flight: usize,
    /// Whether the bound grows to `peak`.
    follow: bool,
    /// Capacity of the buffers handed out and not given back (an estimate:
    /// a buffer dropped elsewhere is never subtracted, which only makes
    /// [`Pool::reserve`] ask for fewer).
    out: usize,
    /// Capacity reserved by [`Pool::reserve`] and not made yet.
    filling: usize,
    /// The most bytes in flight [`Pool::reserve`] was asked about: it asks
    /// for buffers only beyond it.
    reserved_peak: usize,
    /// Whether [`Pool::reserve`] asks for buffers ahead.
    prefill: bool,
    hits: u64,
    misses: u64,
    prefilled: u64,
}

impl Inner {
    /// The bound in force: the limit, or the peak in flight if larger and
    /// followed, with [`PEAK_SLACK`].
    fn bound(&self) -> usize {
        if self.follow {
            self.limit
                .max(self.peak.saturating_add(self.peak / PEAK_SLACK))
        } else {
            self.limit
        }
    }

    /// Drops the oldest buffers beyond the bound; returns them (unmapped by
    /// the caller, outside the lock).
    fn trim(&mut self) -> Vec<AlignedVec> {
        let mut evicted = Vec::new();
        while self.bytes > self.bound() {
            let old = self.free.remove(0);
            self.bytes -= old.capacity();
            evicted.push(old);
        }
        evicted
    }
}

/// What a pool holds and how often it served a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Free buffers held.
    pub buffers: usize,
    /// Their total capacity in bytes.
    pub bytes: usize,
    /// Requests served by a free buffer.
    pub hits: u64,
    /// Requests of a poolable size that needed a fresh allocation.
    pub misses: u64,
    /// Buffers made ahead of the requests ([`Pool::fill_one`]).
    pub prefilled: u64,
}

impl Pool {
    /// An empty pool that keeps at most `limit` bytes.
    pub const fn new(limit: usize) -> Self {
        Pool {
            inner: Mutex::new(Inner {
                free: Vec::new(),
                bytes: 0,
                limit,
                peak: 0,
                flight: 0,
                follow: false,
                out: 0,
                filling: 0,
                reserved_peak: 0,
                prefill: false,
                hits: 0,
                misses: 0,
                prefilled: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the list inconsistent
        // (every update is a push or a remove plus a counter).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An empty buffer with at least `capacity` bytes of room.
    pub fn take(&self, capacity: usize) -> AlignedVec {
        let mut b = self.recycle(capacity);
        b.clear();
        b
    }

    /// A buffer of exactly `len` bytes whose contents are unspecified: for
    /// a caller that overwrites every byte.
    ///
    /// Why: writing into a buffer in place needs it initialised, and safe
    /// code initialises by zeroing (`resize`), a pass over memory the
    /// caller then writes again. A recycled buffer is served with what it
    /// held (free buffers keep their length), so only bytes beyond its old
    /// length are zeroed; a fresh one is zeroed whole. The fold of an
    /// original kept for recovery into a new buffer writes its result
    /// straight into it: 28 concurrent 8 MiB reductions spent about 45 ms
    /// of CPU per repetition copying that result from a stack stage.
    pub fn take_filled(&self, len: usize) -> AlignedVec {
        let mut b = self.recycle(len);
        b.resize(len, 0);
        b
    }

    /// A free buffer with room for `capacity` bytes, as it was given back,
    /// or a fresh, empty one.
    fn recycle(&self, capacity: usize) -> AlignedVec {
        if capacity >= MIN_POOLED {
            let mut p = self.lock();
            let best = p
                .free
                .iter()
                .enumerate()
                .filter(|(_, b)| b.capacity() >= capacity && b.capacity() / 2 <= capacity)
                .min_by_key(|(_, b)| b.capacity())
                .map(|(i, _)| i);
            match best {
                Some(i) => {
                    let b = p.free.remove(i);
                    p.bytes -= b.capacity();
                    p.out += b.capacity();
                    p.hits += 1;
                    return b;
                }
                None => p.misses += 1,
            }
            drop(p);
            let b = fresh(capacity);
            self.lock().out += b.capacity();
            return b;
        }
        fresh(capacity)
    }

    /// Gives `buf` back (its contents are never read again; they are kept,
    /// so that [`Pool::take_filled`] need not zero them).
    pub fn give(&self, buf: AlignedVec) {
        let cap = buf.capacity();
        if cap < MIN_POOLED {
            return;
        }
        let evicted = {
            let mut p = self.lock();
            p.out = p.out.saturating_sub(cap);
            if cap > p.bound() {
                return;
            }
            p.bytes += cap;
            p.free.push(buf);
            p.trim()
        };
        // Unmapping happens here, outside the lock.
        drop(evicted);
    }

    /// Applies `change` to the settings, then drops the oldest buffers
    /// beyond the bound (unmapped outside the lock).
    fn reconfigure(&self, change: impl FnOnce(&mut Inner)) {
        let evicted = {
            let mut p = self.lock();
            change(&mut p);
            p.trim()
        };
        drop(evicted);
    }

    /// Changes the bound, dropping the oldest buffers beyond it.
    pub fn set_limit(&self, limit: usize) {
        self.reconfigure(|p| p.limit = limit);
    }

    /// Whether the bound grows, beyond the limit, to the most bytes of
    /// reduction data this process had in flight at once: a burst of many
    /// concurrent reductions then finds its buffers again in the next
    /// burst, instead of faulting in fresh pages, and the pool never keeps
    /// more than the process has shown it uses at once.
    pub fn follow_peak(&self, on: bool) {
        self.reconfigure(|p| p.follow = on);
    }

    /// A reduction holding about `bytes` of data at once started (about
    /// two buffers of its size: the original kept for recovery and the
    /// value folded beside it); returns the bytes in flight in the process
    /// now, and raises the peak. Counted over every runtime of the process
    /// (several ranks in one process share one pool).
    pub fn start_flight(&self, bytes: usize) -> usize {
        let mut p = self.lock();
        p.flight = p.flight.saturating_add(bytes);
        p.peak = p.peak.max(p.flight);
        p.flight
    }

    /// A reduction counted by [`Pool::start_flight`] ended.
    pub fn end_flight(&self, bytes: usize) {
        let mut p = self.lock();
        p.flight = p.flight.saturating_sub(bytes);
    }

    /// Whether [`Pool::reserve`] asks for buffers ahead (off by default).
    pub fn set_prefill(&self, on: bool) {
        self.lock().prefill = on;
    }

    /// The reduction data in flight now ([`Pool::start_flight`]) may be
    /// held in buffers of `capacity` bytes: how many such buffers to make
    /// ahead ([`Pool::fill_one`] each), so that that many bytes exist, free
    /// or in use. They are counted as made from now on (a second call does
    /// not ask for them again). Only a new peak in flight asks for any: the
    /// count of buffers in use is an estimate (a buffer the pool never
    /// handed out may be given to it), and a pool that kept refilling to
    /// it would churn against its bound. Never more than the bound leaves
    /// room for; none unless prefill is on, and none below 128 KiB.
    ///
    /// Why: each rank's share of the folds changes from batch to batch, so
    /// a pool that grows only on misses meets a new largest batch again and
    /// again, and each time faults a fresh buffer in during a fold. 28
    /// concurrent 8 MiB reductions over 8 ranks still missed 3-11 buffers
    /// per repetition after 15 repetitions, and spent about a sixth of the
    /// CPU time of a repetition in the kernel zeroing their pages.
    pub fn reserve(&self, capacity: usize) -> usize {
        if capacity < MIN_PREFILLED {
            return 0;
        }
        let mut p = self.lock();
        if !p.prefill || p.flight <= p.reserved_peak {
            return 0;
        }
        p.reserved_peak = p.flight;
        let have = p.bytes + p.out + p.filling;
        let room = p.bound().saturating_sub(p.bytes + p.filling);
        let want = p.flight.saturating_sub(have).min(room);
        let n = want.div_ceil(capacity).min(room / capacity);
        p.filling += n * capacity;
        n
    }

    /// Makes one buffer of `capacity` bytes that [`Pool::reserve`] asked
    /// for, its pages touched (zeroed, so that a take of up to `capacity`
    /// bytes zeroes nothing), and keeps it (as [`Pool::give`] keeps a
    /// buffer handed out).
    pub fn fill_one(&self, capacity: usize) {
        let mut b = fresh(capacity);
        b.resize(capacity, 0);
        {
            let mut p = self.lock();
            p.filling = p.filling.saturating_sub(capacity);
            p.prefilled += 1;
            p.out += b.capacity();
        }
        self.give(b);
    }

    /// Gives up `count` buffers of `capacity` bytes that [`Pool::reserve`]
    /// asked for and that will not be made (the runtime stopped).
    pub fn unreserve(&self, count: usize, capacity: usize) {
        let mut p = self.lock();
        p.filling = p.filling.saturating_sub(count.saturating_mul(capacity));
    }

    /// The bound in bytes now (the limit, or the peak in flight if it is
    /// followed and larger).
    pub fn limit(&self) -> usize {
        self.lock().bound()
    }

    /// What the pool holds now.
    pub fn stats(&self) -> PoolStats {
        let p = self.lock();
        PoolStats {
            buffers: p.free.len(),
            bytes: p.bytes,
            hits: p.hits,
            misses: p.misses,
            prefilled: p.prefilled,
        }
    }
}

static GLOBAL: Pool = Pool::new(DEFAULT_LIMIT);

/// An empty buffer with at least `capacity` bytes of room, recycled if the
/// process-wide pool has one.
pub fn take(capacity: usize) -> AlignedVec {
    GLOBAL.take(capacity)
}

/// A buffer of exactly `len` bytes with unspecified contents, recycled if
/// the process-wide pool has one ([`Pool::take_filled`]).
pub fn take_filled(len: usize) -> AlignedVec {
    GLOBAL.take_filled(len)
}

/// Gives a buffer back to the process-wide pool.
pub fn give(buf: AlignedVec) {
    GLOBAL.give(buf)
}

/// Sets the process-wide pool's bound in bytes (0 turns recycling off).
pub fn set_limit(limit: usize) {
    GLOBAL.set_limit(limit)
}

/// Whether the process-wide pool's bound follows the peak of reduction
/// data in flight ([`Pool::follow_peak`]).
pub fn follow_peak(on: bool) {
    GLOBAL.follow_peak(on)
}

/// A reduction started in this process ([`Pool::start_flight`]): returns
/// the bytes of reduction data in flight now.
pub fn start_flight(bytes: usize) -> usize {
    GLOBAL.start_flight(bytes)
}

/// A reduction ended in this process ([`Pool::end_flight`]).
pub fn end_flight(bytes: usize) {
    GLOBAL.end_flight(bytes)
}

/// Whether the process-wide pool asks for buffers ahead
/// ([`Pool::set_prefill`]).
pub fn set_prefill(on: bool) {
    GLOBAL.set_prefill(on)
}

/// How many buffers of `capacity` bytes the process-wide pool wants made
/// ahead for the reduction data in flight now ([`Pool::reserve`]).
pub fn reserve(capacity: usize) -> usize {
    GLOBAL.reserve(capacity)
}

/// Makes one buffer that [`reserve`] asked for ([`Pool::fill_one`]).
pub fn fill_one(capacity: usize) {
    GLOBAL.fill_one(capacity)
}

/// Gives up reserved buffers that will not be made ([`Pool::unreserve`]).
pub fn unreserve(count: usize, capacity: usize) {
    GLOBAL.unreserve(count, capacity)
}

/// The process-wide pool's bound in bytes.
pub fn limit() -> usize {
    GLOBAL.limit()
}

/// What the process-wide pool holds now.
pub fn stats() -> PoolStats {
    GLOBAL.stats()
}

/// Shares `buf` as [`Bytes`]; the buffer returns to the process-wide pool
/// when the last clone is dropped.
pub fn bytes(buf: AlignedVec) -> Bytes {
    GLOBAL.bytes(buf)
}

impl Pool {
    /// Shares `buf` as [`Bytes`]; the buffer returns to this pool when the
    /// last clone is dropped.
    pub fn bytes(&'static self, buf: AlignedVec) -> Bytes {
        Bytes::from_owner(Pooled(buf, self))
    }
}

/// A buffer of the process-wide pool that is shared as [`Bytes`] and can
/// be changed again once every [`Bytes`] of it is gone: a value folded in
/// place rank after rank, served to peers between folds. Returns to the
/// pool when the last owner drops it.
pub struct SharedBuf(std::sync::Arc<Pooled>);

impl SharedBuf {
    /// Takes `buf` over.
    pub fn new(buf: AlignedVec) -> Self {
        SharedBuf(std::sync::Arc::new(Pooled(buf, &GLOBAL)))
    }

    /// The bytes, shared: the buffer cannot change while any clone lives.
    pub fn bytes(&self) -> Bytes {
        Bytes::from_owner(SharedOwner(self.0.clone()))
    }

    /// The buffer, if no [`Bytes`] of it is alive.
    pub fn get_mut(&mut self) -> Option<&mut AlignedVec> {
        std::sync::Arc::get_mut(&mut self.0).map(|p| &mut p.0)
    }
}

impl std::ops::Deref for SharedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0 .0
    }
}

/// Keeps a [`SharedBuf`] alive under its [`Bytes`].
struct SharedOwner(std::sync::Arc<Pooled>);

impl AsRef<[u8]> for SharedOwner {
    fn as_ref(&self) -> &[u8] {
        &self.0 .0
    }
}

/// A buffer that returns to its pool when dropped.
struct Pooled(AlignedVec, &'static Pool);

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.1
            .give(std::mem::replace(&mut self.0, AlignedVec::new()));
    }
}

#[cfg(test)]
mod tests;
