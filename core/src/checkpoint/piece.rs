//! The format of one checkpoint piece, on disk and on the wire.
//!
//! A piece is a header, its payload, and a 32-byte blake3 hash of both
//! (all integers little-endian):
//!
//! | offset | bytes | field |
//! | --- | --- | --- |
//! | 0 | 4 | magic `b"TFCK"` |
//! | 4 | 2 | format version ([`FORMAT`]) |
//! | 6 | 1 | level (1..=4) |
//! | 7 | 1 | flags (0) |
//! | 8 | 8 | job id |
//! | 16 | 4 | owner rank |
//! | 20 | 2 | `k` (L3: the group's data shards; else 0) |
//! | 22 | 2 | `m` (L3: its parity shards; else 0) |
//! | 24 | 8 | checkpoint version |
//! | 32 | 8 | type tag |
//! | 40 | 8 | payload length |
//! | 48 | 8 + 12k | L3 only: shard index (2), 0 (2), group (4), the `k` members (4 each), the `k` data lengths (8 each) |
//!
//! The hash covers every byte before it, so any damaged byte — header,
//! payload or hash — is caught. [`decode`] checks, in this order, the
//! length, magic, format, geometry and checksum, and only then compares
//! the header with what the reader expects ([`Expect`]): a damaged header
//! is reported as damage, not as a foreign piece. The payload follows a
//! header of `48 + (8 + 12k)` bytes, so it is not aligned: copy it into an
//! aligned buffer before reading an archive in place.

use super::{JobId, Level};

const MAGIC: [u8; 4] = *b"TFCK";
/// The piece format this build writes and reads.
pub const FORMAT: u16 = 1;
/// Length of the fixed part of the header.
pub const FIXED_LEN: usize = 48;
/// Length of the checksum trailer.
pub const SUM_LEN: usize = 32;
/// Bound on `k + m` of an L3 group (bounds the header's length).
pub const MAX_SHARDS: usize = 256;

/// What a piece says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The job that wrote it.
    pub job: JobId,
    /// The rank whose state it holds; for an L3 parity piece, the rank
    /// that holds it.
    pub owner: u32,
    /// The checkpoint version.
    pub version: u64,
    /// The state's type, as the caller tags it ([`super::type_tag`]).
    pub type_tag: u64,
    /// The level it was written at.
    pub level: Level,
    /// L3 only (and required there): the piece's place in its group.
    pub shard: Option<Shard>,
}

/// An L3 piece's place in its erasure-coded group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    /// The group's number ([`super::EcGroup::index`]).
    pub group: u32,
    /// The group's members, in shard order: data shard `i` is
    /// `members[i]`'s state (`k = members.len()`).
    pub members: Vec<u32>,
    /// Number of parity shards.
    pub m: u16,
    /// This piece: data shard `index < k`, or parity shard `index - k`.
    pub index: u16,
    /// True length of each data shard (they are padded to one length for
    /// coding: [`shard_len`]).
    pub lens: Vec<u64>,
}

impl Shard {
    /// Number of data shards.
    pub fn k(&self) -> usize {
        self.members.len()
    }

    /// Whether this piece is a parity shard.
    pub fn is_parity(&self) -> bool {
        usize::from(self.index) >= self.k()
    }

    fn ext_len(&self) -> usize {
        8 + 12 * self.k()
    }
}

/// A decoded piece: its header and a view of its payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece<'a> {
    /// The header.
    pub header: Header,
    /// The payload (the state's bytes, or an L3 shard).
    pub payload: &'a [u8],
}

/// What a reader expects of a piece; `None` fields are not checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expect {
    /// This job.
    pub job: JobId,
    /// The type being restored.
    pub type_tag: u64,
    /// The rank whose state is wanted.
    pub owner: Option<u32>,
    /// The version wanted.
    pub version: Option<u64>,
    /// The level read from.
    pub level: Option<Level>,
}

