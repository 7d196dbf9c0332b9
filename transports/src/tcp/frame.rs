//! The frame codec: a fixed 32-byte header (the shared
//! [`crate::framing`] header with three fields), then `len` payload bytes.
//!
//! ```text
//! offset  size  field
//!      0     2  magic  b"tf"
//!      2     1  kind   (see the `kind` constants below)
//!      3     1  reserved, 0
//!      4     4  len    payload bytes that follow the header (u32 LE)
//!      8     8  a      u64 LE, meaning depends on the kind
//!     16     8  b      u64 LE
//!     24     8  c      u64 LE
//! ```
//!
//! | kind | a | b | c | payload |
//! | --- | --- | --- | --- | --- |
//! | `HELLO` | | | | [`Hello`] body (83 bytes), which begins with the caller's protocol version ([`crate::version`]) and ends with its nonce |
//! | `CHALLENGE` | | | | the listener's nonce and proof of the job key (64 bytes, [`taskfold_core::auth::Challenge`]) |
//! | `PROOF` | | | | the caller's proof of the job key (32 bytes) |
//! | `ACCEPTED` | | | | none: the listener checked the proof and holds the connection for good |
//! | `REFUSE` | | | | the reason, UTF-8 |
//! | `TABLE` | size | the master's protocol version | the master's rank | `size` entries of 31 bytes: an address (19 bytes), the rank's node token (u64 LE), its current incarnation (u32 LE) |
//! | `CONTROL` | | | | the control frame, opaque |
//! | `GET_REQ` | request id | key | node token (0: stream it) | none |
//! | `GET_CHUNK` | request id | offset | total length | `len` bytes of the buffer |
//! | `GET_ERR` | request id | key | 1 = not exposed | none |
//! | `GOODBYE` | | | | none |
//! | `GET_LEND` | request id | address | total length | owner pid (u64 LE); then, if the buffer is in the owner's shared heap, its heap descriptor, inode, length and the buffer's offset (4 × u64 LE) |
//! | `GET_RETURN` | request id | | | none |
//! | `PARKED` | size | the master's protocol version | the master's rank | a `TABLE`'s entries |
//! | `ASSIGN` | the rank to take | the incarnation to take it as | | none |
//! | `DISMISS` | | | | none |
//! | `RINGS` | | | | none (the caller stays on TCP), or its offer of rings (32 bytes: pid u32, capacity u64, five descriptors i32, all LE; see `ring`) |
//! | `RINGS_TAKEN` | 1 = taken, 0 = not (both stay on TCP) | | | none |

use crate::shm::HeapRef;
use crate::version::VERSION;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use taskfold_core::auth::{CHALLENGE_LEN, NONCE_LEN, PROOF_LEN};

/// Payload of a `GET_LEND` frame: the owner's pid.
pub const LEND_LEN: u32 = 8;
/// Payload of a `GET_LEND` frame naming a place in the owner's shared heap.
pub const LEND_HEAP_LEN: u32 = 40;
/// Header length in bytes.
pub const HEADER_LEN: usize = crate::framing::header_len(3);
/// First two bytes of every frame.
pub const MAGIC: [u8; 2] = *b"tf";
/// Largest `HELLO` or `REFUSE` payload accepted.
pub const HANDSHAKE_MAX: u32 = 4096;
/// Bytes of one encoded address in a `TABLE` or `HELLO`.
pub const ADDR_LEN: usize = 19;
/// Bytes of one `TABLE` entry: an address, a node token, an incarnation.
pub const ENTRY_LEN: usize = ADDR_LEN + 8 + 4 + 1;
/// Bytes of an encoded [`Hello`] body.
pub const HELLO_LEN: usize = 24 + ADDR_LEN + 8 + NONCE_LEN;

