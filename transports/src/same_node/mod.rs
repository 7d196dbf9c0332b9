//! Same-node sharing: what a transport offers, besides moving bytes, to
//! ranks that run on one node ([`crate::Transport::same_node`]).
//!
//! A rank whose large buffers lie in its shared heap ([`crate::shm`]) can
//! name where a buffer lies ([`SameNode::locate`], an opaque
//! [`Locator`] that travels in the core's messages), and a peer on the same
//! node reads the bytes there, in place, with no request to the owner
//! ([`SameNode::view`]): a one-sided get through shared memory. The owner
//! keeps the bytes unchanged by protocol (the layer above releases them),
//! not by a loan.
//!
//! This module is the only one that knows what a locator names (a process,
//! its heap's descriptor and inode, an offset) and the only one that maps
//! peers' heaps: once per peer, read-only, kept while the link to the peer
//! is up, then retained after it went down until the layer above forgets
//! it ([`SameNode::forget_memory`]), so that a buddy still reads an
//! original its owner offered just before it died.
//!
//! A locator is a peer's word: the process it names is proven to be the
//! peer's (it holds the peer's listening socket) before anything of it
//! is opened, once per peer process (`owner`); a locator naming another
//! process reads nothing and is counted ([`LOCATORS_REFUSED`]).
//!
//! Any transport can offer it: it needs only the node token
//! ([`node_token`]), the process's heap, where each peer listens
//! ([`SameNode::set_listeners`]) and the transport's link states, which
//! the transport reports ([`SameNode::link_failing`],
//! [`SameNode::link_down`]). TCP also lends buffers over its get protocol
//! to same-node requesters and reads them through the same heap mappings
//! (`SameNode::peer_heap`).

mod locator;
mod owner;
mod token;
mod view;

pub use locator::Place;
pub use owner::{locators_refused, Listeners, LOCATORS_REFUSED};
pub use taskfold_core::wire::Locator;
pub use token::node_token;
pub use view::SharedView;

use crate::shm::{HeapRef, PeerHeap};
use crate::{Rank, Received};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Buffers smaller than this are not lent by a get: a loan costs a round
/// trip more than a streamed get of a small buffer. [`SameNode::locate`]
/// has no such floor: a peer reads a located buffer with no request at
/// all, whatever its size.
pub const MIN_LOAN: usize = 64 << 10;

/// Bytes of same-node buffers read in place from a peer's shared heap (not
/// copied by the kernel), by transport (label `transport`).
pub const MAPPED_BYTES: &str = "taskfold_transport_mapped_bytes_total";

/// [`MAPPED_BYTES`] of this process, also without a metrics recorder.
static MAPPED: AtomicU64 = AtomicU64::new(0);

/// Bytes this process read in place from same-node peers' shared heaps
/// (all transports of the process together).
pub fn mapped_bytes() -> u64 {
    MAPPED.load(Ordering::Relaxed)
}

/// How many bytes `at` names (as its maker wrote it: unchecked until
/// they are read).
pub fn located_len(at: &Locator) -> u64 {
    Place::decode(at).len
}

/// The locator of the heap that `at` lies in, naming no bytes: a peer
/// that views it maps that heap ahead of the buffers it will read there.
pub fn heap_of(at: &Locator) -> Locator {
    Place {
        len: 0,
        ..Place::decode(at)
    }
    .encode()
}

/// One transport's same-node state. See the [module documentation](self).
pub struct SameNode {
    rank: u32,
    /// This node's token (0: this transport neither reads nor names
    /// memory in place).
    token: u64,
    /// The transport's name, for the counters.
    label: &'static str,
    /// Cleared when the kernel refuses to let this process read a peer's
    /// memory: nothing is read in place or asked for as a loan again.
    reads_ok: AtomicBool,
    /// Cleared when a peer's heap cannot be mapped (the kernel refuses).
    heaps_ok: AtomicBool,
    /// Per peer: whether its link is up (views need it).
    up: Vec<AtomicBool>,
    closed: AtomicBool,
    /// Same-node peers' shared heaps, mapped once, by peer rank; moved to
    /// `retained` when the peer's link goes down (views in use keep
    /// theirs).
    heaps: Mutex<HashMap<u32, Arc<PeerHeap>>>,
    /// Heaps of peers whose link went down, kept mapped until the layer
    /// above forgets them ([`SameNode::forget_memory`]).
    retained: Mutex<HashMap<u32, Arc<PeerHeap>>>,
    /// Each peer's process, proven before anything it names is opened.
    owners: owner::Owners,
}