/// Why a piece is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PieceError {
    /// Shorter than its header or than its header announces.
    #[error("truncated: {have} bytes, {need} needed")]
    Truncated {
        /// Bytes needed.
        need: u64,
        /// Bytes present.
        have: u64,
    },
    /// Longer than its header announces.
    #[error("{have} bytes, but the header announces {need}")]
    TrailingBytes {
        /// Bytes announced.
        need: u64,
        /// Bytes present.
        have: u64,
    },
    /// Not a checkpoint piece.
    #[error("not a checkpoint piece (bad magic)")]
    BadMagic,
    /// Written in a format this build does not read.
    #[error("piece format {0}, this build reads {FORMAT}")]
    Format(u16),
    /// The header contradicts itself.
    #[error("malformed header: {0}")]
    Malformed(&'static str),
    /// Header or payload does not match the checksum.
    #[error("checksum mismatch (damaged piece)")]
    Checksum,
    /// Written by another job.
    #[error("another job's piece (job {found}, this job {expected})")]
    ForeignJob {
        /// This job.
        expected: JobId,
        /// The piece's.
        found: JobId,
    },
    /// Holds another type.
    #[error("type tag {found:#018x}, expected {expected:#018x}")]
    WrongType {
        /// The type being restored.
        expected: u64,
        /// The piece's.
        found: u64,
    },
    /// Holds another rank's state.
    #[error("owner rank {found}, expected {expected}")]
    WrongOwner {
        /// The rank wanted.
        expected: u32,
        /// The piece's.
        found: u32,
    },
    /// Holds another version.
    #[error("version {found}, expected {expected}")]
    WrongVersion {
        /// The version wanted.
        expected: u64,
        /// The piece's.
        found: u64,
    },
    /// Written at another level.
    #[error("level {found}, expected {expected}")]
    WrongLevel {
        /// The level read from.
        expected: Level,
        /// The piece's.
        found: Level,
    },
}

impl PieceError {
    /// Whether the piece is intact but not the one wanted (another job,
    /// type, owner, version or level), rather than damaged.
    pub fn is_foreign(&self) -> bool {
        matches!(
            self,
            PieceError::ForeignJob { .. }
                | PieceError::WrongType { .. }
                | PieceError::WrongOwner { .. }
                | PieceError::WrongVersion { .. }
                | PieceError::WrongLevel { .. }
        )
    }
}

/// Checks that `header` describes a piece of `payload_len` bytes that
/// [`decode`] would accept.
fn validate(header: &Header, payload_len: u64) -> Result<(), PieceError> {
    match (&header.shard, header.level) {
        (None, Level::L3) => Err(PieceError::Malformed("an L3 piece without its shard")),
        (Some(_), l) if l != Level::L3 => Err(PieceError::Malformed("a shard geometry outside L3")),
        (None, _) => Ok(()),
        (Some(s), _) => validate_shard(header.owner, s, payload_len),
    }
}

fn validate_shard(owner: u32, s: &Shard, payload_len: u64) -> Result<(), PieceError> {
    let (k, m) = (s.k(), usize::from(s.m));
    if k == 0 || m == 0 || k + m > MAX_SHARDS {
        return Err(PieceError::Malformed("L3 geometry out of range"));
    }
    if s.lens.len() != k {
        return Err(PieceError::Malformed("L3 lengths do not match k"));
    }
    let index = usize::from(s.index);
    if index >= k + m {
        return Err(PieceError::Malformed("L3 shard index out of range"));
    }
    let expected = if index < k {
        if s.members[index] != owner {
            return Err(PieceError::Malformed("L3 data shard not its owner's"));
        }
        s.lens[index]
    } else {
        padded_len(&s.lens)
    };
    if payload_len != expected {
        return Err(PieceError::Malformed("L3 payload length not the shard's"));
    }
    Ok(())
}

