//! L3: Reed–Solomon erasure coding of a group's checkpoints
//! (`reed-solomon-simd`).
//!
//! A group of `k` ranks codes its `k` states (the data shards, of unequal
//! lengths) into `m` parity shards. Data shards are padded with zeros to
//! one even length for coding ([`shard_len`]) and their true lengths are
//! recorded, so any `k` of the `k + m` shards rebuild the others byte for
//! byte. Fewer than `k` survivors is a typed error, never a guess.
//!
//! [`encode`] and [`rebuild`] work on bare shards ([`Coder`] keeps its
//! working space between calls and codes shards a cache-sized stripe at a
//! time: the one to time for the coder's throughput); [`encode_pieces`] and
//! [`rebuild_pieces`] wrap them in checksummed pieces ([`super::piece`]).

use super::piece::{self, Expect, Header, PieceError, Shard, MAX_SHARDS};
use super::{EcGroup, JobId, Level};
use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};
use std::borrow::Cow;

/// Why shards cannot be coded or rebuilt.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ErasureError {
    /// `k` or `m` out of range (`k, m ≥ 1`, `k + m ≤` [`MAX_SHARDS`]).
    #[error("unsupported geometry: k = {k}, m = {m}")]
    Geometry {
        /// Data shards.
        k: usize,
        /// Parity shards.
        m: usize,
    },
    /// Fewer than `k` shards survive.
    #[error("{have} of {k} + {m} shards survive, {k} needed")]
    TooFew {
        /// Shards present.
        have: usize,
        /// Data shards (the number needed).
        k: usize,
        /// Parity shards.
        m: usize,
    },
    /// A shard's length is not the one its geometry gives.
    #[error("shard {index} has {got} bytes, expected {expected}")]
    ShardLength {
        /// The shard.
        index: usize,
        /// Its length by the geometry.
        expected: u64,
        /// Its length.
        got: u64,
    },
    /// Pieces that are not of one group and version.
    #[error("pieces of different groups: {0}")]
    Mismatch(&'static str),
    /// A piece is refused.
    #[error(transparent)]
    Piece(#[from] PieceError),
    /// The coder refused its input.
    #[error("reed-solomon: {0}")]
    Codec(#[from] reed_solomon_simd::Error),
}

use super::piece::padded_len;
/// The length every shard is coded at (defined with the shards' pieces).
pub use super::piece::shard_len;

fn check_geometry(k: usize, m: usize) -> Result<(), ErasureError> {
    if k == 0 || m == 0 || k + m > MAX_SHARDS || !ReedSolomonEncoder::supports(k, m) {
        return Err(ErasureError::Geometry { k, m });
    }
    Ok(())
}

fn padded(shard: &[u8], len: usize) -> Cow<'_, [u8]> {
    if shard.len() == len {
        return Cow::Borrowed(shard);
    }
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(shard);
    v.resize(len, 0);
    Cow::Owned(v)
}

/// Bytes of each shard coded at once. The coder makes several passes
/// over its working space (`k + m` rounded up, times this): a stripe of
/// this size keeps it in the cache, where whole shards of megabytes would
/// stream it from memory at every pass. A multiple of 64, the coder's
/// unit, so that every stripe but the last is coded as in a whole shard.
pub const STRIPE: usize = 32 << 10;

/// A Reed–Solomon coder that keeps its working space between calls (an
/// encoder codes every version of its group's checkpoint) and codes
/// shards stripe by stripe ([`STRIPE`]). Its parity is byte for byte the
/// parity of the whole shards coded at once.
#[derive(Default)]
pub struct Coder {
    enc: Option<ReedSolomonEncoder>,
}

impl std::fmt::Debug for Coder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coder").finish_non_exhaustive()
    }
}

/// Bytes `at..at + n` of `shard`, zero-padded past its end.
fn stripe_of(shard: &[u8], at: usize, n: usize) -> Cow<'_, [u8]> {
    match shard.get(at..at + n) {
        Some(s) => Cow::Borrowed(s),
        None => {
            let mut v = shard.get(at..).unwrap_or_default().to_vec();
            v.resize(n, 0);
            Cow::Owned(v)
        }
    }
}

