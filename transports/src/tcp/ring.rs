//! A same-node connection's bytes through shared memory: two rings, one
//! per direction, each woken by an `eventfd`.
//!
//! Why: over the loopback interface every frame costs its sender the
//! kernel's TCP send path *and* the receiver's (the loopback runs the
//! receiver's stack in the sender's time), and its receiver a TCP read and
//! the acknowledgements; a small reduction is paced by the CPU all ranks
//! spend on its messages (the book's Transports chapter has the
//! measurements). Through a ring a frame is one copy in and one copy out,
//! and a system call only when the other side sleeps.
//!
//! How (the exchange that sets rings up is the `switch` module's; what
//! each side makes and checks, [`offer`]'s):
//! - The caller of a connection to a peer of its node creates the rings (a
//!   sealed `memfd` of [`map_len`] bytes) and four `eventfd`s, and offers
//!   them in the connection's first frame ([`Offer`]). The peer proves the
//!   offering process holds the connection's socket, takes the descriptors
//!   with `pidfd_getfd` (the permission to read that process's memory,
//!   which same-node loans need already) and answers. From then on both
//!   directions' frames travel through the rings, byte for byte as they
//!   would through the socket (the frame format, the MACs of
//!   `TASKFOLD_INTEGRITY=mac`, the order) — the socket stays open and
//!   silent, and tells the peer's death.
//! - Each ring is single-producer, single-consumer: the producer owns
//!   `tail`, the consumer `head`, both counting bytes from 0. A side about
//!   to sleep sets its `waiting` word, then looks again; the other side
//!   writes the `eventfd` only if it finds the word set (and clears it), so
//!   a busy pair makes no system call at all and no wake-up is lost
//!   (sequentially consistent stores and loads on both sides).
//! - The end of the stream is the socket's: a reader that finds its ring
//!   empty and the socket closed (read 0 bytes, or failed) reports the end
//!   only after one more look at the ring, so every byte the peer wrote
//!   before it closed or died is read, as over TCP. A byte arriving on the
//!   socket after the switch is a protocol error.
//!
//! What a crash loses: nothing a socket would keep. A dead writer's bytes
//! in the ring are read to their end (then the stream ends, mid-frame if
//! it died mid-frame: the reader's error, as over TCP). The mapping
//! outlives the peer's process.
//!
//! A peer is trusted here as far as a socket trusts it (it proved the job
//! key): indices it writes are checked before use (a ring never holds more
//! than its capacity; anything else ends the stream as invalid data), and
//! the bytes it writes are checked by the frame decoder and, with
//! integrity on, the MACs. The file is sealed against resizing, so a peer
//! cannot make our mapping fault.

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::Notify;

/// Bytes of each direction's ring. A loan answers every same-node get of
/// 64 KiB or more, so the largest frame that streams through a ring in
/// one piece is a control frame; bigger ones pass in several.
pub(crate) const RING_CAP: u64 = 64 << 10;

/// First word of the file: tells rings from any other file.
const MAGIC: u64 = u64::from_le_bytes(*b"tfrings1");

/// Bytes before the rings' data: the magic, the capacity and each ring's
/// four words, each on a cache line of its own.
const HEAD_LEN: u64 = 4096;

/// Where ring `i`'s words lie: tail, head, the reader's and the writer's
/// `waiting`.
const fn word(ring: usize, which: usize) -> usize {
    64 + ring * 256 + which * 64
}
const TAIL: usize = 0;
const HEAD: usize = 1;
const READER_WAITS: usize = 2;
const WRITER_WAITS: usize = 3;

/// Bytes of the file holding two rings of `cap` bytes.
pub(crate) fn map_len(cap: u64) -> u64 {
    HEAD_LEN + 2 * cap
}

/// The shared file, mapped.
struct Mapping {
    ptr: *mut u8,
    len: usize,
    cap: u64,
}

// SAFETY: the mapping is plain shared memory; every access to its words
// is atomic, and each ring's bytes are written by one side only between
// the indices it owns (see the module documentation).
unsafe impl Send for Mapping {}
// SAFETY: as for `Send`.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are the live mapping this value made; nothing
        // refers to it once the last `Arc` goes.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

impl Mapping {
    fn new(fd: RawFd, len: u64, cap: u64) -> io::Result<Mapping> {
        // SAFETY: a fresh shared mapping of a file of at least `len` bytes
        // (checked by the callers, and sealed against shrinking); the
        // result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: ptr.cast(),
            len: len as usize,
            cap,
        })
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset.is_multiple_of(8) && (offset as u64) < HEAD_LEN);
        // SAFETY: 8-aligned, inside the first page of the live mapping,
        // which outlives `&self`; shared words are only accessed atomically.
        unsafe { &*self.ptr.add(offset).cast::<AtomicU64>() }
    }

    fn flag(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: as in `word`; 4-aligned.
        unsafe { &*self.ptr.add(offset).cast::<AtomicU32>() }
    }

    fn data(&self, ring: usize) -> *mut u8 {
        // SAFETY: ring data starts after the head page, inside the mapping.
        unsafe { self.ptr.add((HEAD_LEN + ring as u64 * self.cap) as usize) }
    }

    /// Bytes in a ring between `head` and `tail`, checked.
    fn used(&self, head: u64, tail: u64) -> io::Result<u64> {
        let used = tail.wrapping_sub(head);
        if used > self.cap {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a ring's indices are broken (head {head}, tail {tail})"),
            ));
        }
        Ok(used)
    }
}

