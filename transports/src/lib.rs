//! Transports of taskfold: how bytes move between ranks.
//!
//! Collective logic never touches sockets: the actors above speak only to
//! the [`Transport`] trait, and each implementation lives in its own module.
//!
//! # Layout
//!
//! - [`Transport`] (this file): ordered control frames to a rank, one-sided
//!   `get` of a buffer a rank has exposed, link-failure events. Two
//!   capabilities beside it, which a transport offers or not:
//!   [`Transport::same_node`] (reading same-node peers' memory in place,
//!   [`same_node`]) and [`Transport::driven`] (a transport whose I/O runs
//!   on a runtime the caller drives, [`Driven`]).
//! - [`loopback`]: every rank in one process; still copies every frame and
//!   every fetched buffer, as a wire would, so tests exercise the wire format.
//! - [`tcp`]: the default transport (socket2 + tokio), with the bootstrap that
//!   finds the master and the other ranks.
//! - `libfabric` (cargo feature `libfabric`): RDM endpoints over the system
//!   libfabric, tagged messages for control, RMA reads for gets.
//! - [`pmi`]: the launcher's key-value store (PMI-1 on `PMI_FD`; PMIx and
//!   PMI-2 with the cargo features `pmix` and `pmi2`), where ranks find
//!   the master and the job's key without a shared file.
//! - [`select`]: builds the transport the environment asks for
//!   (`TASKFOLD_TRANSPORT=tcp|libfabric`).
//! - [`same_node`]: views of same-node peers' memory, the opaque
//!   [`same_node::Locator`] that names it, and the cache of peers' heaps;
//!   [`shm`]: the shared heap (an opt-in global allocator) whose large
//!   blocks same-node ranks map, so that a fold reads a peer's bytes in
//!   place ([`Received::Shared`]).
//! - [`version`]: the one protocol version, checked at every handshake.
//! - [`auth`]: the job key (fresh, or found where the settings say) that
//!   every connection's handshake proves (an authenticated job).
//! - What every transport does alike, written once: [`Exposed`] (the
//!   exposed-buffer table), [`framing`] (the fixed header of every
//!   frame), [`lease`] (memory a peer is reading), [`link`]
//!   (link states, the checks before a send or a get, a rank's frames and
//!   gets to itself).
//! - [`private`]: private files and directories (0600/0700, no planted
//!   link followed, another user's file never believed), used for every
//!   file a job writes.
//! - [`shared_file`]: read-only mappings of same-node replica files, exposed
//!   like any buffer (a buddy's copy without copying).
//! - [`board`]: the master's notice board, shared memory where the ranks
//!   of its node read released barriers and completed reductions, woken
//!   by one futex.
//! - `conformance` (cargo feature `conformance`): the test suite every
//!   transport must pass.

pub mod auth;
pub mod board;
#[cfg(feature = "conformance")]
pub mod conformance;
mod exposed;
pub mod framing;
pub mod lease;
#[cfg(feature = "libfabric")]
pub mod libfabric;
pub mod link;
pub mod loopback;
pub mod pmi;
pub mod private;
pub mod same_node;
pub mod select;
pub mod shared_file;
pub mod shm;
pub mod tcp;
pub mod version;

/// The byte buffers of frames and exposed data (re-exported, so that users
/// of the trait need no direct dependency on `bytes`).
pub use bytes::Bytes;
pub use exposed::Exposed;
pub use same_node::{Locator, SameNode, SharedView};
use std::future::Future;
use std::pin::Pin;
pub use taskfold_core::Rank;

/// A receive buffer: aligned so that an rkyv archive can be read in place.
pub type RecvBuf = rkyv::util::AlignedVec<16>;

