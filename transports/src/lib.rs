//! Transports of taskfold: how bytes move between ranks.
//!
//! Collective logic never touches sockets: the actors above speak only to
//! the [`Transport`] trait, and each implementation lives in its own module.
//!
//! # Layout
//!
//! - [`Transport`] (this file): ordered control frames to a rank, one-sided
//!   `get` of a buffer a rank has exposed, link-failure events.
//! - [`loopback`]: every rank in one process; still copies every frame and
//!   every fetched buffer, as a wire would, so tests exercise the wire format.
//! - [`tcp`]: the default transport (socket2 + tokio), with the bootstrap that
//!   finds the master and the other ranks.
//! - `libfabric` (cargo feature `libfabric`): RDM endpoints over the system
//!   libfabric, tagged messages for control, RMA reads for gets.
//! - [`select`]: builds the transport the environment asks for
//!   (`TASKFOLD_TRANSPORT=tcp|libfabric`).
//! - [`shm`]: the shared heap (an opt-in global allocator) whose large
//!   blocks same-node ranks map, so that a fold reads a peer's bytes in
//!   place ([`Transport::get_loan`], [`Received::Shared`]).
//! - [`shared_file`]: read-only mappings of same-node replica files, exposed
//!   like any buffer (a buddy's copy without copying).
//! - [`board`]: the master's notice board, shared memory where the ranks
//!   of its node read released barriers and completed reductions, woken
//!   by one futex.
//! - `conformance` (cargo feature `conformance`): the test suite every
//!   transport must pass.

pub mod board;
#[cfg(feature = "conformance")]
pub mod conformance;
#[cfg(feature = "libfabric")]
pub mod libfabric;
pub mod loopback;
pub mod select;
pub mod shared_file;
pub mod shm;
pub mod tcp;

/// The byte buffers of frames and exposed data (re-exported, so that users
/// of the trait need no direct dependency on `bytes`).
pub use bytes::Bytes;
use std::future::Future;
use std::pin::Pin;
pub use taskfold_core::wire::Direct;
pub use taskfold_core::Rank;

/// A receive buffer: aligned so that an rkyv archive can be read in place.
pub type RecvBuf = rkyv::util::AlignedVec<16>;

/// The result of a one-sided `get`.
pub type GetFuture = Pin<Box<dyn Future<Output = Result<RecvBuf, TransportError>> + Send>>;

/// The result of [`Transport::get_loan`].
pub type LoanFuture = Pin<Box<dyn Future<Output = Result<Received, TransportError>> + Send>>;

/// A piece of a segmented get ([`Transport::get_segments`]).
#[derive(Debug)]
pub struct Segment {
    /// Where the piece starts in the owner's buffer.
    pub offset: usize,
    /// Length of the whole buffer.
    pub total: usize,
    /// The piece's bytes.
    pub bytes: RecvBuf,
}

/// Receives the segments of a get in order, as they arrive, on a thread of
/// the transport (hand heavy work elsewhere).
pub type SegmentSink = Box<dyn FnMut(Segment) + Send>;

/// The end of a segmented get: every segment was handed over, or the error
/// that ended it (the segments handed over before are then incomplete).
pub type SegmentsFuture = Pin<Box<dyn Future<Output = Result<(), TransportError>> + Send>>;

/// Fetched bytes: a private copy, or a read-only view of the owner's memory.
#[derive(Debug)]
pub enum Received {
    /// A private copy.
    Owned(RecvBuf),
    /// The owner's own bytes, lent: unchanged until this is dropped, which
    /// returns the loan.
    Shared(SharedView),
}

impl std::ops::Deref for Received {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Received::Owned(b) => b,
            Received::Shared(v) => v,
        }
    }
}

impl Received {
    /// The bytes as [`Bytes`], with no copy: a private copy becomes a
    /// pooled buffer; a view stays a view (the loan is returned when the
    /// last clone of the [`Bytes`] is dropped, so hold them only as long as
    /// the owner may be asked to keep its bytes unchanged).
    pub fn into_bytes(self) -> Bytes {
        match self {
            Received::Owned(b) => taskfold_core::pool::bytes(b),
            Received::Shared(v) => Bytes::from_owner(v),
        }
    }

    /// A private copy (no copy if it is one already); returns a loan at once.
    pub fn into_owned(self) -> RecvBuf {
        match self {
            Received::Owned(b) => b,
            Received::Shared(v) => {
                let mut b = taskfold_core::pool::take(v.len());
                b.extend_from_slice(&v);
                b
            }
        }
    }
}

/// A lent range of a same-node peer's shared heap ([`shm`]), mapped
/// read-only. Dropping it returns the loan to the owner.
pub struct SharedView {
    heap: std::sync::Arc<shm::PeerHeap>,
    offset: usize,
    len: usize,
    /// Returns the loan when dropped (after the view's last read).
    _loan: Box<dyn Send + Sync>,
}

