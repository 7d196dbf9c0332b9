//! A fixed-bin histogram with underflow, overflow and NaN counters.
//!
//! Every rank bins its own samples into the same `[lo, hi)` range and bin
//! count; the reduction adds the counts. Samples below `lo` go to
//! `underflow`, samples at or above `hi` to `overflow`, NaNs to `nan`, so
//! no sample is ever dropped: `total()` is the global sample count.
//!
//! Ranks that disagree on the binning are caught twice: `shape` (the bin
//! count) is checked by the master before any data moves, and `fold` refuses
//! a different range.

use taskfold::rkyv::{Archive, Deserialize, Serialize};
use taskfold::{FoldError, ReducerBody};

/// Counts of samples per bin over `[lo, hi)`.
///
/// ```
/// use taskfold_examples::Histogram;
/// let mut h = Histogram::new(0.0, 10.0, 5);
/// h.extend([-1.0, 0.0, 3.9, 9.99, 10.0, f64::NAN]);
/// assert_eq!(h.bins, vec![1, 1, 0, 0, 1]);
/// assert_eq!((h.underflow, h.overflow, h.nan), (1, 1, 1));
/// ```
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[rkyv(crate = taskfold::rkyv)]
pub struct Histogram {
    /// Lower edge of the first bin.
    pub lo: f64,
    /// Upper edge of the last bin (exclusive).
    pub hi: f64,
    /// Samples per bin.
    pub bins: Vec<u64>,
    /// Samples below `lo` (and `-inf`).
    pub underflow: u64,
    /// Samples at or above `hi` (and `+inf`).
    pub overflow: u64,
    /// NaN samples.
    pub nan: u64,
}

impl Histogram {
    /// An empty histogram of `bins` equal bins over `[lo, hi)`.
    ///
    /// Panics if `bins` is 0 or the range is empty or not finite: binning is
    /// the application's choice, made once, not data.
    pub fn new(lo: f64, hi: f64, bins: usize) -> Self {
        assert!(bins > 0, "a histogram needs at least one bin");
        assert!(
            lo.is_finite() && hi.is_finite() && lo < hi,
            "invalid histogram range [{lo}, {hi})"
        );
        Histogram {
            lo,
            hi,
            bins: vec![0; bins],
            underflow: 0,
            overflow: 0,
            nan: 0,
        }
    }

    /// Counts one sample.
    pub fn add(&mut self, x: f64) {
        if x.is_nan() {
            self.nan += 1;
        } else if x < self.lo {
            self.underflow += 1;
        } else if x >= self.hi {
            self.overflow += 1;
        } else {
            let n = self.bins.len();
            let k = ((x - self.lo) / (self.hi - self.lo) * n as f64) as usize;
            // Rounding can push a sample just below `hi` to `n`.
            self.bins[k.min(n - 1)] += 1;
        }
    }

    /// Counts every sample of `xs`.
    pub fn extend(&mut self, xs: impl IntoIterator<Item = f64>) {
        for x in xs {
            self.add(x);
        }
    }

    /// Every sample counted, including under/overflow and NaN.
    pub fn total(&self) -> u64 {
        self.bins.iter().sum::<u64>() + self.underflow + self.overflow + self.nan
    }
}

impl ReducerBody for Histogram {
    fn fold(&mut self, other: &ArchivedHistogram) -> Result<(), FoldError> {
        let (lo, hi) = (other.lo.to_native(), other.hi.to_native());
        if lo.to_bits() != self.lo.to_bits() || hi.to_bits() != self.hi.to_bits() {
            return Err(FoldError::Custom(format!(
                "histogram ranges differ: [{}, {}) here, [{lo}, {hi}) from the peer",
                self.lo, self.hi
            )));
        }
        if other.bins.len() != self.bins.len() {
            return Err(FoldError::Mismatch {
                mine: self.bins.len() as u64,
                theirs: other.bins.len() as u64,
            });
        }
        for (mine, theirs) in self.bins.iter_mut().zip(other.bins.iter()) {
            *mine += theirs.to_native();
        }
        self.underflow += other.underflow.to_native();
        self.overflow += other.overflow.to_native();
        self.nan += other.nan.to_native();
        Ok(())
    }

    fn shape(&self) -> Option<u64> {
        Some(self.bins.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::{fold_tree, reduce_on_cluster};
    use proptest::prelude::*;
    use taskfold::ReduceValue;

    fn sample() -> impl Strategy<Value = f64> {
        prop_oneof![
            8 => -20.0..120.0f64,
            1 => Just(f64::NAN),
            1 => Just(f64::INFINITY),
            1 => Just(f64::NEG_INFINITY),
            1 => Just(100.0),
            1 => Just(0.0),
        ]
    }

    proptest! {
        #[test]
        fn any_split_and_tree_matches_the_sequential_histogram(
            ranks in prop::collection::vec(prop::collection::vec(sample(), 0..40), 1..9),
            picks in prop::collection::vec(0usize..64, 0..32),
        ) {
            let mut sequential = Histogram::new(0.0, 100.0, 7);
            let parts: Vec<Histogram> = ranks
                .iter()
                .map(|xs| {
                    sequential.extend(xs.iter().copied());
                    let mut h = Histogram::new(0.0, 100.0, 7);
                    h.extend(xs.iter().copied());
                    h
                })
                .collect();
            let folded = fold_tree(parts, &picks).unwrap().unwrap();
            prop_assert_eq!(&folded, &sequential);
            prop_assert_eq!(folded.total(), ranks.iter().map(Vec::len).sum::<usize>() as u64);
        }
    }

    #[test]
    fn on_four_ranks() {
        let data = |r: u32| (0..1000).map(move |i| ((i * 37 + r * 11) % 130) as f64 - 15.0);
        let mut sequential = Histogram::new(0.0, 100.0, 10);
        let parts = (0..4)
            .map(|r| {
                sequential.extend(data(r));
                let mut h = Histogram::new(0.0, 100.0, 10);
                h.extend(data(r));
                h
            })
            .collect();
        let got = reduce_on_cluster(parts, 3).unwrap();
        assert_eq!(got, sequential);
        assert!(got.underflow > 0 && got.overflow > 0);
    }

    #[test]
    fn different_ranges_refuse_to_fold() {
        let mut a = Histogram::new(0.0, 1.0, 4);
        let b = Histogram::new(0.0, 2.0, 4).encode().unwrap();
        assert!(matches!(a.fold_bytes(&b), Err(FoldError::Custom(_))));
        let c = Histogram::new(0.0, 1.0, 5).encode().unwrap();
        assert_eq!(
            a.fold_bytes(&c),
            Err(FoldError::Mismatch { mine: 4, theirs: 5 })
        );
    }

    #[test]
    fn edges() {
        let mut h = Histogram::new(-1.0, 1.0, 3);
        h.extend([-1.0, 1.0 - f64::EPSILON, 1.0, -1.0 - 1e-12]);
        assert_eq!(h.bins, vec![1, 0, 1]);
        assert_eq!((h.underflow, h.overflow), (1, 1));
    }
}
