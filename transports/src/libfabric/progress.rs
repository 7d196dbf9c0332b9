//! The progress thread: the only thread that posts fabric operations and
//! reads the completion queue.
//!
//! The application's calls become [`Cmd`]s on a channel. The thread loops:
//! take commands, post what waits (sends into free send slots, RMA reads in
//! chunks), read completions, check timers; when nothing happened it
//! sleeps, in `fi_cq_sread` if the queue has a wait object (woken by
//! `fi_cq_signal` after each command), otherwise on the command channel with
//! a backoff that stays short while operations or remote reads are in
//! flight (manual-progress providers need the polling) and grows to
//! [`IDLE_NAP`] when the transport is idle: no busy polling.
//!
//! # Memory
//!
//! Every posted operation's context is a boxed `fi_context2` kept in the
//! operation table, and every buffer it uses (receive and send slabs, the
//! destination of a read) lives in the engine until the operation's
//! completion is read or the endpoint is closed: on exit the endpoint is
//! closed first, then the buffers are freed. Memory peers read (exposed
//! buffers, large frames) is held by a lease per read, which the reader
//! releases with a `RELEASE` message once its reads completed, or which is
//! dropped when the reader's link goes down: withdrawing a buffer while a
//! peer reads it never frees memory under the provider.

use super::fi::{
    bits, Completion, CompletionQueue, CqRead, Endpoint, FabricError, FiAddr, MemoryRegion, Posted,
    RawContext,
};
use super::shared::{Registered, Registrar, Shared};
use super::wire::{self, Msg, Remote};
use crate::{BufferKey, RecvBuf, TransportError};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest sleep of an idle progress thread.
pub(crate) const IDLE_NAP: Duration = Duration::from_millis(1);
/// Longest wait in `fi_cq_sread` (completions and commands wake it sooner;
/// timers need a turn now and then).
const SREAD_WAIT: Duration = Duration::from_millis(50);
/// How long a peer whose operations fail may stay unexplained (no goodbye,
/// no TCP failure) before it is reported down.
const SUSPECT_GRACE: Duration = Duration::from_secs(1);
/// How long a graceful shutdown waits for its goodbyes to be sent.
const BYE_WAIT: Duration = Duration::from_secs(1);
/// Receive buffers posted at once (at most the provider's rx queue).
const RX_SLOTS: usize = 64;
/// Send buffers (at most the provider's tx queue).
const TX_SLOTS: usize = 128;
/// Frames waiting for an earlier one, per peer, before the peer is
/// considered broken.
const REORDER_MAX: usize = 1 << 16;

/// How long the polling progress thread sleeps after `idle` without
/// completions or commands: short while operations (or peers' reads of our
/// memory) are in flight, since manual-progress providers move their data
/// only when polled, longer as the quiet lasts.
fn nap(idle: Duration, active: bool) -> Duration {
    let us = Duration::from_micros;
    if idle < us(50) {
        Duration::ZERO
    } else if active {
        if idle < us(1000) {
            us(20)
        } else {
            us(100)
        }
    } else if idle < us(2000) {
        us(50)
    } else if idle < us(50_000) {
        us(200)
    } else {
        IDLE_NAP
    }
}

/// Completes a get.
pub(crate) type Reply = futures::channel::oneshot::Sender<Result<RecvBuf, TransportError>>;

/// What the application asks of the progress thread.
pub(crate) enum Cmd {
    /// An ordered control frame to a peer.
    Send { to: u32, frame: Bytes },
    /// A one-sided get.
    Get {
        from: u32,
        key: BufferKey,
        reply: Reply,
    },
    /// The peer's link went down or the peer left (link state already
    /// set): fail and drop what concerns it.
    Forget { peer: u32, reason: String },
    /// Stop: after goodbyes if graceful, at once otherwise.
    Shutdown { graceful: bool },
}

/// Tuning of the engine.
#[derive(Debug, Clone)]
pub(crate) struct Tuning {
    pub read_chunk: usize,
    pub op_timeout: Duration,
    pub max_get: u64,
    pub mr_local: bool,
    /// Sleep in `fi_cq_sread` rather than on the command channel.
    pub sread: bool,
    pub tx_size: usize,
    pub rx_size: usize,
    /// Messages a receiver may have pending from all its senders together
    /// (the flow-control window per peer is this over `size - 1`).
    pub flow_budget: u64,
}

/// An operation context; the provider may use the `fi_context2` as scratch.
#[repr(C)]
struct Ctx {
    raw: RawContext,
}

// SAFETY: the context is scratch memory the provider uses while the
// operation is posted; the endpoint is thread-safe (FI_THREAD_SAFE), and the
// engine owning the context moves to its progress thread as a whole.
unsafe impl Send for Ctx {}

fn new_ctx() -> Box<Ctx> {
    Box::new(Ctx {
        raw: RawContext::default(),
    })
}

enum OpKind {
    Recv { slot: usize },
    Send { slot: usize, to: u32 },
    Read { fetch: u64, len: usize },
}

struct Op {
    ctx: Box<Ctx>,
    kind: OpKind,
}

/// Fixed-size buffers in one allocation, registered if the provider needs
/// local registration. The region is dropped before the memory.
struct Slab {
    mr: Option<MemoryRegion>,
    buf: Vec<u8>,
}

