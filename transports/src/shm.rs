//! Same-node shared memory: a heap whose large blocks the other ranks on
//! the node can map, so that a fold reads a peer's contribution in place.
//!
//! Why: two ranks on one node otherwise move a contribution with the
//! kernel's cross-memory copy (`process_vm_readv`, see the TCP transport's
//! `cma` module), which pins every page and copies it: 3.6 ms for 8 MiB
//! here, against 2.0 ms for the fold that follows. Reading the owner's
//! pages where they are removes that copy from every same-node task.
//!
//! How:
//! - [`SharedHeap`] is a global allocator that a program opts into (one
//!   line, below). Blocks of at least [`MIN_SHARED`] bytes come from one
//!   `memfd` per process, mapped shared, and so do all the buffer pool's
//!   blocks ([`MIN_SHARED_POOLED`]: reduction buffers, small ones too);
//!   the application's smaller ones go to the system allocator.
//! - A transport that lends a buffer names its place in the heap
//!   ([`locate`]); the reader opens the owner's heap through
//!   `/proc/<pid>/fd/<fd>` (the same permission as reading the owner's
//!   memory), maps it read-only once ([`PeerHeap`]), and hands out views of
//!   it ([`crate::SharedView`]).
//! - A freed block keeps its pages for the next block of its size, up to
//!   [`HOT_BLOCKS`] blocks and [`HOT_BYTES`] bytes (the oldest goes first);
//!   beyond that a freed block's pages go back to the kernel at once
//!   (`MADV_REMOVE`). A block freed and made again and again (a value
//!   encoded every step, a buffer grown by doubling, a decoded array)
//!   would otherwise fault in and clear every page each time, in shared
//!   memory, which costs more than private pages: glibc avoids the same by
//!   raising its threshold for unmapping. The buffer pool above keeps the
//!   reduction buffers themselves, so a recycled buffer keeps its pages in
//!   both processes.
//!
//! ```ignore
//! #[global_allocator]
//! static HEAP: taskfold_transports::shm::SharedHeap = taskfold_transports::shm::SharedHeap;
//! ```
//!
//! Without it (or with `TASKFOLD_SHARED_HEAP=off`, or if the kernel refuses
//! the `memfd`), every block comes from the system allocator and same-node
//! gets copy as before.
//!
//! **Fork**: the heap's mapping is not inherited (`MADV_DONTFORK`), and a
//! forked child allocates from the system allocator. A child that goes on
//! to `exec` (as `std::process::Command` does) is unaffected; a child that
//! keeps running must not touch the parent's large blocks. Install the
//! heap only in programs that do not fork without exec.
//!
//! **What a crash loses**: nothing more than before. A reader's mapping
//! keeps the owner's pages alive if the owner dies mid-fold, so the fold
//! completes on the bytes that were lent; the mapping is dropped when the
//! link to the owner goes down and no view of it is left.

use std::alloc::{GlobalAlloc, Layout, System};
use std::os::fd::AsRawFd;
use std::sync::{Mutex, OnceLock};
use taskfold_core::settings::{shared_heap_enabled, SHARED_HEAP_VAR};

/// Smallest block served from the shared heap (the buffer pool's threshold).
pub const MIN_SHARED: usize = 1 << 20;

/// Smallest block served from the shared heap when the buffer pool
/// allocates it ([`taskfold_core::pool::allocating`]): every reduction
/// buffer lies in the heap, where same-node peers read it in place, while
/// the application's own blocks below [`MIN_SHARED`] stay with the system
/// allocator (which reuses them without a system call; a heap block gives
/// its pages back when freed).
///
/// Why every size: below this a contribution is neither read in place nor
/// viewed by a same-node buddy, and pays a disk copy, a buddy's offer and
/// a get over the loopback, which cost more than the heap block's one page
/// (see the book's Architecture chapter, Small contributions).
pub const MIN_SHARED_POOLED: usize = 1;

/// Blocks are whole multiples of this (and aligned to it within the heap).
const GRANULE: usize = 64 << 10;