impl Coder {
    /// A coder; its working space is made at the first call.
    pub fn new() -> Coder {
        Coder::default()
    }

    /// The encoder, set for `k` data and `m` parity shards of `n` bytes.
    fn encoder(
        &mut self,
        k: usize,
        m: usize,
        n: usize,
    ) -> Result<&mut ReedSolomonEncoder, ErasureError> {
        match self.enc.take() {
            Some(mut e) => {
                e.reset(k, m, n)?;
                Ok(self.enc.insert(e))
            }
            None => Ok(self.enc.insert(ReedSolomonEncoder::new(k, m, n)?)),
        }
    }

    /// The `m` parity shards of the data shards `data` (`k = data.len()`),
    /// each [`shard_len`] bytes long.
    pub fn encode(&mut self, data: &[&[u8]], m: usize) -> Result<Vec<Vec<u8>>, ErasureError> {
        let k = data.len();
        check_geometry(k, m)?;
        let lens: Vec<u64> = data.iter().map(|d| d.len() as u64).collect();
        let len = shard_len(&lens);
        let mut parity = vec![Vec::with_capacity(len); m];
        let mut at = 0;
        while at < len {
            // Even, as the coder requires: `len` and `STRIPE` are.
            let n = STRIPE.min(len - at);
            let enc = self.encoder(k, m, n)?;
            for d in data {
                enc.add_original_shard(stripe_of(d, at, n))?;
            }
            let out = enc.encode()?;
            for (p, r) in parity.iter_mut().zip(out.recovery_iter()) {
                p.extend_from_slice(r);
            }
            at += n;
        }
        Ok(parity)
    }
}

/// The `m` parity shards of the data shards `data` (`k = data.len()`),
/// each [`shard_len`] bytes long ([`Coder::encode`] with a fresh coder).
pub fn encode(data: &[&[u8]], m: usize) -> Result<Vec<Vec<u8>>, ErasureError> {
    Coder::new().encode(data, m)
}

/// The `k` data shards (`k = lens.len()`, at their true lengths), rebuilt
/// from the survivors: `shards[i]` is data shard `i` for `i < k` (its true
/// length) and parity shard `i - k` after, `None` where lost. Needs any
/// `k` of the `k + m`. Allocates no more than the survivors' bytes: every
/// length is checked against the geometry before a shard is rebuilt.
pub fn rebuild(
    lens: &[u64],
    m: usize,
    shards: &[Option<&[u8]>],
) -> Result<Vec<Vec<u8>>, ErasureError> {
    let k = lens.len();
    check_geometry(k, m)?;
    if shards.len() != k + m {
        return Err(ErasureError::Mismatch("not k + m shard slots"));
    }
    let len = padded_len(lens);
    for (index, s) in shards.iter().enumerate() {
        let expected = if index < k { lens[index] } else { len };
        match s {
            Some(s) if s.len() as u64 != expected => {
                let got = s.len() as u64;
                return Err(ErasureError::ShardLength {
                    index,
                    expected,
                    got,
                });
            }
            _ => {}
        }
    }
    let have = shards.iter().filter(|s| s.is_some()).count();
    if have < k {
        return Err(ErasureError::TooFew { have, k, m });
    }
    if shards[..k].iter().all(Option::is_some) {
        return Ok(shards[..k].iter().flatten().map(|s| s.to_vec()).collect());
    }
    // A data shard is missing, so a parity shard of `len` bytes is present:
    // `len` is bounded by the input.
    let len = shard_len(lens);
    let mut dec = ReedSolomonDecoder::new(k, m, len)?;
    for (i, s) in shards[..k].iter().enumerate() {
        if let Some(s) = s {
            dec.add_original_shard(i, padded(s, len))?;
        }
    }
    for (j, s) in shards[k..].iter().enumerate() {
        if let Some(s) = s {
            dec.add_recovery_shard(j, s)?;
        }
    }
    let restored = dec.decode()?;
    (0..k)
        .map(|i| {
            let true_len = lens[i] as usize;
            match shards[i] {
                Some(s) => Ok(s.to_vec()),
                None => restored
                    .restored_original(i)
                    .map(|r| r[..true_len].to_vec())
                    .ok_or(ErasureError::TooFew { have, k, m }),
            }
        })
        .collect()
}