impl Slab {
    fn new(
        reg: &Registrar,
        slots: usize,
        access: u64,
        mr_local: bool,
    ) -> Result<Slab, FabricError> {
        let buf = vec![0u8; slots * wire::SLOT];
        let mr = if mr_local {
            // SAFETY: the region is dropped before `buf` (field order), and
            // the Vec is never resized, so its heap block never moves.
            Some(unsafe { reg.local(buf.as_ptr(), buf.len(), access) }?)
        } else {
            None
        };
        Ok(Slab { mr, buf })
    }

    fn ptr(&mut self, slot: usize) -> *mut u8 {
        self.buf[slot * wire::SLOT..].as_mut_ptr()
    }

    fn slot(&self, slot: usize) -> &[u8] {
        &self.buf[slot * wire::SLOT..(slot + 1) * wire::SLOT]
    }

    fn slot_mut(&mut self, slot: usize) -> &mut [u8] {
        &mut self.buf[slot * wire::SLOT..(slot + 1) * wire::SLOT]
    }

    fn desc(&self) -> *mut c_void {
        self.mr
            .as_ref()
            .map_or(std::ptr::null_mut(), MemoryRegion::desc)
    }
}

/// A message waiting for a send slot.
enum Out {
    Control { seq: u64, frame: Bytes },
    Large { seq: u64, at: Remote },
    Bye { seq: u64 },
    GetReq { req: u64, key: u64 },
    GetOk { req: u64, at: Remote },
    GetErr { req: u64, key: u64 },
    Release { token: u64 },
    Credit { n: u64 },
}

impl Out {
    fn msg(&self) -> Msg<'_> {
        match self {
            Out::Control { seq, frame } => Msg::Control { seq: *seq, frame },
            Out::Large { seq, at } => Msg::Large { seq: *seq, at: *at },
            Out::Bye { seq } => Msg::Bye { seq: *seq },
            Out::GetReq { req, key } => Msg::GetReq {
                req: *req,
                key: *key,
            },
            Out::GetOk { req, at } => Msg::GetOk { req: *req, at: *at },
            Out::GetErr { req, key } => Msg::GetErr {
                req: *req,
                key: *key,
            },
            Out::Release { token } => Msg::Release { token: *token },
            Out::Credit { n } => Msg::Credit { n: *n },
        }
    }
}

/// The destination of a read; the region (if any) is dropped first.
enum FetchBuf {
    Aligned(RecvBuf),
    Plain(Vec<u8>),
}

impl FetchBuf {
    fn as_mut_ptr(&mut self) -> *mut u8 {
        match self {
            FetchBuf::Aligned(b) => b.as_mut_ptr(),
            FetchBuf::Plain(v) => v.as_mut_ptr(),
        }
    }
}

enum Purpose {
    /// A get: complete the caller's future.
    Get(Option<Reply>),
    /// A large control frame with this sequence number.
    Frame { seq: u64 },
}

/// An RMA read in progress (in chunks).
struct Fetch {
    mr: Option<MemoryRegion>,
    buf: FetchBuf,
    peer: u32,
    at: Remote,
    issued: u64,
    done: u64,
    outstanding: usize,
    purpose: Purpose,
    failed: bool,
    started: Instant,
}

/// A get waiting for the owner's answer.
struct Request {
    peer: u32,
    key: u64,
    reply: Reply,
    started: Instant,
}

/// A frame in the reorder buffer.
enum InItem {
    Frame(Bytes),
    Fetching,
    Bye,
}

#[derive(Default)]
struct Peer {
    out_seq: u64,
    in_next: u64,
    pending: BTreeMap<u64, InItem>,
    /// Messages waiting to be sent to this peer, in order.
    outq: VecDeque<Out>,
    /// True while this peer is in the engine's ready list.
    queued: bool,
    /// Messages we may still send before the peer returns credits.
    credits: u64,
    /// Messages consumed from this peer since we last returned credits.
    consumed: u64,
}

/// Memory a peer may be reading.
struct Lease {
    peer: u32,
    _reg: Arc<Registered>,
}

/// The progress thread's state. See the [module documentation](self).
pub(crate) struct Engine {
    /// Closed first on exit (`Option::take`), before the buffers below.
    ep: Option<Endpoint>,
    cq: Arc<CompletionQueue>,
    sh: Arc<Shared>,
    reg: Arc<Registrar>,
    tuning: Tuning,
    addrs: Vec<FiAddr>,
    cmd_rx: flume::Receiver<Cmd>,
    peer_left: Box<dyn Fn(u32) -> bool + Send>,
    ops: HashMap<usize, Op>,
    /// Contexts not in use (boxed: their addresses must not move).
    #[allow(clippy::vec_box)]
    ctx_pool: Vec<Box<Ctx>>,
    rx: Slab,
    tx: Slab,
    tx_free: Vec<usize>,
    tx_busy: usize,
    tx_limit: usize,
    /// Peers with messages to send and credits (round robin).
    ready: VecDeque<u32>,
    /// Flow-control window per peer (messages).
    window: u64,
    readq: VecDeque<u64>,
    peers: Vec<Peer>,
    requests: HashMap<u64, Request>,
    fetches: HashMap<u64, Fetch>,
    leases: HashMap<u64, Lease>,
    suspects: HashMap<u32, (Instant, String)>,
    next_id: u64,
    scratch: Vec<u8>,
    stopping: Option<Instant>,
}

