//! One-sided gets: serving exposed buffers and receiving them.
//!
//! The owner answers a `GET_REQ` by itself (no application or actor takes
//! part): `ceil(len / chunk)` `GET_CHUNK` frames (one if the buffer is
//! empty), each a header followed by a slice of the exposed `Bytes` written
//! straight to the socket, or one `GET_ERR` if the key is not exposed. The
//! requester checks the announced total against what the get accepts (a
//! larger one is a protocol error: the link is dropped before anything is
//! allocated), then reads every chunk's payload from the socket into one
//! aligned buffer that grows with the bytes received.
//!
//! What a peer can make this rank hold is bounded (see the book's
//! Security chapter): a get's total ([`super::TcpConfig::max_get`], or
//! less if the caller said so), a chunk's length (the larger of the
//! maximum frame and this rank's chunk), the loans it holds at once
//! ([`MAX_LOANS_PER_PEER`], then gets are streamed).
//!
//! A requester on the owner's node gets a loan instead (`GET_LEND`, see
//! the `cma` module): one copy from the owner's memory, then `GET_RETURN`.
//! If the buffer lies in the owner's shared heap ([`crate::shm`]), the
//! requester maps that heap (once per peer, through the transport's
//! [`crate::same_node::SameNode`]) and reads the bytes where they are: a
//! get completes with a view whose drop sends `GET_RETURN`, a segmented
//! get with one `memcpy` from the mapping.

use super::cma;
use super::conn::Rd;
use super::conn::{OutFrame, ReadError, Writer};
use super::frame::{Header, ERR_NOT_EXPOSED, HEADER_LEN};
use super::metrics;
use super::peer::{Link, Pending, Shared};
use crate::same_node::MIN_LOAN;
use crate::{BufferKey, Received, SharedView, TransportError};
use std::sync::Arc;
use tokio::io::AsyncReadExt;

/// Room reserved for a streamed get at its first chunk, at most: beyond,
/// the buffer grows as the bytes arrive (at most doubling), so that what
/// this rank holds follows what the peer really sent, not what it
/// announced.
const RESERVE_FIRST: u64 = 64 << 20;

/// Loans a peer may hold at once; a get beyond is streamed instead (its
/// bytes are sent, nothing more is kept alive for the peer).
pub(crate) const MAX_LOANS_PER_PEER: usize = 256;

/// Answers `peer`'s get request from the connection whose writer is `w`:
/// a loan if the requester is on this node (its `token` is ours) and the
/// buffer is big enough to be worth the round trip, else a stream.
pub(crate) fn serve(shared: &Shared, w: &Writer, peer: u32, req: u64, key: u64, token: u64) {
    if shared.is_closed() {
        return;
    }
    let Some(data) = shared.exposed.lookup(BufferKey(key)) else {
        let _ = w.send(OutFrame::GetErr { req, key });
        return;
    };
    let total = data.len();
    if token != 0 && token == shared.same.token() && total >= MIN_LOAN && may_lend(shared, peer) {
        let addr = data.as_ptr() as u64;
        let heap = crate::shm::locate(data.as_ptr(), total);
        shared.loans().lend(peer, req, data);
        if w.send(OutFrame::Lend {
            req,
            addr,
            total: total as u64,
            heap,
        })
        .is_err()
        {
            shared.loans().returned(peer, req);
        }
        return;
    }
    let mut offset = 0;
    loop {
        let end = total.min(offset + shared.chunk);
        let _ = w.send(OutFrame::Chunk {
            req,
            offset: offset as u64,
            total: total as u64,
            data: data.slice(offset..end),
        });
        offset = end;
        if offset >= total {
            break;
        }
    }
}

/// Whether `peer` may be lent one more buffer ([`MAX_LOANS_PER_PEER`]);
/// counts the bound when it is reached.
fn may_lend(shared: &Shared, peer: u32) -> bool {
    let room = shared.loans().of(peer) < MAX_LOANS_PER_PEER;
    if !room {
        metrics::bound_hit("loans");
    }
    room
}

/// Takes the pending get `req` to `peer` out of its slot.
fn take_pending(shared: &Shared, peer: u32, req: u64) -> Option<Pending> {
    shared.slot(peer).pending.remove(&req)
}