impl std::fmt::Debug for SameNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SameNode")
            .field("rank", &self.rank)
            .field("token", &self.token)
            .finish()
    }
}

impl SameNode {
    /// The same-node state of `rank` in a job of `size` ranks, for the
    /// transport named `label`; `on`: read and name memory in place (else
    /// every call answers `None`).
    pub fn new(rank: u32, size: u32, label: &'static str, on: bool) -> SameNode {
        SameNode {
            rank,
            token: if on { node_token() } else { 0 },
            label,
            reads_ok: AtomicBool::new(true),
            heaps_ok: AtomicBool::new(true),
            up: (0..size).map(|_| AtomicBool::new(true)).collect(),
            closed: AtomicBool::new(false),
            heaps: Mutex::new(HashMap::new()),
            retained: Mutex::new(HashMap::new()),
            owners: owner::Owners::new(size),
        }
    }

    /// Tells where each peer listens, by which a locator's process is
    /// proven to be the peer's before anything it names is opened
    /// ([`LOCATORS_REFUSED`]); until then no peer's memory is opened. The
    /// first call is kept.
    pub fn set_listeners(&self, f: Listeners) {
        self.owners.set_listeners(f);
    }

    /// This node's token, or 0 if this transport reads nothing in place.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The token a request for a loan carries: this node's, unless reads
    /// of peers' memory were refused (0: stream it).
    pub fn request_token(&self) -> u64 {
        if self.reads_ok.load(Ordering::Relaxed) {
            self.token
        } else {
            0
        }
    }

    /// The kernel refused to let this process read a peer's memory: ask
    /// for no loan, and read nothing in place, again.
    pub fn reads_refused(&self) {
        self.reads_ok.store(false, Ordering::Relaxed);
    }

    /// Where a peer on this node may read `data` in place without asking
    /// this rank ([`SameNode::view`]): `data` lies in this process's shared
    /// heap (of any size: the read in place needs no request, so small
    /// data gains most from it). `data` must be bytes this rank exposes and
    /// keeps unchanged until it withdraws them; the caller names the place
    /// to its peers.
    pub fn locate(&self, data: &[u8]) -> Option<Locator> {
        if self.token == 0 || data.is_empty() || self.closed.load(Ordering::SeqCst) {
            return None;
        }
        let heap = crate::shm::locate(data.as_ptr(), data.len())?;
        Some(
            Place {
                node: self.token,
                pid: std::process::id(),
                heap,
                len: data.len() as u64,
            }
            .encode(),
        )
    }

    /// A read-only view of `from`'s bytes at `at` (which `from`'s
    /// [`SameNode::locate`] gave), read in place through the mapping of its
    /// heap (made once per peer): no request to `from`, which takes no
    /// part. `None` if this process cannot read them there (another node,
    /// no shared heap, the kernel refuses, the link to `from` is not up):
    /// fetch with [`crate::Transport::get`] instead. Hold the view only for
    /// the read that needs it.
    ///
    /// If the owner dies meanwhile, the mapping keeps its pages, and the
    /// read completes on the bytes it announced.
    pub fn view(&self, from: Rank, at: &Locator) -> Option<Received> {
        self.view_from(from, at, false)
    }

    /// As [`SameNode::view`], also after the link to `from` went down, as
    /// long as this process still maps `from`'s memory (until
    /// [`SameNode::forget_memory`]): a buddy reads the original that
    /// `from` offered it just before it died, which `from` kept unchanged
    /// (it can no longer change it). Not for data that a live peer may
    /// have released meanwhile.
    pub fn view_retained(&self, from: Rank, at: &Locator) -> Option<Received> {
        self.view_from(from, at, true)
    }

    /// Stops mapping the memory of `peer`, whose link went down, once
    /// nothing more will be read there with [`SameNode::view_retained`]
    /// (views already taken keep what they read).
    pub fn forget_memory(&self, peer: Rank) {
        let gone = lock(&self.retained).remove(&peer.0);
        drop(gone);
    }

    fn view_from(&self, from: Rank, at: &Locator, retained: bool) -> Option<Received> {
        let peer = from.0;
        let place = Place::decode(at);
        if self.token == 0
            || place.node != self.token
            || self.closed.load(Ordering::SeqCst)
            || peer as usize >= self.up.len()
        {
            return None;
        }
        let len = usize::try_from(place.len).ok()?;
        let usable =
            self.up[peer as usize].load(Ordering::SeqCst) && self.reads_ok.load(Ordering::Relaxed);
        let mapped = match retained.then(|| self.retained_heap(peer, place.pid, &place.heap)) {
            // A buddy reading a dead owner's original: the mapping it holds
            // serves whatever happened since (the link went down, reads in
            // place were turned off for other peers).
            Some(Some(kept)) => kept,
            _ if !usable => return None,
            _ => self.peer_heap(peer, place.pid, &place.heap)?,
        };
        let offset = usize::try_from(place.heap.offset).ok()?;
        let view = SharedView::new(mapped, offset, len, Box::new(()))?;
        self.count_mapped(place.len);
        Some(Received::Shared(view))
    }

