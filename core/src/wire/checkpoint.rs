//! The checkpoint messages between ranks ([`super::Msg::Checkpoint`]; see
//! the book's Checkpoints chapter): L2 copies to a partner, L3 shards to
//! a group's encoder and parity to its holders, and the queries of a
//! restarted rank that gathers its pieces.
//!
//! Bodies never travel in these frames: a piece or a shard is exposed by
//! its sender and fetched with a one-sided get, under a buffer key both
//! ends derive ([`buffer_key`]) from what they know, never from a field a
//! peer chose. Every field is untrusted: a level is a number checked with
//! [`crate::checkpoint::Level::from_number`], a length bounds the get, and
//! every piece fetched is verified ([`crate::checkpoint::piece`]) before
//! it is stored or restored.

use rkyv::{Archive, Deserialize, Serialize};

/// One checkpoint message.
#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum CheckpointMsg {
    /// Owner → its partner: my L2 piece of `version` (`len` bytes) is
    /// exposed under [`buffer_key`]`(Body::Copy, owner, version, 0)`:
    /// fetch it, store it durably, answer [`CheckpointMsg::Stored`].
    Offer {
        /// The checkpoint version.
        version: u64,
        /// Bytes of the piece.
        len: u64,
    },
    /// Holder → owner (L2) or → encoder (L3 parity): the piece is durable
    /// (`ok`), or refused with `reason`.
    Stored {
        /// The level stored (2 or 3).
        level: u8,
        /// The checkpoint version.
        version: u64,
        /// L3: the group; else 0.
        group: u32,
        /// L3: the parity shard's index in the group; else 0.
        index: u16,
        /// Durable.
        ok: bool,
        /// Why not, if not.
        reason: String,
    },
    /// Member → its group's encoder: my state of `version` (`len` bytes,
    /// of type `type_tag`) is exposed under
    /// [`buffer_key`]`(Body::Shard, member, version, group)`.
    Shard {
        /// The checkpoint version.
        version: u64,
        /// The group.
        group: u32,
        /// Bytes of the state.
        len: u64,
        /// The state's type tag.
        type_tag: u64,
    },
    /// Encoder → a parity holder: parity piece `index` of the group's
    /// `version` (`len` bytes) is exposed under
    /// [`buffer_key`]`(Body::Parity, index, version, group)`.
    Parity {
        /// The checkpoint version.
        version: u64,
        /// The group.
        group: u32,
        /// The shard index of the piece in the group (`k + j`).
        index: u16,
        /// Bytes of the piece.
        len: u64,
    },
    /// Encoder → every member: the group's parity of `version` is durable
    /// at every holder; `lens` are the members' state lengths, which each
    /// member's own data piece records.
    Coded {
        /// The checkpoint version.
        version: u64,
        /// The group.
        group: u32,
        /// Every member's state length, in shard order.
        lens: Vec<u64>,
    },
    /// Encoder → every member: the group's L3 of `version` failed.
    CodingFailed {
        /// The checkpoint version.
        version: u64,
        /// The group.
        group: u32,
        /// Why.
        reason: String,
    },
    /// Restarted rank → a holder: which versions of these pieces do you
    /// hold? (L2: `owner`'s copy; L3: every piece of `group`.)
    Query {
        /// Matches the answer to the question.
        req: u64,
        /// The level (2 or 3).
        level: u8,
        /// L2: the owner whose copy is wanted.
        owner: u32,
        /// L3: the group.
        group: u32,
    },
    /// Holder → restarted rank: the versions held, newest first, with the
    /// L3 shard index of each (0 for L2); by file name, not yet verified.
    Holding {
        /// The question's.
        req: u64,
        /// `(version, shard index)` pairs.
        pieces: Vec<(u64, u16)>,
    },
    /// Restarted rank → a holder: expose one piece for me.
    Fetch {
        /// Matches the answer to the question.
        req: u64,
        /// The level (2 or 3).
        level: u8,
        /// L2: the owner; L3: ignored.
        owner: u32,
        /// L3: the group.
        group: u32,
        /// L3: the shard index.
        index: u16,
        /// The version.
        version: u64,
        /// The type being restored: a piece of another type is refused.
        type_tag: u64,
    },
    /// Holder → restarted rank: the piece (`len` bytes) is exposed under
    /// [`buffer_key`]`(Body::Fetched, requester, req, 0)` until
    /// [`CheckpointMsg::Release`].
    Piece {
        /// The question's.
        req: u64,
        /// Bytes of the piece.
        len: u64,
    },
    /// Holder → restarted rank: no such piece, or it is refused.
    Missing {
        /// The question's.
        req: u64,
        /// Why.
        reason: String,
    },
    /// Restarted rank → holder: the piece of `req` was fetched; withdraw
    /// it.
    Release {
        /// The question's.
        req: u64,
    },
}

/// Which body a checkpoint buffer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Body {
    /// An owner's L2 piece offered to its partner.
    Copy = 1,
    /// A member's state offered to its group's encoder.
    Shard = 2,
    /// A parity piece offered to its holder.
    Parity = 3,
    /// A piece a holder exposes for a restarted rank.
    Fetched = 4,
}

/// The buffer key of a checkpoint body: a hash of the body's kind and
/// three numbers both ends know, in a space of its own (reduction buffers
/// are keyed by other hashes).
pub fn buffer_key(body: Body, who: u32, n: u64, group: u32) -> u64 {
    let mut h = crate::id::stable_hash("checkpoint-body");
    for word in [body as u64, u64::from(who), n, u64::from(group)] {
        h = (h ^ word)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_by_every_field() {
        let base = buffer_key(Body::Copy, 1, 2, 3);
        assert_eq!(base, buffer_key(Body::Copy, 1, 2, 3));
        for other in [
            buffer_key(Body::Shard, 1, 2, 3),
            buffer_key(Body::Copy, 2, 2, 3),
            buffer_key(Body::Copy, 1, 3, 3),
            buffer_key(Body::Copy, 1, 2, 4),
            buffer_key(Body::Copy, 2, 1, 3),
        ] {
            assert_ne!(base, other);
        }
    }
}