impl SharedView {
    /// A view of `len` bytes at `offset` in `heap`, returned by dropping
    /// `loan`; `None` (and the loan returned) if the range is outside it.
    pub fn new(
        heap: std::sync::Arc<shm::PeerHeap>,
        offset: usize,
        len: usize,
        loan: Box<dyn Send + Sync>,
    ) -> Option<SharedView> {
        heap.slice(offset, len)?;
        Some(SharedView {
            heap,
            offset,
            len,
            _loan: loan,
        })
    }
}

impl AsRef<[u8]> for SharedView {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::ops::Deref for SharedView {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.heap
            .slice(self.offset, self.len)
            .expect("checked when the view was made")
    }
}

impl std::fmt::Debug for SharedView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedView")
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
}

/// Pseudo-rank of the launcher (`taskfold run`) when it reports to the master.
pub const LAUNCHER: Rank = Rank(u32::MAX);

/// Names an exposed buffer on its owner (the reduction key, in practice).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BufferKey(pub u64);

/// What a transport reports to the layer above.
#[derive(Debug, Clone)]
pub enum Event {
    /// A control frame from `from`, in the order `from` sent it.
    Message {
        /// The sender ([`LAUNCHER`] for the launcher).
        from: Rank,
        /// The frame, as sent.
        frame: Bytes,
    },
    /// The link to `peer` broke (connection reset, peer process gone).
    LinkDown {
        /// The peer.
        peer: Rank,
        /// What the transport saw.
        reason: String,
    },
}

/// Transport failures. Never a panic: the layer above decides what a broken
/// link means (with fault tolerance, usually a failed rank).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// The rank is not part of the job.
    #[error("rank {0} is not part of the job")]
    NoSuchRank(u32),
    /// The link to the peer is down.
    #[error("link to rank {peer} is down: {reason}")]
    LinkDown {
        /// The peer.
        peer: u32,
        /// Why.
        reason: String,
    },
    /// The peer has no buffer exposed under that key.
    #[error("rank {peer} exposes no buffer {key:#x}")]
    NotExposed {
        /// The peer.
        peer: u32,
        /// The key asked for.
        key: u64,
    },
    /// A frame exceeds the configured maximum.
    #[error("frame of {len} bytes exceeds the maximum of {max}")]
    FrameTooLarge {
        /// Its length.
        len: u64,
        /// The maximum.
        max: u64,
    },
    /// The peer broke the protocol.
    #[error("protocol error from {peer}: {detail}")]
    Protocol {
        /// The peer (u32::MAX if unknown).
        peer: u32,
        /// What was wrong.
        detail: String,
    },
    /// The bootstrap refused this process (wrong job, rank or size).
    #[error("refused by the master: {0}")]
    Refused(String),
    /// The master could not be reached in time.
    #[error("master unreachable: {0}")]
    MasterUnreachable(String),
    /// An I/O error.
    #[error("I/O error: {0}")]
    Io(String),
    /// The transport was shut down.
    #[error("transport shut down")]
    Closed,
}