    /// Counts `bytes` read in place.
    pub(crate) fn count_mapped(&self, bytes: u64) {
        metrics::counter!(MAPPED_BYTES, "transport" => self.label).increment(bytes);
        metrics::counter!(crate::tcp::metrics::BYTES_RECEIVED, "transport" => self.label)
            .increment(bytes);
        MAPPED.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Whether `peer`'s heap named by `heap` (in process `pid`) is mapped
    /// already.
    pub(crate) fn heap_mapped(&self, peer: u32, pid: u32, heap: &HeapRef) -> bool {
        lock(&self.heaps)
            .get(&peer)
            .is_some_and(|h| h.is(pid, heap))
    }

    /// `peer`'s shared heap (process `pid`), mapped read-only, if `heap`
    /// names one this process can map.
    pub(crate) fn peer_heap(&self, peer: u32, pid: u32, heap: &HeapRef) -> Option<Arc<PeerHeap>> {
        if !self.heaps_ok.load(Ordering::Relaxed) {
            return None;
        }
        let mut heaps = lock(&self.heaps);
        if let Some(h) = heaps.get(&peer).filter(|h| h.is(pid, heap)) {
            return Some(h.clone());
        }
        // Only a proven process's descriptors are opened: a cached heap
        // was proven before it was mapped.
        if !self.owners.check(self.rank, self.label, peer, pid) {
            return None;
        }
        match PeerHeap::open(pid, heap) {
            Ok(h) => {
                let h = Arc::new(h);
                heaps.insert(peer, h.clone());
                Some(h)
            }
            // The peer is gone (it died before we first mapped its heap):
            // nothing to read there, but other peers' heaps still map.
            Err(e) if !PeerHeap::refused(&e) => {
                tracing::debug!(rank = self.rank, peer, error = %e, "a same-node peer's heap is gone");
                None
            }
            Err(e) => {
                tracing::warn!(rank = self.rank, peer, error = %e, "cannot map a same-node peer's heap; copying instead");
                self.heaps_ok.store(false, Ordering::Relaxed);
                None
            }
        }
    }

    /// `peer`'s heap as mapped when its link went down, if it was mapped
    /// then and is the heap `heap` names in process `pid`; or as mapped
    /// now, if the link is up or still going down (its state is recorded
    /// before the heap moves to the retained ones, and a buddy asked for a
    /// dead owner's original in between must still find it). Never maps
    /// anything new, and serves a mapping made before reads in place were
    /// turned off.
    fn retained_heap(&self, peer: u32, pid: u32, heap: &HeapRef) -> Option<Arc<PeerHeap>> {
        let kept =
            |m: &HashMap<u32, Arc<PeerHeap>>| m.get(&peer).filter(|h| h.is(pid, heap)).cloned();
        let retained = kept(&lock(&self.retained));
        retained.or_else(|| kept(&lock(&self.heaps)))
    }

    /// The link to `peer` is no longer up (it is going down, or the peer
    /// left): nothing more is read in place there, except what
    /// [`SameNode::view_retained`] still finds mapped.
    pub fn link_failing(&self, peer: u32) {
        if let Some(u) = self.up.get(peer as usize) {
            u.store(false, Ordering::SeqCst);
        }
    }

    /// The link to `peer` went down: as [`SameNode::link_failing`], and
    /// its heap, if mapped, is retained until [`SameNode::forget_memory`].
    pub fn link_down(&self, peer: u32) {
        self.link_failing(peer);
        let heap = lock(&self.heaps).remove(&peer);
        if let Some(h) = heap {
            lock(&self.retained).insert(peer, h);
        }
    }

    /// `peer` was replaced by a new process: its memory may be read in
    /// place again (its heap is mapped anew, by the new process's id).
    pub fn readmit(&self, peer: u32) {
        self.owners.forget(peer);
        if let Some(u) = self.up.get(peer as usize) {
            u.store(true, Ordering::SeqCst);
        }
    }

    /// The transport closed: nothing more is located or read.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }
}

/// Locks a map; every update leaves it consistent, so a panic elsewhere
/// does not poison it for good.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
