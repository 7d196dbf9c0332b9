//! The messages ranks exchange over the fabric (tagged sends), and the
//! endpoint-name frame exchanged over TCP at start-up.
//!
//! Every fabric message is at most [`SLOT`] bytes: a fixed [`HEADER`]-byte
//! header (the shared [`crate::framing`] header with five fields: magic,
//! kind, the payload's length, five u64 words), then (for `CONTROL` only)
//! the frame's bytes. The protocol
//! version is checked once, in the endpoint-name frame of the bootstrap
//! ([`crate::version`]), not in every message. All integers are
//! little-endian. The sender's rank travels in the tag (see [`tag_of`]), not
//! in the message. A received message is untrusted input: [`Msg::decode`]
//! checks it and names what is wrong.
//!
//! | kind | fields | meaning |
//! | --- | --- | --- |
//! | `CONTROL` | seq, then the frame | a control frame of at most [`INLINE_MAX`] bytes |
//! | `LARGE` | seq, len, addr, key, token | a larger control frame: read it at (addr, key), then `RELEASE` token |
//! | `BYE` | seq | the sender shut down gracefully (after all its frames) |
//! | `GET_REQ` | req, buffer key | "where is the buffer `key`?" |
//! | `GET_OK` | req, len, addr, key, token | read it there, then `RELEASE` token |
//! | `GET_ERR` | req, buffer key | not exposed |
//! | `RELEASE` | token | the reader is done with a lease |
//! | `CREDIT` | n | the receiver consumed `n` more of the sender's messages |
//!
//! Flow control: a rank sends a peer at most a window of messages beyond
//! those the peer has reported consumed (`CREDIT` messages themselves are
//! not counted), so a slow receiver never has more than a window of
//! unexpected messages per sender queued in the provider. Besides bounding
//! memory, this avoids a bug of libfabric 1.17's `shm` provider, which loses
//! messages when a sender floods a peer.

/// Bytes of the fixed header.
pub const HEADER: usize = crate::framing::header_len(5);
/// Largest control frame sent inline; larger ones go by RMA read.
pub const INLINE_MAX: usize = 16 << 10;
/// Size of every receive buffer (and of every message at most, sealed
/// or not: [`super::seal::TRAILER`]).
pub const SLOT: usize = HEADER + INLINE_MAX + super::seal::TRAILER;

const MAGIC: [u8; 2] = *b"tF";

/// Tag bits of every taskfold message (the upper half of the tag).
pub const TAG_BASE: u64 = 0x7446_0001 << 32;
/// Ignore mask of the receives: the sender's rank (lower half).
pub const TAG_IGNORE: u64 = 0xffff_ffff;

/// The tag of a message sent by `rank`.
pub fn tag_of(rank: u32) -> u64 {
    TAG_BASE | u64::from(rank)
}

/// The sender's rank of a message with `tag`, if the tag is ours.
pub fn rank_of(tag: u64) -> Option<u32> {
    (tag & !TAG_IGNORE == TAG_BASE).then_some((tag & TAG_IGNORE) as u32)
}

mod kind {
    pub const CONTROL: u8 = 1;
    pub const LARGE: u8 = 2;
    pub const BYE: u8 = 3;
    pub const GET_REQ: u8 = 4;
    pub const GET_OK: u8 = 5;
    pub const GET_ERR: u8 = 6;
    pub const RELEASE: u8 = 7;
    pub const CREDIT: u8 = 8;
}

/// Where a reader finds remote bytes: RMA address, key, length, and the
/// lease it must release afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remote {
    /// Length in bytes.
    pub len: u64,
    /// RMA address (virtual address or offset, per `FI_MR_VIRT_ADDR`).
    pub addr: u64,
    /// Remote key.
    pub key: u64,
    /// Lease to release (0: none).
    pub token: u64,
}

/// One fabric message, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg<'a> {
    /// An inline control frame.
    Control {
        /// Per-(sender, receiver) sequence number.
        seq: u64,
        /// The frame.
        frame: &'a [u8],
    },
    /// A control frame to fetch by RMA read.
    Large {
        /// Sequence number.
        seq: u64,
        /// Where it is.
        at: Remote,
    },
    /// The sender left gracefully.
    Bye {
        /// Sequence number (after its last frame).
        seq: u64,
    },
    /// Where is buffer `key`?
    GetReq {
        /// Request id (the requester's).
        req: u64,
        /// Buffer key.
        key: u64,
    },
    /// Buffer found.
    GetOk {
        /// Request id.
        req: u64,
        /// Where it is.
        at: Remote,
    },
    /// Buffer not exposed.
    GetErr {
        /// Request id.
        req: u64,
        /// Buffer key.
        key: u64,
    },
    /// A lease is released.
    Release {
        /// The lease.
        token: u64,
    },
    /// Flow-control credits returned.
    Credit {
        /// Messages consumed since the last credit.
        n: u64,
    },
}

fn put(out: &mut Vec<u8>, kind: u8, words: &[u64]) {
    put_with(out, kind, 0, words);
}