/// `fd`, an eventfd this side waits on, registered with the runtime.
fn bell_waited(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the `AsyncFd` owns the descriptor, which stays open and the
    // same until it is dropped.
    Ok(unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }?)
}

/// Rings `fd`: one added to its count, which wakes its waiter.
fn ring_bell(fd: &OwnedFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: an 8-byte write from a live buffer to an eventfd we hold. A
    // full count (never reached: the waiter drains it) would only make
    // the write fail, and the waiter is awake then anyway.
    unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), 8) };
}

/// Empties `fd`'s count (it is non-blocking: nothing to read is fine).
fn drain_bell(fd: &OwnedFd) {
    let mut buf = [0u8; 8];
    // SAFETY: an 8-byte read into a live buffer from an eventfd we hold.
    unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
}

/// One side's two ends of a connection's rings.
pub(crate) struct Ends {
    pub rx: RingRead,
    pub tx: RingWrite,
}

/// The bells and the socket half of one direction.
type Dir<H> = (OwnedFd, OwnedFd, H);

impl Ends {
    fn new(
        map: Arc<Mapping>,
        (rd_data, rd_space, rd): Dir<OwnedReadHalf>,
        (wr_data, wr_space, wr): Dir<OwnedWriteHalf>,
        read_ring: usize,
    ) -> io::Result<Ends> {
        let closed = Arc::new(Closed::default());
        let head = map.word(word(read_ring, HEAD)).load(SeqCst);
        let write_ring = 1 - read_ring;
        let tail = map.word(word(write_ring, TAIL)).load(SeqCst);
        Ok(Ends {
            rx: RingRead {
                map: map.clone(),
                ring: read_ring,
                head,
                data: bell_waited(rd_data)?,
                space: rd_space,
                tcp: rd,
                end: None,
                closed: closed.clone(),
            },
            tx: RingWrite {
                map,
                ring: write_ring,
                tail: Mutex::new(tail),
                data: wr_data,
                space: bell_waited(wr_space)?,
                tcp: wr,
                closed,
            },
        })
    }
}

/// Set when the reading end saw the stream end, so that a writer waiting
/// for room in a dead peer's ring stops waiting.
#[derive(Default)]
struct Closed {
    done: AtomicBool,
    notify: Notify,
}

/// The reading end: an [`AsyncRead`] of the peer's bytes.
pub(crate) struct RingRead {
    map: Arc<Mapping>,
    ring: usize,
    /// Our copy of the ring's head (we own it).
    head: u64,
    /// Rung by the writer when it wrote and found us waiting.
    data: AsyncFd<OwnedFd>,
    /// Rung by us when we made room and found the writer waiting.
    space: OwnedFd,
    /// The silent socket: its end is the stream's end.
    tcp: OwnedReadHalf,
    /// How the stream ended, once the socket said so.
    end: Option<io::Result<()>>,
    closed: Arc<Closed>,
}

impl RingRead {
    /// The connection's socket (its addresses prove who holds it).
    pub(crate) fn socket(&self) -> &OwnedReadHalf {
        &self.tcp
    }

