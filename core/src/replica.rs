//! Replicas of originals (see the book's Fault tolerance chapter): their
//! buffer format, keys and placement.
//!
//! A replica buffer is a 16-byte header — `b"TFRP"`, the CRC-32 of the
//! payload (u32 LE), the payload's length (u64 LE) — followed by the
//! original's rkyv archive. The header keeps the payload 16-byte aligned,
//! and the checksum is verified on every read (disk or network).
//!
//! Two other headers mark originals that are never written to a file:
//! `b"TFRU"` (no durability: never copied at all) and `b"TFRV"` (kept in
//! the owner's memory, which its buddy on the same node views in place;
//! [`write_view_header`]). A view copies nothing that a checksum could
//! catch damaged, so a `TFRV` header holds a tag naming the reduction and
//! the owner instead of a CRC, and costs no pass over the data. Files are
//! always checksummed: [`verify`] refuses both; [`verify_held`] accepts a
//! `TFRV` buffer (length checked) read from memory.

use crate::rank::{Group, Rank};
use crate::rankset::RankSet;

pub mod reuse;

/// Length of the replica header.
pub const HEADER_LEN: usize = 16;
const MAGIC: [u8; 4] = *b"TFRP";
const UNCHECKED: [u8; 4] = *b"TFRU";
const VIEWED: [u8; 4] = *b"TFRV";

/// Why a replica buffer is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplicaError {
    /// Not a replica buffer, or truncated.
    #[error("not a replica buffer ({0})")]
    Malformed(String),
    /// The payload does not match its checksum.
    #[error("replica checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        /// Checksum in the header.
        stored: u32,
        /// Checksum of the bytes read.
        computed: u32,
    },
}

/// Writes the header for `payload` into `out[..HEADER_LEN]`.
pub fn write_header(out: &mut [u8], payload: &[u8]) {
    out[..4].copy_from_slice(&MAGIC);
    out[4..8].copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
}