/// A recycled buffer of `n` zeroed bytes, to read into.
fn zeroed(n: usize) -> taskfold_core::reducer::EncodedBuf {
    let mut b = taskfold_core::pool::take(n);
    b.resize(n, 0);
    b
}

/// `buf` (holding the first `offset` bytes of a get of `total`) grown by
/// `len` zeroed bytes to read the next chunk into; room beyond is
/// reserved ahead by doubling, never past `total`.
fn grow(buf: &mut crate::RecvBuf, total: u64, len: u64) -> std::ops::Range<usize> {
    let start = buf.len();
    let end = start + len as usize;
    if buf.capacity() < end {
        // Not `clamp`: a total below RESERVE_FIRST must win.
        let want = (end as u64)
            .saturating_mul(2)
            .max(RESERVE_FIRST)
            .min(total.max(end as u64));
        buf.reserve_exact(want as usize - start);
    }
    buf.resize(end, 0);
    start..end
}

/// Reads and drops `len` bytes.
async fn skip(rd: &mut Rd, len: u64) -> Result<(), ReadError> {
    let mut left = len;
    let mut sink = [0u8; 16 << 10];
    while left > 0 {
        let n = left.min(sink.len() as u64) as usize;
        rd.read_exact(&mut sink[..n]).await.map_err(ReadError::Io)?;
        left -= n as u64;
    }
    Ok(())
}

/// What is wrong with a chunk `offset + len` of `total` bytes for get `p`,
/// if anything: the total within what the get accepts, chunks no longer
/// than `max_chunk`, in order, within the announced total.
fn check_chunk(p: &Pending, offset: u64, total: u64, len: u64, max_chunk: u64) -> Option<String> {
    if total > p.max {
        metrics::bound_hit("get_total");
        Some(format!(
            "get of {total} bytes announced, more than the {} this get accepts",
            p.max
        ))
    } else if len > max_chunk {
        metrics::bound_hit("chunk");
        Some(format!(
            "chunk of {len} bytes, more than the maximum of {max_chunk}"
        ))
    } else if (p.buf.is_some() || p.done > 0) && total != p.total {
        Some(format!("get total changed from {} to {total}", p.total))
    } else if offset != p.done || len > total - offset {
        Some(format!(
            "chunk {offset}+{len} out of order or past the end of {total} (expected offset {})",
            p.done
        ))
    } else {
        None
    }
}

/// Where the payload of a checked chunk is read into.
pub(crate) enum Dest {
    /// A buffer of its own (a segmented get).
    Piece(taskfold_core::reducer::EncodedBuf),
    /// This range of the get's buffer (`Pending::buf`).
    Range(std::ops::Range<usize>),
}

/// Checks a chunk `offset + len` of `total` bytes for get `p`
/// ([`check_chunk`]) and makes room for its payload; nothing is allocated
/// for a refused chunk.
pub(crate) fn prepare_chunk(
    p: &mut Pending,
    offset: u64,
    total: u64,
    len: u64,
    max_chunk: u64,
) -> Result<Dest, String> {
    if let Some(detail) = check_chunk(p, offset, total, len, max_chunk) {
        return Err(detail);
    }
    p.total = total;
    if p.sink.is_some() {
        return Ok(Dest::Piece(zeroed(len as usize)));
    }
    // `total <= p.max` was checked; the buffer holds the `offset` bytes
    // read so far (chunks come in order).
    let buf = p
        .buf
        .get_or_insert_with(|| taskfold_core::pool::take(total.min(RESERVE_FIRST) as usize));
    Ok(Dest::Range(grow(buf, total, len)))
}