    /// Copies what the ring holds into `buf`; 0 if it is empty.
    fn take(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let m = &*self.map;
        let tail = m.word(word(self.ring, TAIL)).load(SeqCst);
        let used = m.used(self.head, tail)?;
        let n = used.min(buf.len() as u64) as usize;
        if n == 0 {
            return Ok(0);
        }
        let at = (self.head % m.cap) as usize;
        let first = n.min(m.cap as usize - at);
        // SAFETY: both ranges lie inside the ring's data (at < cap, first
        // ≤ cap - at, n - first ≤ at) and in `buf` (n ≤ len); the writer
        // does not write bytes between head and tail (a peer that does
        // only garbles its own frames, which the decoder checks).
        unsafe {
            std::ptr::copy_nonoverlapping(m.data(self.ring).add(at), buf.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(
                m.data(self.ring),
                buf.as_mut_ptr().add(first),
                n - first,
            );
        }
        self.head += n as u64;
        m.word(word(self.ring, HEAD)).store(self.head, SeqCst);
        let waits = m.flag(word(self.ring, WRITER_WAITS));
        if waits.load(SeqCst) != 0 {
            waits.store(0, SeqCst);
            ring_bell(&self.space);
        }
        Ok(n)
    }

    /// Whether the socket ended (`Ready`), as far as it can tell now.
    fn poll_socket(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut one = [0u8; 1];
        let mut b = ReadBuf::new(&mut one);
        match Pin::new(&mut self.tcp).poll_read(cx, &mut b) {
            Poll::Ready(Ok(())) if b.filled().is_empty() => Poll::Ready(Ok(())),
            Poll::Ready(Ok(())) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "bytes on the socket of a connection that moved to rings",
            ))),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for RingRead {
    fn drop(&mut self) {
        self.closed.done.store(true, SeqCst);
        self.closed.notify.notify_waiters();
    }
}

impl AsyncRead for RingRead {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            let n = this.take(buf.initialize_unfilled())?;
            if n > 0 {
                buf.advance(n);
                return Poll::Ready(Ok(()));
            }
            if let Some(end) = this.end.take() {
                // The ring was looked at after the socket ended: all read.
                this.closed.done.store(true, SeqCst);
                this.closed.notify.notify_waiters();
                let again = match &end {
                    Ok(()) => Ok(()),
                    Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
                };
                this.end = Some(end);
                return Poll::Ready(again);
            }
            let waits = this.map.flag(word(this.ring, READER_WAITS));
            waits.store(1, SeqCst);
            let tail = this.map.word(word(this.ring, TAIL)).load(SeqCst);
            if tail != this.head {
                waits.store(0, SeqCst);
                continue;
            }
            match this.data.poll_read_ready(cx) {
                Poll::Ready(Ok(mut guard)) => {
                    drain_bell(guard.get_inner());
                    guard.clear_ready();
                    continue;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {}
            }
            match this.poll_socket(cx) {
                Poll::Ready(end) => this.end = Some(end),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// The writing end: bytes in, in order, never blocking.
pub(crate) struct RingWrite {
    map: Arc<Mapping>,
    ring: usize,
    /// Our copy of the ring's tail (we own it); the lock keeps writers of
    /// the connection (a sender's direct write, the writer task) apart.
    tail: Mutex<u64>,
    /// Rung by us when we wrote and found the reader waiting.
    data: OwnedFd,
    /// Rung by the reader when it made room and found us waiting.
    space: AsyncFd<OwnedFd>,
    /// Kept open: closing it (when this end goes) ends the stream.
    tcp: OwnedWriteHalf,
    closed: Arc<Closed>,
}

impl RingWrite {
    /// Copies as much of `bufs` as the ring has room for; `WouldBlock` if
    /// it has none.
    pub(crate) fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if self.closed.done.load(SeqCst) {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let m = &*self.map;
        let mut tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        let head = m.word(word(self.ring, HEAD)).load(SeqCst);
        let mut room = m.cap - m.used(head, *tail)?;
        if room == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let mut written = 0usize;
        for b in bufs {
            let n = (b.len() as u64).min(room) as usize;
            let at = ((*tail + written as u64) % m.cap) as usize;
            let first = n.min(m.cap as usize - at);
            // SAFETY: both ranges lie in the ring's data (as in
            // `RingRead::take`) and are outside head..tail, which the
            // reader alone reads; `b` is live for the call.
            unsafe {
                std::ptr::copy_nonoverlapping(b.as_ptr(), m.data(self.ring).add(at), first);
                std::ptr::copy_nonoverlapping(b.as_ptr().add(first), m.data(self.ring), n - first);
            }
            written += n;
            room -= n as u64;
            if room == 0 {
                break;
            }
        }
        *tail += written as u64;
        m.word(word(self.ring, TAIL)).store(*tail, SeqCst);
        let waits = m.flag(word(self.ring, READER_WAITS));
        if waits.load(SeqCst) != 0 {
            waits.store(0, SeqCst);
            ring_bell(&self.data);
        }
        Ok(written)
    }

    /// Waits until the ring has room, or the stream ended.
    pub(crate) async fn writable(&self) -> io::Result<()> {
        let m = &*self.map;
        loop {
            let ended = self.closed.notify.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.closed.done.load(SeqCst) {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
            let waits = m.flag(word(self.ring, WRITER_WAITS));
            waits.store(1, SeqCst);
            let head = m.word(word(self.ring, HEAD)).load(SeqCst);
            let tail = *self.tail.lock().unwrap_or_else(|e| e.into_inner());
            if m.used(head, tail)? < m.cap {
                return Ok(());
            }
            tokio::select! {
                ready = self.space.readable() => {
                    let mut guard = ready?;
                    drain_bell(guard.get_inner());
                    guard.clear_ready();
                }
                _ = ended => {}
            }
        }
    }

    /// The connection's socket, for the last frame sent on it (the
    /// answer to the offer).
    pub(crate) fn socket_mut(&mut self) -> &mut OwnedWriteHalf {
        &mut self.tcp
    }
}

mod offer;
pub(crate) use offer::{take, Made, Offer, Refused};

#[cfg(test)]
mod tests;
