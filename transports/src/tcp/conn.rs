//! Connections: the accept loop, the handshake, one writer task per
//! connection fed by an unbounded channel, and the reader tasks.
//!
//! Each rank opens its own connection to a peer on first use and sends its
//! control frames and get requests on it; the peer answers the gets on that
//! same connection. So per connection, one direction carries control frames
//! and requests, the other carries responses, and a rank's big responses
//! never delay its own control frames.

use super::frame::{self, kind, Header, Hello, Role, HANDSHAKE_MAX, HEADER_LEN};
use super::peer::{Link, Shared};
use super::{bootstrap, get, metrics};
use crate::version::{self, VERSION};
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// How long an accepted connection may take to send its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a refused caller is given to read the reason and close.
const REFUSE_LINGER: Duration = Duration::from_secs(2);
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
}

/// What senders and the writer task share about a connection.
#[derive(Default)]
struct Line {
    /// The socket's write half, once connected and until the writer ends.
    half: Option<Arc<OwnedWriteHalf>>,
    /// Frames handed to the writer task and not yet written: a sender may
    /// write directly only when this is 0, so that frames keep their order.
    queued: u64,
}

/// The writer task's end of a connection: the frames it must write and the
/// state it shares with senders.
pub(crate) struct WriterEnd {
    rx: mpsc::UnboundedReceiver<OutFrame>,
    line: Arc<std::sync::Mutex<Line>>,
}

/// The connection's writer task is gone (the connection is closed).
#[derive(Debug)]
pub(crate) struct WriterClosed;

impl Writer {
    /// A writer and the end its task reads.
    pub(crate) fn new() -> (Writer, WriterEnd) {
        let (tx, rx) = mpsc::unbounded_channel();
        let line = Arc::new(std::sync::Mutex::new(Line::default()));
        (
            Writer {
                tx,
                line: line.clone(),
            },
            WriterEnd { rx, line },
        )
    }

