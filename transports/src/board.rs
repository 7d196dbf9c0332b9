//! The node's notice board: a few pages of shared memory where the master
//! posts what every rank on its node waits for (released barriers,
//! completed reductions), and a futex word, the bell, that wakes their
//! waiting application threads at once.
//!
//! Why: a notice sent as a message wakes three threads on every rank (the
//! transport's reader, the actors' thread, then the application thread),
//! one rank after the other. On a node with more ranks than cores the last
//! rank heard of a released barrier 0.4 ms after the first (8 ranks, 2
//! cores), so their next operations started that much apart. Through the
//! board, the master writes the notice once and one system call wakes
//! every application thread that waits on it, with no other thread in
//! between.
//!
//! How:
//! - The master's process creates the board ([`Board::create`], a `memfd`
//!   of [`BOARD_LEN`] bytes) and sends every rank its [`BoardRef`]. A rank
//!   on the same node (same [`crate::shared_file::node_token`]) maps it
//!   through `/proc/<pid>/fd/<fd>` ([`Board::open`]), the same permission
//!   as reading the master's memory; a rank elsewhere ignores it.
//! - Notices are only ever *successes*: a failure always travels as a
//!   message. A waiter therefore checks its own answer (from the message)
//!   and the board, and whichever comes first wins; both say the same. A
//!   completion is confirmed by a message later (the rank's actors need
//!   it); a released barrier only to a rank that said it does not read
//!   the board (the runtime's `Msg::Barrier`).
//! - Only the master writes notices: a rank maps them **read-only**. The
//!   bell lies on a page of its own after them, the one page a rank may
//!   write (it rings it, see below): a rank's bug can ring the bell, which
//!   costs a spurious look, but never forge a notice.
//! - The bell is a counter: whoever posts a notice, or answers a waiter
//!   through its usual channel, adds one and wakes every thread waiting on
//!   it (`FUTEX_WAKE`). A waiter reads the bell before it looks for its
//!   answer and sleeps only if the bell has not moved since
//!   ([`Board::wait`]), so no wake-up is lost.
//!
//! **What a crash loses**: nothing. The board only repeats what messages
//! say. If the master dies, its mapping stays valid in every rank (the
//! pages live while mapped) and no new notice appears: waiters get the
//! master's loss through their usual channel, whose answer rings the bell.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;
use taskfold_core::wire::Locator;

/// Bytes of a board's notices (a multiple of every page size in use, so
/// that the bell's page after them can be mapped apart).
const NOTICES_LEN: usize = 64 << 10;

/// Bytes of the bell's page.
const BELL_PAGE: usize = 64 << 10;

/// Bytes of a board: the notices, then the bell's page.
pub const BOARD_LEN: usize = NOTICES_LEN + BELL_PAGE;

/// First word of every board: tells a board from any other file.
const MAGIC: u64 = u64::from_le_bytes(*b"tfboard1");

/// Offset of the bell: the first word of its own page.
const BELL: usize = NOTICES_LEN;

/// Offset of the ring of released barriers: [`BARRIERS`] slots, barrier
/// `seq` in slot `seq % BARRIERS`, holding `seq + 1` once released.
const BARRIER_RING: usize = 128;

/// Slots of the barrier ring. A slot is overwritten only by a barrier
/// [`BARRIERS`] numbers later, whose release implies this one's (see
/// [`Board::barrier_released`]).
pub const BARRIERS: u64 = 64;

/// Offset of the count of completions ever posted.
const COMPLETION_HEAD: usize = 1024;

/// Offset of the ring of completed reductions: the `n`-th completion
/// posted (from 0) holds its key in slot `n % COMPLETIONS`.
const COMPLETION_RING: usize = 1088;

/// Slots of the completion ring. A waiter whose reduction started more
/// than this many completions ago cannot tell from the board whether it
/// completed: it gets its answer as a message.
pub const COMPLETIONS: u64 = 1024;

/// Offset of the bitmap of ranks the master declared failed (fenced).
const FENCED: usize = COMPLETION_RING + 8 * COMPLETIONS as usize;

/// Ranks the fenced bitmap can name; a rank beyond reads as fenced, so it
/// never takes a completion from the board.
pub const FENCED_RANKS: u32 = ((NOTICES_LEN - FENCED) * 8) as u32;