/// The result of a one-sided [`Transport::get`].
pub type GetFuture = Pin<Box<dyn Future<Output = Result<Received, TransportError>> + Send>>;

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
    /// The owner's own bytes, read in place: lent by a get (unchanged
    /// until this is dropped, which returns the loan), or viewed through
    /// [`SameNode::view`] (unchanged by the protocol above).
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
    /// On the master's rank only: a new process, incarnation
    /// `incarnation`, proved the job key and asks to replace `peer`; it
    /// listens at `addr` (this transport's encoding, for
    /// [`Transport::readmit`]). It waits until [`Transport::admit`] or
    /// [`Transport::refuse_replacement`] (or the connect timeout).
    Replacement {
        /// The rank it replaces.
        peer: Rank,
        /// Its incarnation.
        incarnation: u32,
        /// Its node (an opaque token; 0: unknown).
        node: u64,
        /// Where it listens (opaque bytes for [`Transport::readmit`]).
        addr: Vec<u8>,
    },
}

/// The reason the master gives a replacement whose rank finished its
/// work in the job (it finalized before its process died): nothing waits
/// for it. A runtime reports this refusal as its own start error.
pub const RANK_FINISHED: &str = "its rank finished its work in this job";

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
    /// The bootstrap refused this process (wrong job, rank, size or
    /// protocol version).
    #[error("refused by the master: {0}")]
    Refused(String),
    /// A peer speaks another protocol version ([`version`]): refused when
    /// the two first meet.
    #[error("protocol version mismatch with {peer}: this build speaks version {ours}, {peer} speaks version {theirs}")]
    Version {
        /// This build's version.
        ours: u16,
        /// The peer's.
        theirs: u16,
        /// Who the peer is ("the master", "rank 3", a rendezvous file).
        peer: String,
    },
    /// The master could not be reached in time.
    #[error("master unreachable: {0}")]
    MasterUnreachable(String),
    /// An I/O error.
    #[error("I/O error: {0}")]
    Io(String),
    /// The transport was shut down.
    #[error("transport shut down")]
    Closed,
    /// The job key is missing or unreadable, or a process called did not
    /// prove it (the message names the variable at fault, never the key).
    #[error("{0}")]
    Auth(String),
    /// This transport does not replace ranks (`taskfold run --respawn`
    /// needs the TCP transport).
    #[error("the {0} transport cannot let a replacement rank in")]
    Unsupported(&'static str),
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
    /// Short name for logs and metrics (`"tcp"`, `"loopback"`).
    fn name(&self) -> &'static str;
    /// Queues an ordered control frame to `to`.
    fn send(&self, to: Rank, frame: Bytes) -> Result<(), TransportError>;
    /// Exposes `data` under `key` for one-sided gets (replacing any older).
    fn expose(&self, key: BufferKey, data: Bytes);
    /// Stops exposing `key`; returns the bytes if they were exposed.
    fn withdraw(&self, key: BufferKey) -> Option<Bytes>;
    /// Fetches the buffer `from` exposes under `key`: a private copy, or,
    /// from a same-node peer whose buffer lies in its shared heap, a
    /// read-only view of the owner's own bytes ([`Received::Shared`], a
    /// loan). The owner keeps lent bytes unchanged, and its buffer
    /// allocated, until the view is dropped: hold it no longer than the
    /// read that needs it ([`Received::into_owned`] makes a copy and
    /// returns the loan at once).
    fn get(&self, from: Rank, key: BufferKey) -> GetFuture;
    /// Like [`Transport::get`], but hands the bytes to `sink` in segments as
    /// they arrive, so that the caller works on the first ones while the
    /// rest is in flight (a fold overlaps the fetch); the segments are
    /// private copies. The default hands over one segment, the whole
    /// buffer, once it is here; a streaming transport (TCP) hands over each
    /// chunk as it is read.
    fn get_segments(&self, from: Rank, key: BufferKey, sink: SegmentSink) -> SegmentsFuture {
        one_segment(self.get(from, key), sink)
    }
    /// As [`Transport::get`], for a caller that knows how long the buffer
    /// may be: a peer announcing more than `max` bytes is refused with
    /// [`TransportError::Protocol`]. A streaming transport (TCP) refuses
    /// before it allocates anything and drops the link to that peer; the
    /// default checks the length once the bytes are here.
    fn get_within(&self, from: Rank, key: BufferKey, max: u64) -> GetFuture {
        checked_within(self.get(from, key), from, max)
    }
    /// As [`Transport::get_segments`], refusing a buffer longer than `max`
    /// bytes (see [`Transport::get_within`]); the default checks each
    /// segment's total before handing it over.
    fn get_segments_within(
        &self,
        from: Rank,
        key: BufferKey,
        max: u64,
        mut sink: SegmentSink,
    ) -> SegmentsFuture {
        let over = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = over.clone();
        let f = self.get_segments(
            from,
            key,
            Box::new(move |seg: Segment| {
                if seg.total as u64 > max {
                    seen.store(seg.total, std::sync::atomic::Ordering::Relaxed);
                } else {
                    sink(seg);
                }
            }),
        );
        Box::pin(async move {
            f.await?;
            match over.load(std::sync::atomic::Ordering::Relaxed) {
                0 => Ok(()),
                total => check_within(from, total, max),
            }
        })
    }
    /// The stream of incoming frames and link events (one consumer).
    fn events(&self) -> flume::Receiver<Event>;
    /// Closes every link; later calls fail with [`TransportError::Closed`].
    fn shutdown(&self);
    /// Reading same-node peers' memory in place ([`same_node`]), if this
    /// transport offers it (the default: it does not).
    fn same_node(&self) -> Option<&SameNode> {
        None
    }
    /// Every rank's node, by rank: equal values for ranks on one node
    /// ([`same_node::node_token`]), learnt when the job starts. `None`
    /// (the default) when this transport does not know them, or some
    /// rank's node is unknown: then copies are placed blind to nodes.
    fn nodes(&self) -> Option<&[u64]> {
        None
    }
    /// Every rank's incarnation as this process joined the job (a
    /// replacement joins a job where others were replaced before it); the
    /// default: all 0.
    fn incarnations(&self) -> Vec<u32> {
        vec![0; self.size() as usize]
    }
    /// The rank that ran the master when this process joined (the
    /// default: rank 0).
    fn master_rank(&self) -> Rank {
        Rank(0)
    }
    /// This rank runs the master from now on (a standby took over): the
    /// transport takes what only the master takes (replacements, the
    /// launcher's reports) and tells newcomers where it is, if it can.
    /// The default does nothing.
    fn become_master(&self) -> Result<(), TransportError> {
        Ok(())
    }
    /// On the master's rank: sends a parked spare (`TASKFOLD_SPARES`) to
    /// take dead rank `peer` as incarnation `incarnation` (it then asks to
    /// join as a replacement, [`Event::Replacement`]); false if no spare
    /// is parked here (the default: spares are not supported).
    fn assign_spare(&self, peer: Rank, incarnation: u32) -> bool {
        let _ = (peer, incarnation);
        false
    }
    /// On the master's rank: the spares parked here now.
    fn spares_parked(&self) -> usize {
        0
    }
    /// On the master's rank: every rank finished (finalized or is gone
    /// for good): a process that joins from now on (a late replacement, a
    /// spare) is told so ([`RANK_FINISHED`]) rather than left to find no
    /// master. The default does nothing.
    fn job_over(&self) -> Result<(), TransportError> {
        Ok(())
    }
    /// Whether this transport lets replacements of dead ranks in
    /// ([`Transport::admit`], [`Transport::readmit`]); the default: no.
    fn replaces(&self) -> bool {
        false
    }
    /// This process's incarnation: 0 for a rank started with the job, `k`
    /// for the `k`-th replacement of its rank (the default: 0).
    fn incarnation(&self) -> u32 {
        0
    }
    /// On the master's rank: lets in the replacement that asked
    /// ([`Event::Replacement`]): it is answered with every rank's address,
    /// the ranks in `dead` marked as declared failed
    /// ([`Transport::dead_at_join`] on its side), and may start, and this
    /// rank serves it from now on (as [`Transport::readmit`]). The
    /// default: replacements are not supported,
    /// [`TransportError::Unsupported`].
    fn admit(&self, peer: Rank, incarnation: u32, dead: &[u32]) -> Result<(), TransportError> {
        let _ = (peer, incarnation, dead);
        Err(TransportError::Unsupported(self.name()))
    }
    /// The ranks the master had declared failed when it let this process
    /// in (a replacement or a spare; empty for a process of the job's
    /// start, and by default).
    fn dead_at_join(&self) -> Vec<u32> {
        Vec::new()
    }
    /// On the master's rank: refuses the replacement that asked, telling
    /// it `reason` (the default does nothing).
    fn refuse_replacement(&self, peer: Rank, incarnation: u32, reason: &str) {
        let _ = (peer, incarnation, reason);
    }
    /// `peer` was replaced by incarnation `incarnation`, listening at
    /// `addr` ([`Event::Replacement`]): the older incarnation's
    /// connections are closed, its pending gets fail, and it is refused
    /// from now on; sends and gets go to the replacement. A call for an
    /// incarnation not newer than the one served does nothing. The
    /// default: [`TransportError::Unsupported`].
    fn readmit(&self, peer: Rank, incarnation: u32, addr: &[u8]) -> Result<(), TransportError> {
        let _ = (peer, incarnation, addr);
        Err(TransportError::Unsupported(self.name()))
    }
    /// Where `peer`'s current process listens and runs, in the form
    /// [`Transport::readmit`] takes; `None` (the default) where not known.
    /// A new master tells a rank that missed a replacement (its notice
    /// died with the master that sent it) where the replacement is.
    fn address_of(&self, peer: Rank) -> Option<Vec<u8>> {
        let _ = peer;
        None
    }
    /// The runtime the caller is to drive, if this transport runs on one
    /// ([`Driven`]); `None` (the default) for a transport that runs itself.
    fn driven(&self) -> Option<&dyn Driven> {
        None
    }
}