    /// Queues `f` (or writes it at once, see [`Writer`]).
    pub(crate) fn send(&self, f: OutFrame) -> Result<(), WriterClosed> {
        // Consistent after any panic: a counter and an option.
        let mut line = self.line.lock().unwrap_or_else(|e| e.into_inner());
        let f = match (&line.half, line.queued) {
            (Some(half), 0) if direct(&f) => match write_now(half, f) {
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
fn write_now(half: &OwnedWriteHalf, f: OutFrame) -> Result<(), OutFrame> {
    let mut b = Batch::default();
    b.push(f);
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
    /// Adds a frame; true if the writer must stop after this batch.
    fn push(&mut self, f: OutFrame) -> bool {
        let (hdr, payload, end) = match f {
            OutFrame::Control(p) => (Header::new(kind::CONTROL, p.len() as u32), Some(p), false),
            OutFrame::GetReq { req, key, token } => (
                Header {
                    a: req,
                    b: key,
                    c: token,
                    ..Header::new(kind::GET_REQ, 0)
                },
                None,
                false,
            ),
            OutFrame::Lend {
                req,
                addr,
                total,
                heap,
            } => {
                let mut body = u64::from(std::process::id()).to_le_bytes().to_vec();
                if let Some(h) = heap {
                    for v in [u64::from(h.fd), h.ino, h.len, h.offset] {
                        body.extend_from_slice(&v.to_le_bytes());
                    }
                }
                (
                    Header {
                        a: req,
                        b: addr,
                        c: total,
                        ..Header::new(kind::GET_LEND, body.len() as u32)
                    },
                    Some(Bytes::from(body)),
                    false,
                )
            }
            OutFrame::Return { req } => (
                Header {
                    a: req,
                    ..Header::new(kind::GET_RETURN, 0)
                },
                None,
                false,
            ),
            OutFrame::Chunk {
                req,
                offset,
                total,
                data,
            } => (
                Header {
                    a: req,
                    b: offset,
                    c: total,
                    ..Header::new(kind::GET_CHUNK, data.len() as u32)
                },
                Some(data),
                false,
            ),
            OutFrame::GetErr { req, key } => (
                Header {
                    a: req,
                    b: key,
                    c: frame::ERR_NOT_EXPOSED,
                    ..Header::new(kind::GET_ERR, 0)
                },
                None,
                false,
            ),
            OutFrame::Raw(bytes) => {
                // Counted as a frame when it was begun (its rest is bytes).
                self.bytes += bytes.len();
                self.segs.push_back(self.small.split().freeze());
                self.segs.push_back(bytes);
                return false;
            }
            OutFrame::Goodbye => (Header::new(kind::GOODBYE, 0), None, true),
            OutFrame::Close => return true,
        };
        self.small.extend_from_slice(&hdr.encode());
        self.bytes += HEADER_LEN;
        self.frames += 1;
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
        end
    }

    async fn write(&mut self, w: &OwnedWriteHalf) -> io::Result<()> {
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
/// leave in the order they were queued.
pub(crate) async fn run_writer(shared: Arc<Shared>, w: OwnedWriteHalf, end: WriterEnd, peer: u32) {
    let _live = shared.live_guard();
    let WriterEnd { mut rx, line } = end;
    let w = Arc::new(w);
    // Senders may write directly from now on; when this task ends (or is
    // aborted), they may not, and the last reference to the half goes,
    // which shuts our direction down.
    let _closed = LineGuard::open(line.clone(), w.clone());
    let mut batch = Batch::default();
    while let Some(first) = rx.recv().await {
        let mut taken = 1;
        let mut end = batch.push(first);
        while !end && batch.bytes < BATCH_MAX {
            match rx.try_recv() {
                Ok(f) => {
                    taken += 1;
                    end = batch.push(f);
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
    }
}

/// Lends a connection's write half to its senders while the writer task
/// lives.
struct LineGuard(Arc<std::sync::Mutex<Line>>);

impl LineGuard {
    fn open(line: Arc<std::sync::Mutex<Line>>, half: Arc<OwnedWriteHalf>) -> LineGuard {
        line.lock().unwrap_or_else(|e| e.into_inner()).half = Some(half);
        LineGuard(line)
    }
}

impl Drop for LineGuard {
    fn drop(&mut self) {
        let mut l = self.0.lock().unwrap_or_else(|e| e.into_inner());
        l.half = None;
        // No direct writes after the end, whatever is still queued.
        l.queued = u64::MAX / 2;
    }
}

/// Why a reader stopped.
pub(crate) enum ReadError {
    /// Clean end of stream at a frame boundary.
    Eof,
    Io(io::Error),
    Protocol(String),
}

impl ReadError {
    fn describe(&self, peer: u32) -> String {
        match self {
            ReadError::Eof => format!("rank {peer} closed the connection without a goodbye"),
            ReadError::Io(e) => format!("connection with rank {peer} failed: {e}"),
            ReadError::Protocol(d) => format!("protocol error from rank {peer}: {d}"),
        }
    }
}

/// Reads one header.
pub(crate) async fn read_header<R: AsyncRead + Unpin>(r: &mut R) -> Result<Header, ReadError> {
    let mut h = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match r.read(&mut h[got..]).await {
            Ok(0) if got == 0 => return Err(ReadError::Eof),
            Ok(0) => return Err(ReadError::Io(io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => got += n,
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
    Header::decode(&h).map_err(ReadError::Protocol)
}

/// Reads a payload of `len` bytes (the caller has checked the limit).
pub(crate) async fn read_payload<R: AsyncRead + Unpin>(
    r: &mut R,
    len: u32,
) -> Result<Bytes, ReadError> {
    let mut v = vec![0u8; len as usize];
    r.read_exact(&mut v).await.map_err(ReadError::Io)?;
    metrics::received(HEADER_LEN as u64 + u64::from(len), 1);
    Ok(Bytes::from(v))
}

/// Reads a control frame's payload, refusing it over `max`.
pub(crate) async fn read_control<R: AsyncRead + Unpin>(
    r: &mut R,
    hdr: &Header,
    max: u64,
) -> Result<Bytes, ReadError> {
    if u64::from(hdr.len) > max {
        return Err(ReadError::Protocol(format!(
            "control frame of {} bytes exceeds the maximum of {max}",
            hdr.len
        )));
    }
    read_payload(r, hdr.len).await
}

/// Logs and counts a connection dropped for bad input.
pub(crate) fn bad_connection(rank: u32, from: SocketAddr, detail: &str) {
    tracing::warn!(rank, %from, detail, "dropping connection");
    metrics::bad_connection();
}

/// Sends a refusal, then waits (bounded) for the caller to close, so that
/// the reason is not lost to a reset.
pub(crate) async fn refuse(rd: OwnedReadHalf, wr: OwnedWriteHalf, reason: String) {
    linger_close(rd, wr, frame::refuse_frame(&reason)).await;
}

/// Writes `last`, closes our direction and reads (discarding) until the
/// caller closes too, at most [`REFUSE_LINGER`]: closing with unread input
/// would reset the connection and could lose `last`.
async fn linger_close(mut rd: OwnedReadHalf, mut wr: OwnedWriteHalf, last: Vec<u8>) {
    let _ = tokio::time::timeout(REFUSE_LINGER, async {
        wr.write_all(&last).await?;
        wr.shutdown().await?;
        let mut sink = [0u8; 4096];
        while rd.read(&mut sink).await? > 0 {}
        Ok::<_, io::Error>(())
    })
    .await;
}

/// Accepts connections until the runtime is shut down.
pub(crate) async fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((s, from)) => {
                super::sock::tune_accepted(&s);
                tokio::spawn(handle_accepted(shared.clone(), s, from));
            }
            Err(e) => {
                // Out of descriptors and the like: back off, keep serving.
                tracing::warn!(rank = shared.rank, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn read_hello(rd: &mut OwnedReadHalf) -> Result<Hello, String> {
    let hdr = match read_header(rd).await {
        Ok(h) => h,
        Err(ReadError::Eof) => return Err("closed before its hello".into()),
        Err(ReadError::Io(e)) => return Err(format!("read failed: {e}")),
        Err(ReadError::Protocol(d)) => return Err(d),
    };
    if hdr.kind != kind::HELLO {
        return Err(format!("first frame is of kind {}, not a hello", hdr.kind));
    }
    if hdr.len > HANDSHAKE_MAX {
        return Err(format!("hello of {} bytes", hdr.len));
    }
    let body = read_payload(rd, hdr.len)
        .await
        .map_err(|e| e.describe(u32::MAX))?;
    Hello::decode(&body)
}

async fn handle_accepted(shared: Arc<Shared>, stream: TcpStream, from: SocketAddr) {
    let (mut rd, wr) = stream.into_split();
    let hello = match tokio::time::timeout(HELLO_TIMEOUT, read_hello(&mut rd)).await {
        Ok(Ok(h)) => h,
        Ok(Err(detail)) => return bad_connection(shared.rank, from, &detail),
        Err(_) => return bad_connection(shared.rank, from, "no hello in time"),
    };
    if hello.version != VERSION {
        let reason = version::mismatch(shared.rank, hello.version);
        bad_connection(shared.rank, from, &reason);
        return refuse(rd, wr, reason).await;
    }
    match hello.role {
        Role::Peer => accept_peer(shared, rd, wr, hello, from).await,
        Role::Register => bootstrap::on_register(shared, rd, wr, hello, from).await,
        Role::Launcher => bootstrap::on_launcher(shared, rd, wr, hello, from).await,
    }
}

fn check_peer(shared: &Shared, h: &Hello) -> Result<(), String> {
    if h.job != shared.job {
        return Err(format!(
            "wrong job id: this is job {:#x}, the caller belongs to job {:#x}",
            shared.job, h.job
        ));
    }
    if h.size != shared.size {
        return Err(format!(
            "wrong rank counts: the job has {} ranks, the caller was started with {}",
            shared.size, h.size
        ));
    }
    if h.rank >= shared.size || h.rank == shared.rank {
        return Err(format!(
            "rank {} cannot connect to rank {}",
            h.rank, shared.rank
        ));
    }
    Ok(())
}

enum Verdict {
    Accepted,
    Goodbye(OwnedReadHalf, OwnedWriteHalf),
    Refuse(OwnedReadHalf, OwnedWriteHalf, String),
}

/// A peer's connection to us: it carries its control frames and get
/// requests; we answer the gets on it.
async fn accept_peer(
    shared: Arc<Shared>,
    rd: OwnedReadHalf,
    wr: OwnedWriteHalf,
    hello: Hello,
    from: SocketAddr,
) {
    if let Err(reason) = check_peer(&shared, &hello) {
        bad_connection(shared.rank, from, &reason);
        return refuse(rd, wr, reason).await;
    }
    let peer = hello.rank;
    let verdict = {
        let mut slot = shared.slot(peer);
        if shared.is_closed() {
            Verdict::Goodbye(rd, wr)
        } else if slot.link != Link::Up {
            Verdict::Refuse(rd, wr, format!("rank {peer} already left the job"))
        } else if slot.incoming.is_some() {
            Verdict::Refuse(rd, wr, format!("rank {peer} is already connected"))
        } else {
            let (tx, rx) = Writer::new();
            slot.incoming = Some(tx.clone());
            let w = tokio::spawn(run_writer(shared.clone(), wr, rx, peer));
            let r = tokio::spawn(in_reader(shared.clone(), peer, rd, tx));
            slot.tasks.push(w.abort_handle());
            slot.tasks.push(r.abort_handle());
            Verdict::Accepted
        }
    };
    match verdict {
        Verdict::Accepted => tracing::debug!(rank = shared.rank, peer, "peer connected"),
        // We are shutting down: the caller sees a goodbye, not a failure.
        Verdict::Goodbye(rd, wr) => {
            linger_close(rd, wr, Header::new(kind::GOODBYE, 0).encode().to_vec()).await;
        }
        Verdict::Refuse(rd, wr, reason) => {
            bad_connection(shared.rank, from, &reason);
            refuse(rd, wr, reason).await;
        }
    }
}

/// Reads a peer's control frames and get requests.
async fn in_reader(shared: Arc<Shared>, peer: u32, mut rd: OwnedReadHalf, wtx: Writer) {
    let _live = shared.live_guard();
    let err = loop {
        let hdr = match read_header(&mut rd).await {
            Ok(h) => h,
            Err(e) => break e,
        };
        match hdr.kind {
            kind::CONTROL => match read_control(&mut rd, &hdr, shared.max_frame).await {
                Ok(frame) => shared.deliver(peer, frame),
                Err(e) => break e,
            },
            kind::GET_REQ => {
                metrics::received(HEADER_LEN as u64, 1);
                get::serve(&shared, &wtx, peer, hdr.a, hdr.b, hdr.c);
            }
            kind::GET_RETURN => {
                metrics::received(HEADER_LEN as u64, 1);
                shared.loans().returned(peer, hdr.a);
            }
            kind::GOODBYE => {
                shared.peer_gone(peer);
                let _ = wtx.send(OutFrame::Close);
                return;
            }
            k => break ReadError::Protocol(format!("unexpected frame kind {k} from a caller")),
        }
    };
    ended(&shared, peer, err, true);
}

/// Reports the end of a connection that did not say goodbye (`incoming`:
/// the peer's connection to us).
fn ended(shared: &Arc<Shared>, peer: u32, err: ReadError, incoming: bool) {
    if shared.is_closed() {
        return;
    }
    if let ReadError::Protocol(d) = &err {
        tracing::error!(rank = shared.rank, peer, detail = %d, "protocol error, dropping the link");
        metrics::bad_connection();
    }
    shared.link_lost(peer, err.describe(peer), incoming);
}

/// Our connection to `peer`: connect, hello, then write what is queued.
pub(crate) async fn run_outgoing(shared: Arc<Shared>, peer: u32, rx: WriterEnd) {
    let live = shared.live_guard();
    let Some(addr) = shared
        .addrs
        .get()
        .and_then(|t| t.get(peer as usize))
        .copied()
    else {
        return shared.link_lost(peer, format!("no address for rank {peer}"), false);
    };
    let stream =
        match tokio::time::timeout(shared.connect_timeout, super::sock::connect(addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                if !shared.is_closed() {
                    shared.link_lost(
                        peer,
                        format!("connecting to rank {peer} at {addr}: {e}"),
                        false,
                    );
                }
                return;
            }
            Err(_) => {
                if !shared.is_closed() {
                    shared.link_lost(
                        peer,
                        format!("connecting to rank {peer} at {addr} timed out"),
                        false,
                    );
                }
                return;
            }
        };
    let (rd, mut wr) = stream.into_split();
    let hello = frame::hello_frame(&Hello {
        version: VERSION,
        role: Role::Peer,
        job: shared.job,
        rank: shared.rank,
        size: shared.size,
        addr: None,
    });
    if let Err(e) = wr.write_all(&hello).await {
        if !shared.is_closed() {
            shared.link_lost(peer, format!("hello to rank {peer} failed: {e}"), false);
        }
        return;
    }
    metrics::sent(hello.len() as u64, 1);
    {
        let mut slot = shared.slot(peer);
        if slot.link != Link::Up {
            return;
        }
        let r = tokio::spawn(out_reader(shared.clone(), peer, rd));
        slot.tasks.push(r.abort_handle());
    }
    run_writer(shared, wr, rx, peer).await;
    drop(live);
}

/// Reads the responses to our gets (and a goodbye or refusal).
async fn out_reader(shared: Arc<Shared>, peer: u32, mut rd: OwnedReadHalf) {
    let _live = shared.live_guard();
    let err = loop {
        let hdr = match read_header(&mut rd).await {
            Ok(h) => h,
            Err(e) => break e,
        };
        match hdr.kind {
            kind::GET_CHUNK => {
                if let Err(e) = get::on_chunk(&shared, peer, &hdr, &mut rd).await {
                    break e;
                }
            }
            kind::GET_ERR => {
                metrics::received(HEADER_LEN as u64, 1);
                if let Err(e) = get::on_error(&shared, peer, &hdr) {
                    break e;
                }
            }
            kind::GET_LEND if hdr.len == frame::LEND_LEN || hdr.len == frame::LEND_HEAP_LEN => {
                let body = match read_payload(&mut rd, hdr.len).await {
                    Ok(b) => b,
                    Err(e) => break e,
                };
                let word = |i: usize| {
                    u64::from_le_bytes(body[8 * i..8 * i + 8].try_into().unwrap_or_default())
                };
                let pid = word(0);
                let heap = (hdr.len == frame::LEND_HEAP_LEN).then(|| crate::shm::HeapRef {
                    fd: word(1) as u32,
                    ino: word(2),
                    len: word(3),
                    offset: word(4),
                });
                metrics::received(HEADER_LEN as u64 + u64::from(hdr.len), 1);
                if let Err(e) = get::on_lend(&shared, peer, &hdr, pid, heap) {
                    break e;
                }
            }
            kind::GOODBYE => {
                metrics::received(HEADER_LEN as u64, 1);
                return shared.peer_gone(peer);
            }
            kind::REFUSE if hdr.len <= HANDSHAKE_MAX => {
                let reason = match read_payload(&mut rd, hdr.len).await {
                    Ok(b) => String::from_utf8_lossy(&b).into_owned(),
                    Err(e) => e.describe(peer),
                };
                break ReadError::Protocol(format!("refused our connection: {reason}"));
            }
            k => break ReadError::Protocol(format!("unexpected frame kind {k} from a server")),
        }
    };
    ended(&shared, peer, err, false);
}