/// Where a board lies: enough for a process on the same node to map it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoardRef {
    /// The creating process.
    pub pid: u32,
    /// Its descriptor of the board.
    pub fd: i32,
    /// The board's inode (checked when mapping: the descriptor may have
    /// been closed and reused).
    pub ino: u64,
    /// The node's token ([`crate::shared_file::node_token`]).
    pub node: u64,
}

impl BoardRef {
    /// The opaque locator that carries this reference in `Msg::Board`
    /// (four little-endian integers: node, pid, descriptor, inode).
    pub fn encode(&self) -> Locator {
        Locator::from_words(&[
            (0, &self.node.to_le_bytes()),
            (8, &self.pid.to_le_bytes()),
            (12, &self.fd.to_le_bytes()),
            (16, &self.ino.to_le_bytes()),
        ])
    }

    /// The reference `at` names (any bytes decode: what they name is
    /// checked when the board is opened).
    pub fn decode(at: &Locator) -> BoardRef {
        BoardRef {
            node: at.u64_at(0),
            pid: at.u32_at(8),
            fd: at.u32_at(12) as i32,
            ino: at.u64_at(16),
        }
    }
}

/// A mapped board (see the module docs).
pub struct Board {
    ptr: *mut u8,
    /// The creator (the master) writes notices; a rank's mapping of them
    /// is read-only.
    writer: bool,
    reference: BoardRef,
    /// The creator keeps its descriptor open: it is how others find it.
    _fd: Option<OwnedFd>,
}

// SAFETY: the mapping lives until `drop` and is only accessed through
// atomics (see `word32` / `word64`), which are safe to share.
unsafe impl Send for Board {}
// SAFETY: as above.
unsafe impl Sync for Board {}

impl std::fmt::Debug for Board {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Board")
            .field("reference", &self.reference)
            .finish()
    }
}

