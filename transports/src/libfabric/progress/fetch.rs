//! Fetching: this rank's gets (a request to the owner, then RMA reads of
//! what it lends, in chunks) and the reads of peers' large control frames.

use super::super::fi::{bits, FabricError, MemoryRegion, Posted};
use super::super::seal::{Digest, Tamper, BULK_MISMATCH};
use super::super::wire::Remote;
use super::flow::{InItem, Out};
use super::ops::{new_ctx, Ctx, OpKind};
use super::{Engine, Reply};
use crate::{BufferKey, RecvBuf, TransportError};
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::time::Instant;

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

    fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            FetchBuf::Aligned(b) => &mut b[..],
            FetchBuf::Plain(v) => &mut v[..],
        }
    }
}

/// What a fetch is for.
pub(super) enum Purpose {
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
    /// The digest the bytes must have (sealed descriptors only).
    digest: Option<Digest>,
}

/// A get waiting for the owner's answer.
struct Request {
    peer: u32,
    key: u64,
    /// The most bytes the caller accepts.
    max: u64,
    reply: Reply,
    started: Instant,
}

/// This rank's gets and reads in progress.
#[derive(Default)]
pub(super) struct Fetching {
    requests: HashMap<u64, Request>,
    fetches: HashMap<u64, Fetch>,
    /// Fetches with chunks left to post, in order.
    readq: VecDeque<u64>,
}

impl Fetching {
    /// Gets waiting for an answer.
    pub fn waiting(&self) -> bool {
        !self.requests.is_empty()
    }

    /// Counts for the engine's state log: requests, fetches, queued reads.
    pub fn describe(&self) -> (usize, usize, usize) {
        (self.requests.len(), self.fetches.len(), self.readq.len())
    }

    /// Fails every get with `Closed` (on shutdown).
    pub fn close(&mut self) {
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
    }

    /// Fails the gets waiting for `peer`'s answer with `err`.
    pub fn fail_requests(&mut self, peer: u32, err: impl Fn() -> TransportError) {
        let ids: Vec<u64> = self
            .requests
            .iter()
            .filter(|(_, r)| r.peer == peer)
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            if let Some(r) = self.requests.remove(&id) {
                let _ = r.reply.send(Err(err()));
            }
        }
    }
}

impl Engine {
    /// Asks `from` where its buffer `key` is.
    /// A longer answer than `max` bytes (or the transport's maximum) is
    /// refused before anything is allocated.
    pub(super) fn request(&mut self, from: u32, key: BufferKey, max: Option<u64>, reply: Reply) {
        if let Err(e) = self.sh.check_peer(crate::Rank(from)) {
            let _ = reply.send(Err(e));
            return;
        }
        let req = self.id();
        self.fetching.requests.insert(
            req,
            Request {
                peer: from,
                key: key.0,
                max: max.map_or(self.tuning.max_get, |m| m.min(self.tuning.max_get)),
                reply,
                started: Instant::now(),
            },
        );
        self.flow.enqueue(from, Out::GetReq { req, key: key.0 });
    }

    /// The owner answered request `req`: read there (`Some`), or nothing is
    /// exposed (`None`).
    pub(super) fn answered(&mut self, from: u32, req: u64, at: Option<(Remote, Option<Digest>)>) {
        let r = match self.fetching.requests.remove(&req) {
            Some(r) if r.peer == from => r,
            other => {
                if let Some(r) = other {
                    self.fetching.requests.insert(req, r);
                }
                tracing::warn!(rank = self.sh.rank, from, req, "answer to no request");
                if let Some((at, _)) = at.filter(|a| a.0.token != 0) {
                    self.flow.enqueue(from, Out::Release { token: at.token });
                }
                return;
            }
        };
        match at {
            Some((at, _)) if at.len > r.max => {
                crate::libfabric::bound_hit("get_total");
                self.release(from, &at);
                let _ = r.reply.send(Err(TransportError::Protocol {
                    peer: from,
                    detail: format!(
                        "rank {from} offers {} bytes, more than the {} this get accepts",
                        at.len, r.max
                    ),
                }));
            }
            Some((at, digest)) => self.start_fetch(from, at, Purpose::Get(Some(r.reply)), digest),
            None => {
                let _ = r.reply.send(Err(TransportError::NotExposed {
                    peer: from,
                    key: r.key,
                }));
            }
        }
    }

