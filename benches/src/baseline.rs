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

#[cfg(test)]
mod tests {
    #[test]
    fn memcpy_is_measured() {
        let t = super::memcpy_median(1 << 20, 3);
        assert!(t > 0.0 && t < 1.0, "{t}");
    }
}
