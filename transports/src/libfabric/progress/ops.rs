//! Operations: what is posted to the endpoint and how its completions come
//! back. Every posted operation's context is a boxed `fi_context2` kept in
//! the operation table, and every buffer it uses (receive and send slabs,
//! the destination of a read) stays in the engine until the operation's
//! completion is read or the endpoint is closed.

use super::super::fi::{
    bits, Completion, CompletionError, CompletionQueue, CqRead, Endpoint, FabricError,
    MemoryRegion, Posted, RawContext,
};
use super::super::seal::Seals;
use super::super::shared::Registrar;
use super::super::wire;
use super::flow::Out;
use super::Engine;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

/// Receive buffers posted at once (at most the provider's rx queue).
const RX_SLOTS: usize = 64;
/// Send buffers (at most the provider's tx queue).
const TX_SLOTS: usize = 128;

/// An operation context; the provider may use the `fi_context2` as scratch.
#[repr(C)]
pub(super) struct Ctx {
    raw: RawContext,
}

// SAFETY: the context is scratch memory the provider uses while the
// operation is posted; the endpoint is thread-safe (FI_THREAD_SAFE), and the
// engine owning the context moves to its progress thread as a whole.
unsafe impl Send for Ctx {}

pub(super) fn new_ctx() -> Box<Ctx> {
    Box::new(Ctx {
        raw: RawContext::default(),
    })
}

/// What a posted operation is.
pub(super) enum OpKind {
    Recv { slot: usize },
    Send { slot: usize, to: u32 },
    Read { fetch: u64, len: usize },
}

/// A posted operation: its context, kept until its completion.
pub(super) struct Op {
    pub ctx: Box<Ctx>,
    pub kind: OpKind,
}

/// Fixed-size buffers in one allocation, registered if the provider needs
/// local registration. The region is dropped before the memory.
pub(super) struct Slab {
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