/// A transport whose I/O runs on a runtime that the caller drives on a
/// thread of its own, beside its own tasks, so that an incoming frame
/// wakes that thread alone (TCP with [`tcp::TcpConfig::threads`] 0).
pub trait Driven: Send + Sync {
    /// The runtime to drive (a single-threaded tokio runtime). Taken once:
    /// `None` afterwards. Nothing moves until the caller runs it.
    fn take_driver(&self) -> Option<tokio::runtime::Runtime>;
    /// [`Transport::shutdown`] as a future to run on the driver before it
    /// stops (the goodbyes need it).
    fn close_on_driver(&self) -> DriverClose;
}

/// A transport's graceful close, run on its driver
/// ([`Driven::close_on_driver`]).
pub type DriverClose = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The bytes of `f` handed to `sink` as one segment, once they are here.
pub(crate) fn one_segment(f: GetFuture, mut sink: SegmentSink) -> SegmentsFuture {
    Box::pin(async move {
        let bytes = f.await?.into_owned();
        let total = bytes.len();
        sink(Segment {
            offset: 0,
            total,
            bytes,
        });
        Ok(())
    })
}

/// `f`, failing if its buffer is longer than `max` bytes (checked once
/// the bytes are here).
pub(crate) fn checked_within(f: GetFuture, from: Rank, max: u64) -> GetFuture {
    Box::pin(async move {
        let got = f.await?;
        check_within(from, got.len(), max)?;
        Ok(got)
    })
}

/// The error of a get whose buffer (`len` bytes) is longer than the `max`
/// its caller accepts.
fn check_within(from: Rank, len: usize, max: u64) -> Result<(), TransportError> {
    if len as u64 > max {
        return Err(TransportError::Protocol {
            peer: from.0,
            detail: format!("get of {len} bytes, more than the {max} this get accepts"),
        });
    }
    Ok(())
}

/// Copies bytes into a fresh aligned receive buffer.
pub fn recv_buf_from(bytes: &[u8]) -> RecvBuf {
    let mut b = RecvBuf::with_capacity(bytes.len());
    b.extend_from_slice(bytes);
    b
}