/// Appends a header of `kind` announcing `len` payload bytes.
fn put_with(out: &mut Vec<u8>, kind: u8, len: u32, words: &[u64]) {
    let mut fields = [0u64; 5];
    fields[..words.len()].copy_from_slice(words);
    let at = out.len();
    out.resize(at + HEADER, 0);
    crate::framing::encode(&mut out[at..], MAGIC, kind, len, &fields);
}

impl Msg<'_> {
    /// Appends the encoding (at most [`SLOT`] bytes for a `CONTROL` of at
    /// most [`INLINE_MAX`] bytes) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Msg::Control { seq, frame } => {
                put_with(out, kind::CONTROL, frame.len() as u32, &[*seq]);
                out.extend_from_slice(frame);
            }
            Msg::Large { seq, at } => {
                put(out, kind::LARGE, &[*seq, at.len, at.addr, at.key, at.token])
            }
            Msg::Bye { seq } => put(out, kind::BYE, &[*seq]),
            Msg::GetReq { req, key } => put(out, kind::GET_REQ, &[*req, *key]),
            Msg::GetOk { req, at } => put(
                out,
                kind::GET_OK,
                &[*req, at.len, at.addr, at.key, at.token],
            ),
            Msg::GetErr { req, key } => put(out, kind::GET_ERR, &[*req, *key]),
            Msg::Release { token } => put(out, kind::RELEASE, &[*token]),
            Msg::Credit { n } => put(out, kind::CREDIT, &[*n]),
        }
    }

    /// Decodes a received message.
    pub fn decode(b: &[u8]) -> Result<Msg<'_>, String> {
        let mut w = [0u64; 5];
        let (k, len) =
            crate::framing::decode(b, MAGIC, &mut w).map_err(|e| format!("message: {e}"))?;
        let remote = || Remote {
            len: w[1],
            addr: w[2],
            key: w[3],
            token: w[4],
        };
        let w = |i: usize| w[i];
        // Only a control message carries bytes after its header: another
        // received with more is malformed, whatever its header says.
        if k != kind::CONTROL && (len != 0 || b.len() != HEADER) {
            return Err(format!(
                "message kind {k} announces a payload of {len}, carries {}",
                b.len() - HEADER
            ));
        }
        Ok(match k {
            kind::CONTROL => {
                if len as usize != b.len() - HEADER || len as usize > INLINE_MAX {
                    return Err(format!(
                        "control frame announces {len} bytes, carries {}",
                        b.len() - HEADER
                    ));
                }
                Msg::Control {
                    seq: w(0),
                    frame: &b[HEADER..],
                }
            }
            kind::LARGE => Msg::Large {
                seq: w(0),
                at: remote(),
            },
            kind::BYE => Msg::Bye { seq: w(0) },
            kind::GET_REQ => Msg::GetReq {
                req: w(0),
                key: w(1),
            },
            kind::GET_OK => Msg::GetOk {
                req: w(0),
                at: remote(),
            },
            kind::GET_ERR => Msg::GetErr {
                req: w(0),
                key: w(1),
            },
            kind::RELEASE => Msg::Release { token: w(0) },
            kind::CREDIT => Msg::Credit { n: w(0) },
            k => return Err(format!("unknown message kind {k}")),
        })
    }
}

/// First bytes of the start-up frame carrying a rank's endpoint name over
/// TCP.
const NAME_MAGIC: &[u8; 8] = b"tfFIname";

/// A peer's start-up frame, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameFrame {
    /// The peer's protocol version ([`crate::version::VERSION`]).
    pub version: u16,
    /// Its libfabric provider.
    pub provider: String,
    /// Its endpoint name (`fi_getname`).
    pub name: Vec<u8>,
    /// Its process's fresh nonce, if it seals its fabric messages
    /// (`TASKFOLD_INTEGRITY=mac`, [`super::seal`]).
    pub nonce: Option<[u8; super::seal::NONCE_LEN]>,
}

/// The start-up frame: this build's protocol version, the provider name,
/// the endpoint name and, if this rank seals its fabric messages, its
/// process's nonce.
pub fn name_frame(
    provider: &str,
    name: &[u8],
    nonce: Option<&[u8; super::seal::NONCE_LEN]>,
) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + 6 + provider.len() + name.len() + 32);
    f.extend_from_slice(NAME_MAGIC);
    f.extend_from_slice(&crate::version::VERSION.to_le_bytes());
    f.extend_from_slice(&(provider.len() as u16).to_le_bytes());
    f.extend_from_slice(&(name.len() as u16).to_le_bytes());
    f.extend_from_slice(provider.as_bytes());
    f.extend_from_slice(name);
    if let Some(n) = nonce {
        f.extend_from_slice(n);
    }
    f
}

