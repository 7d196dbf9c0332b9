//! Writing to a connection: one writer task per connection fed by a
//! channel, and the direct path that spares small frames the hop to that
//! task. The channel is fed by this rank's own sends and by the answers
//! to a peer's get requests; the reader of those requests waits for room
//! ([`Writer::room`]) before it serves the next one, so a peer that asks
//! without reading the answers stops being read instead of growing the
//! queue.

use super::frame::{self, kind, Header, HEADER_LEN};
use super::metrics;
use super::peer::Shared;
use super::wire::WireWrite;
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::sync::Arc;
use taskfold_core::auth::FrameMac;
use tokio::sync::{mpsc, Notify};

/// Payloads up to this size are copied into the batch buffer; larger ones
/// (get chunks) are written from their own `Bytes`.
const COPY_MAX: usize = 16 << 10;
/// A writer gathers queued frames into one vectored write up to this size.
const BATCH_MAX: usize = 8 << 20;

/// What a writer task is asked to write.
pub(crate) enum OutFrame {
    Control(Bytes),
    GetReq {
        req: u64,
        key: u64,
        /// The requester's node token, 0 for a streamed answer.
        token: u64,
    },
    Lend {
        req: u64,
        addr: u64,
        total: u64,
        /// Where the buffer lies in our shared heap, if it does.
        heap: Option<crate::shm::HeapRef>,
    },
    Return {
        req: u64,
    },
    Chunk {
        req: u64,
        offset: u64,
        total: u64,
        data: Bytes,
    },
    GetErr {
        req: u64,
        key: u64,
    },
    /// Bytes of frames already encoded: the rest of a frame that a sender
    /// began to write itself (see [`Writer::send`]).
    Raw(Bytes),
    /// Write a goodbye, then close our direction.
    Goodbye,
    /// Close our direction (after the peer's goodbye).
    Close,
}

/// Feeds a connection: sending never blocks.
///
/// A small frame goes straight to the socket from the sender's thread
/// (a non-blocking write) when nothing is queued before it on this
/// connection; otherwise, or for what such a write leaves, it goes to the
/// connection's writer task, which writes in queue order. The direct path
/// spares every control message a wake-up of the writer's thread, which
/// on a busy node is a wait for a core (one-way latency of a 64 B frame:
/// see the book's Transports chapter).
#[derive(Clone)]
pub(crate) struct Writer {
    tx: mpsc::UnboundedSender<OutFrame>,
    line: Arc<std::sync::Mutex<Line>>,
    /// Woken when the writer task took frames off the queue, or ended.
    drained: Arc<Notify>,
}

/// What senders and the writer task share about a connection.
#[derive(Default)]
struct Line {
    /// The connection's write side (its socket, or its ring), once
    /// connected and until the writer ends.
    half: Option<Arc<WireWrite>>,
    /// Frames handed to the writer task and not yet written: a sender may
    /// write directly only when this is 0, so that frames keep their order.
    queued: u64,
    /// The writer task ended: nothing queued will be written.
    ended: bool,
    /// This direction's frame MAC (`TASKFOLD_INTEGRITY=mac`): every frame
    /// is sealed when it is put in line for the socket, in socket order.
    mac: Option<FrameMac>,
}

/// The writer task's end of a connection: the frames it must write and the
/// state it shares with senders.
pub(crate) struct WriterEnd {
    rx: mpsc::UnboundedReceiver<OutFrame>,
    line: Arc<std::sync::Mutex<Line>>,
    drained: Arc<Notify>,
}

/// The connection's writer task is gone (the connection is closed).
#[derive(Debug)]
pub(crate) struct WriterClosed;

impl Writer {
    /// A writer and the end its task reads.
    pub(crate) fn new() -> (Writer, WriterEnd) {
        let (tx, rx) = mpsc::unbounded_channel();
        let line = Arc::new(std::sync::Mutex::new(Line::default()));
        let drained = Arc::new(Notify::new());
        (
            Writer {
                tx,
                line: line.clone(),
                drained: drained.clone(),
            },
            WriterEnd { rx, line, drained },
        )
    }

    /// Frames queued for the writer task and not yet written.
    pub(crate) fn queued(&self) -> u64 {
        self.line.lock().unwrap_or_else(|e| e.into_inner()).queued
    }

    /// Waits until fewer than `limit` frames are queued, or the writer
    /// task ended: the back-pressure of a reader that queues answers to
    /// its peer's requests (it reads no more requests meanwhile).
    pub(crate) async fn room(&self, limit: u64) {
        loop {
            let woken = self.drained.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            {
                let l = self.line.lock().unwrap_or_else(|e| e.into_inner());
                if l.queued < limit || l.ended {
                    return;
                }
            }
            woken.await;
        }
    }

