//! A sparse map merge: keys to sums.
//!
//! Each rank counts (or sums weights) under string keys it discovers itself
//! — words, error codes, cell ids — and the reduction merges the maps,
//! adding the values of keys present on both sides. Contributions have no
//! common shape, so `shape` is `None`.
//!
//! The fold walks the peer's archived map in place; only keys new to this
//! side are copied (one `String` each).

use std::collections::BTreeMap;
use taskfold::rkyv::{Archive, Deserialize, Serialize};
use taskfold::{FoldError, ReducerBody};

/// Sums per key. Values are `i64` and add with wrapping (a fold never
/// panics); use a float type instead if you sum weights.
///
/// ```
/// use taskfold_examples::SparseSum;
/// let mut s = SparseSum::default();
/// s.add("ok", 2);
/// s.add("timeout", 1);
/// s.add("ok", 3);
/// assert_eq!(s.get("ok"), 5);
/// assert_eq!(s.get("missing"), 0);
/// ```
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[rkyv(crate = taskfold::rkyv)]
pub struct SparseSum {
    /// Key → sum, ordered by key.
    pub sums: BTreeMap<String, i64>,
}

impl SparseSum {
    /// Adds `v` to `key`.
    pub fn add(&mut self, key: &str, v: i64) {
        match self.sums.get_mut(key) {
            Some(s) => *s = s.wrapping_add(v),
            None => {
                self.sums.insert(key.to_owned(), v);
            }
        }
    }

    /// The sum under `key` (0 if absent).
    pub fn get(&self, key: &str) -> i64 {
        self.sums.get(key).copied().unwrap_or(0)
    }
}

impl ReducerBody for SparseSum {
    fn fold(&mut self, other: &ArchivedSparseSum) -> Result<(), FoldError> {
        for (k, v) in other.sums.iter() {
            self.add(k.as_str(), v.to_native());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::{fold_tree, reduce_on_cluster};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_split_and_tree_matches_the_sequential_merge(
            ranks in prop::collection::vec(
                prop::collection::vec(("[a-f]{0,3}", -1000i64..1000), 0..30), 1..9),
            picks in prop::collection::vec(0usize..64, 0..32),
        ) {
            let mut sequential = SparseSum::default();
            let parts: Vec<SparseSum> = ranks
                .iter()
                .map(|kvs| {
                    let mut s = SparseSum::default();
                    for (k, v) in kvs {
                        s.add(k, *v);
                        sequential.add(k, *v);
                    }
                    s
                })
                .collect();
            let got = fold_tree(parts, &picks).unwrap().unwrap();
            prop_assert_eq!(got, sequential);
        }
    }

    #[test]
    fn word_counts_on_three_ranks() {
        let texts = [
            "the quick brown fox",
            "jumps over the lazy dog",
            "the dog sleeps",
        ];
        let mut sequential = SparseSum::default();
        let parts = texts
            .iter()
            .map(|t| {
                let mut s = SparseSum::default();
                for w in t.split_whitespace() {
                    s.add(w, 1);
                    sequential.add(w, 1);
                }
                s
            })
            .collect();
        let got = reduce_on_cluster(parts, 2).unwrap();
        assert_eq!(got, sequential);
        assert_eq!(got.get("the"), 3);
        assert_eq!(got.get("dog"), 2);
        assert_eq!(got.sums.len(), 9);
    }
}