/// Frame kinds.
pub mod kind {
    /// First frame of every connection: who is calling.
    pub const HELLO: u8 = 1;
    /// The handshake was refused; payload is the reason. The sender closes.
    pub const REFUSE: u8 = 2;
    /// Bootstrap answer of the master: every rank's listen address.
    pub const TABLE: u8 = 3;
    /// An ordered control frame, delivered as `Event::Message`.
    pub const CONTROL: u8 = 4;
    /// A one-sided get request.
    pub const GET_REQ: u8 = 5;
    /// A piece of a get response.
    pub const GET_CHUNK: u8 = 6;
    /// A get failed (the key is not exposed).
    pub const GET_ERR: u8 = 7;
    /// The sender is leaving gracefully; nothing follows on this connection.
    pub const GOODBYE: u8 = 8;
    /// A get answered by a loan: read the buffer from the owner's memory
    /// (same node, see the `cma` module).
    pub const GET_LEND: u8 = 9;
    /// The requester finished reading a loan.
    pub const GET_RETURN: u8 = 10;
    /// The listener's answer to a hello: its nonce and its proof of the
    /// job key (see `taskfold_core::auth`).
    pub const CHALLENGE: u8 = 11;
    /// The caller's proof of the job key; nothing else is read before it.
    pub const PROOF: u8 = 12;
    /// The master's answer to a spare: parked (payload: the table).
    pub const PARKED: u8 = 13;
    /// The master to a parked spare: take rank `a` as incarnation `b`.
    pub const ASSIGN: u8 = 14;
    /// The master to a parked spare: the job is over.
    pub const DISMISS: u8 = 15;
    /// The listener checked the caller's proof and holds the connection
    /// for good (no longer one its gate may close): the caller's last
    /// handshake frame, read before it takes the connection as its own.
    pub const ACCEPTED: u8 = 16;
    /// A peer connection's first frame after the handshake, from the
    /// caller: the rings it offers (same node), or none (TCP).
    pub const RINGS: u8 = 17;
    /// The peer's answer to an offer of rings.
    pub const RINGS_TAKEN: u8 = 18;
}

/// Payload of a `RINGS` frame offering rings (`super::ring::Offer`).
pub const RINGS_OFFER_LEN: u32 = 32;

/// `GET_ERR` code: the key is not exposed.
pub const ERR_NOT_EXPOSED: u64 = 1;

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Header {
    /// Frame kind.
    pub kind: u8,
    /// Payload length.
    pub len: u32,
    /// First kind-specific field.
    pub a: u64,
    /// Second kind-specific field.
    pub b: u64,
    /// Third kind-specific field.
    pub c: u64,
}

impl Header {
    /// A header of `kind` with `len` payload bytes and zero fields.
    pub fn new(kind: u8, len: u32) -> Header {
        Header {
            kind,
            len,
            ..Header::default()
        }
    }

    /// Encodes the header ([`crate::framing`], three fields).
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        crate::framing::encode(
            &mut h,
            MAGIC,
            self.kind,
            self.len,
            &[self.a, self.b, self.c],
        );
        h
    }

    /// Decodes and checks magic, kind and the fixed lengths of bodiless kinds.
    pub fn decode(h: &[u8; HEADER_LEN]) -> Result<Header, String> {
        let mut f = [0u64; 3];
        let (kind, len) =
            crate::framing::decode(h, MAGIC, &mut f).map_err(|e| format!("frame: {e}"))?;
        let hdr = Header {
            kind,
            len,
            a: f[0],
            b: f[1],
            c: f[2],
        };
        match hdr.kind {
            kind::HELLO | kind::REFUSE | kind::TABLE | kind::CONTROL | kind::GET_CHUNK => {}
            kind::PARKED => {}
            kind::GET_LEND if hdr.len != LEND_LEN && hdr.len != LEND_HEAP_LEN => {
                return Err(format!("a loan with a payload of {}", hdr.len));
            }
            kind::GET_LEND => {}
            kind::CHALLENGE if hdr.len != CHALLENGE_LEN as u32 => {
                return Err(format!("a challenge with a payload of {}", hdr.len));
            }
            kind::PROOF if hdr.len != PROOF_LEN as u32 => {
                return Err(format!("a proof with a payload of {}", hdr.len));
            }
            kind::CHALLENGE | kind::PROOF => {}
            kind::RINGS if hdr.len != 0 && hdr.len != RINGS_OFFER_LEN => {
                return Err(format!("a ring offer with a payload of {}", hdr.len));
            }
            kind::RINGS => {}
            kind::GET_REQ
            | kind::RINGS_TAKEN
            | kind::GET_ERR
            | kind::GOODBYE
            | kind::GET_RETURN
            | kind::ASSIGN
            | kind::DISMISS
            | kind::ACCEPTED => {
                if hdr.len != 0 {
                    return Err(format!(
                        "frame kind {} with a payload of {}",
                        hdr.kind, hdr.len
                    ));
                }
            }
            k => return Err(format!("unknown frame kind {k}")),
        }
        Ok(hdr)
    }
}

