//! Folding helpers shared by the examples' tests (and handy in yours):
//! fold contributions along an arbitrary tree exactly as the runtime does
//! (encode one side, fold its archived bytes into the other), or reduce them
//! for real on a [`LocalCluster`].

use taskfold::{FoldError, LocalCluster, Reduce, ReduceError, ReduceValue};

/// Folds `parts` pairwise along the tree chosen by `picks`, through the
/// wire format: at each step two live contributions are chosen (by the next
/// pick, modulo the number left), the second is encoded and folded into the
/// first from its archived bytes. Missing picks default to 0, so any slice
/// (even empty) describes a valid tree.
///
/// Returns `None` for no parts.
pub fn fold_tree<T: ReduceValue>(parts: Vec<T>, picks: &[usize]) -> Result<Option<T>, FoldError> {
    let mut live: Vec<T> = parts;
    let mut picks = picks.iter().copied();
    while live.len() > 1 {
        let n = live.len();
        let a = picks.next().unwrap_or(0) % n;
        let mut b = picks.next().unwrap_or(1) % n;
        if b == a {
            b = (a + 1) % n;
        }
        let provider = live.swap_remove(b);
        // swap_remove moved the last element into `b`; fix up `a`.
        let a = if a == n - 1 { b } else { a };
        let bytes = provider.encode()?;
        live[a].fold_bytes(&bytes)?;
    }
    Ok(live.pop())
}

/// Reduces `parts` (one per rank) on a [`LocalCluster`] of `parts.len()`
/// ranks and returns the root's result.
pub fn reduce_on_cluster<T: ReduceValue>(parts: Vec<T>, root: u32) -> Result<T, ReduceError> {
    let n = parts.len() as u32;
    let cluster =
        LocalCluster::new(n).map_err(|e| ReduceError::InvalidOptions(format!("cluster: {e}")))?;
    let futures = cluster
        .ranks()
        .iter()
        .zip(parts)
        .map(|(rt, v)| rt.reduce(v, Reduce::root(root).id("harness")))
        .collect::<Result<Vec<_>, _>>()?;
    let mut result = None;
    for f in futures {
        if let Some(v) = f.get()? {
            result = Some(v);
        }
    }
    cluster.shutdown()?;
    result.ok_or_else(|| ReduceError::Decode("the root returned no value".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskfold::Sum;

    #[test]
    fn every_tree_folds_everything_once() {
        for picks in [
            vec![],
            vec![3, 1, 4, 1, 5, 9, 2, 6],
            vec![0; 20],
            vec![7; 20],
        ] {
            let parts: Vec<_> = (0..7u64).map(|r| Sum(vec![1u64 << r])).collect();
            let got = fold_tree(parts, &picks).unwrap().unwrap();
            assert_eq!(got.0, vec![0b111_1111]);
        }
        assert!(fold_tree(Vec::<Sum<u32>>::new(), &[]).unwrap().is_none());
    }

    #[test]
    fn on_a_cluster() {
        let parts: Vec<_> = (0..3u64).map(|r| Sum(vec![r + 1])).collect();
        assert_eq!(reduce_on_cluster(parts, 2).unwrap().0, vec![6]);
    }
}