/// Writes a header without reading the payload: for an original that is
/// never copied (no durability), whose checksum would cost a pass over the
/// data for nothing. [`verify`] refuses it (no copy is ever trusted without
/// a checksum); [`original_payload`] accepts it from the owner's memory.
pub fn write_unchecked_header(out: &mut [u8], payload: &[u8]) {
    out[..4].copy_from_slice(&UNCHECKED);
    out[4..8].copy_from_slice(&[0; 4]);
    out[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
}

/// Writes the header of an original kept in memory and viewed in place by
/// its buddy: `tag` ([`view_tag`]) instead of a checksum, so no pass over
/// the payload. Such a buffer must never reach a file: [`with_checksum`]
/// gives the checksummed buffer to write instead.
pub fn write_view_header(out: &mut [u8], payload: &[u8], tag: u32) {
    out[..4].copy_from_slice(&VIEWED);
    out[4..8].copy_from_slice(&tag.to_le_bytes());
    out[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
}

/// The tag of `owner`'s original of reduction `key` in a `TFRV` header:
/// what a buddy compares with the offer, in place of a checksum, to know
/// that the bytes it views are the original offered.
pub fn view_tag(key: u64, owner: u32) -> u32 {
    let h = (key ^ u64::from(owner).wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .wrapping_mul(0xff51_afd7_ed55_8ccd);
    (h >> 32) as u32
}

/// Whether `buf` starts with a `TFRV` header ([`write_view_header`]).
pub fn is_viewed(buf: &[u8]) -> bool {
    buf.len() >= HEADER_LEN && buf[..4] == VIEWED
}

/// A copy of `buf` with a checksummed header, if it has a `TFRV` one (for
/// a file); `None` if its header is already fit for one.
pub fn with_checksum(buf: &[u8]) -> Option<Vec<u8>> {
    if !is_viewed(buf) {
        return None;
    }
    let mut out = buf.to_vec();
    let (head, payload) = out.split_at_mut(HEADER_LEN);
    write_header(head, payload);
    Some(out)
}

/// The checksum stored in a replica buffer's header (the tag of a `TFRV`
/// header).
pub fn stored_crc(buf: &[u8]) -> Option<u32> {
    buf.get(4..8)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
}

/// The payload length announced by the replica header at the start of
/// `buf`; `None` if `buf` does not start with one. Checks the header only:
/// the payload's checksum is verified by [`verify`] when it is read.
pub fn announced_len(buf: &[u8]) -> Option<u64> {
    if buf.len() < HEADER_LEN || buf[..4] != MAGIC {
        return None;
    }
    Some(len_field(buf))
}

/// Like [`announced_len`], for a buffer in memory: a `TFRV` header counts.
pub fn held_len(buf: &[u8]) -> Option<u64> {
    if is_viewed(buf) {
        return Some(len_field(buf));
    }
    announced_len(buf)
}

/// The payload length in a header that starts `buf` (at least
/// `HEADER_LEN` bytes).
fn len_field(buf: &[u8]) -> u64 {
    u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes"))
}

/// The payload after a header that starts `buf`, if its length is the
/// header's.
fn payload_of(buf: &[u8]) -> Result<&[u8], ReplicaError> {
    let len = len_field(buf);
    let payload = &buf[HEADER_LEN..];
    if payload.len() as u64 != len {
        return Err(ReplicaError::Malformed(format!(
            "length {} != header {len}",
            payload.len()
        )));
    }
    Ok(payload)
}

/// The payload of an original served from its owner's memory (not a
/// copy): like [`verify`], but an original made without a checksum
/// ([`write_unchecked_header`]) is accepted as it is, its length checked.
pub fn original_payload(buf: &[u8]) -> Result<&[u8], ReplicaError> {
    if buf.len() >= HEADER_LEN && buf[..4] == UNCHECKED {
        return payload_of(buf);
    }
    verify_held(buf)
}

/// Like [`verify`], for a replica held in memory rather than read from a
/// file: the original kept by its owner and viewed by its buddy (a `TFRV`
/// header) is accepted with its length checked (it carries no checksum;
/// see the module documentation).
pub fn verify_held(buf: &[u8]) -> Result<&[u8], ReplicaError> {
    if is_viewed(buf) {
        return payload_of(buf);
    }
    verify(buf)
}

/// Verifies a replica buffer and returns its payload.
pub fn verify(buf: &[u8]) -> Result<&[u8], ReplicaError> {
    if buf.len() >= HEADER_LEN && buf[..4] == UNCHECKED {
        return Err(ReplicaError::Malformed(
            "an original made without a checksum (durability off)".into(),
        ));
    }
    if buf.len() < HEADER_LEN || buf[..4] != MAGIC {
        return Err(ReplicaError::Malformed(format!(
            "{} bytes, bad header",
            buf.len()
        )));
    }
    let stored = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
    let payload = payload_of(buf)?;
    let computed = crc32fast::hash(payload);
    if computed != stored {
        return Err(ReplicaError::Checksum { stored, computed });
    }
    Ok(payload)
}

/// Buffer key under which a rank exposes its own original of reduction
/// `key` (distinct from the key of its intermediate data, `key` itself).
pub fn original_key(key: u64) -> u64 {
    key ^ 0x4f52_4947_494e_414c // "ORIGINAL"
}

/// Buffer key under which a buddy exposes its copy of `owner`'s original.
pub fn replica_key(key: u64, owner: u32) -> u64 {
    let mut h = crate::id::stable_hash("replica") ^ key;
    h = h.rotate_left(17) ^ u64::from(owner).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h
}

/// The buddy of `owner`: the next live member of the group after it,
/// cyclically (`(i+1) mod p`, skipping dead ranks). `None`
/// when no other member is alive. Blind to nodes: see [`buddy_on`].
pub fn buddy(group: &Group, owner: Rank, dead: &RankSet) -> Option<Rank> {
    buddy_on(group, owner, dead, None)
}

/// The buddy of `owner` knowing each rank's node (`nodes[r]` is rank
/// `r`'s node token; `None`, or a table too short, when unknown): the next
/// live member after `owner`, cyclically, on another node than `owner`'s,
/// so that losing a node never loses both an original and its copy. When
/// every live member is on `owner`'s node (or the nodes are unknown), the
/// next live member, as [`buddy`]. Every rank computes the same answer from
/// the same group, dead set and node table: the owner offers to it and the
/// master infers it.
pub fn buddy_on(group: &Group, owner: Rank, dead: &RankSet, nodes: Option<&[u64]>) -> Option<Rank> {
    let n = group.len();
    let i = group.index_of(owner)?;
    let mut live = (1..n)
        .map(|d| group.rank_at((i + d) % n))
        .filter(|r| !dead.contains(r.0 as usize));
    let first = live.next()?;
    let node = |r: Rank| nodes.and_then(|t| t.get(r.0 as usize).copied());
    let Some(own) = node(owner) else {
        return Some(first);
    };
    if node(first).is_some_and(|f| f != own) {
        return Some(first);
    }
    Some(
        live.find(|&r| node(r).is_some_and(|f| f != own))
            .unwrap_or(first),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_corruption() {
        let payload = vec![7u8; 100];
        let mut buf = vec![0u8; HEADER_LEN];
        write_header(&mut buf, &payload);
        buf.extend_from_slice(&payload);
        assert_eq!(verify(&buf).unwrap(), &payload[..]);
        let mut bad = buf.clone();
        bad[50] ^= 1;
        assert!(matches!(verify(&bad), Err(ReplicaError::Checksum { .. })));
        assert!(matches!(
            verify(&buf[..40]),
            Err(ReplicaError::Malformed(_))
        ));
        assert!(matches!(verify(b"nope"), Err(ReplicaError::Malformed(_))));
        assert_eq!(announced_len(&buf), Some(100));
        assert_eq!(announced_len(&buf[..HEADER_LEN]), Some(100));
        assert_eq!(announced_len(&buf[..HEADER_LEN - 1]), None);
        assert_eq!(announced_len(b"TFRX0000000000000000"), None);
    }

    #[test]
    fn unchecked_headers_are_refused_as_copies_and_read_from_owners() {
        let payload = vec![7u8; 100];
        let mut buf = vec![0u8; HEADER_LEN];
        write_unchecked_header(&mut buf, &payload);
        buf.extend_from_slice(&payload);
        assert!(
            matches!(verify(&buf), Err(ReplicaError::Malformed(m)) if m.contains("without a checksum"))
        );
        assert_eq!(announced_len(&buf), None, "never taken for a disk copy");
        assert_eq!(
            original_payload(&buf).unwrap(),
            &payload[..],
            "served from memory"
        );
        assert!(original_payload(&buf[..50]).is_err(), "truncated");
        let mut checked = vec![0u8; HEADER_LEN];
        write_header(&mut checked, &payload);
        checked.extend_from_slice(&payload);
        checked[40] ^= 1;
        assert!(matches!(
            original_payload(&checked),
            Err(ReplicaError::Checksum { .. })
        ));
    }

    #[test]
    fn viewed_headers_name_their_original_and_never_reach_a_file() {
        let payload = vec![9u8; 64];
        let mut buf = vec![0u8; HEADER_LEN];
        write_view_header(&mut buf, &payload, view_tag(5, 2));
        buf.extend_from_slice(&payload);
        assert!(is_viewed(&buf));
        assert_eq!(stored_crc(&buf), Some(view_tag(5, 2)));
        assert_ne!(view_tag(5, 2), view_tag(5, 3));
        assert_ne!(view_tag(5, 2), view_tag(6, 2));
        assert!(verify(&buf).is_err(), "a file is always checksummed");
        assert_eq!(announced_len(&buf), None, "never taken for a disk copy");
        assert_eq!(held_len(&buf), Some(64));
        assert_eq!(verify_held(&buf).unwrap(), &payload[..]);
        assert_eq!(original_payload(&buf).unwrap(), &payload[..]);
        assert!(verify_held(&buf[..40]).is_err(), "truncated");
        let file = with_checksum(&buf).expect("converted");
        assert_eq!(verify(&file).unwrap(), &payload[..]);
        assert_eq!(with_checksum(&file), None, "already checksummed");
    }

    #[test]
    fn buddies_skip_the_dead() {
        let g = Group::world(4);
        let none = RankSet::new();
        assert_eq!(buddy(&g, Rank(1), &none), Some(Rank(2)));
        assert_eq!(buddy(&g, Rank(3), &none), Some(Rank(0)));
        let dead: RankSet = [2usize, 3].into_iter().collect();
        assert_eq!(buddy(&g, Rank(1), &dead), Some(Rank(0)));
        assert_eq!(buddy(&Group::world(1), Rank(0), &none), None);
        let sub = Group::new([1, 5], 8).unwrap();
        assert_eq!(buddy(&sub, Rank(5), &none), Some(Rank(1)));
    }

    #[test]
    fn keys_differ() {
        assert_ne!(original_key(1), 1);
        assert_ne!(replica_key(1, 2), replica_key(1, 3));
        assert_ne!(replica_key(1, 2), original_key(1));
    }

    fn group_of(n: u32) -> Group {
        Group::world(n)
    }

    #[test]
    fn a_buddy_is_on_another_node_when_there_is_one() {
        // Block placement: ranks 0,1 on node 10, ranks 2,3 on node 20.
        let g = group_of(4);
        let nodes = [10, 10, 20, 20];
        let none = RankSet::new();
        let b = |o: u32, dead: &RankSet| buddy_on(&g, Rank(o), dead, Some(&nodes)).map(|r| r.0);
        assert_eq!(b(0, &none), Some(2));
        assert_eq!(b(1, &none), Some(2));
        assert_eq!(b(2, &none), Some(0));
        assert_eq!(b(3, &none), Some(0));
        // Today's rule would give 1 and 3.
        assert_eq!(buddy(&g, Rank(0), &none), Some(Rank(1)));
        // Rank 2 dead: the next live member on the other node is 3.
        let mut d = RankSet::new();
        d.insert(2);
        assert_eq!(b(0, &d), Some(3));
        // Node 20 gone: one node left, today's rule.
        d.insert(3);
        assert_eq!(b(0, &d), Some(1));
        assert_eq!(b(1, &d), Some(0));
        // Unknown nodes: today's rule.
        assert_eq!(buddy_on(&g, Rank(0), &none, None), Some(Rank(1)));
        assert_eq!(buddy_on(&g, Rank(0), &none, Some(&[])), Some(Rank(1)));
    }

    proptest::proptest! {
        #[test]
        fn placement_keeps_copies_off_the_owners_node(
            n in 1u32..12,
            node_of in proptest::collection::vec(0u64..3, 12),
            dead_bits in proptest::collection::vec(proptest::bool::ANY, 12),
        ) {
            let g = group_of(n);
            let nodes = &node_of[..n as usize];
            let mut dead = RankSet::new();
            for (r, _) in dead_bits.iter().enumerate().take(n as usize).filter(|(_, d)| **d) {
                dead.insert(r);
            }
            for o in 0..n {
                if dead.contains(o as usize) {
                    continue;
                }
                let got = buddy_on(&g, Rank(o), &dead, Some(nodes));
                proptest::prop_assert_eq!(got, buddy_on(&g, Rank(o), &dead, Some(nodes)));
                let others: Vec<u32> =
                    (0..n).filter(|&r| r != o && !dead.contains(r as usize)).collect();
                let Some(b) = got else {
                    proptest::prop_assert!(others.is_empty());
                    continue;
                };
                proptest::prop_assert!(others.contains(&b.0), "buddy {} not a live member", b.0);
                let spans = others.iter().any(|&r| nodes[r as usize] != nodes[o as usize]);
                if spans {
                    proptest::prop_assert_ne!(nodes[b.0 as usize], nodes[o as usize]);
                } else {
                    proptest::prop_assert_eq!(Some(b), buddy(&g, Rank(o), &dead));
                }
            }
        }
    }
}