/// Who opens a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A rank registering with the master during the bootstrap.
    Register = 1,
    /// A rank opening its link to a peer.
    Peer = 2,
    /// The launcher reporting to the master.
    Launcher = 3,
    /// A spare parking with the master until a rank needs it.
    Spare = 4,
}

/// The body of a `HELLO` frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The caller's protocol version ([`crate::version::VERSION`]).
    pub version: u16,
    /// Why it calls.
    pub role: Role,
    /// Job id.
    pub job: u64,
    /// The caller's rank (`u32::MAX` for the launcher).
    pub rank: u32,
    /// Number of ranks the caller was started with.
    pub size: u32,
    /// The caller's listen address (registration only).
    pub addr: Option<SocketAddr>,
    /// The caller's node token ([`crate::same_node::node_token`]; 0 when
    /// unknown), carried by a registration into the master's table.
    pub node: u64,
    /// The caller's fresh nonce for the handshake (see
    /// `taskfold_core::auth`).
    pub nonce: [u8; NONCE_LEN],
    /// The caller's process incarnation: 0 for a rank started with the
    /// job, `k` for its `k`-th replacement. A registration with `k > 0`
    /// asks to replace a dead rank; a peer refuses a caller older than the
    /// incarnation it knows (the old process is fenced).
    pub incarnation: u32,
    /// The caller seals every frame after the handshake with a MAC
    /// (`TASKFOLD_INTEGRITY=mac`; flag bit 1). A rank refuses a peer or a
    /// registration that does not agree with it; the launcher always does.
    pub mac: bool,
}

/// A rank's entry in the master's `TABLE`: where it listens, its node,
/// and which of its processes is the one in the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The rank's listen address.
    pub addr: SocketAddr,
    /// The rank's node token (0 when unknown).
    pub node: u64,
    /// The rank's current incarnation: connections of an older one are
    /// refused (a replacement learns who replaced whom before it).
    pub incarnation: u32,
    /// The master declared that incarnation failed: a replacement learns
    /// the job's deaths with its admission, so that it turns to the same
    /// standby as every other rank should the master die at once.
    pub dead: bool,
}

impl Entry {
    /// The entry's bytes (as one entry of a `TABLE`).
    pub fn encode(&self) -> [u8; ENTRY_LEN] {
        let mut out = [0u8; ENTRY_LEN];
        out[..ADDR_LEN].copy_from_slice(&encode_addr(self.addr));
        out[ADDR_LEN..ADDR_LEN + 8].copy_from_slice(&self.node.to_le_bytes());
        out[ADDR_LEN + 8..ADDR_LEN + 12].copy_from_slice(&self.incarnation.to_le_bytes());
        out[ADDR_LEN + 12] = u8::from(self.dead);
        out
    }

    /// Decodes [`Entry::encode`]'s bytes.
    pub fn decode(b: &[u8]) -> Result<Entry, String> {
        if b.len() != ENTRY_LEN {
            return Err(format!("table entry of {} bytes", b.len()));
        }
        let (addr, rest) = b.split_at(ADDR_LEN);
        let (node, rest) = rest.split_at(8);
        let (inc, dead) = rest.split_at(4);
        Ok(Entry {
            addr: decode_addr(addr)?,
            node: u64::from_le_bytes(node.try_into().map_err(|_| "node token")?),
            incarnation: u32::from_le_bytes(inc.try_into().map_err(|_| "incarnation")?),
            dead: match dead {
                [0] => false,
                [1] => true,
                other => return Err(format!("table entry with status {other:?}")),
            },
        })
    }
}