    pub fn slot(&self, slot: usize) -> &[u8] {
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

/// The endpoint, its completion queue, the operations posted on it and
/// the buffers they use.
pub(super) struct Ops {
    /// Closed first on exit (`Option::take`), before the buffers below.
    pub ep: Option<Endpoint>,
    pub cq: Arc<CompletionQueue>,
    pub table: HashMap<usize, Op>,
    /// Contexts not in use (boxed: their addresses must not move).
    #[allow(clippy::vec_box)]
    pub ctx_pool: Vec<Box<Ctx>>,
    pub rx: Slab,
    tx: Slab,
    tx_free: Vec<usize>,
    /// Sends and reads posted and not completed.
    pub tx_busy: usize,
    /// At most this many sends and reads posted at once.
    pub tx_limit: usize,
    scratch: Vec<u8>,
}

impl Ops {
    /// The buffers for `ep`, sized for the provider's queues.
    pub fn new(
        ep: Endpoint,
        reg: &Registrar,
        rx_size: usize,
        tx_size: usize,
        mr_local: bool,
    ) -> Result<Ops, FabricError> {
        let rx_slots = RX_SLOTS.min(rx_size.max(4));
        let tx_slots = TX_SLOTS.min(tx_size.max(4));
        Ok(Ops {
            cq: ep.cq().clone(),
            ep: Some(ep),
            table: HashMap::new(),
            ctx_pool: Vec::new(),
            rx: Slab::new(reg, rx_slots, bits::RECV, mr_local)?,
            tx: Slab::new(reg, tx_slots, bits::SEND, mr_local)?,
            tx_free: (0..tx_slots).rev().collect(),
            tx_busy: 0,
            tx_limit: tx_size.clamp(8, 256),
            scratch: Vec::with_capacity(wire::SLOT),
        })
    }

    /// Receive slots.
    pub fn rx_slots(&self) -> usize {
        self.rx.buf.len() / wire::SLOT
    }

    /// True if another send or read may be posted now.
    pub fn room(&self) -> bool {
        self.tx_busy < self.tx_limit && !self.tx_free.is_empty()
    }

    /// The endpoint, unless closed.
    pub fn ep(&self) -> Result<&Endpoint, FabricError> {
        self.ep
            .as_ref()
            .ok_or_else(|| FabricError::local("endpoint", "closed"))
    }

    /// Keeps `ctx` in the table until the completion of the operation it
    /// was posted with.
    pub fn posted(&mut self, ctx: Box<Ctx>, kind: OpKind) {
        let cptr: *const Ctx = &*ctx;
        self.table.insert(cptr as usize, Op { ctx, kind });
    }

    /// Posts one message to `dest` from `rank` (tagged with it), sealed
    /// for `to` if `seals` (then `change`d after sealing, if a test plays
    /// the path); the slot and context stay taken until its completion.
    pub fn post_send(
        &mut self,
        (rank, to): (u32, u32),
        dest: super::super::fi::FiAddr,
        out: &Out,
        seals: Option<&mut Seals>,
        change: bool,
    ) -> Result<Posted, FabricError> {
        if self.tx_free.is_empty() {
            return Ok(Posted::Again);
        }
        self.scratch.clear();
        out.msg().encode(&mut self.scratch);
        // The message's last byte (a control frame's last byte), which a
        // test may change after it is sealed.
        let last = self.scratch.len() - 1;
        if let Some(s) = seals {
            if !s.seal(to, &mut self.scratch, &out.digest()) {
                return Err(FabricError::local(
                    "seal",
                    format!("no message key for rank {to}"),
                ));
            }
        }
        if change {
            self.scratch[last] ^= 0x20;
        }
        self.post_scratch(rank, to, dest)
    }

    /// Posts the message last encoded (again: a test's replay on the
    /// path, [`Ops::post_send`]).
    pub fn post_scratch(
        &mut self,
        rank: u32,
        to: u32,
        dest: super::super::fi::FiAddr,
    ) -> Result<Posted, FabricError> {
        let Some(slot) = self.tx_free.last().copied() else {
            return Ok(Posted::Again);
        };
        let len = self.scratch.len();
        self.tx.slot_mut(slot)[..len].copy_from_slice(&self.scratch);
        let mut ctx = self.ctx_pool.pop().unwrap_or_else(new_ctx);
        let cptr: *mut Ctx = &mut *ctx;
        let ptr = self.tx.ptr(slot);
        let desc = self.tx.desc();
        let r = match self.ep() {
            // SAFETY: the slot is taken from the free list until this
            // send's completion; the context is kept in the op table
            // until then; both outlive the endpoint (see `Engine::exit`).
            Ok(ep) => unsafe { ep.tsend(ptr, len, desc, dest, wire::tag_of(rank), cptr.cast()) },
            Err(e) => Err(e),
        };
        if let Ok(Posted::Yes) = r {
            self.tx_free.pop();
            self.tx_busy += 1;
            self.posted(ctx, OpKind::Send { slot, to });
        } else {
            self.ctx_pool.push(ctx);
        }
        r
    }

    /// A send completed (or failed): its slot and context are free again.
    pub fn send_done(&mut self, slot: usize, ctx: Box<Ctx>) {
        self.tx_busy -= 1;
        self.tx_free.push(slot);
        self.ctx_pool.push(ctx);
    }
}

impl Engine {
    /// Posts the receive of `slot`, driving progress while the receive
    /// queue is full.
    pub(super) fn post_recv(&mut self, slot: usize, mut ctx: Box<Ctx>) -> Result<(), FabricError> {
        let ptr = self.ops.rx.ptr(slot);
        let desc = self.ops.rx.desc();
        let cptr: *mut Ctx = &mut *ctx;
        loop {
            // SAFETY: the slot lies in the receive slab and the context is
            // boxed; both stay in the engine until this receive's
            // completion is read (the op table holds the context) or the
            // endpoint is closed (before the slab is freed).
            let r = unsafe {
                self.ops.ep()?.trecv(
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
                    let mut c = [EMPTY; 1];
                    if let CqRead::Entries(1) = self.ops.cq.read(&mut c)? {
                        self.complete(c[0]);
                    }
                }
            }
        }
        self.ops.posted(ctx, OpKind::Recv { slot });
        Ok(())
    }

    /// An operation completed.
    pub(super) fn complete(&mut self, c: Completion) {
        let Some(op) = self.ops.table.remove(&c.context) else {
            tracing::warn!(rank = self.sh.rank, "completion of an unknown operation");
            return;
        };
        match op.kind {
            OpKind::Recv { slot } => {
                self.received(slot, c.len, c.tag, c.src);
                if self.ops.ep.is_some() {
                    if let Err(e) = self.post_recv(slot, op.ctx) {
                        tracing::error!(rank = self.sh.rank, error = %e, "reposting a receive");
                    }
                }
            }
            OpKind::Send { slot, .. } => self.ops.send_done(slot, op.ctx),
            OpKind::Read { fetch, len } => {
                self.ops.tx_busy -= 1;
                self.ops.ctx_pool.push(op.ctx);
                self.read_done(fetch, len, None);
            }
        }
    }

    /// An operation failed.
    pub(super) fn failed(&mut self, e: CompletionError) {
        let Some(op) = self.ops.table.remove(&e.context) else {
            tracing::warn!(rank = self.sh.rank, error = %e.message, "failed unknown operation");
            return;
        };
        match op.kind {
            OpKind::Recv { slot } => {
                if e.code != bits::ECANCELED && self.stopping.is_none() {
                    tracing::warn!(rank = self.sh.rank, error = %e.message, "receive failed");
                }
                if self.ops.ep.is_some() && e.code != bits::ECANCELED {
                    if let Err(e) = self.post_recv(slot, op.ctx) {
                        tracing::error!(rank = self.sh.rank, error = %e, "reposting a receive");
                    }
                }
            }
            OpKind::Send { slot, to } => {
                self.ops.send_done(slot, op.ctx);
                self.suspect(to, format!("fi_tsend: {}", e.message));
            }
            OpKind::Read { fetch, len } => {
                self.ops.tx_busy -= 1;
                self.ops.ctx_pool.push(op.ctx);
                self.read_done(fetch, len, Some(format!("fi_read: {}", e.message)));
            }
        }
    }

    /// Reads up to eight batches of completions; true if any came.
    pub(super) fn poll_completions(&mut self, comps: &mut [Completion]) -> bool {
        let mut busy = false;
        for _ in 0..8 {
            match self.ops.cq.read(comps) {
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
        busy
    }
}

/// A blank completion entry, to read into.
pub(super) const EMPTY: Completion = Completion {
    context: 0,
    flags: 0,
    len: 0,
    tag: 0,
    src: libfabric_sys::FI_ADDR_NOTAVAIL,
};