/// Virtual size of a heap: reserved, not committed (pages are allocated
/// when touched). Allocations beyond it fall back to the system allocator.
/// Every same-node peer a rank reads from maps it too, so 128 ranks on a
/// node use 32 TiB of each process's 128 TiB of address space.
pub const HEAP_LEN: usize = 256 << 30;

/// Free extents remembered for reuse; beyond this a freed range's pages are
/// still released, only its address range is not reused.
const MAX_FREE: usize = 1024;

/// Freed blocks kept with their pages, at most (see the module docs).
pub const HOT_BLOCKS: usize = 8;

/// Bytes of freed blocks kept with their pages, at most.
pub const HOT_BYTES: usize = 64 << 20;

/// Largest alignment a heap block honours (blocks start on a page).
const MAX_ALIGN: usize = 4096;

/// The global allocator that puts large blocks in shared memory (see the
/// module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct SharedHeap;

/// Where a lent buffer lies in its owner's heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapRef {
    /// The owner's descriptor of its heap.
    pub fd: u32,
    /// The heap's inode (checked by the reader: descriptors are reused).
    pub ino: u64,
    /// The heap's length.
    pub len: u64,
    /// The buffer's offset in the heap.
    pub offset: u64,
}

/// This process's heap.
struct Heap {
    fd: i32,
    ino: u64,
    base: usize,
    len: usize,
    /// The process that made it: a forked child allocates elsewhere.
    pid: u32,
    state: Mutex<Extents>,
}

/// Bump pointer plus free extents (offset, length), sorted by offset,
/// adjacent extents merged.
struct Extents {
    top: usize,
    free: [(usize, usize); MAX_FREE],
    nfree: usize,
    /// Freed blocks whose pages were kept (offset, length), oldest first;
    /// in neither `free` nor use.
    hot: [(usize, usize); HOT_BLOCKS],
    nhot: usize,
}

static HEAP: OnceLock<Option<Heap>> = OnceLock::new();

fn round_up(n: usize) -> usize {
    n.div_ceil(GRANULE) * GRANULE
}

/// Whether the environment turns the heap off (`TASKFOLD_SHARED_HEAP`).
///
/// The one read of the environment outside
/// `taskfold_core::settings::Settings::from_env`: the heap decides on its
/// first large allocation, which may come before `main`, and it cannot
/// wait for the runtime's settings. It reads the value with `getenv`
/// (`std::env` would allocate inside the allocator) and parses it with
/// the settings' own boolean parser ([`shared_heap_enabled`], which never
/// allocates), so `off`, `0`, `false` and `no` all turn it off. A value
/// that is not a boolean turns it off too; the runtime's settings refuse
/// that value, so no runtime starts with it.
fn disabled_by_env() -> bool {
    // SAFETY: the name is a NUL-terminated literal; `getenv` returns null
    // or a NUL-terminated string that stays valid while the environment is
    // not modified, and it is read here at once.
    let value = unsafe {
        let v = libc::getenv(SHARED_HEAP_VAR.as_ptr());
        (!v.is_null()).then(|| std::ffi::CStr::from_ptr(v).to_bytes())
    };
    !shared_heap_enabled(value)
}

/// Creates the heap, or `None` if it is turned off or the kernel refuses.
/// Calls only `libc`: it runs inside the allocator.
fn create() -> Option<Heap> {
    if disabled_by_env() {
        return None;
    }
    // SAFETY: plain system calls on a descriptor this function owns; every
    // result is checked, and the descriptor is closed on each failure path.
    unsafe {
        let fd = libc::memfd_create(c"taskfold-heap".as_ptr(), libc::MFD_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let mut st: libc::stat = std::mem::zeroed();
        // Mode 0600 (a memfd starts 0777): only this user's processes may
        // open it through /proc, whatever else the kernel allows.
        if libc::fchmod(fd, 0o600) != 0
            || libc::ftruncate(fd, HEAP_LEN as libc::off_t) != 0
            || libc::fstat(fd, &mut st) != 0
        {
            libc::close(fd);
            return None;
        }
        let base = libc::mmap(
            std::ptr::null_mut(),
            HEAP_LEN,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_NORESERVE,
            fd,
            0,
        );
        if base == libc::MAP_FAILED {
            libc::close(fd);
            return None;
        }
        // A forked child must not share (and scribble on) the parent's
        // blocks: it does not inherit the mapping at all.
        libc::madvise(base, HEAP_LEN, libc::MADV_DONTFORK);
        Some(Heap {
            fd,
            ino: st.st_ino,
            base: base as usize,
            len: HEAP_LEN,
            pid: libc::getpid() as u32,
            state: Mutex::new(Extents {
                top: 0,
                free: [(0, 0); MAX_FREE],
                nfree: 0,
                hot: [(0, 0); HOT_BLOCKS],
                nhot: 0,
            }),
        })
    }
}

/// The heap if this process made one (and is not a forked child).
fn heap() -> Option<&'static Heap> {
    HEAP.get().and_then(Option::as_ref)
}

