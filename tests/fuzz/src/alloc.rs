//! A counting global allocator: the system allocator, recording the
//! largest single allocation (or reallocation) made by this thread since
//! [`reset`]. A fuzz binary or test installs it with
//! `#[global_allocator]`; [`installed`] tells whether it was, so that an
//! allocation bound is never checked against a counter nobody feeds.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    /// Largest allocation of this thread since the last [`reset`].
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

/// The counting allocator.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counting;

fn record(size: usize) {
    // `try_with`: a thread being torn down has no counter any more.
    let _ = PEAK.try_with(|p| {
        if size > p.get() {
            p.set(size);
        }
    });
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds the
// `GlobalAlloc` contract; recording a size allocates nothing (a const
// thread-local `Cell`).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: the caller's `layout` contract is passed on as it is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (every
        // allocation of this allocator is `System`'s).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
        // SAFETY: as for `dealloc`; `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Starts a new count on this thread.
pub fn reset() {
    PEAK.with(|p| p.set(0));
}

/// The largest single allocation on this thread since [`reset`].
pub fn peak() -> usize {
    PEAK.with(Cell::get)
}

/// Whether [`Counting`] is the global allocator of this process.
pub fn installed() -> bool {
    reset();
    let v = std::hint::black_box(Vec::<u8>::with_capacity(4099));
    let seen = peak() >= 4099;
    drop(v);
    reset();
    seen
}