impl Hello {
    /// Encodes the body.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(HELLO_LEN);
        v.extend_from_slice(&self.version.to_le_bytes());
        v.push(self.role as u8);
        v.push(u8::from(self.addr.is_some()) | (u8::from(self.mac) << 1));
        v.extend_from_slice(&self.rank.to_le_bytes());
        v.extend_from_slice(&self.size.to_le_bytes());
        v.extend_from_slice(&self.incarnation.to_le_bytes());
        v.extend_from_slice(&self.job.to_le_bytes());
        let addr = self
            .addr
            .unwrap_or(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0));
        v.extend_from_slice(&encode_addr(addr));
        v.extend_from_slice(&self.node.to_le_bytes());
        v.extend_from_slice(&self.nonce);
        v
    }

    /// Decodes a body. The version is read first, so that a peer of another
    /// version can be told so even if the rest of its hello differs.
    pub fn decode(b: &[u8]) -> Result<Hello, String> {
        if b.len() < 2 {
            return Err(format!("hello of {} bytes", b.len()));
        }
        let version = u16::from_le_bytes([b[0], b[1]]);
        if version != VERSION {
            // The caller refuses on the version; the rest is not parsed.
            return Ok(Hello {
                version,
                role: Role::Peer,
                job: 0,
                rank: u32::MAX,
                size: 0,
                addr: None,
                node: 0,
                nonce: [0; NONCE_LEN],
                incarnation: 0,
                mac: false,
            });
        }
        if b.len() != HELLO_LEN {
            return Err(format!("hello of {} bytes, expected {HELLO_LEN}", b.len()));
        }
        let role = match b[2] {
            1 => Role::Register,
            2 => Role::Peer,
            3 => Role::Launcher,
            4 => Role::Spare,
            r => return Err(format!("unknown role {r}")),
        };
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let flags = b[3];
        if flags & !3 != 0 {
            return Err(format!("bad hello flags {flags}"));
        }
        let addr = match flags & 1 {
            0 => None,
            _ => Some(decode_addr(&b[24..24 + ADDR_LEN])?),
        };
        Ok(Hello {
            version,
            role,
            job: u64_at(16),
            rank: u32_at(4),
            size: u32_at(8),
            addr,
            node: u64_at(24 + ADDR_LEN),
            nonce: b[24 + ADDR_LEN + 8..]
                .try_into()
                .map_err(|_| "hello nonce")?,
            incarnation: u32_at(12),
            mac: flags & 2 != 0,
        })
    }
}

/// Encodes an address: family (4 or 6), 16 address bytes, port (u16 LE).
pub fn encode_addr(addr: SocketAddr) -> [u8; ADDR_LEN] {
    let mut out = [0u8; ADDR_LEN];
    match addr.ip() {
        IpAddr::V4(ip) => {
            out[0] = 4;
            out[1..5].copy_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            out[0] = 6;
            out[1..17].copy_from_slice(&ip.octets());
        }
    }
    out[17..19].copy_from_slice(&addr.port().to_le_bytes());
    out
}

/// Decodes an address written by [`encode_addr`].
pub fn decode_addr(b: &[u8]) -> Result<SocketAddr, String> {
    if b.len() != ADDR_LEN {
        return Err(format!("address of {} bytes", b.len()));
    }
    let port = u16::from_le_bytes([b[17], b[18]]);
    let ip: IpAddr = match b[0] {
        4 => Ipv4Addr::new(b[1], b[2], b[3], b[4]).into(),
        6 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[1..17]);
            Ipv6Addr::from(o).into()
        }
        f => return Err(format!("bad address family {f}")),
    };
    Ok(SocketAddr::new(ip, port))
}

