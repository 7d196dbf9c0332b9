//! The `k` best-scoring items across every rank.
//!
//! Each rank keeps its own best `k` (sorted, best first); a fold merges two
//! sorted lists and keeps the first `k`. Ties are broken by id (smaller
//! first) and scores compare with [`f64::total_cmp`], so the order is total
//! and the result does not depend on the order the runtime folds in: it is
//! exactly the global top `k`.

use std::cmp::Ordering;
use taskfold::rkyv::{Archive, Deserialize, Serialize};
use taskfold::{FoldError, ReducerBody};

/// One scored item.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
#[rkyv(crate = taskfold::rkyv)]
pub struct Scored {
    /// Higher is better.
    pub score: f64,
    /// The item (a particle, a trace, a document…).
    pub id: u64,
}

/// Best first: higher score, then smaller id.
fn rank_order(a: (f64, u64), b: (f64, u64)) -> Ordering {
    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
}

/// The best `k` items, best first.
///
/// ```
/// use taskfold_examples::TopK;
/// let mut t = TopK::new(2);
/// t.offer(0.5, 1);
/// t.offer(0.9, 2);
/// t.offer(0.7, 3);
/// assert_eq!(t.ids(), vec![2, 3]);
/// ```
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[rkyv(crate = taskfold::rkyv)]
pub struct TopK {
    /// How many to keep.
    pub k: u32,
    /// At most `k` items, best first.
    pub items: Vec<Scored>,
}

impl TopK {
    /// Keeps the best `k`.
    pub fn new(k: u32) -> Self {
        TopK {
            k,
            items: Vec::with_capacity(k as usize),
        }
    }

    /// Offers one item; kept if it is among the best `k` so far. A NaN
    /// score is ignored (it has no rank).
    pub fn offer(&mut self, score: f64, id: u64) {
        let k = self.k as usize;
        if k == 0 || score.is_nan() {
            return;
        }
        let pos = self
            .items
            .partition_point(|s| rank_order((s.score, s.id), (score, id)) == Ordering::Less);
        if pos < k {
            self.items.insert(pos, Scored { score, id });
            self.items.truncate(k);
        }
    }

    /// The kept ids, best first.
    pub fn ids(&self) -> Vec<u64> {
        self.items.iter().map(|s| s.id).collect()
    }
}

impl ReducerBody for TopK {
    fn fold(&mut self, other: &ArchivedTopK) -> Result<(), FoldError> {
        if other.k.to_native() != self.k {
            return Err(FoldError::Custom(format!(
                "top-k sizes differ: k = {} here, {} from the peer",
                self.k,
                other.k.to_native()
            )));
        }
        let k = self.k as usize;
        // Merge two sorted lists, reading the peer's in place.
        let mine = std::mem::take(&mut self.items);
        let mut out = Vec::with_capacity(k);
        let (mut i, mut j) = (0, 0);
        while out.len() < k && (i < mine.len() || j < other.items.len()) {
            let take_mine = match (mine.get(i), other.items.get(j)) {
                (Some(a), Some(b)) => {
                    rank_order((a.score, a.id), (b.score.to_native(), b.id.to_native()))
                        != Ordering::Greater
                }
                (Some(_), None) => true,
                _ => false,
            };
            if take_mine {
                out.push(mine[i]);
                i += 1;
            } else {
                let b = &other.items[j];
                out.push(Scored {
                    score: b.score.to_native(),
                    id: b.id.to_native(),
                });
                j += 1;
            }
        }
        self.items = out;
        Ok(())
    }

    fn shape(&self) -> Option<u64> {
        Some(self.k as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::{fold_tree, reduce_on_cluster};
    use proptest::prelude::*;
    use taskfold::ReduceValue;

    fn sequential(all: &[(f64, u64)], k: usize) -> Vec<(f64, u64)> {
        let mut v: Vec<_> = all.iter().copied().filter(|p| !p.0.is_nan()).collect();
        v.sort_by(|a, b| rank_order(*a, *b));
        v.truncate(k);
        v
    }

    fn pairs(t: &TopK) -> Vec<(f64, u64)> {
        t.items.iter().map(|s| (s.score, s.id)).collect()
    }

    fn score() -> impl Strategy<Value = f64> {
        prop_oneof![8 => -100.0..100.0f64, 2 => (0..5).prop_map(f64::from), 1 => Just(f64::NAN)]
    }

    proptest! {
        #[test]
        fn any_split_and_tree_is_the_global_top_k(
            ranks in prop::collection::vec(
                prop::collection::vec((score(), 0u64..40), 0..30), 1..9),
            k in 0u32..12,
            picks in prop::collection::vec(0usize..64, 0..32),
        ) {
            let all: Vec<(f64, u64)> = ranks.iter().flatten().copied().collect();
            let parts: Vec<TopK> = ranks
                .iter()
                .map(|items| {
                    let mut t = TopK::new(k);
                    for &(s, id) in items {
                        t.offer(s, id);
                    }
                    t
                })
                .collect();
            let got = fold_tree(parts, &picks).unwrap().unwrap();
            let want = sequential(&all, k as usize);
            prop_assert_eq!(pairs(&got), want);
        }
    }

    #[test]
    fn on_four_ranks() {
        let item = |r: u64, i: u64| (((i * 2_654_435_761 + r * 97) % 10_007) as f64, r * 1000 + i);
        let all: Vec<_> = (0..4)
            .flat_map(|r| (0..500).map(move |i| item(r, i)))
            .collect();
        let parts = (0..4)
            .map(|r| {
                let mut t = TopK::new(10);
                for i in 0..500 {
                    let (s, id) = item(r, i);
                    t.offer(s, id);
                }
                t
            })
            .collect();
        let got = reduce_on_cluster(parts, 1).unwrap();
        assert_eq!(pairs(&got), sequential(&all, 10));
    }

    #[test]
    fn different_k_is_an_error() {
        let mut a = TopK::new(3);
        let b = TopK::new(4).encode().unwrap();
        assert!(matches!(a.fold_bytes(&b), Err(FoldError::Custom(_))));
    }
}