fn heap_for_alloc() -> Option<&'static Heap> {
    let h = HEAP.get_or_init(create).as_ref()?;
    // SAFETY: `getpid` has no preconditions.
    (h.pid == unsafe { libc::getpid() } as u32).then_some(h)
}

impl Heap {
    fn contains(&self, p: *const u8) -> bool {
        let p = p as usize;
        p >= self.base && p < self.base + self.len
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Extents> {
        // Every update keeps the extents consistent before it can panic
        // (it cannot: no allocation, no indexing out of bounds).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A block of `size` bytes (a multiple of [`GRANULE`]) and whether it
    /// reads as zeros: a kept block of that size (the newest), else the
    /// smallest free extent that fits, else fresh address space.
    fn take(&self, size: usize) -> Option<(*mut u8, bool)> {
        let mut s = self.lock();
        if let Some(i) = (0..s.nhot).rev().find(|&i| s.hot[i].1 == size) {
            let off = s.hot[i].0;
            let n = s.nhot;
            s.hot.copy_within(i + 1..n, i);
            s.nhot -= 1;
            return Some(((self.base + off) as *mut u8, false));
        }
        let mut best: Option<usize> = None;
        for i in 0..s.nfree {
            let len = s.free[i].1;
            if len >= size && best.is_none_or(|b| len < s.free[b].1) {
                best = Some(i);
            }
        }
        let off = if let Some(i) = best {
            let (off, len) = s.free[i];
            if len == size {
                let n = s.nfree;
                s.free.copy_within(i + 1..n, i);
                s.nfree -= 1;
            } else {
                s.free[i] = (off + size, len - size);
            }
            off
        } else {
            if s.top + size > self.len {
                return None;
            }
            let off = s.top;
            s.top += size;
            off
        };
        Some(((self.base + off) as *mut u8, true))
    }

    /// Keeps the freed block at `p` of `size` bytes with its pages, if it
    /// fits the bounds; returns the blocks that no longer fit (the oldest
    /// first), whose pages the caller releases, or `p`'s own if it is
    /// larger than every kept block together may be.
    fn keep(&self, p: *mut u8, size: usize) -> ([(usize, usize); HOT_BLOCKS + 1], usize) {
        let mut out = [(0, 0); HOT_BLOCKS + 1];
        let off = p as usize - self.base;
        if size > HOT_BYTES {
            out[0] = (off, size);
            return (out, 1);
        }
        let mut s = self.lock();
        let mut evicted = 0;
        let mut kept: usize = s.hot[..s.nhot].iter().map(|h| h.1).sum();
        while s.nhot == HOT_BLOCKS || kept + size > HOT_BYTES {
            out[evicted] = s.hot[0];
            evicted += 1;
            kept -= s.hot[0].1;
            let n = s.nhot;
            s.hot.copy_within(1..n, 0);
            s.nhot -= 1;
        }
        let n = s.nhot;
        s.hot[n] = (off, size);
        s.nhot += 1;
        (out, evicted)
    }

    /// Gives back the block at `p` of `size` bytes (a multiple of
    /// [`GRANULE`]) for reuse; its pages were released already.
    fn give(&self, p: *mut u8, size: usize) {
        let off = p as usize - self.base;
        let mut s = self.lock();
        // Insert sorted, merging with the neighbours.
        let i = s.free[..s.nfree].partition_point(|&(o, _)| o < off);
        let merge_prev = i > 0 && s.free[i - 1].0 + s.free[i - 1].1 == off;
        let merge_next = i < s.nfree && off + size == s.free[i].0;
        match (merge_prev, merge_next) {
            (true, true) => {
                let next_len = s.free[i].1;
                s.free[i - 1].1 += size + next_len;
                let n = s.nfree;
                s.free.copy_within(i + 1..n, i);
                s.nfree -= 1;
            }
            (true, false) => s.free[i - 1].1 += size,
            (false, true) => s.free[i] = (off, size + s.free[i].1),
            (false, false) => {
                if s.nfree == MAX_FREE {
                    return; // the address range is not reused; its pages are gone
                }
                let n = s.nfree;
                s.free.copy_within(i..n, i + 1);
                s.free[i] = (off, size);
                s.nfree += 1;
            }
        }
        // Free space that reaches the top lowers it.
        let n = s.nfree;
        if n > 0 && s.free[n - 1].0 + s.free[n - 1].1 == s.top {
            s.top = s.free[n - 1].0;
            s.nfree -= 1;
        }
    }
}

fn shared_size(layout: Layout) -> bool {
    let min = if layout.size() < MIN_SHARED && taskfold_core::pool::allocating() {
        MIN_SHARED_POOLED
    } else {
        MIN_SHARED
    };
    layout.size() >= min && layout.align() <= MAX_ALIGN
}

// SAFETY: every block comes either from `System` (and goes back to it) or
// from the heap, told apart by address; heap blocks are disjoint (each
// address range is handed out once until kept or given back),
// page-aligned and at least `layout.size()` long. A block from the free
// extents or fresh reads as zeros (never written, or released with
// `MADV_REMOVE`, after which shared memory reads as zeros); a kept block
// does not, and `alloc_zeroed` clears it.
unsafe impl GlobalAlloc for SharedHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if shared_size(layout) {
            if let Some((p, _)) = heap_for_alloc().and_then(|h| h.take(round_up(layout.size()))) {
                return p;
            }
        }
        // SAFETY: forwarded with the caller's (valid, non-zero) layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if shared_size(layout) {
            if let Some((p, zeroed)) =
                heap_for_alloc().and_then(|h| h.take(round_up(layout.size())))
            {
                if !zeroed {
                    // SAFETY: `p` is a block of at least `layout.size()`
                    // bytes that this call now owns.
                    unsafe { std::ptr::write_bytes(p, 0, layout.size()) };
                }
                return p;
            }
        }
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(h) = heap().filter(|h| h.contains(ptr)) {
            let size = round_up(layout.size());
            // SAFETY: `getpid` has no preconditions.
            if h.pid != unsafe { libc::getpid() } as u32 {
                // A forked child's: never reused (see the module docs).
                return;
            }
            let (release, n) = h.keep(ptr, size);
            for &(off, len) in &release[..n] {
                let p = (h.base + off) as *mut u8;
                // SAFETY: `p..p + len` is a block of the heap's shared
                // mapping that nobody uses (given up, and out of the kept
                // blocks); releasing its pages makes it read as zeros
                // until written again.
                let released = unsafe { libc::madvise(p.cast(), len, libc::MADV_REMOVE) } == 0;
                // A free extent must read as zeros (it is handed out as
                // such); otherwise its address range is left.
                if released {
                    h.give(p, len);
                }
            }
            return;
        }
        // SAFETY: not a heap address, so `System` allocated it.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let in_heap = heap().is_some_and(|h| h.contains(ptr));
        if !in_heap && new_size < MIN_SHARED {
            // SAFETY: forwarded: `System` allocated `ptr` with `layout`.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        if in_heap && new_size >= MIN_SHARED_POOLED && round_up(new_size) == round_up(layout.size())
        {
            return ptr; // still fits its block
        }
        // SAFETY: `new_size` is non-zero and, rounded to the alignment,
        // does not overflow (the caller's contract).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a valid layout, as above.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are valid for the smaller size and
            // distinct (the old one is still allocated).
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

/// Where `len` bytes at `ptr` lie in this process's heap, if they do.
pub fn locate(ptr: *const u8, len: usize) -> Option<HeapRef> {
    let h = heap().filter(|h| h.contains(ptr))?;
    let offset = ptr as usize - h.base;
    (offset + len <= h.len).then_some(HeapRef {
        fd: h.fd as u32,
        ino: h.ino,
        len: h.len as u64,
        offset: offset as u64,
    })
}

/// Whether this process allocates large blocks in a shared heap (the
/// allocator is installed, on, and has served a block).
pub fn active() -> bool {
    heap().is_some()
}

/// Another process's heap, mapped read-only.
#[derive(Debug)]
pub struct PeerHeap {
    ptr: *const u8,
    len: usize,
    pid: u32,
    ino: u64,
}

// SAFETY: the mapping is read-only and lives until `drop`; sharing
// `&PeerHeap` across threads only hands out shared slices of it.
unsafe impl Send for PeerHeap {}
// SAFETY: as above.
unsafe impl Sync for PeerHeap {}

impl PeerHeap {
    /// Maps the heap that process `pid` names in `r`: a private regular
    /// file of this user's (see [`crate::private::open_peer_fd`]) of the
    /// inode and length named.
    pub fn open(pid: u32, r: &HeapRef) -> std::io::Result<PeerHeap> {
        use std::os::unix::fs::MetadataExt;
        let file = crate::private::open_peer_fd(pid, r.fd, false)?;
        let meta = file.metadata()?;
        if meta.ino() != r.ino || meta.len() != r.len {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "process {pid}'s descriptor {} is not its heap (inode {}, {} bytes)",
                    r.fd,
                    meta.ino(),
                    meta.len()
                ),
            ));
        }
        let len = usize::try_from(r.len).map_err(std::io::Error::other)?;
        // SAFETY: maps `len` bytes (the file's length, checked above) of a
        // descriptor that is open for the call; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_NORESERVE,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(PeerHeap {
            ptr: p as *const u8,
            len,
            pid,
            ino: r.ino,
        })
    }

    /// Whether an error of [`PeerHeap::open`] says that this kernel refuses
    /// to map peers' heaps (permissions, resources), rather than that this
    /// peer's heap is gone: the process exited or died (its `/proc` entry
    /// or descriptor no longer exists), or its pid or descriptor now names
    /// something else. Only a refusal is worth giving up shared reads for.
    pub fn refused(e: &std::io::Error) -> bool {
        !matches!(
            e.kind(),
            std::io::ErrorKind::NotFound | std::io::ErrorKind::InvalidData
        )
    }

    /// Whether this is the heap `r` names in process `pid`.
    pub fn is(&self, pid: u32, r: &HeapRef) -> bool {
        self.pid == pid && self.ino == r.ino && self.len as u64 == r.len
    }

    /// The bytes at `offset..offset + len`, if inside the heap.
    ///
    /// The owner promises not to change them while they are lent (the
    /// transport's loan protocol); a range the owner freed reads as zeros,
    /// never faults (the heap's length never shrinks).
    pub fn slice(&self, offset: usize, len: usize) -> Option<&[u8]> {
        if offset.checked_add(len)? > self.len {
            return None;
        }
        // SAFETY: `offset + len <= self.len`, inside the live read-only
        // mapping, which outlives the borrow of `self`.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.add(offset), len) })
    }
}

impl Drop for PeerHeap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `open`; no slice of it
        // outlives `self`.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heap_ref(fd: u32) -> HeapRef {
        HeapRef {
            fd,
            ino: 1,
            len: 4096,
            offset: 0,
        }
    }

    #[test]
    fn a_peer_that_is_gone_is_not_a_refusal() {
        // A process that exited: its /proc entry is gone.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let e = PeerHeap::open(pid, &heap_ref(3))
            .map(|_| ())
            .expect_err("no such process");
        assert!(!PeerHeap::refused(&e), "{e}");
        // A descriptor that is not the heap it was said to be (this
        // process's stdin has another inode and length).
        let e = PeerHeap::open(std::process::id(), &heap_ref(0))
            .map(|_| ())
            .expect_err("not a heap");
        assert!(!PeerHeap::refused(&e), "{e}");
        // The kernel saying no is one.
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert!(PeerHeap::refused(&denied));
    }
}
