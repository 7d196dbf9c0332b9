//! Streaming mean and variance: Welford's update on each rank, Chan et
//! al.'s pairwise merge in the reduction.
//!
//! Each rank pushes its samples one at a time (no need to keep them); the
//! fold merges two summaries `(n, mean, M2)` exactly as if one rank had seen
//! both streams:
//!
//! ```text
//! n     = n_a + n_b
//! delta = mean_b - mean_a
//! mean  = mean_a + delta * n_b / n
//! M2    = M2_a + M2_b + delta^2 * n_a * n_b / n
//! ```
//!
//! This is numerically stable (no `sum(x^2) - n * mean^2` cancellation), and
//! associative and commutative up to rounding, so the runtime may fold in
//! any order: results agree with a sequential Welford pass to a relative
//! `1e-12` or so for well-scaled data.

use taskfold::rkyv::{Archive, Deserialize, Serialize};
use taskfold::{FoldError, ReducerBody};

/// Count, mean, sum of squared deviations, minimum and maximum of a stream.
///
/// ```
/// use taskfold_examples::Moments;
/// let mut m = Moments::default();
/// m.extend([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
/// assert_eq!(m.mean, 5.0);
/// assert_eq!(m.variance(), Some(4.0)); // population variance
/// ```
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[rkyv(crate = taskfold::rkyv)]
pub struct Moments {
    /// Samples seen.
    pub count: u64,
    /// Their mean (0 when empty).
    pub mean: f64,
    /// Sum of squared deviations from the mean.
    pub m2: f64,
    /// Smallest sample (`+inf` when empty).
    pub min: f64,
    /// Largest sample (`-inf` when empty).
    pub max: f64,
}

impl Default for Moments {
    fn default() -> Self {
        Moments {
            count: 0,
            mean: 0.0,
            m2: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }
}

impl Moments {
    /// Welford's update with one sample.
    pub fn push(&mut self, x: f64) {
        self.count += 1;
        let delta = x - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (x - self.mean);
        self.min = self.min.min(x);
        self.max = self.max.max(x);
    }

    /// Pushes every sample of `xs`.
    pub fn extend(&mut self, xs: impl IntoIterator<Item = f64>) {
        for x in xs {
            self.push(x);
        }
    }

    /// Chan et al.'s merge of another summary into this one.
    pub fn merge(&mut self, count: u64, mean: f64, m2: f64, min: f64, max: f64) {
        if count == 0 {
            return;
        }
        if self.count == 0 {
            *self = Moments {
                count,
                mean,
                m2,
                min,
                max,
            };
            return;
        }
        let (na, nb) = (self.count as f64, count as f64);
        let n = na + nb;
        let delta = mean - self.mean;
        self.mean += delta * nb / n;
        self.m2 += m2 + delta * delta * na * nb / n;
        self.count += count;
        self.min = self.min.min(min);
        self.max = self.max.max(max);
    }

    /// Population variance (`M2 / n`); `None` when empty.
    pub fn variance(&self) -> Option<f64> {
        (self.count > 0).then(|| self.m2 / self.count as f64)
    }

    /// Sample variance (`M2 / (n - 1)`); `None` below two samples.
    pub fn sample_variance(&self) -> Option<f64> {
        (self.count > 1).then(|| self.m2 / (self.count - 1) as f64)
    }
}

impl ReducerBody for Moments {
    fn fold(&mut self, other: &ArchivedMoments) -> Result<(), FoldError> {
        self.merge(
            other.count.to_native(),
            other.mean.to_native(),
            other.m2.to_native(),
            other.min.to_native(),
            other.max.to_native(),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::{fold_tree, reduce_on_cluster};
    use proptest::prelude::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * a.abs().max(b.abs()).max(1.0)
    }

    proptest! {
        #[test]
        fn any_split_and_tree_matches_a_sequential_welford_pass(
            ranks in prop::collection::vec(prop::collection::vec(-1e3..1e3f64, 0..50), 1..9),
            offset in -1e6..1e6f64,
            picks in prop::collection::vec(0usize..64, 0..32),
        ) {
            let mut sequential = Moments::default();
            let parts: Vec<Moments> = ranks
                .iter()
                .map(|xs| {
                    let xs = xs.iter().map(|x| x + offset);
                    sequential.extend(xs.clone());
                    let mut m = Moments::default();
                    m.extend(xs);
                    m
                })
                .collect();
            let got = fold_tree(parts, &picks).unwrap().unwrap();
            prop_assert_eq!(got.count, sequential.count);
            prop_assert_eq!(got.min, sequential.min);
            prop_assert_eq!(got.max, sequential.max);
            prop_assert!(close(got.mean, sequential.mean, 1e-12), "{} vs {}", got.mean, sequential.mean);
            // M2 is scaled like the data's squared spread (not its offset).
            let scale = sequential.m2.max(1.0);
            prop_assert!((got.m2 - sequential.m2).abs() <= 1e-9 * scale,
                "{} vs {}", got.m2, sequential.m2);
        }
    }

    #[test]
    fn on_three_ranks_against_two_pass_statistics() {
        let data = |r: u32| (0..5000).map(move |i| 1e9 + ((i * 7919 + r * 104_729) % 1000) as f64);
        let all: Vec<f64> = (0..3).flat_map(data).collect();
        let n = all.len() as f64;
        let mean = all.iter().sum::<f64>() / n;
        let var = all.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
        let parts = (0..3)
            .map(|r| {
                let mut m = Moments::default();
                m.extend(data(r));
                m
            })
            .collect();
        let got = reduce_on_cluster(parts, 0).unwrap();
        assert_eq!(got.count, all.len() as u64);
        assert!(close(got.mean, mean, 1e-14), "{} vs {mean}", got.mean);
        // A naive sum of squares would lose every digit at this offset.
        assert!(
            close(got.variance().unwrap(), var, 1e-9),
            "{:?} vs {var}",
            got.variance()
        );
    }

    #[test]
    fn empty_sides() {
        let mut a = Moments::default();
        a.merge(0, 0.0, 0.0, f64::INFINITY, f64::NEG_INFINITY);
        assert_eq!(a, Moments::default());
        assert_eq!(a.variance(), None);
        a.merge(2, 3.0, 2.0, 2.0, 4.0);
        assert_eq!((a.count, a.mean, a.m2), (2, 3.0, 2.0));
        assert_eq!(a.sample_variance(), Some(2.0));
    }
}