/// Encodes the master's table, one [`Entry`] per rank.
pub fn encode_table(entries: &[Entry]) -> Vec<u8> {
    let mut v = Vec::with_capacity(entries.len() * ENTRY_LEN);
    for e in entries {
        v.extend_from_slice(&e.encode());
    }
    v
}

/// Decodes a table of `size` entries.
pub fn decode_table(b: &[u8], size: u32) -> Result<Vec<Entry>, String> {
    if b.len() as u64 != u64::from(size) * ENTRY_LEN as u64 {
        return Err(format!(
            "address table of {} bytes for {size} ranks",
            b.len()
        ));
    }
    b.chunks(ENTRY_LEN).map(Entry::decode).collect()
}

/// Encodes the payload of a `GET_LEND`: the owner's `pid`, then, if the
/// buffer lies in its shared heap, where.
pub fn encode_lend(pid: u64, heap: Option<HeapRef>) -> Vec<u8> {
    let mut body = pid.to_le_bytes().to_vec();
    if let Some(h) = heap {
        for v in [u64::from(h.fd), h.ino, h.len, h.offset] {
            body.extend_from_slice(&v.to_le_bytes());
        }
    }
    body
}

/// Decodes what [`encode_lend`] wrote: the owner's pid and the place in
/// its heap, if any. A payload of another length, or a descriptor beyond
/// `u32`, is refused (a truncated descriptor would name another file).
pub fn decode_lend(b: &[u8]) -> Result<(u64, Option<HeapRef>), String> {
    if b.len() != LEND_LEN as usize && b.len() != LEND_HEAP_LEN as usize {
        return Err(format!("a loan with a payload of {}", b.len()));
    }
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[8 * i..8 * i + 8]);
        u64::from_le_bytes(w)
    };
    if b.len() == LEND_LEN as usize {
        return Ok((word(0), None));
    }
    let fd = u32::try_from(word(1)).map_err(|_| format!("a loan from descriptor {}", word(1)))?;
    let heap = HeapRef {
        fd,
        ino: word(2),
        len: word(3),
        offset: word(4),
    };
    Ok((word(0), Some(heap)))
}

/// Writes one frame on a blocking stream.
pub fn write_frame_sync(w: &mut impl Write, hdr: Header, payload: &[u8]) -> io::Result<()> {
    let mut buf = Vec::with_capacity(HEADER_LEN + payload.len());
    buf.extend_from_slice(&hdr.encode());
    buf.extend_from_slice(payload);
    w.write_all(&buf)?;
    w.flush()
}

/// Reads one frame from a blocking stream; `Ok(None)` on a clean end of
/// stream before the header. Payloads over `max` are refused.
pub fn read_frame_sync(r: &mut impl Read, max: u64) -> io::Result<Option<(Header, Vec<u8>)>> {
    let mut h = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match r.read(&mut h[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let hdr = Header::decode(&h).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    if u64::from(hdr.len) > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {} bytes exceeds {max}", hdr.len),
        ));
    }
    let mut payload = vec![0u8; hdr.len as usize];
    r.read_exact(&mut payload)?;
    Ok(Some((hdr, payload)))
}

/// Encodes a `REFUSE` frame.
pub fn refuse_frame(reason: &str) -> Vec<u8> {
    let mut r = reason.as_bytes();
    if r.len() > HANDSHAKE_MAX as usize {
        r = &r[..HANDSHAKE_MAX as usize];
    }
    let mut v = Header::new(kind::REFUSE, r.len() as u32).encode().to_vec();
    v.extend_from_slice(r);
    v
}

/// Encodes a complete frame of `kind` with `payload`.
pub fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = Header::new(kind, payload.len() as u32).encode().to_vec();
    v.extend_from_slice(payload);
    v
}

/// Encodes a complete `HELLO` frame.
pub fn hello_frame(h: &Hello) -> Vec<u8> {
    let body = h.encode();
    let mut v = Header::new(kind::HELLO, body.len() as u32)
        .encode()
        .to_vec();
    v.extend_from_slice(&body);
    v
}

#[cfg(test)]
mod tests;