/// What every piece of one group's checkpoint shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// The job.
    pub job: JobId,
    /// The checkpoint version.
    pub version: u64,
    /// The state's type tag.
    pub type_tag: u64,
}

/// The `k + m` L3 pieces of `group`'s checkpoint: data piece `i` holds
/// `data[i]`, the state of `group.members[i]` (its owner); parity piece
/// `j` is owned by its holder `group.parity[j]`.
pub fn encode_pieces(
    stamp: Stamp,
    group: &EcGroup,
    data: &[&[u8]],
) -> Result<Vec<Vec<u8>>, ErasureError> {
    Coder::new().encode_pieces(stamp, group, data)
}

impl Coder {
    /// [`encode_pieces`] with this coder.
    pub fn encode_pieces(
        &mut self,
        stamp: Stamp,
        group: &EcGroup,
        data: &[&[u8]],
    ) -> Result<Vec<Vec<u8>>, ErasureError> {
        if data.len() != group.members.len() {
            return Err(ErasureError::Mismatch("one data shard per member needed"));
        }
        let parity = self.encode(data, group.parity.len())?;
        let lens: Vec<u64> = data.iter().map(|d| d.len() as u64).collect();
        let owners = group.members.iter().chain(&group.parity);
        let payloads = data.iter().copied().chain(parity.iter().map(Vec::as_slice));
        owners
            .zip(payloads)
            .enumerate()
            .map(|(index, (&owner, payload))| {
                let header = Header {
                    job: stamp.job,
                    owner,
                    version: stamp.version,
                    type_tag: stamp.type_tag,
                    level: Level::L3,
                    shard: Some(Shard {
                        group: group.index,
                        members: group.members.clone(),
                        m: group.parity.len() as u16,
                        index: index as u16,
                        lens: lens.clone(),
                    }),
                };
                Ok(piece::encode(&header, payload)?)
            })
            .collect()
    }
}

/// Rebuilds the data shards of one group's checkpoint from the pieces
/// found (any order, any subset): every piece is verified and must be an
/// L3 piece of `expect`'s job, type and version (`expect.owner` is not
/// checked: the pieces have several owners) and of one group geometry.
/// Returns the group's members and their states.
pub fn rebuild_pieces(
    found: &[&[u8]],
    expect: &Expect,
) -> Result<(Vec<u32>, Vec<Vec<u8>>), ErasureError> {
    let expect = Expect {
        owner: None,
        level: Some(Level::L3),
        ..*expect
    };
    let mut geometry: Option<Shard> = None;
    let mut slots: Vec<Option<&[u8]>> = Vec::new();
    for bytes in found {
        let piece = piece::check(bytes, &expect)?;
        let shard = piece
            .header
            .shard
            .ok_or(PieceError::Malformed("no shard"))?;
        let g = geometry.get_or_insert_with(|| shard.clone());
        if (g.group, &g.members, g.m, &g.lens)
            != (shard.group, &shard.members, shard.m, &shard.lens)
        {
            return Err(ErasureError::Mismatch("geometries differ"));
        }
        if slots.is_empty() {
            slots = vec![None; g.k() + usize::from(g.m)];
        }
        slots[usize::from(shard.index)] = Some(piece.payload);
    }
    let Some(g) = geometry else {
        return Err(ErasureError::TooFew {
            have: 0,
            k: 0,
            m: 0,
        });
    };
    let data = rebuild(&g.lens, usize::from(g.m), &slots)?;
    Ok((g.members, data))
}

#[cfg(test)]
mod tests;
