//! Reduction ids and keys.

use crate::rank::{Group, Rank};
use std::fmt;

/// The user-facing name of a reduction, unique among the live reductions of
/// its group (e.g. `"image-7"`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReductionId(String);

/// Longest id accepted, in bytes: ids travel in control messages.
pub const MAX_ID_LEN: usize = 256;

impl ReductionId {
    /// Validates an id: 1..=256 bytes, no control characters.
    pub fn new(id: impl Into<String>) -> Result<Self, crate::ReduceError> {
        let id = id.into();
        if id.is_empty() || id.len() > MAX_ID_LEN || id.chars().any(char::is_control) {
            return Err(crate::ReduceError::InvalidOptions(format!(
                "reduction id {} ({} bytes) must be 1..={MAX_ID_LEN} bytes without control characters",
                crate::quote::quote(&id),
                id.len()
            )));
        }
        Ok(ReductionId(id))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ReductionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The 64-bit name of a live reduction on the wire: a stable hash of its id,
/// group and root, computed identically by every rank without talking to the
/// master. The master keeps the full description and refuses a key whose
/// description differs (mismatched options).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReductionKey(pub u64);

impl fmt::Display for ReductionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl ReductionKey {
    /// Key of reduction `id` over `group`. The root is deliberately not part
    /// of the key: ranks that disagree on the root must meet at the master
    /// and get a typed error, not run two half-reductions that never end.
    pub fn of(id: &ReductionId, group: &Group) -> Self {
        let mut h = Fnv::new();
        h.write(id.as_str().as_bytes());
        h.write(&[0xff]);
        for Rank(r) in group.members() {
            h.write(&r.to_le_bytes());
        }
        ReductionKey(h.0)
    }
}

/// FNV-1a: stable across processes and builds (std's hasher is neither).
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// A stable 64-bit hash of a string (FNV-1a), used for type tags and job ids.
pub fn stable_hash(s: &str) -> u64 {
    let mut h = Fnv::new();
    h.write(s.as_bytes());
    h.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable_and_distinct() {
        let g = Group::world(4);
        let a = ReductionKey::of(&ReductionId::new("a").unwrap(), &g);
        assert_eq!(a, ReductionKey::of(&ReductionId::new("a").unwrap(), &g));
        assert_ne!(a, ReductionKey::of(&ReductionId::new("b").unwrap(), &g));
        let sub = Group::new([0, 1], 4).unwrap();
        assert_ne!(a, ReductionKey::of(&ReductionId::new("a").unwrap(), &sub));
        assert!(ReductionId::new("").is_err());
        assert!(ReductionId::new("x".repeat(300)).is_err());
        assert!(ReductionId::new("a\nb").is_err());
    }

    #[test]
    fn a_long_invalid_id_is_quoted_short() {
        let e = ReductionId::new("x".repeat(100_000))
            .unwrap_err()
            .to_string();
        assert!(e.len() < 200, "{e}");
        assert!(e.contains("100000 bytes"), "{e}");
    }
}