/// Moves control frames and data between the ranks of one job.
///
/// Contract (checked by the conformance suite, `conformance`, cargo feature
/// `conformance`):
/// - `send` never blocks; frames from one rank to another arrive in order,
///   exactly once, unless the link goes down. Sending to oneself works and
///   goes through [`Transport::events`] like any other frame.
/// - `get` is one-sided: the owner's application and actors take no part;
///   the transport serves the exposed bytes by itself.
/// - a peer that disappears produces one [`Event::LinkDown`]; pending `get`s
///   to it fail with [`TransportError::LinkDown`], they do not hang.
pub trait Transport: Send + Sync + 'static {
    /// This process's rank.
    fn rank(&self) -> Rank;
    /// Number of ranks in the job.
    fn size(&self) -> u32;
    /// Queues an ordered control frame to `to`.
    fn send(&self, to: Rank, frame: Bytes) -> Result<(), TransportError>;
    /// Exposes `data` under `key` for one-sided gets (replacing any older).
    fn expose(&self, key: BufferKey, data: Bytes);
    /// Stops exposing `key`; returns the bytes if they were exposed.
    fn withdraw(&self, key: BufferKey) -> Option<Bytes>;
    /// Fetches the buffer `from` exposes under `key`.
    fn get(&self, from: Rank, key: BufferKey) -> GetFuture;
    /// Like [`Transport::get`], but a transport may hand back a read-only
    /// view of the owner's own bytes ([`Received::Shared`], a same-node
    /// peer's shared heap) instead of a copy. The owner keeps them
    /// unchanged, and its buffer allocated, until the view is dropped:
    /// hold it no longer than the read that needs it.
    fn get_loan(&self, from: Rank, key: BufferKey) -> LoanFuture {
        let f = self.get(from, key);
        Box::pin(async move { f.await.map(Received::Owned) })
    }
    /// Like [`Transport::get`], but hands the bytes to `sink` in segments as
    /// they arrive, so that the caller works on the first ones while the
    /// rest is in flight (a fold overlaps the fetch). The default hands over
    /// one segment, the whole buffer, once it is here; a streaming transport
    /// (TCP) hands over each chunk as it is read.
    fn get_segments(&self, from: Rank, key: BufferKey, mut sink: SegmentSink) -> SegmentsFuture {
        let f = self.get(from, key);
        Box::pin(async move {
            let bytes = f.await?;
            let total = bytes.len();
            sink(Segment {
                offset: 0,
                total,
                bytes,
            });
            Ok(())
        })
    }
    /// Where a peer on this node may read `data` in place without asking
    /// this rank ([`Transport::view`]), if this transport has such a path
    /// (the default: none). `data` must be bytes this rank exposes and
    /// keeps unchanged until it withdraws them; the caller names the place
    /// to its peers (the master forwards it in tasks).
    fn locate(&self, data: &[u8]) -> Option<Direct> {
        let _ = data;
        None
    }
    /// A read-only view of `from`'s bytes at `at` (which `from`'s
    /// [`Transport::locate`] gave), read in place: no request to `from`,
    /// which takes no part (a one-sided get through shared memory).
    /// `None` if this process cannot read them there (another node, no
    /// shared heap, the kernel refuses, the link to `from` is down): fetch
    /// with [`Transport::get_loan`] instead. The owner keeps the bytes
    /// unchanged by protocol, not by a loan: hold the view only for the
    /// read that needs it.
    fn view(&self, from: Rank, at: &Direct) -> Option<Received> {
        let _ = (from, at);
        None
    }
    /// As [`Transport::view`], also after the link to `from` went down, as
    /// long as this process still maps `from`'s memory (until
    /// [`Transport::forget_memory`]): a buddy reads the original that
    /// `from` offered it just before it died, which `from` kept unchanged
    /// (it can no longer change it). Not for data that a live peer may
    /// have released meanwhile. Default: [`Transport::view`].
    fn view_retained(&self, from: Rank, at: &Direct) -> Option<Received> {
        self.view(from, at)
    }
    /// Stops mapping the memory of `peer`, whose link went down, once
    /// nothing more will be read there with [`Transport::view_retained`]
    /// (views already taken keep what they read). Default: nothing kept.
    fn forget_memory(&self, peer: Rank) {
        let _ = peer;
    }
    /// The stream of incoming frames and link events (one consumer).
    fn events(&self) -> flume::Receiver<Event>;
    /// Closes every link; later calls fail with [`TransportError::Closed`].
    fn shutdown(&self);
    /// Short name for logs and metrics (`"tcp"`, `"loopback"`).
    fn name(&self) -> &'static str;
    /// The runtime this transport's tasks run on, if the caller is to run
    /// it on a thread of its own (a single-threaded runtime shared with
    /// the caller's tasks, so that an incoming frame wakes that thread
    /// alone). Taken once; `None` for a transport that runs itself.
    fn take_driver(&self) -> Option<tokio::runtime::Runtime> {
        None
    }
    /// For a transport whose driver the caller runs: [`Transport::shutdown`]
    /// as a future to run on that driver before it stops (the goodbyes need
    /// it). `None` for a transport that runs itself.
    fn shutdown_on_driver(&self) -> Option<DriverClose> {
        None
    }
}

/// A transport's graceful close, run on its driver
/// ([`Transport::shutdown_on_driver`]).
pub type DriverClose = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// The exposed-buffer table shared by a transport's serving side.
#[derive(Default, Debug)]
pub struct Exposed {
    map: std::sync::RwLock<std::collections::HashMap<BufferKey, Bytes>>,
}

impl Exposed {
    /// Inserts or replaces.
    pub fn insert(&self, key: BufferKey, data: Bytes) {
        self.map
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, data);
    }
    /// Removes.
    pub fn remove(&self, key: BufferKey) -> Option<Bytes> {
        self.map
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key)
    }
    /// A cheap clone of the bytes under `key`.
    pub fn lookup(&self, key: BufferKey) -> Option<Bytes> {
        self.map
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned()
    }
    /// Number of exposed buffers and their total bytes.
    pub fn usage(&self) -> (usize, usize) {
        let m = self.map.read().unwrap_or_else(|e| e.into_inner());
        (m.len(), m.values().map(Bytes::len).sum())
    }
}

/// Copies bytes into a fresh aligned receive buffer.
pub fn recv_buf_from(bytes: &[u8]) -> RecvBuf {
    let mut b = RecvBuf::with_capacity(bytes.len());
    b.extend_from_slice(bytes);
    b
}
