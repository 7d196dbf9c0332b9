//! The interference of `bench compare`, identical on both sides: seeded
//! arrival delays, a busy rank, and the background load's compute kernel.
//! The MPI driver (`benches/mpi/reduce_bench.c`) implements the same
//! functions in C; the `tests` module pins the values both must produce.

use std::time::{Duration, Instant};

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The seeded delay of `rank` in repetition `rep`, as a fraction of the
/// jitter in `[0, 1)`. Same seed, same arrival order on both sides.
pub fn delay_fraction(seed: u64, rep: u64, rank: u64) -> f64 {
    let x = splitmix64(
        seed.wrapping_add(rep.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .wrapping_add(rank.wrapping_mul(0xBF58_476D_1CE4_E5B9)),
    );
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// A slow rank computes: it burns its core for `d`, it does not sleep.
pub fn busy_spin(d: Duration) {
    let end = Instant::now() + d;
    let mut acc = 0.0f64;
    while Instant::now() < end {
        for i in 0..1000 {
            acc += f64::from(i) * 1e-9;
        }
        std::hint::black_box(acc);
    }
}

/// One pass of a Kirchhoff-migration-like kernel: for every image point,
/// sum trace amplitudes at the straight-ray traveltime (square roots,
/// divisions and gathers over a trace block). The background load runs
/// it back to back; it returns a checksum so nothing is optimised away.
pub fn migration_kernel(traces: &[f32], nt: usize, image: &mut [f32]) -> f32 {
    let ntr = traces.len() / nt.max(1);
    let nx = image.len();
    for (ix, px) in image.iter_mut().enumerate() {
        let x = ix as f32 * 12.5;
        let z = 400.0 + (ix % 64) as f32 * 10.0;
        let mut acc = 0.0f32;
        for tr in 0..ntr {
            let dx = x - tr as f32 * 25.0;
            let t = ((dx * dx + z * z).sqrt() * 2.0 / 2000.0 / 0.004) as usize;
            if t < nt {
                acc += traces[tr * nt + t];
            }
        }
        *px += acc / (1 + nx % 7) as f32;
    }
    image.iter().sum()
}

/// Runs [`migration_kernel`] until `until`: one process of the background
/// load (scenario d). Bounded: it stops by itself at the deadline.
pub fn load_until(until: Instant) -> f32 {
    let nt = 1000;
    let traces: Vec<f32> = (0..64 * nt).map(|i| ((i % 97) as f32).sin()).collect();
    let mut image = vec![0.0f32; 4096];
    let mut sum = 0.0;
    while Instant::now() < until {
        sum += migration_kernel(&traces, nt, &mut image);
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_are_seeded_and_uniform() {
        // The C driver prints the same values (checked by the compare test).
        let a = delay_fraction(7, 0, 0);
        assert_eq!(a, delay_fraction(7, 0, 0));
        assert_ne!(a, delay_fraction(7, 0, 1));
        assert_ne!(a, delay_fraction(8, 0, 0));
        let v: Vec<f64> = (0..10_000).map(|i| delay_fraction(3, i, 5)).collect();
        assert!(v.iter().all(|x| (0.0..1.0).contains(x)));
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "mean {mean}");
    }

    #[test]
    fn spin_and_load_stop_by_themselves() {
        let t = Instant::now();
        busy_spin(Duration::from_millis(5));
        assert!(t.elapsed() >= Duration::from_millis(5));
        let _ = load_until(Instant::now() + Duration::from_millis(20));
        assert!(t.elapsed() < Duration::from_secs(10));
    }
}