    /// A large control frame `seq` from `from`, to read at `at`.
    pub(super) fn large_frame(&mut self, from: u32, seq: u64, at: Remote, digest: Option<Digest>) {
        if self.arrived(from, seq, InItem::Fetching) {
            self.start_fetch(from, at, Purpose::Frame { seq }, digest);
        }
    }

    /// Gives back a lease we will not read.
    fn release(&mut self, peer: u32, at: &Remote) {
        if at.token != 0 {
            self.flow.enqueue(peer, Out::Release { token: at.token });
        }
    }

    fn start_fetch(&mut self, peer: u32, at: Remote, purpose: Purpose, digest: Option<Digest>) {
        // A control frame is bounded by the largest frame, a get by the
        // largest get: checked before the buffer is allocated.
        let max = match purpose {
            Purpose::Frame { .. } => self.tuning.max_frame,
            Purpose::Get(_) => self.tuning.max_get,
        };
        if at.len > max {
            let reason = format!(
                "rank {peer} offers {} bytes, more than the maximum of {max}",
                at.len
            );
            self.release(peer, &at);
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
            match unsafe { self.serving.reg.local(buf.as_mut_ptr(), len, bits::READ) } {
                Ok(mr) => Some(mr),
                Err(e) => {
                    if let Purpose::Get(Some(reply)) = purpose {
                        let _ = reply.send(Err(e.into()));
                    }
                    self.release(peer, &at);
                    return;
                }
            }
        } else {
            None
        };
        let id = self.id();
        let fetch = Fetch {
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
            digest,
        };
        self.fetching.fetches.insert(id, fetch);
        if len == 0 {
            self.finish(id);
        } else {
            self.fetching.readq.push_back(id);
        }
    }

    /// Posts the queued reads while the provider's queue allows; true if
    /// any was posted.
    pub(super) fn post_reads(&mut self) -> bool {
        let mut any = false;
        while self.ops.tx_busy < self.ops.tx_limit {
            let Some(&id) = self.fetching.readq.front() else {
                break;
            };
            match self.post_read(id) {
                Ok(true) => any = true,
                Ok(false) => {
                    self.fetching.readq.pop_front();
                }
                Err(()) => break,
            }
        }
        any
    }

    /// Posts the next chunk of fetch `id`: Ok(true) if posted, Ok(false)
    /// if nothing is left to post, Err if the provider is busy.
    fn post_read(&mut self, id: u64) -> Result<bool, ()> {
        let chunk = self.tuning.read_chunk as u64;
        let Some(f) = self.fetching.fetches.get_mut(&id) else {
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
        let mut ctx = self.ops.ctx_pool.pop().unwrap_or_else(new_ctx);
        let cptr: *mut Ctx = &mut *ctx;
        let src = self.addrs[peer as usize];
        let r = match self.ops.ep.as_ref() {
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
                self.ops.tx_busy += 1;
                self.ops.posted(ctx, OpKind::Read { fetch: id, len });
                Ok(true)
            }
            Ok(Posted::Again) => {
                self.ops.ctx_pool.push(ctx);
                Err(())
            }
            Err(e) => {
                self.ops.ctx_pool.push(ctx);
                let reason = format!("{e}");
                self.fail_fetch(id, &reason);
                self.suspect(peer, reason);
                Ok(false)
            }
        }
    }