/// A chunk arrived: read its payload into the request's buffer (or, for a
/// segmented get, into a buffer of its own, handed to the sink).
pub(crate) async fn on_chunk(
    shared: &Shared,
    peer: u32,
    hdr: &Header,
    rd: &mut Rd,
) -> Result<(), ReadError> {
    let (req, offset, total, len) = (hdr.a, hdr.b, hdr.c, u64::from(hdr.len));
    let Some(mut p) = take_pending(shared, peer, req) else {
        if shared.is_closed() {
            // Our gets were failed by the shutdown: skip the bytes.
            skip(rd, len).await?;
            return rd.end_frame().await;
        }
        return Err(ReadError::Protocol(format!(
            "chunk for unknown request {req}"
        )));
    };
    let max_chunk = shared.max_frame.max(shared.chunk as u64);
    let into = match prepare_chunk(&mut p, offset, total, len, max_chunk) {
        Ok(into) => into,
        Err(detail) => {
            let _ = p.tx.send(Err(TransportError::Protocol {
                peer,
                detail: detail.clone(),
            }));
            return Err(ReadError::Protocol(detail));
        }
    };
    let mut piece = None;
    let read = match into {
        // A segmented get: each chunk in a buffer of its own, handed over
        // as soon as it is read, while the next one arrives.
        Dest::Piece(b) => rd.read_exact(piece.insert(b)).await,
        Dest::Range(range) => {
            let buf = p.buf.as_mut().expect("prepare_chunk made the buffer");
            rd.read_exact(&mut buf[range]).await
        }
    };
    if let Err(e) = read {
        let _ = p.tx.send(Err(TransportError::LinkDown {
            peer,
            reason: format!("connection failed during a get: {e}"),
        }));
        return Err(ReadError::Io(e));
    }
    // Checked before a byte of it is handed over or the get completes.
    if let Err(e) = rd.end_frame().await {
        let _ = p.tx.send(Err(TransportError::Protocol {
            peer,
            detail: e.describe(peer),
        }));
        return Err(e);
    }
    metrics::received(HEADER_LEN as u64 + len, 1);
    p.done += len;
    if let (Some(sink), Some(bytes)) = (p.sink.as_mut(), piece) {
        sink(crate::Segment {
            offset: offset as usize,
            total: total as usize,
            bytes,
        });
    }
    finish_or_wait(shared, peer, req, p);
    Ok(())
}

/// A chunk of get `req` from `peer` was handed on: completes the get if
/// it was the last, else puts it back among the peer's pending gets
/// (failed at once if the link or the transport went down meanwhile).
fn finish_or_wait(shared: &Shared, peer: u32, req: u64, mut p: Pending) {
    if p.done == p.total {
        if p.sink.is_some() {
            // Every segment is with the caller: the empty buffer says so.
            let _ = p.tx.send(Ok(Received::Owned(crate::RecvBuf::new())));
        } else {
            let buf = p.buf.take().unwrap_or_default();
            p.complete(Ok(Received::Owned(buf)));
        }
        return;
    }
    let mut slot = shared.slot(peer);
    match slot.link.error(peer) {
        None if !shared.is_closed() => {
            slot.pending.insert(req, p);
        }
        None => {
            let _ = p.tx.send(Err(TransportError::Closed));
        }
        Some(e) => {
            let _ = p.tx.send(Err(e));
        }
    }
}

/// Sends `GET_RETURN` for a loan when dropped (a view's last read done).
struct Loan {
    shared: Arc<Shared>,
    peer: u32,
    req: u64,
}

impl Drop for Loan {
    fn drop(&mut self) {
        let w = {
            let mut slot = self.shared.slot(self.peer);
            if slot.link != Link::Up || self.shared.is_closed() {
                // The link went down meanwhile (the owner keeps the
                // buffer), or we shut down: nothing to return it over, and
                // no connection to open for it.
                return;
            }
            self.shared.outgoing(&mut slot, self.peer)
        };
        let _ = w.send(OutFrame::Return { req: self.req });
    }
}

/// A view of a loan in the owner's shared heap, if the heap can be mapped
/// (else the caller copies with `process_vm_readv`).
fn view(
    shared: &Arc<Shared>,
    peer: u32,
    req: u64,
    pid: u32,
    heap: &crate::shm::HeapRef,
    total: usize,
) -> Option<SharedView> {
    let mapped = shared.same.peer_heap(peer, pid, heap)?;
    // Checked before the loan guard exists: a range outside the heap falls
    // back to the copy, which needs the loan still out.
    mapped.slice(heap.offset as usize, total)?;
    let loan = Loan {
        shared: shared.clone(),
        peer,
        req,
    };
    SharedView::new(mapped, heap.offset as usize, total, Box::new(loan))
}