/// The header's bytes and the checksum of header and payload: a writer
/// writes `head`, `payload`, `sum`, in that order, without copying the
/// payload. Refuses a header [`decode`] would refuse.
pub fn frame(header: &Header, payload: &[u8]) -> Result<(Vec<u8>, [u8; SUM_LEN]), PieceError> {
    validate(header, payload.len() as u64)?;
    let ext = header.shard.as_ref().map_or(0, Shard::ext_len);
    let mut head = Vec::with_capacity(FIXED_LEN + ext);
    head.extend_from_slice(&MAGIC);
    head.extend_from_slice(&FORMAT.to_le_bytes());
    head.push(header.level.number());
    head.push(0);
    head.extend_from_slice(&header.job.0.to_le_bytes());
    head.extend_from_slice(&header.owner.to_le_bytes());
    let (k, m) = header
        .shard
        .as_ref()
        .map_or((0, 0), |s| (s.k() as u16, s.m));
    head.extend_from_slice(&k.to_le_bytes());
    head.extend_from_slice(&m.to_le_bytes());
    head.extend_from_slice(&header.version.to_le_bytes());
    head.extend_from_slice(&header.type_tag.to_le_bytes());
    head.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    if let Some(s) = &header.shard {
        head.extend_from_slice(&s.index.to_le_bytes());
        head.extend_from_slice(&0u16.to_le_bytes());
        head.extend_from_slice(&s.group.to_le_bytes());
        s.members
            .iter()
            .for_each(|r| head.extend_from_slice(&r.to_le_bytes()));
        s.lens
            .iter()
            .for_each(|l| head.extend_from_slice(&l.to_le_bytes()));
    }
    let sum = checksum(&head, payload);
    Ok((head, sum))
}

/// The whole piece in one buffer ([`frame`], concatenated).
pub fn encode(header: &Header, payload: &[u8]) -> Result<Vec<u8>, PieceError> {
    let (head, sum) = frame(header, payload)?;
    let mut out = Vec::with_capacity(head.len() + payload.len() + SUM_LEN);
    out.extend_from_slice(&head);
    out.extend_from_slice(payload);
    out.extend_from_slice(&sum);
    Ok(out)
}

fn checksum(head: &[u8], payload: &[u8]) -> [u8; SUM_LEN] {
    let mut h = blake3::Hasher::new();
    h.update(head);
    h.update(payload);
    *h.finalize().as_bytes()
}

/// Little-endian fields read from a slice whose length was checked first.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn u16(&self, at: usize) -> u16 {
        u16::from_le_bytes(self.array(at))
    }
    fn u32(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.array(at))
    }
    fn u64(&self, at: usize) -> u64 {
        u64::from_le_bytes(self.array(at))
    }
    fn array<const N: usize>(&self, at: usize) -> [u8; N] {
        let mut out = [0u8; N];
        out.copy_from_slice(&self.0[at..at + N]);
        out
    }
}