/// Maps BOARD_LEN bytes of `fd`: every page writable for the creator
/// (`writer`), else the notices read-only and the bell's page writable.
fn map(fd: i32, writer: bool) -> io::Result<*mut u8> {
    let prot = match writer {
        true => libc::PROT_READ | libc::PROT_WRITE,
        false => libc::PROT_READ,
    };
    // SAFETY: maps BOARD_LEN bytes of a descriptor open for the call, whose
    // length was set (create) or checked (open) to be BOARD_LEN; the
    // result is checked.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            BOARD_LEN,
            prot,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    if !writer {
        // SAFETY: the bell's page lies inside the mapping just made, and
        // NOTICES_LEN keeps it page-aligned; the descriptor is open for
        // writing, which a shared writable page needs.
        let r = unsafe {
            libc::mprotect(
                p.cast::<u8>().add(NOTICES_LEN).cast(),
                BELL_PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if r != 0 {
            let e = io::Error::last_os_error();
            // SAFETY: unmaps the mapping made above, not yet shared.
            unsafe { libc::munmap(p, BOARD_LEN) };
            return Err(e);
        }
    }
    Ok(p.cast())
}

impl Board {
    /// Creates a board in this process (the master's).
    pub fn create() -> io::Result<Board> {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: a constant, NUL-terminated name; the result is checked.
        let raw = unsafe { libc::memfd_create(c"taskfold-board".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor we just opened and own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let file = std::fs::File::from(fd);
        // Mode 0600 (a memfd starts 0777): only this user's processes may
        // open the board through /proc.
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(
            crate::private::FILE_MODE,
        ))?;
        file.set_len(BOARD_LEN as u64)?;
        let ino = file.metadata()?.ino();
        let ptr = map(file.as_raw_fd(), true)?;
        let board = Board {
            ptr,
            writer: true,
            reference: BoardRef {
                pid: std::process::id(),
                fd: raw,
                ino,
                node: crate::shared_file::node_token(),
            },
            _fd: Some(OwnedFd::from(file)),
        };
        board.writable(0).store(MAGIC, Ordering::Release);
        Ok(board)
    }

    /// Maps the board `r` names, if it is on this node.
    pub fn open(r: &BoardRef) -> io::Result<Board> {
        use std::os::unix::fs::MetadataExt;
        let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
        if r.node != crate::shared_file::node_token() {
            return Err(invalid("the board is on another node".into()));
        }
        let file = crate::private::open_peer_fd(r.pid, r.fd, true)?;
        let meta = file.metadata()?;
        if meta.ino() != r.ino || meta.len() != BOARD_LEN as u64 {
            return Err(invalid(format!(
                "process {}'s descriptor {} is not its board",
                r.pid, r.fd
            )));
        }
        let board = Board {
            ptr: map(file.as_raw_fd(), false)?,
            writer: false,
            reference: *r,
            _fd: None,
        };
        if board.word64(0).load(Ordering::Acquire) != MAGIC {
            return Err(invalid("not a taskfold board".into()));
        }
        Ok(board)
    }

    /// Where this board lies.
    pub fn reference(&self) -> BoardRef {
        self.reference
    }

    /// A word of the notices, to read (any mapping) or, on the creator's,
    /// to write.
    fn word64(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset.is_multiple_of(8) && offset + 8 <= NOTICES_LEN);
        // SAFETY: `offset` is 8-aligned and inside the live mapping (a
        // page-aligned region of BOARD_LEN bytes), which outlives `&self`;
        // every access to board memory is atomic. Only the creator's
        // mapping is written through (`writable`).
        unsafe { &*self.ptr.add(offset).cast::<AtomicU64>() }
    }

    /// A word of the notices to write: the master's mapping only (a
    /// rank's is read-only; a write there would fault).
    fn writable(&self, offset: usize) -> &AtomicU64 {
        assert!(self.writer, "only the board's creator posts notices");
        self.word64(offset)
    }

    fn bell_word(&self) -> &AtomicU32 {
        // SAFETY: as in `word64`; BELL is 4-aligned and in bounds.
        unsafe { &*self.ptr.add(BELL).cast::<AtomicU32>() }
    }

    /// The bell's count, read before looking for an answer (see
    /// [`Board::wait`]).
    pub fn bell(&self) -> u32 {
        self.bell_word().load(Ordering::Acquire)
    }

    /// Rings the bell: every thread waiting on it (in any process that
    /// maps the board) wakes and looks for its answer again.
    pub fn ring(&self) {
        self.bell_word().fetch_add(1, Ordering::AcqRel);
        // SAFETY: FUTEX_WAKE on a live, aligned word of a shared mapping;
        // it only wakes waiters and reads no memory of ours.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.bell_word().as_ptr(),
                libc::FUTEX_WAKE,
                i32::MAX,
                std::ptr::null::<libc::timespec>(),
                std::ptr::null::<u32>(),
                0,
            );
        }
    }

    /// Sleeps until the bell moves from `seen` or `timeout` passes
    /// (returns at once if it already moved). Spurious returns happen;
    /// callers loop.
    pub fn wait(&self, seen: u32, timeout: Duration) {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: FUTEX_WAIT on a live, aligned word of a shared mapping,
        // with a valid timeout; the kernel compares the word with `seen`
        // atomically and returns at once if it differs.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.bell_word().as_ptr(),
                libc::FUTEX_WAIT,
                seen,
                &ts as *const libc::timespec,
                std::ptr::null::<u32>(),
                0,
            );
        }
    }

    /// How many completions were ever posted: a waiter records it when its
    /// reduction starts, and looks for its key only among later posts.
    pub fn completions(&self) -> u64 {
        self.word64(COMPLETION_HEAD).load(Ordering::Acquire)
    }

    /// Posts the reduction `key` as completed and rings the bell. Only the
    /// master posts (one writer), and only successes.
    pub fn post_complete(&self, key: u64) {
        let head = self.writable(COMPLETION_HEAD);
        let n = head.load(Ordering::Relaxed);
        let slot = COMPLETION_RING + 8 * (n % COMPLETIONS) as usize;
        self.writable(slot).store(key, Ordering::Release);
        head.store(n + 1, Ordering::Release);
        self.ring();
    }

    /// Whether `key` was posted as completed since the count was `since`
    /// ([`Board::completions`]): `Some(true)` if so, `Some(false)` if not
    /// yet, `None` if the board cannot tell (its ring went round since).
    ///
    /// Never a false `Some(true)`: a slot only ever holds the key of the
    /// post it was written for or of a later one, and only posts from
    /// `since` on are read.
    pub fn completed_since(&self, key: u64, since: u64) -> Option<bool> {
        let head = self.completions();
        if head.saturating_sub(since) > COMPLETIONS {
            return None;
        }
        let found = (since..head).any(|n| {
            let slot = COMPLETION_RING + 8 * (n % COMPLETIONS) as usize;
            self.word64(slot).load(Ordering::Acquire) == key
        });
        if found {
            return Some(true);
        }
        // Posts during the scan may have overwritten slots before they
        // were read: then this scan says nothing.
        (self.completions().saturating_sub(since) <= COMPLETIONS).then_some(false)
    }

    /// Marks `rank` as declared failed, before any later post: a fenced
    /// rank learns so by message, and must not take completions of
    /// reductions that went on without it from the board meanwhile.
    pub fn fence(&self, rank: u32) {
        if rank < FENCED_RANKS {
            let word = FENCED + 8 * (rank / 64) as usize;
            self.writable(word)
                .fetch_or(1 << (rank % 64), Ordering::Release);
        }
    }

    /// Whether `rank` was marked failed (or lies beyond the bitmap). Read
    /// after a post, it sees every mark made before that post.
    pub fn is_fenced(&self, rank: u32) -> bool {
        if rank >= FENCED_RANKS {
            return true;
        }
        let word = FENCED + 8 * (rank / 64) as usize;
        self.word64(word).load(Ordering::Acquire) & (1 << (rank % 64)) != 0
    }

    /// Posts barrier `seq` as released and rings the bell.
    pub fn post_barrier(&self, seq: u64) {
        let slot = BARRIER_RING + 8 * (seq % BARRIERS) as usize;
        self.writable(slot).store(seq + 1, Ordering::Release);
        self.ring();
    }

    /// Whether barrier `seq` was posted as released, or a later barrier
    /// in its slot was.
    ///
    /// A later barrier implies this one: a rank calls its barriers one
    /// after another (their numbers, in call order, would mean nothing
    /// otherwise) and tells the master in that order, so by the time all
    /// ranks reached barrier `seq + 64 k` all had reached `seq`, which the
    /// master released first (a barrier that failed is never posted, nor
    /// any after it: the failed rank stays failed).
    pub fn barrier_released(&self, seq: u64) -> bool {
        let slot = BARRIER_RING + 8 * (seq % BARRIERS) as usize;
        self.word64(slot).load(Ordering::Acquire) > seq
    }
}