/// What is wrong with a loan of `total` bytes from `pid` for a get that
/// accepts `max` bytes, if anything.
pub(crate) fn check_lend(max: u64, total: u64, pid: u64) -> Option<String> {
    if total <= max && pid <= u64::from(u32::MAX) {
        return None;
    }
    metrics::bound_hit("get_total");
    Some(format!(
        "loan of {total} bytes from pid {pid}, more than the {max} this get accepts"
    ))
}

/// A loan arrived: read it from the owner's memory off the reader task,
/// return it, and complete the get; if the kernel refuses, ask again for a
/// stream.
pub(crate) fn on_lend(
    shared: &Arc<Shared>,
    peer: u32,
    hdr: &Header,
    pid: u64,
    heap: Option<crate::shm::HeapRef>,
) -> Result<(), ReadError> {
    let (req, addr, total) = (hdr.a, hdr.b, hdr.c);
    let Some(p) = take_pending(shared, peer, req) else {
        if shared.is_closed() {
            return Ok(());
        }
        return Err(ReadError::Protocol(format!(
            "loan for unknown request {req}"
        )));
    };
    if let Some(detail) = check_lend(p.max, total, pid) {
        let _ = p.tx.send(Err(TransportError::Protocol {
            peer,
            detail: detail.clone(),
        }));
        return Err(ReadError::Protocol(detail));
    }
    let shared = shared.clone();
    if p.view {
        // A view of a heap mapped already needs no system call: complete
        // the get on this task, saving a hop to a blocking thread.
        let mapped = heap.filter(|h| shared.same.heap_mapped(peer, pid as u32, h));
        if let Some(v) =
            mapped.and_then(|h| view(&shared, peer, req, pid as u32, &h, total as usize))
        {
            shared.same.count_mapped(total);
            p.complete(Ok(Received::Shared(v)));
            return Ok(());
        }
    }
    shared.handle.clone().spawn_blocking(move || {
        if let Some(v) = heap.and_then(|h| view(&shared, peer, req, pid as u32, &h, total as usize)) {
            shared.same.count_mapped(total);
            // A segmented get copies once from the mapping (a `memcpy`,
            // cheaper than the kernel's cross-memory copy) and returns the
            // loan.
            let got = if p.view {
                Received::Shared(v)
            } else {
                Received::Owned(Received::Shared(v).into_owned())
            };
            p.complete(Ok(got));
            return;
        }
        let res = cma::read(pid as u32, addr, total as usize);
        // Return the loan whatever happened: the owner may drop it now.
        let w = {
            let mut slot = shared.slot(peer);
            shared.outgoing(&mut slot, peer)
        };
        let _ = w.send(OutFrame::Return { req });
        match res {
            Ok(buf) => {
                metrics::received(total, 0);
                p.complete(Ok(Received::Owned(buf)));
            }
            Err(cma::ReadFailure::NotPermitted(e)) => {
                tracing::warn!(rank = shared.rank, peer, error = %e, "same-node reads refused by the kernel; streaming gets instead");
                shared.same.reads_refused();
                restream(&shared, peer, req, p);
            }
            Err(cma::ReadFailure::Failed(e)) => {
                let _ = p.tx.send(Err(TransportError::LinkDown {
                    peer,
                    reason: format!("reading rank {peer}'s buffer failed: {e}"),
                }));
            }
        }
    });
    Ok(())
}

/// A loan whose lender could not be checked (`why`, see `super::lender`):
/// it is returned unread, the get streamed instead, and loans are no
/// longer asked for.
pub(crate) fn decline_lend(shared: &Arc<Shared>, peer: u32, hdr: &Header, why: &str) {
    let req = hdr.a;
    let Some(p) = take_pending(shared, peer, req) else {
        return;
    };
    tracing::warn!(rank = shared.rank, peer, error = %why, "cannot check whose memory a loan names; streaming gets instead");
    shared.same.reads_refused();
    {
        let mut slot = shared.slot(peer);
        let _ = shared
            .outgoing(&mut slot, peer)
            .send(OutFrame::Return { req });
    }
    restream(shared, peer, req, p);
}