/// Decodes and verifies a piece of untrusted bytes: never panics, and
/// allocates no more than `bytes.len()` (the L3 geometry is read only once
/// the bytes are known to hold it).
pub fn decode(bytes: &[u8]) -> Result<Piece<'_>, PieceError> {
    let have = bytes.len() as u64;
    if bytes.len() < FIXED_LEN + SUM_LEN {
        if bytes.len() >= 4 && bytes[..4] != MAGIC {
            return Err(PieceError::BadMagic);
        }
        let need = (FIXED_LEN + SUM_LEN) as u64;
        return Err(PieceError::Truncated { need, have });
    }
    let f = Fields(bytes);
    if f.array::<4>(0) != MAGIC {
        return Err(PieceError::BadMagic);
    }
    if f.u16(4) != FORMAT {
        return Err(PieceError::Format(f.u16(4)));
    }
    let level = Level::from_number(bytes[6]).ok_or(PieceError::Malformed("level not 1..=4"))?;
    if bytes[7] != 0 {
        return Err(PieceError::Malformed("unknown flags"));
    }
    let (k, m) = (usize::from(f.u16(20)), f.u16(22));
    let ext = if level == Level::L3 { 8 + 12 * k } else { 0 };
    if level != Level::L3 && (k != 0 || m != 0) {
        return Err(PieceError::Malformed("a shard geometry outside L3"));
    }
    let payload_len = f.u64(40);
    let need = ((FIXED_LEN + ext + SUM_LEN) as u64).saturating_add(payload_len);
    if have < need {
        return Err(PieceError::Truncated { need, have });
    }
    if have > need {
        return Err(PieceError::TrailingBytes { need, have });
    }
    let head_len = FIXED_LEN + ext;
    let body_end = bytes.len() - SUM_LEN;
    let (head, payload) = (&bytes[..head_len], &bytes[head_len..body_end]);
    if checksum(head, payload)[..] != bytes[body_end..] {
        return Err(PieceError::Checksum);
    }
    let shard = (level == Level::L3).then(|| read_shard(&f, k, m));
    let header = Header {
        job: JobId(f.u64(8)),
        owner: f.u32(16),
        version: f.u64(24),
        type_tag: f.u64(32),
        level,
        shard,
    };
    if level == Level::L3 && f.u16(FIXED_LEN + 2) != 0 {
        return Err(PieceError::Malformed("nonzero reserved field"));
    }
    validate(&header, payload_len)?;
    Ok(Piece { header, payload })
}

/// The L3 extension of a header whose bytes were checked to hold it.
fn read_shard(f: &Fields<'_>, k: usize, m: u16) -> Shard {
    let base = FIXED_LEN + 8;
    Shard {
        group: f.u32(FIXED_LEN + 4),
        members: (0..k).map(|i| f.u32(base + 4 * i)).collect(),
        m,
        index: f.u16(FIXED_LEN),
        lens: (0..k).map(|i| f.u64(base + 4 * k + 8 * i)).collect(),
    }
}

impl Piece<'_> {
    /// Whether this intact piece is the one `expect` describes.
    pub fn matches(&self, expect: &Expect) -> Result<(), PieceError> {
        let h = &self.header;
        if h.job != expect.job {
            return Err(PieceError::ForeignJob {
                expected: expect.job,
                found: h.job,
            });
        }
        if h.type_tag != expect.type_tag {
            return Err(PieceError::WrongType {
                expected: expect.type_tag,
                found: h.type_tag,
            });
        }
        if let Some(expected) = expect.owner.filter(|&o| o != h.owner) {
            return Err(PieceError::WrongOwner {
                expected,
                found: h.owner,
            });
        }
        if let Some(expected) = expect.version.filter(|&v| v != h.version) {
            return Err(PieceError::WrongVersion {
                expected,
                found: h.version,
            });
        }
        if let Some(expected) = expect.level.filter(|&l| l != h.level) {
            return Err(PieceError::WrongLevel {
                expected,
                found: h.level,
            });
        }
        Ok(())
    }
}

/// [`decode`], then [`Piece::matches`]: the piece, if it is intact and
/// the one expected.
pub fn check<'a>(bytes: &'a [u8], expect: &Expect) -> Result<Piece<'a>, PieceError> {
    let piece = decode(bytes)?;
    piece.matches(expect)?;
    Ok(piece)
}

/// The length every shard is coded at: the longest data shard, rounded up
/// to an even number of bytes (at least 2), as the coder requires.
pub fn shard_len(lens: &[u64]) -> usize {
    usize::try_from(padded_len(lens)).unwrap_or(usize::MAX)
}

/// [`shard_len`] as a u64.
pub(crate) fn padded_len(lens: &[u64]) -> u64 {
    let longest = lens.iter().copied().max().unwrap_or(0).max(2);
    longest.saturating_add(longest % 2)
}

#[cfg(test)]
mod tests;