impl Engine {
    /// Allocates the buffers and posts the receives (before the endpoint's
    /// name is published, so peers' first messages find them).
    pub fn new(
        ep: Endpoint,
        sh: Arc<Shared>,
        reg: Arc<Registrar>,
        tuning: Tuning,
        cmd_rx: flume::Receiver<Cmd>,
    ) -> Result<Engine, FabricError> {
        let rx_slots = RX_SLOTS.min(tuning.rx_size.max(4));
        let tx_slots = TX_SLOTS.min(tuning.tx_size.max(4));
        let rx = Slab::new(&reg, rx_slots, bits::RECV, tuning.mr_local)?;
        let tx = Slab::new(&reg, tx_slots, bits::SEND, tuning.mr_local)?;
        let size = sh.size as usize;
        let window = (tuning.flow_budget / (size as u64).saturating_sub(1).max(1)).clamp(4, 64);
        let mut e = Engine {
            cq: ep.cq().clone(),
            ep: Some(ep),
            sh,
            reg,
            tx_limit: tuning.tx_size.clamp(8, 256),
            tuning,
            addrs: Vec::new(),
            cmd_rx,
            peer_left: Box::new(|_| false),
            ops: HashMap::new(),
            ctx_pool: Vec::new(),
            rx,
            tx,
            tx_free: (0..tx_slots).rev().collect(),
            tx_busy: 0,
            ready: VecDeque::new(),
            window,
            readq: VecDeque::new(),
            peers: (0..size)
                .map(|_| Peer {
                    credits: window,
                    ..Peer::default()
                })
                .collect(),
            requests: HashMap::new(),
            fetches: HashMap::new(),
            leases: HashMap::new(),
            suspects: HashMap::new(),
            next_id: 1,
            scratch: Vec::with_capacity(wire::SLOT),
            stopping: None,
        };
        for slot in 0..rx_slots {
            e.post_recv(slot, new_ctx())?;
        }
        Ok(e)
    }

    /// Sets the peers' fabric addresses (indexed by rank) and how to ask
    /// the TCP transport whether a peer left gracefully.
    pub fn connect(&mut self, addrs: Vec<FiAddr>, peer_left: Box<dyn Fn(u32) -> bool + Send>) {
        self.addrs = addrs;
        self.peer_left = peer_left;
    }

