//! Connections: the accept loop, the handshake, the connections peers
//! open to us and what both sides read (our own connections are the
//! `outgoing` module's, the writers the `writer` module's).
//!
//! Each rank opens its own connection to a peer on first use and sends its
//! control frames and get requests on it; the peer answers the gets on that
//! same connection. So per connection, one direction carries control frames
//! and requests, the other carries responses, and a rank's big responses
//! never delay its own control frames.

use super::frame::{self, kind, Header, Hello, Role, HANDSHAKE_MAX, HEADER_LEN};
use super::handshake;
use super::integrity::MacRead;
use super::peer::{Link, Shared};
use super::wire::WireRead;
pub(crate) use super::writer::{run_writer, OutFrame, Writer, WriterEnd};
use super::{bootstrap, gate, get, metrics};
use taskfold_core::auth::{FrameKeys, FrameMac};

/// A connection's read half, its frames checked if the job asks for it.
pub(crate) type Rd = MacRead<WireRead>;
use crate::version::{self, VERSION};
use bytes::Bytes;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

/// How long a refused caller is given to read the reason and close.
const REFUSE_LINGER: Duration = Duration::from_secs(2);
/// Frames queued on a connection to a peer, at most, before its next get
/// request is read: a peer that asks without reading the answers is no
/// longer read (one get adds up to its buffer over the chunk size beyond).
const MAX_QUEUED_ANSWERS: u64 = 1024;
/// Why a reader stopped.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// Clean end of stream at a frame boundary.
    Eof,
    Io(io::Error),
    Protocol(String),
}

impl ReadError {
    /// The error as the peer's fault if the stream broke its own rules:
    /// a ring's indices that do not add up, or bytes on the socket of a
    /// connection on rings (`InvalidData`, which no socket read gives) are
    /// a protocol error, as a malformed frame is.
    pub(crate) fn blamed(self) -> ReadError {
        match self {
            ReadError::Io(e) if e.kind() == io::ErrorKind::InvalidData => {
                ReadError::Protocol(e.to_string())
            }
            e => e,
        }
    }

