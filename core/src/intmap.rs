//! Hash maps keyed by small integers the process itself chose (task ids,
//! node numbers, ranks), hashed by `rustc-hash`'s Fx hasher (a
//! multiplication per word) instead of SipHash.
//!
//! Why: the master's scheduler looks such keys up several times per
//! decision, and SipHash costs more than the rest of a lookup. SipHash
//! resists keys chosen to collide; these keys are the master's own (a
//! peer's report only looks a task id up, never inserts one), so a
//! collision attack cannot fill a map with colliding keys.

use std::collections::HashMap;

/// A map from small integers (see the module's doc).
pub type IntMap<K, V> = HashMap<K, V, rustc_hash::FxBuildHasher>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn dense_keys_spread_and_maps_behave_as_maps() {
        let mut m: IntMap<u64, u64> = IntMap::default();
        for k in 0..10_000u64 {
            assert!(m.insert(k, k * 2).is_none());
        }
        for k in (0..10_000u64).step_by(2) {
            assert_eq!(m.remove(&k), Some(k * 2));
        }
        assert_eq!(m.len(), 5_000);
        assert!((1..10_000u64)
            .step_by(2)
            .all(|k| m.get(&k) == Some(&(k * 2))));
        // Consecutive keys reach distinct low bits (the bucket index).
        let low: std::collections::HashSet<u64> = (0..1024u64)
            .map(|k| rustc_hash::FxBuildHasher.hash_one(k) & 1023)
            .collect();
        assert!(low.len() > 600, "{} distinct buckets of 1024", low.len());
    }
}
