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
//! How (see the `conn` module for the exchange that sets it up):
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
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
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

// Ring 0 carries the caller's bytes to the peer, ring 1 the peer's back.

/// What a caller offers: its pid, the rings' capacity, and its descriptors
/// of the file and of the four `eventfd`s (ring 0's data and space bells,
/// then ring 1's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Offer {
    pub pid: u32,
    pub cap: u64,
    pub fds: [i32; 5],
}

/// Bytes of an encoded [`Offer`].
pub(crate) const OFFER_LEN: u32 = super::frame::RINGS_OFFER_LEN;
const _: () = assert!(OFFER_LEN == 4 + 8 + 5 * 4);

impl Offer {
    /// Little-endian: pid, capacity, the five descriptors.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(OFFER_LEN as usize);
        v.extend_from_slice(&self.pid.to_le_bytes());
        v.extend_from_slice(&self.cap.to_le_bytes());
        for fd in self.fds {
            v.extend_from_slice(&fd.to_le_bytes());
        }
        v
    }

    /// The offer in `b`, or why not.
    pub(crate) fn decode(b: &[u8]) -> Result<Offer, String> {
        if b.len() != OFFER_LEN as usize {
            return Err(format!("a ring offer of {} bytes", b.len()));
        }
        let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let mut cap = [0u8; 8];
        cap.copy_from_slice(&b[4..12]);
        let mut fds = [0i32; 5];
        for (i, fd) in fds.iter_mut().enumerate() {
            *fd = u32_at(12 + 4 * i) as i32;
        }
        Ok(Offer {
            pid: u32_at(0),
            cap: u64::from_le_bytes(cap),
            fds,
        })
    }
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

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain system call; the result is checked.
    let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we just opened and own.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
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

/// The caller's side before the peer answered: the rings made, what to
/// offer, and the descriptors kept until the ends are built.
pub(crate) struct Made {
    map: Arc<Mapping>,
    file: OwnedFd,
    bells: [OwnedFd; 4],
}

impl Made {
    /// Makes the file and the bells (see the module documentation).
    pub(crate) fn new(cap: u64) -> io::Result<Made> {
        // SAFETY: a constant, NUL-terminated name; the result is checked.
        let raw = unsafe {
            libc::memfd_create(
                c"taskfold-rings".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor we just opened and own.
        let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(raw) });
        file.set_len(map_len(cap))?;
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on a descriptor we own; the result is checked.
        if unsafe { libc::fcntl(raw, libc::F_ADD_SEALS, seals) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let map = Mapping::new(raw, map_len(cap), cap)?;
        map.word(8).store(cap, SeqCst);
        map.word(0).store(MAGIC, SeqCst);
        Ok(Made {
            map: Arc::new(map),
            file: OwnedFd::from(file),
            bells: [eventfd()?, eventfd()?, eventfd()?, eventfd()?],
        })
    }

    /// What the caller offers for these rings.
    pub(crate) fn offer(&self) -> Offer {
        let b = |i: usize| self.bells[i].as_raw_fd();
        Offer {
            pid: std::process::id(),
            cap: self.map.cap,
            fds: [self.file.as_raw_fd(), b(0), b(1), b(2), b(3)],
        }
    }

    /// The caller's ends, once the peer took the rings: it writes ring 0
    /// and reads ring 1.
    pub(crate) fn ends(self, rd: OwnedReadHalf, wr: OwnedWriteHalf) -> io::Result<Ends> {
        let [d0, s0, d1, s1] = self.bells;
        Ends::new(self.map, (d1, s1, rd), (d0, s0, wr), 1)
    }
}

/// Takes descriptor `fd` of the process behind `pidfd`.
fn take_fd(pidfd: &OwnedFd, fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_getfd with a pidfd we hold; the result is checked and
    // is a new descriptor we own (O_CLOEXEC is set by the kernel).
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    Ok(unsafe { OwnedFd::from_raw_fd(raw as RawFd) })
}

/// The peer's side: takes the offered rings (the caller has checked that
/// the offering process holds the connection): it reads ring 0 and writes
/// ring 1.
pub(crate) fn take(offer: &Offer, rd: OwnedReadHalf, wr: OwnedWriteHalf) -> Result<Ends, Refused> {
    let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    let attempt = || -> io::Result<(Arc<Mapping>, [OwnedFd; 4])> {
        if offer.cap == 0 || offer.cap > RING_CAP * 64 || !offer.cap.is_multiple_of(4096) {
            return Err(invalid(format!("rings of {} bytes", offer.cap)));
        }
        // SAFETY: plain system call; the result is checked.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, offer.pid as libc::pid_t, 0) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor we just opened and own.
        let pidfd = unsafe { OwnedFd::from_raw_fd(raw as RawFd) };
        let file = std::fs::File::from(take_fd(&pidfd, offer.fds[0])?);
        let len = map_len(offer.cap);
        // SAFETY: fcntl on a descriptor we own; the result is checked.
        let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
        let must = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
        if seals < 0 || seals & must != must || file.metadata()?.len() != len {
            return Err(invalid("the offered file is not sealed rings".into()));
        }
        let map = Mapping::new(file.as_raw_fd(), len, offer.cap)?;
        if map.word(0).load(SeqCst) != MAGIC || map.word(8).load(SeqCst) != offer.cap {
            return Err(invalid("the offered file is not taskfold's rings".into()));
        }
        let mut bells = Vec::with_capacity(4);
        for &fd in &offer.fds[1..] {
            bells.push(take_fd(&pidfd, fd)?);
        }
        let bells: [OwnedFd; 4] = bells.try_into().map_err(|_| invalid("bells".into()))?;
        Ok((Arc::new(map), bells))
    };
    match attempt() {
        Ok((map, [d0, s0, d1, s1])) => {
            Ends::new(map, (d0, s0, rd), (d1, s1, wr), 0).map_err(|e| Refused(e, None))
        }
        Err(e) => Err(Refused(e, Some((rd, wr)))),
    }
}

/// Why the offered rings were not taken, and the socket back (if it was
/// not used up) to go on over TCP.
pub(crate) struct Refused(pub io::Error, pub Option<(OwnedReadHalf, OwnedWriteHalf)>);

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

#[cfg(test)]
mod tests;