    /// A chunk of fetch `id` completed (or failed with `error`).
    pub(super) fn read_done(&mut self, id: u64, len: usize, error: Option<String>) {
        let Some(f) = self.fetching.fetches.get_mut(&id) else {
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
        if f.failed {
            if f.outstanding == 0 {
                self.fetching.fetches.remove(&id);
            }
        } else if f.done >= f.at.len && f.outstanding == 0 {
            self.finish(id);
        }
    }

    /// A fetch completed: release the lease, hand over the bytes.
    fn finish(&mut self, id: u64) {
        let Some(f) = self.fetching.fetches.remove(&id) else {
            return;
        };
        let Fetch {
            mr,
            mut buf,
            peer,
            at,
            purpose,
            digest,
            ..
        } = f;
        drop(mr);
        if self.sh.is_up(peer) {
            self.release(peer, &at);
        }
        if let Some(want) = digest {
            if !self.bulk_intact(peer, &mut buf, &want) {
                return self.bulk_refused(peer, purpose);
            }
        }
        match (purpose, buf) {
            (Purpose::Get(Some(reply)), FetchBuf::Aligned(b)) => {
                let _ = reply.send(Ok(b));
            }
            (Purpose::Frame { seq }, FetchBuf::Plain(v)) => {
                if let Some(slot) = self.flow.peers[peer as usize].pending.get_mut(&seq) {
                    *slot = InItem::Frame(Bytes::from(v));
                }
                self.drain(peer);
            }
            _ => {}
        }
    }

    /// Fails a fetch now; its buffer stays until its posted chunks complete.
    fn fail_fetch(&mut self, id: u64, reason: &str) {
        let Some(f) = self.fetching.fetches.get_mut(&id) else {
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
            self.fetching.fetches.remove(&id);
        }
    }

    /// Fails the fetches from `peer`, whose link is gone.
    pub(super) fn fail_fetches(&mut self, peer: u32, reason: &str) {
        let ids: Vec<u64> = self
            .fetching
            .fetches
            .iter()
            .filter(|(_, f)| f.peer == peer)
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            self.fail_fetch(id, reason);
        }
    }

    /// Fails the gets and reads that waited longer than the operation
    /// timeout, and suspects their peers.
    pub(super) fn time_out(&mut self, now: Instant) {
        let timeout = self.tuning.op_timeout;
        let late: Vec<(u64, u32)> = self
            .fetching
            .requests
            .iter()
            .filter(|(_, r)| now - r.started > timeout)
            .map(|(&id, r)| (id, r.peer))
            .collect();
        for (id, peer) in late {
            let reason = format!("no answer to a get within {timeout:?}");
            if let Some(r) = self.fetching.requests.remove(&id) {
                let _ = r.reply.send(Err(TransportError::LinkDown {
                    peer,
                    reason: reason.clone(),
                }));
            }
            self.suspect(peer, reason);
        }
        let late: Vec<(u64, u32)> = self
            .fetching
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
    }
}

impl Engine {
    /// Whether the bytes read from `peer` have the digest their sealed
    /// descriptor announced (a test playing the path may change one
    /// first).
    fn bulk_intact(&mut self, peer: u32, buf: &mut FetchBuf, want: &Digest) -> bool {
        let bytes = buf.bytes_mut();
        if !bytes.is_empty() && self.tampered(peer, &[Tamper::Bulk]).is_some() {
            bytes[bytes.len() / 2] ^= 0x01;
        }
        super::super::seal::digest(bytes) == *want
    }

    /// Bulk bytes from `peer` failed their check: never handed over. A
    /// get fails with a protocol error; a large frame is lost from the
    /// peer's stream, which is suspected.
    fn bulk_refused(&mut self, peer: u32, purpose: Purpose) {
        super::super::seal::count_refusal(self.sh.rank, peer, &BULK_MISMATCH);
        match purpose {
            Purpose::Get(Some(reply)) => {
                let _ = reply.send(Err(TransportError::Protocol {
                    peer,
                    detail: BULK_MISMATCH.to_string(),
                }));
            }
            Purpose::Get(None) => {}
            Purpose::Frame { .. } => self.suspect(peer, BULK_MISMATCH.to_string()),
        }
    }
}