    pub(crate) fn describe(&self, peer: u32) -> String {
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

/// Counts a connection that proved nothing in time (logged at debug
/// level: a stranger holding idle connections must not fill the log).
fn unproven(rank: u32, from: SocketAddr, detail: &str) {
    tracing::debug!(rank, %from, detail, "dropping connection");
    metrics::bad_connection();
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

/// Accepts connections until the runtime is shut down; each waits for its
/// proof of the job key at the listener's gate ([`gate`]).
pub(crate) async fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    let gate = gate::shared();
    loop {
        match listener.accept().await {
            Ok((s, from)) => {
                let (id, evicted) = gate
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .enter(from.ip());
                for h in evicted {
                    metrics::bound_hit("handshakes");
                    h.abort();
                }
                super::sock::tune_accepted(&s);
                let ticket = gate::Ticket::new(gate.clone(), id);
                let task = tokio::spawn(handle_accepted(shared.clone(), s, from, ticket));
                let mut g = gate.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(h) = g.attach(id, task.abort_handle()) {
                    // Evicted already (another connection came meanwhile).
                    h.abort();
                }
            }
            Err(e) => {
                // Out of descriptors and the like: back off, keep serving.
                tracing::warn!(rank = shared.rank, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Reads the caller's hello: decoded, and its body as received (what the
/// handshake's proofs are made over).
async fn read_hello(rd: &mut OwnedReadHalf) -> Result<(Hello, Bytes), String> {
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
    Ok((Hello::decode(&body)?, body))
}

/// A connection reached our listener: its hello, the version, the
/// handshake (nothing else is read before the caller proved the job key;
/// all within [`gate::PRE_PROOF_TIMEOUT`]), then, its place at the gate
/// freed, what its role asks for.
async fn handle_accepted(
    shared: Arc<Shared>,
    stream: TcpStream,
    from: SocketAddr,
    ticket: gate::Ticket,
) {
    let (mut rd, mut wr) = stream.into_split();
    let until = tokio::time::Instant::now() + gate::PRE_PROOF_TIMEOUT;
    let (hello, claim) = match tokio::time::timeout_at(until, read_hello(&mut rd)).await {
        Ok(Ok(h)) => h,
        Ok(Err(detail)) => return bad_connection(shared.rank, from, &detail),
        Err(_) => return unproven(shared.rank, from, "no hello in time"),
    };
    if hello.version != VERSION {
        bad_connection(
            shared.rank,
            from,
            &version::mismatch(shared.rank, hello.version),
        );
        return refuse(rd, wr, version::refusal(hello.version)).await;
    }
    let proven = handshake::listen(&mut rd, &mut wr, &shared.auth, shared.rank, &hello, &claim);
    let keys = match tokio::time::timeout_at(until, proven).await {
        Ok(Ok(keys)) => {
            // Out of the gate before the caller hears it is in: from
            // here no newer connection can close this one.
            ticket.done();
            if let Err(e) = wr.write_all(&handshake::accepted_frame()).await {
                return bad_connection(shared.rank, from, &format!("accepting the proof: {e}"));
            }
            keys
        }
        Ok(Err(handshake::Failed::Auth(_))) => {
            let reason = handshake::refusal();
            let claimed = format!(
                "{reason} (the caller claimed rank {} as {:?})",
                hello.rank, hello.role
            );
            bad_connection(shared.rank, from, &claimed);
            return refuse(rd, wr, reason).await;
        }
        Ok(Err(f)) => return bad_connection(shared.rank, from, &f.describe("the caller")),
        Err(_) => return unproven(shared.rank, from, "no proof of the job key in time"),
    };
    let (send, recv) = match listener_macs(&shared, &hello, &keys) {
        Ok(m) => m,
        Err(reason) => {
            bad_connection(shared.rank, from, &reason);
            return refuse(rd, wr, reason).await;
        }
    };
    match hello.role {
        Role::Peer => accept_peer(shared, rd, wr, hello, from, (send, recv)).await,
        Role::Register => bootstrap::on_register(shared, rd, wr, hello, from).await,
        Role::Launcher => {
            super::launcher::on_launcher(shared, MacRead::new(rd, recv), wr, hello, from).await
        }
        Role::Spare => super::spare::on_spare(shared, rd, wr, hello, from, send).await,
    }
}

/// A connection's frame MACs: what it sends, what it receives (`None`:
/// without `TASKFOLD_INTEGRITY=mac`).
type Macs = (Option<FrameMac>, Option<FrameMac>);

/// The listener's MACs of a proven connection, or why it is refused: a
/// rank must agree with us on `TASKFOLD_INTEGRITY`; the launcher always
/// seals its report.
fn listener_macs(shared: &Shared, hello: &Hello, keys: &FrameKeys) -> Result<Macs, String> {
    let always = matches!(hello.role, Role::Launcher | Role::Spare);
    if !always && hello.mac != shared.integrity {
        let side = |mac: bool| if mac { "mac" } else { "off" };
        return Err(format!(
            "TASKFOLD_INTEGRITY differs: rank {} runs `{}`, the caller `{}`",
            shared.rank,
            side(shared.integrity),
            side(hello.mac)
        ));
    }
    Ok(if hello.mac {
        let (s, r) = keys.for_side(false);
        (Some(s), Some(r))
    } else {
        (None, None)
    })
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
    (mut send, recv): Macs,
) {
    if let Err(reason) = check_peer(&shared, &hello) {
        bad_connection(shared.rank, from, &reason);
        return refuse(rd, wr, reason).await;
    }
    let peer = hello.rank;
    super::respawn::await_admission(&shared, peer, hello.incarnation).await;
    let verdict = {
        let mut slot = shared.slot(peer);
        if shared.is_closed() {
            Verdict::Goodbye(rd, wr)
        } else if hello.incarnation != slot.incarnation {
            let reason = format!(
                "incarnation {} of rank {peer} is not the one this rank serves ({})",
                hello.incarnation, slot.incarnation
            );
            Verdict::Refuse(rd, wr, reason)
        } else if slot.link != Link::Up {
            Verdict::Refuse(rd, wr, format!("rank {peer} already left the job"))
        } else if slot.incoming.is_some() {
            Verdict::Refuse(rd, wr, format!("rank {peer} is already connected"))
        } else {
            let (tx, rx) = Writer::new();
            slot.incoming = Some(tx.clone());
            let rd = MacRead::new(WireRead::Tcp(rd), recv);
            let caller = Caller {
                peer,
                inc: hello.incarnation,
                writer: (tx, rx),
            };
            let r = tokio::spawn(serve_caller(shared.clone(), caller, rd, wr, send.take()));
            slot.tasks.push(r.abort_handle());
            Verdict::Accepted
        }
    };
    match verdict {
        Verdict::Accepted => tracing::debug!(rank = shared.rank, peer, "peer connected"),
        // We are shutting down: the caller sees a goodbye, not a failure.
        Verdict::Goodbye(rd, wr) => {
            let head = Header::new(kind::GOODBYE, 0).encode();
            let mut bye = head.to_vec();
            if let Some(m) = send.as_mut() {
                bye.extend_from_slice(&m.seal(&[&head]));
            }
            linger_close(rd, wr, bye).await;
        }
        Verdict::Refuse(rd, wr, reason) => {
            bad_connection(shared.rank, from, &reason);
            refuse(rd, wr, reason).await;
        }
    }
}

/// A caller whose connection we serve: its rank, incarnation and the
/// writer of our answers.
struct Caller {
    peer: u32,
    inc: u32,
    writer: (Writer, WriterEnd),
}

/// Serves a caller's connection: its choice of wire (the `switch`
/// module), then our writer and the reader of its frames.
async fn serve_caller(
    shared: Arc<Shared>,
    c: Caller,
    rd: Rd,
    wr: OwnedWriteHalf,
    mut send: Option<taskfold_core::auth::FrameMac>,
) {
    let _live = shared.live_guard();
    let (rd, wr) = match super::switch::answer(&shared, c.peer, rd, wr, &mut send).await {
        Ok(w) => w,
        Err(e) => return ended(&shared, c.peer, c.inc, e, true),
    };
    let (tx, rx) = c.writer;
    let w = tokio::spawn(run_writer(shared.clone(), wr, rx, c.peer, send));
    {
        let mut slot = shared.slot(c.peer);
        if slot.link != Link::Up || slot.incarnation != c.inc {
            w.abort();
            return;
        }
        slot.tasks.push(w.abort_handle());
    }
    in_reader(shared, c.peer, c.inc, rd, tx).await;
}

/// Reads a peer's control frames and get requests.
async fn in_reader(shared: Arc<Shared>, peer: u32, inc: u32, mut rd: Rd, wtx: Writer) {
    let _live = shared.live_guard();
    let err = loop {
        let hdr = match read_header(&mut rd).await {
            Ok(h) => h,
            Err(e) => break e,
        };
        match hdr.kind {
            kind::CONTROL => {
                shared.event_room(Some(peer), u64::from(hdr.len)).await;
                match read_control(&mut rd, &hdr, shared.max_frame).await {
                    Ok(frame) => match rd.end_frame().await {
                        Ok(()) => shared.deliver(peer, frame),
                        Err(e) => break e,
                    },
                    Err(e) => break e,
                }
            }
            kind::GET_REQ => {
                if let Err(e) = rd.end_frame().await {
                    break e;
                }
                metrics::received(HEADER_LEN as u64, 1);
                if wtx.queued() >= MAX_QUEUED_ANSWERS {
                    metrics::bound_hit("writer");
                    wtx.room(MAX_QUEUED_ANSWERS).await;
                }
                get::serve(&shared, &wtx, peer, hdr.a, hdr.b, hdr.c);
            }
            kind::GET_RETURN => {
                if let Err(e) = rd.end_frame().await {
                    break e;
                }
                metrics::received(HEADER_LEN as u64, 1);
                shared.loans().returned(peer, hdr.a);
            }
            kind::GOODBYE => {
                if let Err(e) = rd.end_frame().await {
                    break e;
                }
                shared.peer_gone(peer);
                let _ = wtx.send(OutFrame::Close);
                return;
            }
            k => break ReadError::Protocol(format!("unexpected frame kind {k} from a caller")),
        }
    };
    ended(&shared, peer, inc, err, true);
}

/// Reports the end of a connection that did not say goodbye (`incoming`:
/// the peer's connection to us).
pub(crate) fn ended(shared: &Arc<Shared>, peer: u32, inc: u32, err: ReadError, incoming: bool) {
    if !shared.serves(peer, inc) {
        return; // a replaced incarnation's connection
    }
    if shared.is_closed() {
        return;
    }
    let err = err.blamed();
    if let ReadError::Protocol(d) = &err {
        tracing::error!(rank = shared.rank, peer, detail = %d, "protocol error, dropping the link");
        metrics::bad_connection();
    }
    shared.link_lost(peer, err.describe(peer), incoming);
}