/// Asks again for request `req`, streamed this time.
fn restream(shared: &Arc<Shared>, peer: u32, req: u64, p: Pending) {
    let mut slot = shared.slot(peer);
    if let Some(e) = slot.link.error(peer) {
        let _ = p.tx.send(Err(e));
        return;
    }
    let w = shared.outgoing(&mut slot, peer);
    let key = p.key;
    slot.pending.insert(req, p);
    if w.send(OutFrame::GetReq { req, key, token: 0 }).is_err() {
        if let Some(p) = slot.pending.remove(&req) {
            let _ = p.tx.send(Err(TransportError::Closed));
        }
    }
}

/// A get failed at the owner.
pub(crate) fn on_error(shared: &Shared, peer: u32, hdr: &Header) -> Result<(), ReadError> {
    let (req, key, code) = (hdr.a, hdr.b, hdr.c);
    let Some(p) = take_pending(shared, peer, req) else {
        if shared.is_closed() {
            return Ok(());
        }
        return Err(ReadError::Protocol(format!(
            "error for unknown request {req}"
        )));
    };
    let err = if code == ERR_NOT_EXPOSED {
        TransportError::NotExposed { peer, key }
    } else {
        TransportError::Protocol {
            peer,
            detail: format!("get failed with unknown code {code}"),
        }
    };
    let _ = p.tx.send(Err(err));
    Ok(())
}

/// Registers a get to `peer` and queues its request; the receiver completes
/// with the buffer or the error.
///
/// `view`: the caller takes a view of a same-node loan rather than a copy
/// (not for a segmented get).
pub(crate) fn request(
    shared: &std::sync::Arc<Shared>,
    peer: u32,
    key: BufferKey,
    view: bool,
    max: u64,
    sink: Option<crate::SegmentSink>,
) -> Result<tokio::sync::oneshot::Receiver<Result<Received, TransportError>>, TransportError> {
    let mut slot = shared.slot(peer);
    if shared.is_closed() {
        return Err(TransportError::Closed);
    }
    if let Some(e) = slot.link.error(peer) {
        return Err(e);
    }
    let w = shared.outgoing(&mut slot, peer);
    let req = shared.next_id();
    let (tx, rx) = tokio::sync::oneshot::channel();
    slot.pending.insert(
        req,
        Pending {
            key: key.0,
            buf: None,
            total: 0,
            max: max.min(shared.max_get),
            done: 0,
            view,
            tx,
            sink,
        },
    );
    let token = shared.same.request_token();
    if w.send(OutFrame::GetReq {
        req,
        key: key.0,
        token,
    })
    .is_err()
    {
        slot.pending.remove(&req);
        return Err(TransportError::LinkDown {
            peer,
            reason: format!("connection to rank {peer} is closed"),
        });
    }
    debug_assert!(slot.link == Link::Up);
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_grows_with_its_chunks_never_past_the_total() {
        // A small get fits its first reservation.
        let mut b = crate::RecvBuf::with_capacity(1000);
        assert_eq!(grow(&mut b, 1000, 600), 0..600);
        assert_eq!(grow(&mut b, 1000, 400), 600..1000);
        assert_eq!(b.len(), 1000);
        // A large one: room follows the bytes received (doubling, from
        // RESERVE_FIRST), never more than the total.
        let total = 3 * RESERVE_FIRST;
        let chunk = RESERVE_FIRST / 4;
        let mut b = crate::RecvBuf::with_capacity(RESERVE_FIRST as usize);
        let mut got = 0;
        while got < total {
            let r = grow(&mut b, total, chunk);
            assert_eq!(r, got as usize..(got + chunk) as usize);
            got += chunk;
            assert!(b.capacity() as u64 <= (2 * got).max(RESERVE_FIRST).min(total) + 4096);
        }
        assert_eq!(b.len() as u64, total);
        // A recycled buffer smaller than the total of a small get.
        let mut b = crate::RecvBuf::with_capacity(16);
        assert_eq!(grow(&mut b, 100, 100), 0..100);
    }
}
