//! Multilevel checkpoints (see the book's Checkpoints chapter): the pure
//! parts, no I/O.
//!
//! A rank checkpoints its state as *pieces*, each written at one of four
//! [`Level`]s, each level on its own interval ([`Intervals`]):
//!
//! - **L1**, the rank's local disk: survives the rank's process, not its
//!   node.
//! - **L2**, a copy on a *partner* on another node ([`placement`]):
//!   survives the loss of the rank's node.
//! - **L3**, Reed–Solomon erasure coding across a group of `k` ranks with
//!   `m` parity pieces held off the group ([`erasure`], [`placement`]):
//!   any `m` lost ranks of a group are rebuilt.
//! - **L4**, a shared directory (a parallel file system): survives
//!   everything but the file system.
//!
//! [`piece`] is the on-disk and on-wire format of one piece: a header that
//! names the job, owner, version, type and level, and a blake3 checksum
//! over header and payload. A piece that fails its checksum, or belongs to
//! another job, type, owner or version, is refused with a typed reason
//! ([`piece::PieceError`]), never restored.
//!
//! [`plan`] decides where a restarted rank reads from: knowing which ranks
//! and nodes died, the cheapest level that survived, without probing the
//! levels that are gone (each of which would cost a detection timeout).
//! [`flow`] follows a checkpoint made across ranks: which of a rank's
//! levels are durable, and a group encoder's progress through one L3.
//! [`select`] picks the version to restore: the newest one complete for a
//! rank, or for every rank (a global restart).
//!
//! Nothing here fails by panicking on bad input: decoding untrusted bytes
//! returns an error and allocates no more than the input's length.

pub mod erasure;
pub mod flow;
pub mod piece;
pub mod placement;
pub mod plan;
pub mod select;

pub use erasure::ErasureError;
pub use flow::{Coding, Partial, Progress};
pub use piece::{Expect, Header, Piece, PieceError, Shard};
pub use placement::{EcGroup, Placement, PlacementError};
pub use plan::{Failure, Probe};
pub use select::Found;

use std::fmt;

/// A checkpoint level, cheapest to restore from first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Level {
    /// The rank's local disk.
    L1 = 1,
    /// A partner's local disk, on another node.
    L2 = 2,
    /// Erasure-coded across a group of ranks.
    L3 = 3,
    /// A shared directory (parallel file system).
    L4 = 4,
}

impl Level {
    /// Every level, cheapest first (also the order FTI-style retrieval
    /// probes them in).
    pub const ALL: [Level; 4] = [Level::L1, Level::L2, Level::L3, Level::L4];

    /// The level numbered `n` (1..=4).
    pub fn from_number(n: u8) -> Option<Level> {
        Level::ALL.get(usize::from(n).wrapping_sub(1)).copied()
    }

    /// Its number, 1..=4.
    pub fn number(self) -> u8 {
        self as u8
    }

    /// Position in [`Level::ALL`] (0..4).
    fn index(self) -> usize {
        usize::from(self.number() - 1)
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "L{}", self.number())
    }
}

/// Which job a piece belongs to: a piece of another job (an earlier run
/// left in the same directory, say) is refused, never restored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct JobId(pub u64);

impl JobId {
    /// The job id of a job named `name` (e.g. the launcher's job id and
    /// its start time): the first 8 bytes of its blake3 hash.
    pub fn named(name: &str) -> JobId {
        JobId(hash64(name.as_bytes()))
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#018x}", self.0)
    }
}

/// The type tag of a state type named `name` (e.g. its
/// `std::any::type_name`, with a schema version): the first 8 bytes of
/// its blake3 hash. A piece restored as another type is refused.
pub fn type_tag(name: &str) -> u64 {
    hash64(name.as_bytes())
}

fn hash64(bytes: &[u8]) -> u64 {
    let h = blake3::hash(bytes);
    let mut first = [0u8; 8];
    first.copy_from_slice(&h.as_bytes()[..8]);
    u64::from_le_bytes(first)
}

/// How often each level is written: version `v` is written at level `L`
/// when `v` is a multiple of `L`'s interval; an interval of 0 turns the
/// level off. Frequent cheap levels and rare expensive ones is the point
/// of having several.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Intervals(pub [u64; 4]);

impl Intervals {
    /// Whether version `version` is written at `level`.
    pub fn writes(&self, level: Level, version: u64) -> bool {
        let every = self.0[level.index()];
        version.checked_rem(every) == Some(0)
    }

    /// The levels `version` is written at, cheapest first.
    pub fn levels_at(&self, version: u64) -> Vec<Level> {
        Level::ALL
            .into_iter()
            .filter(|&l| self.writes(l, version))
            .collect()
    }

    /// The newest version at most `last` written at `level`, if any (0 is
    /// a multiple of every interval: the version a job starts from).
    pub fn newest(&self, level: Level, last: u64) -> Option<u64> {
        let every = self.0[level.index()];
        (every != 0).then(|| last - last % every)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_number_and_order() {
        for l in Level::ALL {
            assert_eq!(Level::from_number(l.number()), Some(l));
        }
        assert_eq!(Level::from_number(0), None);
        assert_eq!(Level::from_number(5), None);
        assert!(Level::L1 < Level::L4);
        assert_eq!(Level::L3.to_string(), "L3");
    }

    #[test]
    fn ids_and_tags_are_stable_and_distinct() {
        assert_eq!(JobId::named("job-1"), JobId::named("job-1"));
        assert_ne!(JobId::named("job-1"), JobId::named("job-2"));
        assert_ne!(type_tag("A"), type_tag("B"));
    }

    #[test]
    fn intervals_say_which_levels_a_version_reaches() {
        let iv = Intervals([1, 2, 4, 0]);
        assert_eq!(iv.levels_at(4), vec![Level::L1, Level::L2, Level::L3]);
        assert_eq!(iv.levels_at(3), vec![Level::L1]);
        assert_eq!(iv.newest(Level::L3, 7), Some(4));
        assert_eq!(iv.newest(Level::L4, 7), None);
        assert!(!iv.writes(Level::L4, 0));
    }
}