    fn ep(&self) -> Result<&Endpoint, FabricError> {
        self.ep
            .as_ref()
            .ok_or_else(|| FabricError::local("endpoint", "closed"))
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn post_recv(&mut self, slot: usize, mut ctx: Box<Ctx>) -> Result<(), FabricError> {
        let ptr = self.rx.ptr(slot);
        let desc = self.rx.desc();
        let cptr: *mut Ctx = &mut *ctx;
        loop {
            // SAFETY: the slot lies in the receive slab and the context is
            // boxed; both stay in the engine until this receive's
            // completion is read (the op table holds the context) or the
            // endpoint is closed (before the slab is freed).
            let r = unsafe {
                self.ep()?.trecv(
                    ptr,
                    wire::SLOT,
                    desc,
                    wire::TAG_BASE,
                    wire::TAG_IGNORE,
                    cptr.cast(),
                )
            }?;
            match r {
                Posted::Yes => break,
                Posted::Again => {
                    // The receive queue is full of our own receives: drive
                    // progress once and retry.
                    let mut c = [Completion {
                        context: 0,
                        flags: 0,
                        len: 0,
                        tag: 0,
                    }; 1];
                    if let CqRead::Entries(1) = self.cq.read(&mut c)? {
                        self.complete(c[0]);
                    }
                }
            }
        }
        self.ops.insert(
            cptr as usize,
            Op {
                ctx,
                kind: OpKind::Recv { slot },
            },
        );
        Ok(())
    }

    /// Runs until shut down. Consumes the engine; the endpoint is closed
    /// before any buffer is freed.
    pub fn run(mut self) {
        // Short naps must be short: the default timer slack (50 us) would
        // stretch a 20 us nap to about 70.
        // SAFETY: PR_SET_TIMERSLACK changes only the calling thread's timer
        // slack; the argument is a plain integer (nanoseconds).
        let _ = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
        let mut comps = [Completion {
            context: 0,
            flags: 0,
            len: 0,
            tag: 0,
        }; 32];
        let mut idle_since: Option<Instant> = None;
        let mut next_tick = Instant::now();
        let mut sread_strikes = 0u32;
        loop {
            let mut busy = false;
            loop {
                match self.cmd_rx.try_recv() {
                    Ok(cmd) => {
                        busy = true;
                        if !self.command(cmd) {
                            return self.exit();
                        }
                    }
                    Err(flume::TryRecvError::Empty) => break,
                    Err(flume::TryRecvError::Disconnected) => return self.exit(),
                }
            }
            busy |= self.post_pending();
            for _ in 0..8 {
                match self.cq.read(&mut comps) {
                    Ok(CqRead::Entries(0)) => break,
                    Ok(CqRead::Entries(n)) => {
                        busy = true;
                        for c in &comps[..n] {
                            self.complete(*c);
                        }
                    }
                    Ok(CqRead::Failed(e)) => {
                        busy = true;
                        self.failed(e);
                    }
                    Err(e) => {
                        tracing::error!(rank = self.sh.rank, error = %e, "reading the completion queue");
                        break;
                    }
                }
            }
            let now = Instant::now();
            if now >= next_tick {
                self.tick(now);
                next_tick = now + Duration::from_millis(50);
            }
            if let Some(deadline) = self.stopping {
                let sends = self
                    .ops
                    .values()
                    .any(|o| matches!(o.kind, OpKind::Send { .. }));
                let queued = self.peers.iter().any(|p| !p.outq.is_empty());
                // Peers still reading our memory (large frames, gets) get
                // to finish, within the deadline.
                if (!sends && !queued && self.leases.is_empty()) || now >= deadline {
                    return self.exit();
                }
            }
            if busy {
                idle_since = None;
                continue;
            }
            let idle = now - *idle_since.get_or_insert(now);
            let active = self.tx_busy > 0 || !self.leases.is_empty() || !self.requests.is_empty();
            if self.tuning.sread {
                let ms = if active || idle < Duration::from_millis(2) {
                    0
                } else {
                    SREAD_WAIT.as_millis() as i32
                };
                if ms == 0 {
                    std::thread::yield_now();
                    if active {
                        std::thread::sleep(Duration::from_micros(20));
                    }
                    continue;
                }
                let t0 = Instant::now();
                match self.cq.sread(&mut comps, ms) {
                    Ok(CqRead::Entries(0)) if t0.elapsed() < IDLE_NAP / 4 => {
                        // The provider's wait does not block (shm): poll.
                        sread_strikes += 1;
                        if sread_strikes >= 3 {
                            tracing::debug!(
                                rank = self.sh.rank,
                                "fi_cq_sread does not block: polling"
                            );
                            self.tuning.sread = false;
                        }
                        std::thread::sleep(IDLE_NAP);
                    }
                    Ok(CqRead::Entries(n)) => {
                        sread_strikes = 0;
                        for c in &comps[..n] {
                            self.complete(*c);
                        }
                    }
                    Ok(CqRead::Failed(e)) => self.failed(e),
                    Err(e) => {
                        tracing::debug!(rank = self.sh.rank, error = %e, "fi_cq_sread failed: polling");
                        self.tuning.sread = false;
                    }
                }
                continue;
            }
            let nap = nap(idle, active);
            if nap.is_zero() {
                std::thread::yield_now();
                continue;
            }
            match self.cmd_rx.recv_timeout(nap) {
                Ok(cmd) => {
                    idle_since = None;
                    if !self.command(cmd) {
                        return self.exit();
                    }
                }
                Err(flume::RecvTimeoutError::Timeout) => {}
                Err(flume::RecvTimeoutError::Disconnected) => return self.exit(),
            }
        }
    }

    /// Fails what is pending, closes the endpoint, then frees the buffers.
    fn exit(mut self) {
        for (_, r) in self.requests.drain() {
            let _ = r.reply.send(Err(TransportError::Closed));
        }
        for f in self.fetches.values_mut() {
            if let Purpose::Get(reply) = &mut f.purpose {
                if let Some(reply) = reply.take() {
                    let _ = reply.send(Err(TransportError::Closed));
                }
            }
        }
        self.sh.exposed().clear();
        drop(self.ep.take());
        tracing::debug!(rank = self.sh.rank, "fabric endpoint closed");
    }

    /// Handles one command; false to stop at once.
    fn command(&mut self, cmd: Cmd) -> bool {
        match cmd {
            Cmd::Send { to, frame } => self.send(to, frame),
            Cmd::Get { from, key, reply } => {
                if let Err(e) = self.sh.check_peer(crate::Rank(from)) {
                    let _ = reply.send(Err(e));
                } else {
                    let req = self.id();
                    self.requests.insert(
                        req,
                        Request {
                            peer: from,
                            key: key.0,
                            reply,
                            started: Instant::now(),
                        },
                    );
                    self.enqueue(from, Out::GetReq { req, key: key.0 });
                }
            }
            Cmd::Forget { peer, reason } => {
                let graceful = !self.sh.is_down(peer);
                self.forget_peer(peer, &reason, graceful)
            }
            Cmd::Shutdown { graceful: false } => return false,
            Cmd::Shutdown { graceful: true } => {
                if self.stopping.is_none() {
                    self.stopping = Some(Instant::now() + BYE_WAIT);
                    self.sh.exposed().clear();
                    for (_, r) in self.requests.drain() {
                        let _ = r.reply.send(Err(TransportError::Closed));
                    }
                    for peer in 0..self.sh.size {
                        if peer != self.sh.rank && self.sh.is_up(peer) {
                            let p = &mut self.peers[peer as usize];
                            let seq = p.out_seq;
                            p.out_seq += 1;
                            self.enqueue(peer, Out::Bye { seq });
                        }
                    }
                }
            }
        }
        true
    }

    fn send(&mut self, to: u32, frame: Bytes) {
        if !self.sh.is_up(to) || self.stopping.is_some() {
            return;
        }
        let p = &mut self.peers[to as usize];
        let seq = p.out_seq;
        p.out_seq += 1;
        if frame.len() <= wire::INLINE_MAX {
            self.enqueue(to, Out::Control { seq, frame });
            return;
        }
        let len = frame.len() as u64;
        match self.reg.expose(frame) {
            Ok(reg) => {
                let token = self.id();
                let at = Remote {
                    len,
                    addr: reg.addr(),
                    key: reg.key(),
                    token,
                };
                self.leases.insert(
                    token,
                    Lease {
                        peer: to,
                        _reg: reg,
                    },
                );
                self.enqueue(to, Out::Large { seq, at });
            }
            Err(e) => self.suspect(to, format!("registering a frame of {len} bytes: {e}")),
        }
    }

    /// Queues a message to `to`.
    fn enqueue(&mut self, to: u32, out: Out) {
        let p = &mut self.peers[to as usize];
        p.outq.push_back(out);
        if !p.queued {
            p.queued = true;
            self.ready.push_back(to);
        }
    }

    /// Posts one message; the slot and context stay taken until its
    /// completion.
    fn post_send(&mut self, to: u32, out: &Out) -> Result<Posted, FabricError> {
        let Some(slot) = self.tx_free.last().copied() else {
            return Ok(Posted::Again);
        };
        self.scratch.clear();
        out.msg().encode(&mut self.scratch);
        let len = self.scratch.len();
        self.tx.slot_mut(slot)[..len].copy_from_slice(&self.scratch);
        let mut ctx = self.ctx_pool.pop().unwrap_or_else(new_ctx);
        let cptr: *mut Ctx = &mut *ctx;
        let ptr = self.tx.ptr(slot);
        let desc = self.tx.desc();
        let dest = self.addrs[to as usize];
        let r = match self.ep() {
            // SAFETY: the slot is taken from the free list until this
            // send's completion; the context is kept in the op table
            // until then; both outlive the endpoint (see exit).
            Ok(ep) => unsafe {
                ep.tsend(
                    ptr,
                    len,
                    desc,
                    dest,
                    wire::tag_of(self.sh.rank),
                    cptr.cast(),
                )
            },
            Err(e) => Err(e),
        };
        if let Ok(Posted::Yes) = r {
            self.tx_free.pop();
            self.tx_busy += 1;
            self.ops.insert(
                cptr as usize,
                Op {
                    ctx,
                    kind: OpKind::Send { slot, to },
                },
            );
        } else {
            self.ctx_pool.push(ctx);
        }
        r
    }

    /// Posts queued sends (round robin over peers with credits) and reads
    /// while slots and the provider's queue allow; true if anything was
    /// posted.
    fn post_pending(&mut self) -> bool {
        let mut any = false;
        // Peers whose send was refused in a row: a provider may refuse one
        // peer for long (rxm while its connection to a stopped process is
        // being set up), and that peer must not hold up messages to the
        // others (a pong to the master stuck behind it would get this rank
        // declared failed). The pass ends when every waiting peer refused.
        let mut refused = 0;
        while self.tx_busy < self.tx_limit && !self.tx_free.is_empty() {
            let Some(to) = self.ready.pop_front() else {
                break;
            };
            let up = self.sh.is_up(to);
            let p = &mut self.peers[to as usize];
            if !up {
                p.outq.clear();
            }
            let Some(front) = p.outq.front() else {
                p.queued = false;
                continue;
            };
            let free = matches!(front, Out::Credit { .. });
            if !free && p.credits == 0 {
                // Back in the ready list when credits arrive.
                p.queued = false;
                continue;
            }
            let Some(out) = p.outq.pop_front() else {
                continue;
            };
            match self.post_send(to, &out) {
                Ok(Posted::Yes) => {
                    any = true;
                    refused = 0;
                    let p = &mut self.peers[to as usize];
                    if !free {
                        p.credits -= 1;
                    }
                    if p.outq.is_empty() {
                        p.queued = false;
                    } else {
                        self.ready.push_back(to);
                    }
                }
                Ok(Posted::Again) => {
                    self.peers[to as usize].outq.push_front(out);
                    self.ready.push_back(to);
                    refused += 1;
                    if refused >= self.ready.len() {
                        break;
                    }
                }
                Err(e) => {
                    self.suspect(to, format!("{e}"));
                    let p = &mut self.peers[to as usize];
                    if p.outq.is_empty() {
                        p.queued = false;
                    } else {
                        self.ready.push_back(to);
                    }
                }
            }
        }
        while self.tx_busy < self.tx_limit {
            let Some(&id) = self.readq.front() else {
                break;
            };
            match self.post_read(id) {
                Ok(true) => any = true,
                Ok(false) => {
                    self.readq.pop_front();
                }
                Err(()) => return any,
            }
        }
        any
    }

    /// Posts the next chunk of fetch `id`: Ok(true) if posted, Ok(false)
    /// if nothing is left to post, Err if the provider is busy.
    fn post_read(&mut self, id: u64) -> Result<bool, ()> {
        let chunk = self.tuning.read_chunk as u64;
        let Some(f) = self.fetches.get_mut(&id) else {
            return Ok(false);
        };
        if f.failed || f.issued >= f.at.len {
            return Ok(false);
        }
        let off = f.issued;
        let len = chunk.min(f.at.len - off) as usize;
        let peer = f.peer;
        // SAFETY: off < the buffer's length, which is at.len.
        let ptr = unsafe { f.buf.as_mut_ptr().add(off as usize) };
        let desc =
            f.mr.as_ref()
                .map_or(std::ptr::null_mut(), MemoryRegion::desc);
        let (addr, key) = (f.at.addr.wrapping_add(off), f.at.key);
        let mut ctx = self.ctx_pool.pop().unwrap_or_else(new_ctx);
        let cptr: *mut Ctx = &mut *ctx;
        let src = self.addrs[peer as usize];
        let r = match self.ep.as_ref() {
            // SAFETY: the destination lies in the fetch's buffer, which the
            // fetch table keeps until every posted chunk has completed
            // (failed fetches included) or the endpoint is closed; the
            // context is kept in the op table.
            Some(ep) => unsafe { ep.read(ptr, len, desc, src, addr, key, cptr.cast()) },
            None => Err(FabricError::local("fi_read", "endpoint closed")),
        };
        match r {
            Ok(Posted::Yes) => {
                f.issued += len as u64;
                f.outstanding += 1;
                self.tx_busy += 1;
                self.ops.insert(
                    cptr as usize,
                    Op {
                        ctx,
                        kind: OpKind::Read { fetch: id, len },
                    },
                );
                Ok(true)
            }
            Ok(Posted::Again) => {
                self.ctx_pool.push(ctx);
                Err(())
            }
            Err(e) => {
                self.ctx_pool.push(ctx);
                let reason = format!("{e}");
                self.fail_fetch(id, &reason);
                self.suspect(peer, reason);
                Ok(false)
            }
        }
    }

    fn complete(&mut self, c: Completion) {
        let Some(op) = self.ops.remove(&c.context) else {
            tracing::warn!(rank = self.sh.rank, "completion of an unknown operation");
            return;
        };
        match op.kind {
            OpKind::Recv { slot } => {
                self.received(slot, c.len, c.tag);
                if self.ep.is_some() {
                    if let Err(e) = self.post_recv(slot, op.ctx) {
                        tracing::error!(rank = self.sh.rank, error = %e, "reposting a receive");
                    }
                }
            }
            OpKind::Send { slot, .. } => {
                self.tx_busy -= 1;
                self.tx_free.push(slot);
                self.ctx_pool.push(op.ctx);
            }
            OpKind::Read { fetch, len } => {
                self.tx_busy -= 1;
                self.ctx_pool.push(op.ctx);
                self.read_done(fetch, len, None);
            }
        }
    }

    fn failed(&mut self, e: super::fi::CompletionError) {
        let Some(op) = self.ops.remove(&e.context) else {
            tracing::warn!(rank = self.sh.rank, error = %e.message, "failed unknown operation");
            return;
        };
        match op.kind {
            OpKind::Recv { slot } => {
                if e.code != bits::ECANCELED && self.stopping.is_none() {
                    tracing::warn!(rank = self.sh.rank, error = %e.message, "receive failed");
                }
                if self.ep.is_some() && e.code != bits::ECANCELED {
                    if let Err(e) = self.post_recv(slot, op.ctx) {
                        tracing::error!(rank = self.sh.rank, error = %e, "reposting a receive");
                    }
                }
            }
            OpKind::Send { slot, to } => {
                self.tx_busy -= 1;
                self.tx_free.push(slot);
                self.ctx_pool.push(op.ctx);
                self.suspect(to, format!("fi_tsend: {}", e.message));
            }
            OpKind::Read { fetch, len } => {
                self.tx_busy -= 1;
                self.ctx_pool.push(op.ctx);
                self.read_done(fetch, len, Some(format!("fi_read: {}", e.message)));
            }
        }
    }

    fn received(&mut self, slot: usize, len: usize, tag: u64) {
        let Some(from) = wire::rank_of(tag).filter(|&r| r < self.sh.size) else {
            tracing::warn!(
                rank = self.sh.rank,
                tag,
                "message with a foreign tag dropped"
            );
            return;
        };
        // After a failure nothing more from the peer; after a goodbye seen
        // on TCP first, its last frames may still be on their way.
        if self.sh.is_down(from) {
            return;
        }
        let len = len.min(wire::SLOT);
        let msg = match Msg::decode(&self.rx.slot(slot)[..len]) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(rank = self.sh.rank, from, error = %e, "bad fabric message dropped");
                return;
            }
        };
        if !matches!(msg, Msg::Credit { .. }) {
            let window = self.window;
            let p = &mut self.peers[from as usize];
            p.consumed += 1;
            if p.consumed >= window / 2 {
                let n = std::mem::take(&mut p.consumed);
                p.outq.push_front(Out::Credit { n });
                if !p.queued {
                    p.queued = true;
                    self.ready.push_back(from);
                }
            }
        }
        match msg {
            Msg::Control { seq, frame } => {
                let frame = Bytes::copy_from_slice(frame);
                self.arrived(from, seq, InItem::Frame(frame));
            }
            Msg::Large { seq, at } => {
                if self.arrived(from, seq, InItem::Fetching) {
                    self.start_fetch(from, at, Purpose::Frame { seq });
                }
            }
            Msg::Bye { seq } => {
                self.arrived(from, seq, InItem::Bye);
            }
            Msg::GetReq { req, key } => self.serve(from, req, key),
            Msg::GetOk { req, at } => match self.requests.remove(&req) {
                Some(r) if r.peer == from => {
                    self.start_fetch(from, at, Purpose::Get(Some(r.reply)));
                }
                other => {
                    if let Some(r) = other {
                        self.requests.insert(req, r);
                    }
                    tracing::warn!(rank = self.sh.rank, from, req, "answer to no request");
                    if at.token != 0 {
                        self.enqueue(from, Out::Release { token: at.token });
                    }
                }
            },
            Msg::GetErr { req, .. } => match self.requests.remove(&req) {
                Some(r) if r.peer == from => {
                    let _ = r.reply.send(Err(TransportError::NotExposed {
                        peer: from,
                        key: r.key,
                    }));
                }
                other => {
                    if let Some(r) = other {
                        self.requests.insert(req, r);
                    }
                    tracing::warn!(rank = self.sh.rank, from, req, "answer to no request");
                }
            },
            Msg::Release { token } => {
                if self.leases.get(&token).is_some_and(|l| l.peer == from) {
                    self.leases.remove(&token);
                }
            }
            Msg::Credit { n } => {
                let window = self.window;
                let p = &mut self.peers[from as usize];
                p.credits = p.credits.saturating_add(n).min(window);
                if !p.outq.is_empty() && !p.queued {
                    p.queued = true;
                    self.ready.push_back(from);
                }
            }
        }
    }

    /// Answers a get request: registers the buffer if needed and lends it.
    fn serve(&mut self, from: u32, req: u64, key: u64) {
        if !self.sh.is_up(from) {
            // It left: it will not read, and would never release a lease.
            return;
        }
        let found = {
            let mut table = self.sh.exposed();
            match table.get_mut(&BufferKey(key)) {
                None => None,
                Some(x) if x.data.is_empty() => Some(Ok(None)),
                Some(x) => Some(match &x.reg {
                    Some(r) => Ok(Some(r.clone())),
                    None => self.reg.expose(x.data.clone()).map(|r| {
                        x.reg = Some(r.clone());
                        Some(r)
                    }),
                }),
            }
        };
        let out = match found {
            None => Out::GetErr { req, key },
            Some(Ok(None)) => Out::GetOk {
                req,
                at: Remote {
                    len: 0,
                    addr: 0,
                    key: 0,
                    token: 0,
                },
            },
            Some(Ok(Some(reg))) => {
                let token = self.id();
                let at = Remote {
                    len: reg.len() as u64,
                    addr: reg.addr(),
                    key: reg.key(),
                    token,
                };
                self.leases.insert(
                    token,
                    Lease {
                        peer: from,
                        _reg: reg,
                    },
                );
                Out::GetOk { req, at }
            }
            Some(Err(e)) => {
                tracing::error!(rank = self.sh.rank, key, error = %e, "registering an exposed buffer");
                Out::GetErr { req, key }
            }
        };
        self.enqueue(from, out);
    }

    /// Records an ordered item from `from`; false if it is a duplicate or
    /// out of range (then dropped).
    fn arrived(&mut self, from: u32, seq: u64, item: InItem) -> bool {
        let p = &mut self.peers[from as usize];
        if seq < p.in_next || p.pending.contains_key(&seq) || p.pending.len() >= REORDER_MAX {
            tracing::warn!(
                rank = self.sh.rank,
                from,
                seq,
                "duplicate or runaway frame dropped"
            );
            return false;
        }
        p.pending.insert(seq, item);
        self.drain(from);
        true
    }

    /// Delivers the frames of `from` that are next in order.
    fn drain(&mut self, from: u32) {
        loop {
            let p = &mut self.peers[from as usize];
            let next = p.in_next;
            match p.pending.remove(&next) {
                Some(InItem::Frame(frame)) => {
                    p.in_next += 1;
                    self.sh.deliver(from, frame);
                }
                Some(InItem::Bye) => {
                    p.in_next += 1;
                    if self.sh.peer_gone(from) {
                        self.forget_peer(from, &format!("rank {from} shut down"), true);
                    }
                    return;
                }
                Some(InItem::Fetching) => {
                    p.pending.insert(next, InItem::Fetching);
                    return;
                }
                None => return,
            }
        }
    }

    fn start_fetch(&mut self, peer: u32, at: Remote, purpose: Purpose) {
        if at.len > self.tuning.max_get {
            let reason = format!(
                "rank {peer} offers {} bytes, more than the maximum of {}",
                at.len, self.tuning.max_get
            );
            if at.token != 0 {
                self.enqueue(peer, Out::Release { token: at.token });
            }
            if let Purpose::Get(Some(reply)) = purpose {
                let _ = reply.send(Err(TransportError::Protocol {
                    peer,
                    detail: reason,
                }));
            } else {
                self.suspect(peer, reason);
            }
            return;
        }
        let len = at.len as usize;
        let mut buf = match purpose {
            Purpose::Get(_) => {
                let mut b = taskfold_core::pool::take(len);
                b.resize(len, 0);
                FetchBuf::Aligned(b)
            }
            Purpose::Frame { .. } => FetchBuf::Plain(vec![0; len]),
        };
        let mr = if self.tuning.mr_local && len > 0 {
            // SAFETY: the region is stored in the fetch next to the buffer
            // and dropped before it (field order, and explicitly in
            // finish); the buffer is never resized while registered.
            match unsafe { self.reg.local(buf.as_mut_ptr(), len, bits::READ) } {
                Ok(mr) => Some(mr),
                Err(e) => {
                    if let Purpose::Get(Some(reply)) = purpose {
                        let _ = reply.send(Err(e.into()));
                    }
                    if at.token != 0 {
                        self.enqueue(peer, Out::Release { token: at.token });
                    }
                    return;
                }
            }
        } else {
            None
        };
        let id = self.id();
        self.fetches.insert(
            id,
            Fetch {
                mr,
                buf,
                peer,
                at,
                issued: 0,
                done: 0,
                outstanding: 0,
                purpose,
                failed: false,
                started: Instant::now(),
            },
        );
        if len == 0 {
            self.finish(id);
        } else {
            self.readq.push_back(id);
        }
    }

    fn read_done(&mut self, id: u64, len: usize, error: Option<String>) {
        let Some(f) = self.fetches.get_mut(&id) else {
            return;
        };
        f.outstanding -= 1;
        f.done += len as u64;
        let peer = f.peer;
        if let Some(reason) = error {
            self.fail_fetch(id, &reason);
            self.suspect(peer, reason);
            return;
        }
        let Some(f) = self.fetches.get(&id) else {
            return;
        };
        if f.failed {
            if f.outstanding == 0 {
                self.fetches.remove(&id);
            }
        } else if f.done >= f.at.len && f.outstanding == 0 {
            self.finish(id);
        }
    }

    /// A fetch completed: release the lease, hand over the bytes.
    fn finish(&mut self, id: u64) {
        let Some(f) = self.fetches.remove(&id) else {
            return;
        };
        let Fetch {
            mr,
            buf,
            peer,
            at,
            purpose,
            ..
        } = f;
        drop(mr);
        if at.token != 0 && self.sh.is_up(peer) {
            self.enqueue(peer, Out::Release { token: at.token });
        }
        match (purpose, buf) {
            (Purpose::Get(Some(reply)), FetchBuf::Aligned(b)) => {
                let _ = reply.send(Ok(b));
            }
            (Purpose::Frame { seq }, FetchBuf::Plain(v)) => {
                if let Some(slot) = self.peers[peer as usize].pending.get_mut(&seq) {
                    *slot = InItem::Frame(Bytes::from(v));
                }
                self.drain(peer);
            }
            _ => {}
        }
    }

    /// Fails a fetch now; its buffer stays until its posted chunks complete.
    fn fail_fetch(&mut self, id: u64, reason: &str) {
        let Some(f) = self.fetches.get_mut(&id) else {
            return;
        };
        if !f.failed {
            f.failed = true;
            if let Purpose::Get(reply) = &mut f.purpose {
                if let Some(reply) = reply.take() {
                    let _ = reply.send(Err(TransportError::LinkDown {
                        peer: f.peer,
                        reason: reason.to_string(),
                    }));
                }
            }
        }
        if f.outstanding == 0 {
            self.fetches.remove(&id);
        }
    }

    /// Operations to `peer` fail for no known reason: unless it turns out
    /// to have left (goodbye) or to be down (TCP), report it down after
    /// [`SUSPECT_GRACE`].
    fn suspect(&mut self, peer: u32, reason: String) {
        if self.sh.is_up(peer) && self.stopping.is_none() {
            tracing::debug!(rank = self.sh.rank, peer, %reason, "fabric operation failed");
            self.suspects
                .entry(peer)
                .or_insert_with(|| (Instant::now(), reason));
        }
    }

    /// The link to `peer` is gone: fail and drop everything that concerns
    /// it. If it left `graceful`ly, what it sent before leaving (frames
    /// waiting for an earlier one, reads in progress) is kept.
    fn forget_peer(&mut self, peer: u32, reason: &str, graceful: bool) {
        self.suspects.remove(&peer);
        let err = || TransportError::LinkDown {
            peer,
            reason: reason.to_string(),
        };
        let reqs: Vec<u64> = self
            .requests
            .iter()
            .filter(|(_, r)| r.peer == peer)
            .map(|(&id, _)| id)
            .collect();
        for id in reqs {
            if let Some(r) = self.requests.remove(&id) {
                let _ = r.reply.send(Err(err()));
            }
        }
        self.peers[peer as usize].outq.clear();
        self.leases.retain(|_, l| l.peer != peer);
        if graceful {
            return;
        }
        let fetches: Vec<u64> = self
            .fetches
            .iter()
            .filter(|(_, f)| f.peer == peer)
            .map(|(&id, _)| id)
            .collect();
        for id in fetches {
            self.fail_fetch(id, reason);
        }
        self.peers[peer as usize].pending.clear();
    }

    fn tick(&mut self, now: Instant) {
        if tracing::enabled!(tracing::Level::TRACE) {
            let pending: Vec<(u64, usize)> = self
                .peers
                .iter()
                .map(|p| (p.in_next, p.pending.len()))
                .collect();
            tracing::trace!(
                rank = self.sh.rank,
                ready = self.ready.len(),
                readq = self.readq.len(),
                tx_busy = self.tx_busy,
                ops = self.ops.len(),
                requests = self.requests.len(),
                fetches = self.fetches.len(),
                leases = self.leases.len(),
                ?pending,
                "engine state"
            );
        }
        let timeout = self.tuning.op_timeout;
        let late: Vec<(u64, u32)> = self
            .requests
            .iter()
            .filter(|(_, r)| now - r.started > timeout)
            .map(|(&id, r)| (id, r.peer))
            .collect();
        for (id, peer) in late {
            let reason = format!("no answer to a get within {timeout:?}");
            if let Some(r) = self.requests.remove(&id) {
                let _ = r.reply.send(Err(TransportError::LinkDown {
                    peer,
                    reason: reason.clone(),
                }));
            }
            self.suspect(peer, reason);
        }
        let late: Vec<(u64, u32)> = self
            .fetches
            .iter()
            .filter(|(_, f)| !f.failed && now - f.started > timeout)
            .map(|(&id, f)| (id, f.peer))
            .collect();
        for (id, peer) in late {
            let reason = format!("RMA read not complete within {timeout:?}");
            self.fail_fetch(id, &reason);
            self.suspect(peer, reason);
        }
        let due: Vec<(u32, String)> = self
            .suspects
            .iter()
            .filter(|(_, (since, _))| now - *since >= SUSPECT_GRACE)
            .map(|(&p, (_, r))| (p, r.clone()))
            .collect();
        for (peer, reason) in due {
            self.suspects.remove(&peer);
            if !self.sh.is_up(peer) {
                continue;
            }
            if (self.peer_left)(peer) {
                if self.sh.peer_gone(peer) {
                    self.forget_peer(peer, &format!("rank {peer} shut down"), true);
                }
            } else {
                let reason = format!("fabric operations to rank {peer} fail: {reason}");
                if self.sh.link_down(peer, &reason) {
                    self.forget_peer(peer, &reason, false);
                }
            }
        }
    }
}
