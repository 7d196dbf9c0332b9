//! State shared by the application's threads (the [`crate::Transport`]
//! calls), the progress thread and the thread forwarding the TCP
//! transport's events: link states, the exposed buffers, the command queue.
//!
//! Link transitions and message delivery happen under one lock, which is
//! what makes a peer's `LinkDown` unique and keeps every message delivered
//! from that peer before it.

use super::fi::{CompletionQueue, Domain, FabricError, MemoryRegion};
use super::progress::Cmd;
use crate::link::Link;
use crate::same_node::SameNode;
use crate::{Event, Exposed, Rank, TransportError};
use bytes::Bytes;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Bytes registered for remote reads. Dropping it deregisters the memory
/// first, then releases the bytes (field order).
pub(crate) struct Registered {
    mr: MemoryRegion,
    data: Bytes,
    addr: u64,
    /// The bytes' digest, once a sealed descriptor needed it (the bytes
    /// never change while registered).
    digest: std::sync::OnceLock<super::seal::Digest>,
}

impl Registered {
    /// The RMA address peers read at.
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// The remote key.
    pub fn key(&self) -> u64 {
        self.mr.key()
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.data.len()
    }
    /// The bytes' digest ([`super::seal::digest`]), computed once.
    pub fn digest(&self) -> super::seal::Digest {
        *self.digest.get_or_init(|| super::seal::digest(&self.data))
    }
}

/// Registers memory the way the provider wants it.
pub(crate) struct Registrar {
    domain: Arc<Domain>,
    /// `FI_MR_VIRT_ADDR`: RMA addresses are virtual addresses, else offsets.
    virt_addr: bool,
    /// `FI_MR_PROV_KEY`: the provider picks keys, else we do.
    prov_key: bool,
}

/// Attempts at a fresh random key before a registration fails (a taken
/// key, `FI_ENOKEY`, is a 64-bit collision: a second attempt is already
/// a near certainty).
const KEY_TRIES: usize = 4;

impl Registrar {
    pub fn new(domain: Arc<Domain>, virt_addr: bool, prov_key: bool) -> Registrar {
        Registrar {
            domain,
            virt_addr,
            prov_key,
        }
    }

    /// The key to ask for: ignored where the provider picks it; otherwise
    /// 64 random bits, so that an endpoint outside the job cannot guess
    /// the key of an exposed buffer (a counter's keys 1, 2, 3... at offset
    /// 0 were readable by anyone who reached the endpoint).
    fn key(&self) -> Result<u64, FabricError> {
        if self.prov_key {
            return Ok(0);
        }
        let mut k = [0u8; 8];
        getrandom::fill(&mut k)
            .map_err(|e| FabricError::local("fi_mr_reg", format!("no random key: {e}")))?;
        Ok(u64::from_le_bytes(k))
    }

    /// Registers `len` bytes at `buf` for `access` under a fresh key,
    /// drawing another if the provider says the key is taken.
    ///
    /// # Safety
    /// As [`MemoryRegion::register`].
    unsafe fn register(
        &self,
        buf: *const u8,
        len: usize,
        access: u64,
    ) -> Result<MemoryRegion, FabricError> {
        let mut tries = 0;
        loop {
            // SAFETY: forwarded to the caller.
            let r = unsafe { MemoryRegion::register(&self.domain, buf, len, access, self.key()?) };
            match r {
                Err(e) if e.code == super::fi::bits::ENOKEY && tries + 1 < KEY_TRIES => tries += 1,
                r => return r,
            }
        }
    }

    /// Registers `data` (not empty) for remote reads.
    pub fn expose(&self, data: Bytes) -> Result<Arc<Registered>, FabricError> {
        // SAFETY: the region is stored next to the bytes it covers, in a
        // Registered that drops the region before the bytes; the bytes are
        // immutable and their heap block never moves.
        let mr = unsafe { self.register(data.as_ptr(), data.len(), super::fi::bits::REMOTE_READ) }?;
        let addr = if self.virt_addr {
            data.as_ptr() as u64
        } else {
            0
        };
        Ok(Arc::new(Registered {
            mr,
            data,
            addr,
            digest: std::sync::OnceLock::new(),
        }))
    }

    /// Registers local memory for `access` (`FI_SEND`, `FI_RECV`,
    /// `FI_READ`).
    ///
    /// # Safety
    /// As [`MemoryRegion::register`]: the memory must outlive the region.
    pub unsafe fn local(
        &self,
        buf: *const u8,
        len: usize,
        access: u64,
    ) -> Result<MemoryRegion, FabricError> {
        // SAFETY: forwarded to the caller.
        unsafe { self.register(buf, len.max(1), access) }
    }
}

/// See the [module documentation](self).
pub(crate) struct Shared {
    pub rank: u32,
    pub size: u32,
    pub events_tx: flume::Sender<Event>,
    pub events_rx: flume::Receiver<Event>,
    /// Bytes of the frames delivered that the runtime still holds.
    pub event_bytes: crate::link::EventBytes,
    links: Mutex<Vec<Link>>,
    closed: AtomicBool,
    /// The exposed buffers, each with its registration once a peer asked
    /// for it (registered lazily, on the first request).
    pub exposed: Exposed<Arc<Registered>>,
    /// Same-node reads in place, which need no fabric: told of every link
    /// that stops being up.
    pub same: SameNode,
    pub cmd_tx: flume::Sender<Cmd>,
    /// Signalled after each command when the progress thread sleeps in
    /// `fi_cq_sread`.
    pub cq: Arc<CompletionQueue>,
    /// Per peer: the incarnation served, and what this rank still awaits
    /// of a replacement it let in (its name, its readiness).
    replaced: Mutex<Vec<Replaced>>,
}