    /// Queues `f` (or writes it at once, see [`Writer`]).
    pub(crate) fn send(&self, f: OutFrame) -> Result<(), WriterClosed> {
        // Consistent after any panic: a counter and an option.
        let mut line = self.line.lock().unwrap_or_else(|e| e.into_inner());
        let line = &mut *line;
        let f = match (&line.half, line.queued) {
            (Some(half), 0) if direct(&f) => match write_now(half, f, &mut line.mac) {
                Ok(()) => return Ok(()),
                Err(rest) => rest,
            },
            _ => f,
        };
        line.queued += 1;
        self.tx.send(f).map_err(|_| WriterClosed)
    }
}

/// Frames a sender may write itself: small control frames and get
/// protocol frames; data chunks and the end of a connection go through the
/// writer task.
fn direct(f: &OutFrame) -> bool {
    match f {
        OutFrame::Control(p) => p.len() <= COPY_MAX,
        OutFrame::GetReq { .. }
        | OutFrame::Lend { .. }
        | OutFrame::Return { .. }
        | OutFrame::GetErr { .. } => true,
        OutFrame::Chunk { .. } | OutFrame::Raw(_) | OutFrame::Goodbye | OutFrame::Close => false,
    }
}

/// Writes `f` with one non-blocking write; gives back what must still be
/// queued (all of it if the socket is full, the rest if it took a part).
/// An error other than a full socket is left to the writer task, which
/// meets it again and ends the connection.
fn write_now(half: &WireWrite, f: OutFrame, mac: &mut Option<FrameMac>) -> Result<(), OutFrame> {
    let mut b = Batch::default();
    b.push(f, mac);
    let bytes = b.small.split().freeze();
    match half.try_write(&bytes) {
        Ok(n) if n == bytes.len() => {
            metrics::sent(b.bytes as u64, b.frames);
            Ok(())
        }
        Ok(n) => {
            // The frame is counted here; its rest counts as bytes only.
            metrics::sent(n as u64, 1);
            Err(OutFrame::Raw(bytes.slice(n..)))
        }
        Err(_) => Err(OutFrame::Raw(bytes)),
    }
}

/// Frames gathered for one vectored write.
#[derive(Default)]
struct Batch {
    segs: VecDeque<Bytes>,
    small: BytesMut,
    bytes: usize,
    frames: u64,
}

impl Batch {
    /// Adds a frame, sealed with `mac` if there is one; true if the writer
    /// must stop after this batch.
    fn push(&mut self, f: OutFrame, mac: &mut Option<FrameMac>) -> bool {
        let (hdr, payload, end) = match f {
            OutFrame::Raw(bytes) => {
                // Counted as a frame when it was begun (its rest is bytes).
                self.bytes += bytes.len();
                self.segs.push_back(self.small.split().freeze());
                self.segs.push_back(bytes);
                return false;
            }
            OutFrame::Goodbye => (Header::new(kind::GOODBYE, 0), None, true),
            OutFrame::Close => return true,
            f => {
                let (hdr, payload) = framed(f);
                (hdr, payload, false)
            }
        };
        let head = hdr.encode();
        self.small.extend_from_slice(&head);
        self.bytes += HEADER_LEN;
        self.frames += 1;
        let tag = mac
            .as_mut()
            .map(|m| m.seal(&[&head, payload.as_deref().unwrap_or_default()]));
        if let Some(p) = payload {
            self.bytes += p.len();
            if p.len() <= COPY_MAX {
                self.small.extend_from_slice(&p);
            } else {
                // The exposed bytes themselves go to the socket: no copy.
                self.segs.push_back(self.small.split().freeze());
                self.segs.push_back(p);
            }
        }
        if let Some(t) = tag {
            self.small.extend_from_slice(&t);
            self.bytes += t.len();
        }
        end
    }

    async fn write(&mut self, w: &WireWrite) -> io::Result<()> {
        if !self.small.is_empty() {
            self.segs.push_back(self.small.split().freeze());
        }
        while !self.segs.is_empty() {
            let n = {
                let iov: Vec<IoSlice<'_>> = self
                    .segs
                    .iter()
                    .filter(|s| !s.is_empty())
                    .take(64)
                    .map(|s| IoSlice::new(s))
                    .collect();
                if iov.is_empty() {
                    self.segs.clear();
                    break;
                }
                // The half is shared with senders (see `Writer`): written
                // through `&self`, waiting for room when the socket is full.
                w.writable().await?;
                match w.try_write_vectored(&iov) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(e),
                }
            };
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            let mut left = n;
            while left > 0 {
                let Some(front) = self.segs.front_mut() else {
                    break;
                };
                if front.len() <= left {
                    left -= front.len();
                    self.segs.pop_front();
                } else {
                    let _ = front.split_to(left);
                    left = 0;
                }
            }
            while self.segs.front().is_some_and(Bytes::is_empty) {
                self.segs.pop_front();
            }
        }
        metrics::sent(self.bytes as u64, self.frames);
        self.bytes = 0;
        self.frames = 0;
        Ok(())
    }
}