/// Decodes a start-up frame: `None` if it is not one, else what it says
/// (or what is wrong). The version comes first and is decoded even if the
/// rest is not understood, so that a peer of another version is refused
/// as such.
pub fn parse_name_frame(f: &[u8]) -> Option<Result<NameFrame, String>> {
    let rest = f.strip_prefix(NAME_MAGIC)?;
    if rest.len() < 2 {
        return Some(Err("truncated endpoint-name frame".into()));
    }
    let version = u16::from_le_bytes([rest[0], rest[1]]);
    let malformed = |what: &str| {
        if version == crate::version::VERSION {
            Err(format!("{what} endpoint-name frame"))
        } else {
            // Another version: its layout may differ; the version says it.
            Ok(NameFrame {
                version,
                provider: String::new(),
                name: Vec::new(),
                nonce: None,
            })
        }
    };
    let rest = &rest[2..];
    if rest.len() < 4 {
        return Some(malformed("truncated"));
    }
    let pl = usize::from(u16::from_le_bytes([rest[0], rest[1]]));
    let nl = usize::from(u16::from_le_bytes([rest[2], rest[3]]));
    let body = &rest[4..];
    const N: usize = super::seal::NONCE_LEN;
    let nonce = match body.len().checked_sub(pl + nl) {
        Some(0) => None,
        Some(N) => body[pl + nl..].try_into().ok(),
        _ => return Some(malformed("malformed")),
    };
    if nl == 0 {
        return Some(malformed("malformed"));
    }
    Some(Ok(NameFrame {
        version,
        provider: String::from_utf8_lossy(&body[..pl]).into_owned(),
        name: body[pl..pl + nl].to_vec(),
        nonce,
    }))
}

/// The start-up frame a rank sends each peer over TCP once that peer's
/// endpoint name is in its address vector: the peer may send it fabric
/// messages from now on (before, the source check could not place them).
pub const READY_FRAME: &[u8; 8] = b"tfFIredy";

/// True if `f` is a [`READY_FRAME`].
pub fn is_ready_frame(f: &[u8]) -> bool {
    f == READY_FRAME
}

/// True if `f` is a start-up frame (an endpoint name or a readiness), which
/// the libfabric transport takes for itself.
pub fn is_startup_frame(f: &[u8]) -> bool {
    is_ready_frame(f) || f.starts_with(NAME_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let at = Remote {
            len: 5,
            addr: 6,
            key: 7,
            token: 8,
        };
        let msgs = [
            Msg::Control {
                seq: 3,
                frame: b"hello",
            },
            Msg::Control { seq: 4, frame: b"" },
            Msg::Large { seq: 9, at },
            Msg::Bye { seq: 10 },
            Msg::GetReq { req: 1, key: 2 },
            Msg::GetOk { req: 1, at },
            Msg::GetErr { req: 1, key: 2 },
            Msg::Release { token: 8 },
            Msg::Credit { n: 32 },
        ];
        for m in msgs {
            let mut b = Vec::new();
            m.encode(&mut b);
            assert!(b.len() <= SLOT);
            assert_eq!(Msg::decode(&b), Ok(m));
        }
    }

    #[test]
    fn rejects_garbage() {
        assert!(Msg::decode(b"short").is_err());
        let mut b = Vec::new();
        Msg::Control {
            seq: 1,
            frame: b"abc",
        }
        .encode(&mut b);
        let mut bad = b.clone();
        bad[0] = b'x';
        assert!(Msg::decode(&bad).is_err());
        let mut bad = b.clone();
        bad[2] = 99;
        assert!(Msg::decode(&bad).is_err(), "unknown kind");
        let mut bad = b.clone();
        bad[3] = 1;
        assert!(Msg::decode(&bad).is_err(), "reserved byte");
        let mut bad = b.clone();
        bad.push(0);
        assert!(Msg::decode(&bad).is_err());
        // A message without payload followed by stray bytes is refused too.
        let mut b = Vec::new();
        Msg::Credit { n: 3 }.encode(&mut b);
        assert_eq!(Msg::decode(&b), Ok(Msg::Credit { n: 3 }));
        b.push(0);
        assert!(Msg::decode(&b).is_err(), "bytes after a credit");
        assert_eq!(rank_of(tag_of(5)), Some(5));
        assert_eq!(rank_of(5), None);
    }

    #[test]
    fn name_frames() {
        let f = name_frame("shm", b"\x01\x02", None);
        assert_eq!(
            parse_name_frame(&f),
            Some(Ok(NameFrame {
                version: crate::version::VERSION,
                provider: "shm".to_string(),
                name: vec![1, 2],
                nonce: None,
            }))
        );
        let sealed = name_frame("shm", b"\x01\x02", Some(&[9; 32]));
        let parsed = parse_name_frame(&sealed).and_then(Result::ok).unwrap();
        assert_eq!((parsed.name, parsed.nonce), (vec![1, 2], Some([9; 32])));
        assert!(
            matches!(parse_name_frame(&sealed[..sealed.len() - 1]), Some(Err(_))),
            "a cut nonce"
        );
        assert_eq!(parse_name_frame(b"other"), None);
        assert!(matches!(parse_name_frame(b"tfFIname\x01"), Some(Err(_))));
        // Another version's frame is read as far as its version.
        let mut other = b"tfFIname".to_vec();
        other.extend_from_slice(&(crate::version::VERSION + 1).to_le_bytes());
        other.extend_from_slice(b"\xff");
        assert_eq!(
            parse_name_frame(&other)
                .and_then(Result::ok)
                .map(|n| n.version),
            Some(crate::version::VERSION + 1)
        );
    }
}
