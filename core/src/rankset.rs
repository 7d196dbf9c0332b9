//! Paths: sets of group positions as bitsets.

use rkyv::{Archive, Deserialize, Serialize};

/// A set of group positions (`0..group.len()`), stored as 64-bit words.
///
/// A path `P_i` says whose originals are folded into an intermediate value.
/// Union and disjointness are word-wise, so a 65,536-rank path costs 1,024
/// words and a union is a few hundred nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, Archive, Serialize, Deserialize)]
pub struct RankSet {
    words: Vec<u64>,
}

impl RankSet {
    /// The empty set.
    pub fn new() -> Self {
        RankSet::default()
    }

    /// The set `{index}`.
    pub fn single(index: usize) -> Self {
        let mut s = RankSet::new();
        s.insert(index);
        s
    }

    /// The set `{0, .., n-1}`.
    pub fn full(n: usize) -> Self {
        let mut words = vec![u64::MAX; n / 64];
        if !n.is_multiple_of(64) {
            words.push((1u64 << (n % 64)) - 1);
        }
        RankSet { words }
    }

    /// Adds `index`; returns false if it was already present.
    pub fn insert(&mut self, index: usize) -> bool {
        let (w, b) = (index / 64, index % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        let had = self.words[w] & (1 << b) != 0;
        self.words[w] |= 1 << b;
        !had
    }

    /// Takes `index` out; true if it was in. Trailing empty words are
    /// dropped, so equal sets stay equal (`==` compares the words).
    pub fn remove(&mut self, index: usize) -> bool {
        let (w, b) = (index / 64, index % 64);
        let had = self.contains(index);
        if had {
            self.words[w] &= !(1 << b);
            while self.words.last() == Some(&0) {
                self.words.pop();
            }
        }
        had
    }

    /// True if `index` is in the set.
    pub fn contains(&self, index: usize) -> bool {
        self.words
            .get(index / 64)
            .is_some_and(|w| w & (1 << (index % 64)) != 0)
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// True if the set has no member.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// True if the two sets share no member.
    pub fn is_disjoint(&self, other: &RankSet) -> bool {
        self.words.iter().zip(&other.words).all(|(a, b)| a & b == 0)
    }

    /// True if every member of `self` is in `other`.
    pub fn is_subset(&self, other: &RankSet) -> bool {
        self.words.iter().enumerate().all(|(i, &w)| {
            let o = other.words.get(i).copied().unwrap_or(0);
            w & !o == 0
        })
    }

    /// `self ∪ other`.
    pub fn union(&self, other: &RankSet) -> RankSet {
        let (long, short) = if self.words.len() >= other.words.len() {
            (self, other)
        } else {
            (other, self)
        };
        let mut words = long.words.clone();
        for (w, s) in words.iter_mut().zip(&short.words) {
            *w |= s;
        }
        RankSet { words }
    }

    /// True if the set is exactly `{0, .., n-1}`.
    ///
    /// Word by word, stopping at the first that differs: the scheduler
    /// asks it of every queue front, and a path that is not full (nearly
    /// every one) is told from its first words, not by counting its bits.
    pub fn is_full(&self, n: usize) -> bool {
        let (whole, rest) = (n / 64, n % 64);
        let tail = match rest {
            0 => 0,
            r => (1u64 << r) - 1,
        };
        let head_full =
            self.words.len() >= whole && self.words[..whole].iter().all(|&w| w == u64::MAX);
        head_full
            && self.words.get(whole).copied().unwrap_or(0) == tail
            && self.words.iter().skip(whole + 1).all(|&w| w == 0)
    }

    /// Members in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(wi, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros() as usize;
                w &= w - 1;
                Some(wi * 64 + b)
            })
        })
    }
}

impl ArchivedRankSet {
    /// Converts the archived set back to a native one.
    pub fn to_native(&self) -> RankSet {
        RankSet {
            words: self.words.iter().map(|w| w.to_native()).collect(),
        }
    }
}

impl FromIterator<usize> for RankSet {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Self {
        let mut s = RankSet::new();
        for i in iter {
            s.insert(i);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn is_full_is_exactly_every_position_below_n(
            members in proptest::collection::btree_set(0usize..300, 0..300),
            n in 0usize..300,
        ) {
            let s: RankSet = members.iter().copied().collect();
            let want = members.len() == n && members.iter().all(|&i| i < n);
            prop_assert_eq!(s.is_full(n), want);
            prop_assert!(RankSet::full(n).is_full(n));
            let every: RankSet = (0..n).collect();
            prop_assert!(every.is_full(n));
            prop_assert!(!every.is_full(n + 1));
            prop_assert_eq!(every.is_full(n.saturating_sub(1)), n == 0);
        }
    }

    #[test]
    fn basic_ops() {
        let a: RankSet = [0, 5, 64, 65_535].into_iter().collect();
        let b = RankSet::single(7);
        assert!(a.is_disjoint(&b));
        let u = a.union(&b);
        assert_eq!(u.len(), 5);
        assert_eq!(u.iter().collect::<Vec<_>>(), vec![0, 5, 7, 64, 65_535]);
        assert!(!u.is_disjoint(&a));
        assert!(RankSet::full(65_536).is_full(65_536));
        assert!(RankSet::full(3).is_full(3));
        assert!(!RankSet::full(3).is_full(4));
        assert!(RankSet::full(0).is_empty());
    }

    #[test]
    fn union_of_halves_is_full() {
        let n = 65_536;
        let even: RankSet = (0..n).step_by(2).collect();
        let odd: RankSet = (1..n).step_by(2).collect();
        assert!(even.is_disjoint(&odd));
        assert!(even.union(&odd).is_full(n));
    }
}