/// The writer task of a connection: the only task writing to it, so frames
/// leave in the order they were queued; sealed with `mac` if there is one.
pub(crate) async fn run_writer(
    shared: Arc<Shared>,
    w: WireWrite,
    end: WriterEnd,
    peer: u32,
    mac: Option<FrameMac>,
) {
    let _live = shared.live_guard();
    let WriterEnd {
        mut rx,
        line,
        drained,
    } = end;
    line.lock().unwrap_or_else(|e| e.into_inner()).mac = mac;
    let w = Arc::new(w);
    // Senders may write directly from now on; when this task ends (or is
    // aborted), they may not, and the last reference to the half goes,
    // which shuts our direction down.
    let _closed = LineGuard::open(line.clone(), w.clone(), drained.clone());
    let mut batch = Batch::default();
    let push = |batch: &mut Batch, f: OutFrame| {
        let mut l = line.lock().unwrap_or_else(|e| e.into_inner());
        batch.push(f, &mut l.mac)
    };
    while let Some(first) = rx.recv().await {
        let mut taken = 1;
        let mut end = push(&mut batch, first);
        while !end && batch.bytes < BATCH_MAX {
            match rx.try_recv() {
                Ok(f) => {
                    taken += 1;
                    end = push(&mut batch, f);
                }
                Err(_) => break,
            }
        }
        if let Err(e) = batch.write(&w).await {
            // The reader of this connection sees the failure and reports it.
            tracing::debug!(rank = shared.rank, peer, error = %e, "write failed");
            return;
        }
        if end {
            break;
        }
        let mut l = line.lock().unwrap_or_else(|e| e.into_inner());
        l.queued = l.queued.saturating_sub(taken);
        drop(l);
        drained.notify_waiters();
    }
}

/// Lends a connection's write half to its senders while the writer task
/// lives.
struct LineGuard(Arc<std::sync::Mutex<Line>>, Arc<Notify>);

impl LineGuard {
    fn open(
        line: Arc<std::sync::Mutex<Line>>,
        half: Arc<WireWrite>,
        drained: Arc<Notify>,
    ) -> LineGuard {
        line.lock().unwrap_or_else(|e| e.into_inner()).half = Some(half);
        LineGuard(line, drained)
    }
}

impl Drop for LineGuard {
    fn drop(&mut self) {
        let mut l = self.0.lock().unwrap_or_else(|e| e.into_inner());
        l.half = None;
        // No direct writes after the end, whatever is still queued.
        l.queued = u64::MAX / 2;
        l.ended = true;
        drop(l);
        self.1.notify_waiters();
    }
}

/// The header and payload of a frame of the get protocol or a control
/// frame (not `Raw`, `Goodbye` or `Close`, which [`Batch::push`] handles).
fn framed(f: OutFrame) -> (Header, Option<Bytes>) {
    let with = |kind, a, b, c| Header {
        a,
        b,
        c,
        ..Header::new(kind, 0)
    };
    match f {
        OutFrame::Control(p) => (Header::new(kind::CONTROL, p.len() as u32), Some(p)),
        OutFrame::GetReq { req, key, token } => (with(kind::GET_REQ, req, key, token), None),
        OutFrame::Lend {
            req,
            addr,
            total,
            heap,
        } => {
            let body = lend_body(heap);
            let hdr = Header {
                len: body.len() as u32,
                ..with(kind::GET_LEND, req, addr, total)
            };
            (hdr, Some(body))
        }
        OutFrame::Return { req } => (with(kind::GET_RETURN, req, 0, 0), None),
        OutFrame::Chunk {
            req,
            offset,
            total,
            data,
        } => {
            let hdr = Header {
                len: data.len() as u32,
                ..with(kind::GET_CHUNK, req, offset, total)
            };
            (hdr, Some(data))
        }
        OutFrame::GetErr { req, key } => {
            (with(kind::GET_ERR, req, key, frame::ERR_NOT_EXPOSED), None)
        }
        OutFrame::Raw(_) | OutFrame::Goodbye | OutFrame::Close => {
            unreachable!("handled by Batch::push")
        }
    }
}

/// The payload of a `GET_LEND`: this process's pid, then, if the buffer
/// lies in its shared heap, where.
fn lend_body(heap: Option<crate::shm::HeapRef>) -> Bytes {
    Bytes::from(super::frame::encode_lend(
        u64::from(std::process::id()),
        heap,
    ))
}
