//! Baselines measured in the same run as the figures they qualify.

use std::time::Instant;

/// Median seconds of copying `bytes` bytes between two warm buffers: the
/// floor for "one transfer of the contribution" on this machine.
pub fn memcpy_median(bytes: usize, reps: u32) -> f64 {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    dst.copy_from_slice(&src);
    let mut times: Vec<f64> = (0..reps.max(3))
        .map(|_| {
            let t = Instant::now();
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
            t.elapsed().as_secs_f64()
        })
        .collect();
    crate::stats::median(&mut times)
}

/// Median seconds of `folds` in-place pairwise folds (`mine += theirs`,
/// `f32`) of `bytes` each, spread over `threads` threads at once, with the
/// data in memory rather than in cache (each thread folds around a ring of
/// buffers larger than the caches): the memory-bandwidth floor of `folds`
/// pairwise folds on this machine.
///
/// K concurrent reductions of p contributions need (p − 1)·K such folds
/// whatever schedules them; each reads two arrays and writes one, so no
/// transport or scheduler can finish them faster than this.
pub fn fold_floor(bytes: usize, folds: u32, threads: usize, reps: u32) -> f64 {
    fold_floor_kept(bytes, folds, 0, threads, reps)
}

/// [`fold_floor`] where `into_new` of the `folds` write `mine ⊕ theirs` into
/// a third buffer instead of in place (read two arrays, write a third that
/// is not in cache): the floor of reductions that keep every original
/// unchanged until they end, as taskfold's default durability does, where
/// a rank's first fold cannot overwrite its original. A write to a line
/// that was not just read fetches it first, so such a fold moves a third
/// more memory than one in place.
pub fn fold_floor_kept(bytes: usize, folds: u32, into_new: u32, threads: usize, reps: u32) -> f64 {
    // 8 buffers of each thread: 64 MiB per thread at 8 MiB, above the
    // caches' share of any current CPU.
    const RING: usize = 8;
    let n = (bytes / 4).max(1);
    let threads = threads.max(1);
    let mut rings: Vec<Vec<Vec<f32>>> = (0..threads)
        .map(|t| (0..RING).map(|i| vec![(t + i) as f32; n]).collect())
        .collect();
    // The outputs of the folds into new buffers: a ring of their own,
    // written (so mapped) before the clock starts.
    let mut outs: Vec<Vec<Vec<f32>>> = (0..threads)
        .map(|_| {
            let k = if into_new > 0 { RING } else { 0 };
            (0..k).map(|_| vec![0f32; n]).collect()
        })
        .collect();
    let mut times: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let start = std::sync::Barrier::new(threads);
            // Each thread stamps its own start and end: the span from the
            // first start to the last end is the time, whenever the caller
            // itself gets a core.
            let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
                let handles: Vec<_> = rings
                    .iter_mut()
                    .zip(outs.iter_mut())
                    .zip(
                        shares(folds, threads)
                            .into_iter()
                            .zip(shares(into_new, threads)),
                    )
                    .map(|((ring, out), (count, fresh))| {
                        let start = &start;
                        s.spawn(move || {
                            start.wait();
                            let t0 = Instant::now();
                            for f in 0..count {
                                let i = f % RING;
                                let j = (i + 1) % RING;
                                if f < fresh {
                                    let o = &mut out[i];
                                    for ((o, m), t) in o.iter_mut().zip(&ring[i]).zip(&ring[j]) {
                                        *o = *m + *t;
                                    }
                                    std::hint::black_box(&mut *o);
                                    continue;
                                }
                                let (mine, theirs) = if i < j {
                                    let (a, b) = ring.split_at_mut(j);
                                    (&mut a[i], &b[0])
                                } else {
                                    let (a, b) = ring.split_at_mut(i);
                                    (&mut b[0], &a[j])
                                };
                                for (m, t) in mine.iter_mut().zip(theirs.iter()) {
                                    *m += *t;
                                }
                                std::hint::black_box(&mut *mine);
                            }
                            (t0, Instant::now())
                        })
                    })
                    .collect();
                handles.into_iter().filter_map(|h| h.join().ok()).collect()
            });
            match (
                spans.iter().map(|s| s.0).min(),
                spans.iter().map(|s| s.1).max(),
            ) {
                (Some(a), Some(b)) => b.duration_since(a).as_secs_f64(),
                _ => 0.0,
            }
        })
        .collect();
    crate::stats::median(&mut times)
}

/// `folds` split as evenly as can be over `threads` threads.
fn shares(folds: u32, threads: usize) -> Vec<usize> {
    let threads = threads.max(1);
    let (q, r) = (folds as usize / threads, folds as usize % threads);
    (0..threads).map(|t| q + usize::from(t < r)).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn memcpy_is_measured() {
        let t = super::memcpy_median(1 << 20, 3);
        assert!(t > 0.0 && t < 1.0, "{t}");
    }

    #[test]
    fn folds_are_shared_evenly_and_all_done() {
        assert_eq!(super::shares(196, 2), vec![98, 98]);
        assert_eq!(super::shares(7, 3), vec![3, 2, 2]);
        assert_eq!(super::shares(1, 4), vec![1, 0, 0, 0]);
        assert_eq!(super::shares(5, 0), vec![5]);
    }

    #[test]
    fn the_fold_floor_is_measured() {
        // No comparison of two timings (the machine may be busy): a
        // positive, finite time for real work.
        let t = super::fold_floor(1 << 16, 8, 2, 3);
        assert!(t > 0.0 && t < 1.0, "{t}");
        let t = super::fold_floor_kept(1 << 16, 8, 4, 2, 3);
        assert!(t > 0.0 && t < 10.0, "{t}");
    }
}