/// What a rank knows of a peer's process (see [`Shared::let_in`]).
#[derive(Clone, Copy, Default)]
struct Replaced {
    incarnation: u32,
    awaits_name: bool,
    awaits_ready: bool,
}

impl Shared {
    pub fn new(
        rank: u32,
        size: u32,
        same_node: bool,
        cmd_tx: flume::Sender<Cmd>,
        cq: Arc<CompletionQueue>,
    ) -> Shared {
        let (events_tx, events_rx) = flume::unbounded();
        Shared {
            rank,
            size,
            events_tx,
            events_rx,
            event_bytes: Default::default(),
            links: Mutex::new(vec![Link::Up; size as usize]),
            closed: AtomicBool::new(false),
            exposed: Exposed::default(),
            same: SameNode::new(rank, size, "libfabric", same_node),
            cmd_tx,
            cq,
            replaced: Mutex::new(vec![Replaced::default(); size as usize]),
        }
    }

    /// Records `peer`'s replacement `incarnation`: its name and readiness
    /// are awaited (the progress thread brings the link up again, once it
    /// dropped what the older process left: [`Shared::up_again`]). False
    /// (nothing done) if the incarnation is not newer than the one served.
    pub fn let_in(&self, peer: u32, incarnation: u32) -> bool {
        let mut r = self.replaced.lock().unwrap_or_else(|e| e.into_inner());
        let Some(p) = r.get_mut(peer as usize) else {
            return false;
        };
        if incarnation <= p.incarnation {
            return false;
        }
        *p = Replaced {
            incarnation,
            awaits_name: true,
            awaits_ready: true,
        };
        true
    }

    /// The link to `peer`'s replacement is up.
    pub fn up_again(&self, peer: u32) {
        if let Some(l) = self.links().get_mut(peer as usize) {
            *l = Link::Up;
        }
        self.same.readmit(peer);
    }

    /// Takes what is awaited of `peer`'s replacement: its name (`name`)
    /// or its readiness (after its name). True if it was awaited.
    pub fn take_awaited(&self, peer: u32, name: bool) -> bool {
        let mut r = self.replaced.lock().unwrap_or_else(|e| e.into_inner());
        let Some(p) = r.get_mut(peer as usize) else {
            return false;
        };
        let flag = if name {
            &mut p.awaits_name
        } else if p.awaits_name {
            return false;
        } else {
            &mut p.awaits_ready
        };
        std::mem::replace(flag, false)
    }

    pub fn links(&self) -> MutexGuard<'_, Vec<Link>> {
        self.links.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Marks the transport closed; true if it was open.
    pub fn close(&self) -> bool {
        self.same.close();
        !self.closed.swap(true, Ordering::SeqCst)
    }

    pub fn is_down(&self, peer: u32) -> bool {
        matches!(self.links().get(peer as usize), Some(Link::Down(_)))
    }

    pub fn is_up(&self, peer: u32) -> bool {
        self.links().get(peer as usize) == Some(&Link::Up)
    }

    /// The error a call to `peer` fails with now, if any.
    pub fn check_peer(&self, peer: Rank) -> Result<(), TransportError> {
        crate::link::check_peer(self.is_closed(), self.size, peer)?;
        match self.links()[peer.0 as usize].error(peer.0) {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    /// Queues a command for the progress thread and wakes it.
    pub fn command(&self, cmd: Cmd) -> Result<(), TransportError> {
        self.cmd_tx.send(cmd).map_err(|_| TransportError::Closed)?;
        if let Err(e) = self.cq.signal() {
            tracing::debug!(error = %e, "waking the progress thread");
        }
        Ok(())
    }

    /// Delivers a frame from `peer` unless its link is down or we closed.
    pub fn deliver(&self, peer: u32, frame: Bytes) {
        let links = self.links();
        if !matches!(links.get(peer as usize), Some(Link::Down(_))) && !self.is_closed() {
            let _ = self.events_tx.send(Event::Message {
                from: Rank(peer),
                frame: self.event_bytes.track(frame),
            });
        }
    }

    /// The link to `peer` failed: the first call reports `LinkDown` (unless
    /// we closed) and returns true; later calls, or calls after the peer
    /// left gracefully, do nothing.
    pub fn link_down(&self, peer: u32, reason: &str) -> bool {
        let mut links = self.links();
        let Some(l) = links.get_mut(peer as usize) else {
            return false;
        };
        if *l != Link::Up {
            return false;
        }
        *l = Link::Down(reason.to_string());
        self.same.link_down(peer);
        if !self.is_closed() {
            tracing::warn!(rank = self.rank, peer, %reason, "link down");
            let _ = self.events_tx.send(Event::LinkDown {
                peer: Rank(peer),
                reason: reason.to_string(),
            });
        }
        true
    }

    /// `peer` left gracefully; true if its link was up.
    pub fn peer_gone(&self, peer: u32) -> bool {
        let mut links = self.links();
        match links.get_mut(peer as usize) {
            Some(l) if *l == Link::Up => {
                *l = Link::Gone;
                self.same.link_failing(peer);
                tracing::debug!(rank = self.rank, peer, "peer left gracefully");
                true
            }
            _ => false,
        }
    }
}
