//! Entry points of the fuzz targets (cargo feature `fuzzing`; not part of
//! the API): the TCP receiver's decisions on untrusted input, driven
//! without sockets. Each runs the same functions the transport runs; a
//! failure is returned as the error the transport would raise.

use super::frame::{self, kind, Header, HEADER_LEN};
use super::get::{self, Dest};
use super::peer::Pending;
use super::rendezvous::{self as rv, Unresolved};
use crate::shm::HeapRef;
use std::net::SocketAddr;
use std::path::Path;

/// The request id of the get a [`chunks`] run receives.
pub const REQ: u64 = 1;

/// The master's address and rank read from a rendezvous file's `text`,
/// for `job` (what a rank does with the file another process wrote).
pub fn rendezvous(text: &str, job: u64) -> Result<(SocketAddr, u32), String> {
    rv::parse_rendezvous(text, job, Path::new("fuzz")).map_err(|e| match e {
        Unresolved::Retry(why) => why,
        Unresolved::Fatal(e) => e.to_string(),
    })
}

/// The text the master, rank `master`, writes in its rendezvous file.
pub fn rendezvous_text(job: u64, addr: SocketAddr, master: u32) -> String {
    rv::rendezvous_text(job, addr, master)
}

/// The master's rank and the table in a table file's `bytes`, if they
/// are of `job` and `size` ranks (what a rank whose master died while it
/// handed out the table reads, see `bootstrap::started`).
pub fn table_file(bytes: &[u8], job: u64, size: u32) -> Option<(u32, Vec<frame::Entry>)> {
    super::bootstrap::started::parse(bytes, job, size)
}

/// The bytes the master, rank `master`, writes in its table file.
pub fn table_file_bytes(job: u64, master: u32, table: &[frame::Entry]) -> Vec<u8> {
    super::bootstrap::started::bytes(job, master, table)
}

/// What a get's receiver made of a sequence of frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkRun {
    /// Chunks accepted.
    pub chunks: usize,
    /// Payload bytes accepted (what the peer must really have sent).
    pub accepted: u64,
    /// The announced total, once a chunk was accepted.
    pub total: u64,
    /// Every byte of the total arrived: the get completed.
    pub completed: bool,
    /// The protocol error that dropped the link, if any.
    pub error: Option<String>,
    /// Length of the get's buffer at the end (0 for a segmented get).
    pub len: usize,
    /// Capacity of the get's buffer at the end.
    pub capacity: usize,
}

/// Feeds the headers `frames` to the receiver of get [`REQ`], which
/// accepts at most `max` bytes in chunks of at most `max_chunk`
/// (`segmented`: each chunk in a buffer of its own). A payload is taken
/// to arrive in full (its bytes are not read); frames of other kinds go
/// to other handlers and are skipped. Stops at the first error or when
/// the get completes.
pub fn chunks(max: u64, max_chunk: u64, segmented: bool, frames: &[[u8; HEADER_LEN]]) -> ChunkRun {
    let (tx, _rx) = tokio::sync::oneshot::channel();
    let sink: Option<crate::SegmentSink> = segmented.then(|| Box::new(|_| {}) as _);
    let mut p = Pending {
        key: 0,
        buf: None,
        total: 0,
        max,
        done: 0,
        view: false,
        tx,
        sink,
    };
    let mut run = ChunkRun {
        chunks: 0,
        accepted: 0,
        total: 0,
        completed: false,
        error: None,
        len: 0,
        capacity: 0,
    };
    for f in frames {
        match feed(&mut p, f, max_chunk) {
            Ok(None) => continue,
            Ok(Some(len)) => {
                run.chunks += 1;
                run.accepted += len;
                p.done += len;
                if p.done == p.total {
                    run.completed = true;
                    break;
                }
            }
            Err(e) => {
                run.error = Some(e);
                break;
            }
        }
    }
    run.total = p.total;
    if let Some(b) = &p.buf {
        (run.len, run.capacity) = (b.len(), b.capacity());
    }
    run
}

/// One frame for get `p`: `Some(len)` for a chunk of `len` bytes
/// accepted, `None` for a frame of another kind.
fn feed(p: &mut Pending, f: &[u8; HEADER_LEN], max_chunk: u64) -> Result<Option<u64>, String> {
    let hdr = Header::decode(f)?;
    if hdr.kind != kind::GET_CHUNK {
        return Ok(None);
    }
    if hdr.a != REQ {
        return Err(format!("chunk for unknown request {}", hdr.a));
    }
    let len = u64::from(hdr.len);
    match get::prepare_chunk(p, hdr.b, hdr.c, len, max_chunk)? {
        Dest::Piece(b) if b.len() as u64 != len => Err(format!("piece of {}", b.len())),
        Dest::Range(r)
            if r.len() as u64 != len || Some(r.end) != p.buf.as_ref().map(|b| b.len()) =>
        {
            Err(format!("range {r:?} for a chunk of {len}"))
        }
        _ => Ok(Some(len)),
    }
}

/// What the receiver of a get accepting `max` bytes makes of a `GET_LEND`
/// frame (`header`, then `body`, the bytes its header announces): the
/// owner's pid and heap place, or the protocol error.
pub fn lend(
    max: u64,
    header: &[u8; HEADER_LEN],
    body: &[u8],
) -> Result<(u64, Option<HeapRef>), String> {
    let hdr = Header::decode(header)?;
    if hdr.kind != kind::GET_LEND {
        return Err(format!("frame kind {}", hdr.kind));
    }
    if body.len() as u64 != u64::from(hdr.len) {
        return Err(format!("{} bytes of a payload of {}", body.len(), hdr.len));
    }
    let (pid, heap) = frame::decode_lend(body)?;
    if let Some(e) = get::check_lend(max, hdr.c, pid) {
        return Err(e);
    }
    Ok((pid, heap))
}

/// What a sealed connection's reader takes of `stream` (the bytes a
/// connection carried after the handshake, `TASKFOLD_INTEGRITY=mac`):
/// the control frames' payloads it accepted, in order, until the first
/// frame that is not a control frame within `max_frame` or fails its
/// tag (whose error is returned too). Runs the reader's own
/// [`super::integrity::MacRead`], header and payload reads.
pub fn sealed_frames(
    stream: &[u8],
    mac: taskfold_core::auth::FrameMac,
    max_frame: u64,
) -> (Vec<Vec<u8>>, Option<String>) {
    use super::conn::{read_control, read_header, ReadError};
    let mut rd = super::integrity::MacRead::new(stream, Some(mac));
    let mut taken = Vec::new();
    let err = futures::executor::block_on(async {
        loop {
            let hdr = match read_header(&mut rd).await {
                Ok(h) => h,
                Err(ReadError::Eof) => return None,
                Err(e) => return Some(e.describe(0)),
            };
            if hdr.kind != kind::CONTROL {
                return Some(format!("frame kind {}", hdr.kind));
            }
            let frame = match read_control(&mut rd, &hdr, max_frame).await {
                Ok(f) => f,
                Err(e) => return Some(e.describe(0)),
            };
            if let Err(e) = rd.end_frame().await {
                return Some(e.describe(0));
            }
            taken.push(frame.to_vec());
        }
    });
    (taken, err)
}

/// The text a caller keeps of a refusal received before the listener
/// proved the job key (quoted, bounded).
pub fn pre_proof_refusal(payload: &[u8]) -> String {
    super::handshake::unproven(payload)
}
