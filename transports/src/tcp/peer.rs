//! Per-peer link state shared by the connection tasks and the API.
//!
//! Each peer has one slot: its link state (up, gone after a goodbye, down
//! after a failure), our outgoing connection's writer, the writer of the
//! connection it opened to us, our pending gets to it and the abort handles
//! of the tasks of both connections. Every transition happens under the
//! slot's lock, which is what makes the `LinkDown` event unique and orders it
//! after every message delivered from that peer.

use super::conn::{OutFrame, Writer};
use crate::lease::Leases;
pub(crate) use crate::link::Link;
use crate::same_node::SameNode;
use crate::{Event, Exposed, Rank, Received, RecvBuf, TransportError};
use bytes::Bytes;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::AbortHandle;

/// How long the peer's connection to us is still read after our connection
/// to it broke, at most, before the link is reported down anyway.
///
/// Why: a dead peer's kernel closes both connections at once, but they are
/// read by different tasks; the one that carries responses to our gets may
/// see the end first, while the other still holds frames the peer wrote
/// before it died (its join, an offer of its original to its buddy). Those
/// frames must come before the `LinkDown`. The other connection ends
/// within microseconds then; the bound is for a peer whose process lives
/// on with one connection broken.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// Control frames waiting in the event channel, at most, before a reader
/// waits for room ([`Shared::event_room`]): the consumer's pace, not a
/// peer's, decides how many frames this rank holds.
pub(crate) const MAX_EVENTS: usize = 4096;

/// A get waiting for its response chunks.
pub(crate) struct Pending {
    /// The key asked for (a refused loan is asked for again, streamed).
    pub key: u64,
    /// The buffer: made at the first chunk, grown (zeroed, then read into)
    /// chunk by chunk as the bytes arrive, never past the announced total.
    pub buf: Option<RecvBuf>,
    /// Announced total length.
    pub total: u64,
    /// The most bytes this get accepts: a larger announced total is a
    /// protocol error, found before anything is allocated.
    pub max: u64,
    /// Bytes received so far (chunks arrive in order).
    pub done: u64,
    /// The caller takes a view of a same-node loan instead of a copy (not
    /// a segmented get, whose segments are copies).
    pub view: bool,
    /// Completes the caller's future.
    pub tx: oneshot::Sender<Result<Received, TransportError>>,
    /// A segmented get ([`crate::Transport::get_segments`]): chunks go here
    /// as they are read, and the future completes with an empty buffer.
    pub sink: Option<crate::SegmentSink>,
}

impl Pending {
    /// Completes the get with `r`; the bytes of a segmented get go to its
    /// sink first, as one segment.
    pub fn complete(mut self, r: Result<Received, TransportError>) {
        match (self.sink.take(), r) {
            (Some(mut sink), Ok(data)) => {
                let bytes = data.into_owned();
                sink(crate::Segment {
                    offset: 0,
                    total: bytes.len(),
                    bytes,
                });
                let _ = self.tx.send(Ok(Received::Owned(crate::RecvBuf::new())));
            }
            (_, r) => {
                let _ = self.tx.send(r);
            }
        }
    }
}

/// Everything about one peer.
#[derive(Default)]
pub(crate) struct PeerSlot {
    pub link: Link,
    /// Writer of our outgoing connection (control frames and get requests).
    pub out: Option<Writer>,
    /// Writer of the connection the peer opened to us (get responses).
    pub incoming: Option<Writer>,
    /// Our gets to this peer, by request id.
    pub pending: HashMap<u64, Pending>,
    /// Tasks of both connections, aborted when the link goes down.
    pub tasks: Vec<AbortHandle>,
    /// The peer's incarnation this slot serves: connections of an older
    /// one are refused, and their tasks' ends ignored.
    pub incarnation: u32,
}