impl Drop for Board {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`; no reference
        // into it outlives `self`.
        unsafe {
            libc::munmap(self.ptr.cast(), BOARD_LEN);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    /// The permissions of this process's mapping that holds `addr`, as
    /// `/proc/self/maps` shows them (`r--s`, `rw-s`).
    fn protection_at(addr: usize) -> String {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .find_map(|l| {
                let (range, rest) = l.split_once(' ')?;
                let (a, b) = range.split_once('-')?;
                let (a, b) = (
                    usize::from_str_radix(a, 16).ok()?,
                    usize::from_str_radix(b, 16).ok()?,
                );
                (a <= addr && addr < b).then(|| rest[..4].to_string())
            })
            .unwrap_or_else(|| panic!("no mapping holds {addr:#x}"))
    }

    #[test]
    fn a_rank_maps_the_notices_read_only_and_only_the_bell_writable() {
        let master = Board::create().unwrap();
        let rank = Board::open(&master.reference()).unwrap();
        assert_eq!(protection_at(master.ptr as usize), "rw-s");
        assert_eq!(protection_at(rank.ptr as usize), "r--s");
        assert_eq!(protection_at(rank.ptr as usize + NOTICES_LEN - 1), "r--s");
        assert_eq!(protection_at(rank.ptr as usize + BELL), "rw-s");
        // The rank rings; the master's waiters see it.
        let seen = master.bell();
        rank.ring();
        assert_ne!(master.bell(), seen);
        // A rank that tried to post would fault: it is refused first.
        let posted =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rank.post_barrier(1)));
        assert!(posted.is_err());
        assert!(!rank.barrier_released(1));
    }

    #[test]
    fn a_reference_survives_its_locator() {
        let owner = Board::create().unwrap();
        let r = owner.reference();
        assert_eq!(BoardRef::decode(&r.encode()), r);
        let mode = std::fs::metadata(format!("/proc/self/fd/{}", r.fd)).unwrap();
        assert_eq!(
            std::os::unix::fs::MetadataExt::mode(&mode) & 0o777,
            0o600,
            "only this user may open the board"
        );
        // What a locator names is checked when the board is opened.
        let forged = BoardRef {
            ino: r.ino ^ 1,
            ..r
        };
        assert!(Board::open(&BoardRef::decode(&forged.encode())).is_err());
    }

    #[test]
    fn a_posted_barrier_is_seen_through_another_mapping() {
        let owner = Board::create().unwrap();
        let other = Board::open(&owner.reference()).unwrap();
        assert!(!other.barrier_released(3));
        owner.post_barrier(3);
        assert!(other.barrier_released(3));
        assert!(!other.barrier_released(4));
        // The slot is reused 64 barriers later, whose release implies the
        // old one's; the next in that slot is not released yet.
        owner.post_barrier(3 + BARRIERS);
        assert!(other.barrier_released(3));
        assert!(other.barrier_released(3 + BARRIERS));
        assert!(!other.barrier_released(3 + 2 * BARRIERS));
    }

    #[test]
    fn completions_are_seen_only_after_the_count_a_waiter_started_from() {
        let owner = Board::create().unwrap();
        let other = Board::open(&owner.reference()).unwrap();
        owner.post_complete(7);
        let since = other.completions();
        assert_eq!(since, 1);
        // Key 7 completed before this waiter started: not its reduction.
        assert_eq!(other.completed_since(7, since), Some(false));
        owner.post_complete(8);
        owner.post_complete(7);
        assert_eq!(other.completed_since(7, since), Some(true));
        assert_eq!(other.completed_since(9, since), Some(false));
        // Once the ring went round past `since`, the board cannot tell.
        for k in 100..100 + COMPLETIONS {
            owner.post_complete(k);
        }
        assert_eq!(other.completed_since(9, since), None);
        let now = other.completions();
        owner.post_complete(9);
        assert_eq!(other.completed_since(9, now), Some(true));
    }

    #[test]
    fn fenced_ranks_are_marked_for_every_mapping() {
        let owner = Board::create().unwrap();
        let other = Board::open(&owner.reference()).unwrap();
        assert!(!other.is_fenced(2) && !other.is_fenced(70));
        owner.fence(70);
        owner.fence(2);
        assert!(other.is_fenced(2) && other.is_fenced(70));
        assert!(!other.is_fenced(3) && !other.is_fenced(66));
        assert!(other.is_fenced(FENCED_RANKS), "beyond the bitmap");
        assert!(!other.is_fenced(FENCED_RANKS - 1));
    }

    #[test]
    fn ringing_wakes_a_waiter_in_another_mapping() {
        let owner = Arc::new(Board::create().unwrap());
        let other = Board::open(&owner.reference()).unwrap();
        let seen = other.bell();
        let o = owner.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            o.post_barrier(0);
        });
        let start = Instant::now();
        while !other.barrier_released(0) {
            assert!(start.elapsed() < Duration::from_secs(10), "never woken");
            other.wait(seen, Duration::from_secs(10));
        }
        t.join().unwrap();
        // Woken by the bell, long before the wait's own timeout.
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_ne!(other.bell(), seen);
    }

    #[test]
    fn a_wait_on_a_moved_bell_returns_at_once_and_a_quiet_one_times_out() {
        let b = Board::create().unwrap();
        let seen = b.bell();
        b.ring();
        let start = Instant::now();
        b.wait(seen, Duration::from_secs(10));
        assert!(start.elapsed() < Duration::from_secs(5));
        let start = Instant::now();
        b.wait(b.bell(), Duration::from_millis(20));
        assert!(start.elapsed() >= Duration::from_millis(15));
    }

    #[test]
    fn a_board_elsewhere_or_a_wrong_descriptor_is_refused() {
        let b = Board::create().unwrap();
        let mut r = b.reference();
        r.node ^= 1;
        assert_eq!(
            Board::open(&r).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        let mut r = b.reference();
        r.ino ^= 1;
        assert_eq!(
            Board::open(&r).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }
}
