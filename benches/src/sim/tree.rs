//! Fixed k-nomial trees under the model, rooted at rank 0 (binomial:
//! k = 2): what `MPI_Reduce` runs. In the round of span `mask·k`, rank
//! `v` (a multiple of the span) receives from `v + i·mask`, `i = 1..k`,
//! one child after the other, each once both are ready.

use super::{Arrivals, Layout, Model};

/// The largest k the cost model tries.
pub const MAX_K: usize = 16;

/// The time rank 0 holds the result of a k-nomial tree.
pub fn makespan(m: &Model, l: &Layout, a: &Arrivals, k: usize) -> f64 {
    assert!(k >= 2, "a k-nomial tree needs k >= 2");
    let p = l.ranks;
    let mut ready = a.at.clone();
    let mut mask = 1usize;
    while mask < p {
        let span = mask.saturating_mul(k);
        for v in (0..p).step_by(span) {
            for i in 1..k {
                let c = v + i * mask;
                if c >= p {
                    break;
                }
                ready[v] = ready[v].max(ready[c]) + m.step(l, v, c, &a.slow);
            }
        }
        mask = span;
    }
    ready[0]
}

/// The cost model's choice for arrivals `a`: the k of 2..=[`MAX_K`] with
/// the shortest makespan, and that makespan.
pub fn best(m: &Model, l: &Layout, a: &Arrivals) -> (usize, f64) {
    (2..=MAX_K)
        .map(|k| (k, makespan(m, l, a, k)))
        .min_by(|x, y| x.1.total_cmp(&y.1))
        .expect("k ranges over 2..=MAX_K")
}