/// The state shared by the transport handle and its tasks.
pub(crate) struct Shared {
    pub rank: u32,
    pub size: u32,
    pub job: u64,
    /// Largest control frame, sent or received.
    pub max_frame: u64,
    /// Payload bytes per get response frame.
    pub chunk: usize,
    /// Largest buffer a get accepts ([`super::TcpConfig::max_get`]).
    pub max_get: u64,
    pub connect_timeout: Duration,
    /// The job key every connection proves (see the `handshake` module).
    pub auth: taskfold_core::auth::JobAuth,
    pub events_tx: flume::Sender<Event>,
    /// Bytes of the frames delivered that the runtime still holds.
    pub event_bytes: crate::link::EventBytes,
    pub events_rx: flume::Receiver<Event>,
    pub exposed: Exposed,
    /// Every rank's listen address, set once the bootstrap is done, and
    /// changed when a replacement is let in ([`Shared::readmit`]).
    pub addrs: std::sync::RwLock<Vec<SocketAddr>>,
    /// Every rank's node token (0 when unknown), set once the bootstrap
    /// is done, and changed when a replacement is let in (a spare may
    /// run on another node than the process it replaces).
    pub nodes: std::sync::RwLock<Vec<u64>>,
    /// Whether this rank hosts the master: it takes registrations and
    /// the launcher's reports (rank 0's first process, or a standby that
    /// took over).
    hosts_master: AtomicBool,
    /// On the master: spares parked until a rank needs one, oldest first.
    parked: Mutex<std::collections::VecDeque<super::spare::Parked>>,
    next_spare: AtomicU64,
    /// This process's incarnation ([`super::TcpConfig::incarnation`]).
    pub incarnation: u32,
    /// Frames are sealed with MACs ([`super::TcpConfig::integrity`]).
    pub integrity: bool,
    /// Connections to peers of this node move to rings
    /// ([`super::TcpConfig::rings`]).
    pub rings: bool,
    /// Master only: replacements waiting for the runtime's answer.
    pub replacements: Mutex<HashMap<u32, super::bootstrap::Registration>>,
    peers: Vec<Mutex<PeerSlot>>,
    closed: AtomicBool,
    next_id: AtomicU64,
    /// Connection tasks alive (a graceful shutdown waits for them).
    live: AtomicUsize,
    pub handle: Handle,
    /// Master only: where registrations go while the bootstrap runs.
    pub registrar: Mutex<Option<flume::Sender<super::bootstrap::Registration>>>,
    /// Same-node reads: the node token (0 when loans are off), peers'
    /// heaps, views in place.
    pub same: SameNode,
    /// Buffers lent to same-node peers, by (peer, request): kept alive and
    /// unchanged until the peer returns them or its link breaks.
    loans: Mutex<Leases<Bytes>>,
    /// Loans whose link broke before they were returned: the reader may
    /// still be reading a view of them, so they are kept (unchanged, never
    /// recycled) until the transport is dropped.
    stranded: Mutex<Vec<Bytes>>,
}

/// Decrements the live-task count when a connection task ends or is aborted.
pub(crate) struct LiveGuard(Arc<Shared>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Shared {
    pub fn new(cfg: &super::TcpConfig, handle: Handle) -> Shared {
        let (events_tx, events_rx) = flume::unbounded();
        Shared {
            rank: cfg.rank,
            size: cfg.size,
            job: cfg.job,
            max_frame: cfg.max_frame.min(u64::from(u32::MAX)),
            chunk: cfg.chunk.clamp(64, u32::MAX as usize) / 64 * 64,
            max_get: cfg.max_get,
            connect_timeout: cfg.connect_timeout,
            auth: cfg.auth.clone(),
            events_tx,
            event_bytes: Default::default(),
            events_rx,
            exposed: Exposed::default(),
            addrs: std::sync::RwLock::new(Vec::new()),
            nodes: std::sync::RwLock::new(Vec::new()),
            hosts_master: AtomicBool::new(false),
            parked: Mutex::default(),
            next_spare: AtomicU64::new(0),
            incarnation: cfg.incarnation,
            integrity: cfg.integrity,
            rings: cfg.rings,
            replacements: Mutex::default(),
            peers: (0..cfg.size).map(|_| Mutex::default()).collect(),
            closed: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            live: AtomicUsize::new(0),
            handle,
            registrar: Mutex::new(None),
            same: SameNode::new(cfg.rank, cfg.size, "tcp", cfg.loans),
            loans: Mutex::default(),
            stranded: Mutex::new(Vec::new()),
        }
    }

    /// The same-node loans: buffers lent, by (peer, request).
    pub fn loans(&self) -> MutexGuard<'_, Leases<Bytes>> {
        // Every update is a single table operation: consistent after a panic.
        self.loans.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Buffers lent and not yet returned.
    pub fn loans_out(&self) -> usize {
        self.loans().len()
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Marks the transport closed; true if it was open.
    pub fn close(&self) -> bool {
        self.same.close();
        !self.closed.swap(true, Ordering::SeqCst)
    }

    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub fn live_guard(self: &Arc<Self>) -> LiveGuard {
        self.live.fetch_add(1, Ordering::SeqCst);
        LiveGuard(self.clone())
    }

    pub fn live_tasks(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// The slot of `peer` (callers have checked `peer < size`).
    pub fn slot(&self, peer: u32) -> MutexGuard<'_, PeerSlot> {
        self.peers[peer as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `peer` runs on this rank's node (same node token, as the
    /// job's table says).
    pub fn on_my_node(&self, peer: u32) -> bool {
        let mine = crate::same_node::node_token();
        let theirs = self
            .nodes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(peer as usize)
            .copied();
        mine != 0 && theirs == Some(mine)
    }

    /// Where `peer` listens, if known.
    pub fn addr_of(&self, peer: u32) -> Option<SocketAddr> {
        self.addrs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(peer as usize)
            .copied()
    }

    /// True if the link to `peer` still serves incarnation `inc` (a task
    /// of an older one's connection ends without effect).
    pub fn serves(&self, peer: u32, inc: u32) -> bool {
        self.slot(peer).incarnation == inc
    }

    /// The writer of our outgoing connection to `peer`, opening it if needed.
    pub fn outgoing(self: &Arc<Self>, slot: &mut PeerSlot, peer: u32) -> Writer {
        if let Some(w) = &slot.out {
            return w.clone();
        }
        let (tx, rx) = Writer::new();
        let inc = slot.incarnation;
        let task = self
            .handle
            .spawn(super::outgoing::run_outgoing(self.clone(), peer, inc, rx));
        slot.tasks.push(task.abort_handle());
        slot.out = Some(tx.clone());
        tx
    }

    /// Delivers a control frame from `peer`, unless its link already went
    /// down (so nothing from a peer follows its `LinkDown`). A link that is
    /// draining still delivers: the frame was sent before the failure.
    /// Waits until the event channel has room for a frame from `peer`
    /// ([`MAX_EVENTS`]), the transport closes or the link to `peer` goes
    /// down; counts the bound when it is reached. The reader that waits
    /// reads nothing from its peer meanwhile, so the peer's sends back up
    /// into its own queues (TCP's flow control) and other peers are read
    /// as before.
    /// The frame is `len` bytes long: it waits too while the frames the
    /// runtime holds and this one would exceed [`crate::link::MAX_EVENT_BYTES`]
    /// (`peer` `None`: the launcher's connection, which has no link).
    pub async fn event_room(&self, peer: Option<u32>, len: u64) {
        let full = || self.events_tx.len() >= MAX_EVENTS || !self.event_bytes.room(len);
        if !full() {
            return;
        }
        super::metrics::bound_hit("events");
        let mut pause = Duration::from_micros(100);
        while full()
            && !self.is_closed()
            && !peer.is_some_and(|p| matches!(self.slot(p).link, Link::Down(_)))
        {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }

    pub fn deliver(&self, peer: u32, frame: Bytes) {
        let slot = self.slot(peer);
        if !matches!(slot.link, Link::Down(_)) && !self.is_closed() {
            let _ = self.events_tx.send(Event::Message {
                from: Rank(peer),
                frame: self.event_bytes.track(frame),
            });
        }
        drop(slot);
    }

    /// A connection to or from `peer` broke without a goodbye (`incoming`:
    /// the one the peer opened to us, which carries its control frames).
    /// The link goes down once: `Event::LinkDown` is reported, gets fail
    /// and the other connection is closed; later calls do nothing.
    ///
    /// If our own connection broke first while the peer's is still read,
    /// the link drains instead: gets and sends fail at once, but the
    /// peer's connection is read to its end (at most [`DRAIN_GRACE`]), so
    /// that every control frame the peer sent before the failure is
    /// delivered before the `LinkDown`.
    pub fn link_lost(self: &Arc<Self>, peer: u32, reason: String, incoming: bool) {
        let mut slot = self.slot(peer);
        let reason = match &slot.link {
            Link::Up if !incoming && slot.incoming.is_some() && !self.is_closed() => {
                slot.link = Link::Draining(reason.clone());
                self.same.link_failing(peer);
                Self::fail_gets(&mut slot, peer, &reason, false);
                slot.out = None;
                tracing::debug!(rank = self.rank, peer, %reason, "link draining");
                let (shared, inc) = (self.clone(), slot.incarnation);
                self.handle.spawn(async move {
                    tokio::time::sleep(DRAIN_GRACE).await;
                    // Not if a replacement was let in meanwhile.
                    if shared.serves(peer, inc) {
                        shared.link_lost(peer, String::new(), true);
                    }
                });
                return;
            }
            Link::Up => reason,
            // The peer's connection ended (or the grace ran out): the
            // failure first seen is the one reported.
            Link::Draining(first) if incoming => first.clone(),
            _ => return,
        };
        let closed = self.is_closed();
        slot.link = Link::Down(reason.clone());
        Self::fail_gets(&mut slot, peer, &reason, closed);
        self.down(slot, peer, reason, closed);
    }

    /// Fails every pending get to `peer`.
    fn fail_gets(slot: &mut PeerSlot, peer: u32, reason: &str, closed: bool) {
        for (_, p) in slot.pending.drain() {
            let _ = p.tx.send(Err(if closed {
                TransportError::Closed
            } else {
                TransportError::LinkDown {
                    peer,
                    reason: reason.to_string(),
                }
            }));
        }
    }

    /// The rest of a link going down: its connections closed, its loans
    /// stranded, its heap retained, `Event::LinkDown` reported.
    fn down(&self, mut slot: MutexGuard<'_, PeerSlot>, peer: u32, reason: String, closed: bool) {
        slot.out = None;
        slot.incoming = None;
        let lent = self.loans().take_peer(peer);
        self.stranded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(lent);
        self.same.link_down(peer);
        for t in slot.tasks.drain(..) {
            t.abort();
        }
        if !closed {
            tracing::warn!(rank = self.rank, peer, %reason, "link down");
            let _ = self.events_tx.send(Event::LinkDown {
                peer: Rank(peer),
                reason,
            });
        }
    }

    /// `peer` said goodbye: no event, its gets fail, our connection to it is
    /// closed once the frames already queued are written.
    pub fn peer_gone(&self, peer: u32) {
        let mut slot = self.slot(peer);
        if matches!(slot.link, Link::Up | Link::Draining(_)) {
            tracing::debug!(rank = self.rank, peer, "peer left gracefully");
            slot.link = Link::Gone;
            self.same.link_failing(peer);
            let closed = self.is_closed();
            for (_, p) in slot.pending.drain() {
                let _ = p.tx.send(Err(if closed {
                    TransportError::Closed
                } else {
                    TransportError::LinkDown {
                        peer,
                        reason: format!("rank {peer} shut down"),
                    }
                }));
            }
        }
        if let Some(w) = slot.out.take() {
            let _ = w.send(OutFrame::Close);
        }
    }

    /// Whether this rank hosts the master.
    pub fn hosts_master(&self) -> bool {
        self.hosts_master.load(Ordering::Acquire)
    }

    /// The spares parked here.
    pub fn parked(&self) -> MutexGuard<'_, std::collections::VecDeque<super::spare::Parked>> {
        // Every update is a single queue operation: consistent after a panic.
        self.parked.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A number for the next parked spare.
    pub fn next_spare_id(&self) -> u64 {
        self.next_spare.fetch_add(1, Ordering::Relaxed)
    }

    /// This rank hosts the master from now on.
    pub fn set_hosts_master(&self) {
        self.hosts_master.store(true, Ordering::Release);
    }

    /// The master's table, as this rank joined: every rank's address and
    /// node, and the incarnation of each that is in the job (connections
    /// of older ones are refused).
    pub fn adopt_table(&self, table: &[super::frame::Entry]) {
        *self.addrs.write().unwrap_or_else(|e| e.into_inner()) =
            table.iter().map(|e| e.addr).collect();
        *self.nodes.write().unwrap_or_else(|e| e.into_inner()) =
            table.iter().map(|e| e.node).collect();
        for (peer, e) in table.iter().enumerate() {
            if peer as u32 != self.rank {
                self.slot(peer as u32).incarnation = e.incarnation;
            }
        }
    }

    /// The table this rank would hand a replacement: every rank's
    /// address, node and the incarnation it serves.
    pub fn table(&self) -> Vec<super::frame::Entry> {
        let addrs = self.addrs.read().unwrap_or_else(|e| e.into_inner()).clone();
        let nodes = self.nodes.read().unwrap_or_else(|e| e.into_inner()).clone();
        addrs
            .iter()
            .enumerate()
            .map(|(r, &addr)| super::frame::Entry {
                addr,
                node: nodes.get(r).copied().unwrap_or(0),
                incarnation: match r as u32 == self.rank {
                    true => self.incarnation,
                    false => self.slot(r as u32).incarnation,
                },
                // The runtime knows the deaths, not the transport: the
                // master's admission marks them (`respawn::admit`).
                dead: false,
            })
            .collect()
    }

    /// `peer`'s replacement, incarnation `inc`, on node `node`, listens at
    /// `addr`: the older incarnation's connections are closed and its gets
    /// fail, and the link is up again, to the new address. Nothing if
    /// `inc` is not newer than the incarnation served.
    pub fn readmit(&self, peer: u32, inc: u32, addr: SocketAddr, node: u64) {
        let mut slot = self.slot(peer);
        if inc <= slot.incarnation {
            return;
        }
        let reason = format!("rank {peer} was replaced");
        Self::fail_gets(&mut slot, peer, &reason, self.is_closed());
        for t in slot.tasks.drain(..) {
            t.abort();
        }
        if let Some(w) = slot.out.take() {
            let _ = w.send(OutFrame::Close);
        }
        slot.incoming = None;
        slot.link = Link::Up;
        slot.incarnation = inc;
        if let Some(a) = self
            .addrs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(peer as usize)
        {
            *a = addr;
        }
        if let Some(n) = self
            .nodes
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(peer as usize)
        {
            *n = node;
        }
        self.same.readmit(peer);
        tracing::info!(rank = self.rank, peer, incarnation = inc, %addr, "a replacement is let in");
    }

    /// On shutdown or abort: fails every pending get with `Closed` and takes
    /// every writer (for goodbyes, or to drop them).
    pub fn drain_for_close(&self) -> Vec<Writer> {
        let mut writers = Vec::new();
        for peer in 0..self.size {
            let mut slot = self.slot(peer);
            for (_, p) in slot.pending.drain() {
                let _ = p.tx.send(Err(TransportError::Closed));
            }
            writers.extend(slot.out.take());
            writers.extend(slot.incoming.take());
        }
        writers
    }

    /// Every task of every connection (abort on a crash).
    pub fn all_tasks(&self) -> Vec<AbortHandle> {
        (0..self.size)
            .flat_map(|p| std::mem::take(&mut self.slot(p).tasks))
            .collect()
    }
}

#[cfg(test)]
mod tests;
