//! The earth model: a v(z) velocity law (linear gradient) and a few dipping
//! planar reflectors, generated from a seed.
//!
//! The velocity only depends on depth, so straight-ray traveltimes have a
//! closed form: along a straight ray the slowness is averaged over the
//! depths it crosses, and for `v(z) = v0 + k z`
//! `mean_slowness(z) = ln(1 + k z / v0) / (k z)`. A ray of horizontal offset
//! `h` to depth `z` takes `sqrt(h² + z²) · mean_slowness(z)`.
//!
//! The reflectors are reflectivity contrasts (think density) embedded in
//! that smooth background, which is all a Kirchhoff migration needs.

/// A small, seeded pseudo-random generator (SplitMix64): the same seed gives
/// the same model on every rank and every platform.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A planar reflector: depth `z(x) = z_mid + slope · (x - x_mid)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Reflector {
    /// Depth at the middle of the model, metres.
    pub z_mid: f64,
    /// Dip as `dz/dx` (tangent of the dip angle).
    pub slope: f64,
    /// Reflection coefficient (sign and strength).
    pub amplitude: f64,
}

/// The model's grid and physical parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    /// Grid columns (x).
    pub nx: usize,
    /// Grid rows (z).
    pub nz: usize,
    /// Grid spacing in x and z, metres.
    pub dx: f64,
    /// Velocity at the surface, m/s.
    pub v0: f64,
    /// Velocity gradient `dv/dz`, 1/s.
    pub gradient: f64,
    /// The reflectors, shallowest first.
    pub reflectors: Vec<Reflector>,
}

impl Model {
    /// A model of `nx × nz` cells of `dx` metres with `reflectors`
    /// reflectors, all drawn from `seed`.
    pub fn generate(nx: usize, nz: usize, dx: f64, reflectors: usize, seed: u64) -> Model {
        let mut rng = Rng::new(seed);
        let v0 = rng.uniform(1500.0, 1800.0);
        let gradient = rng.uniform(0.3, 0.7);
        let depth = nz.saturating_sub(1) as f64 * dx;
        let n = reflectors.max(1) as f64;
        let reflectors = (0..reflectors)
            .map(|i| {
                // Spread over 25%..85% of the depth, one slot each.
                let slot = 0.6 * depth / n;
                let z_mid = 0.25 * depth + slot * (i as f64 + rng.uniform(0.3, 0.7));
                let dip = rng.uniform(-12.0, 12.0).to_radians();
                // Keep the whole reflector within 10%..95% of the depth.
                let room = (z_mid - 0.1 * depth).min(0.95 * depth - z_mid);
                let half_width = 0.5 * (nx.saturating_sub(1)) as f64 * dx;
                let max_slope = if half_width > 0.0 {
                    room / half_width
                } else {
                    0.0
                };
                let sign = if rng.next_u64() & 1 == 0 { 1.0 } else { -1.0 };
                Reflector {
                    z_mid,
                    slope: dip.tan().clamp(-max_slope, max_slope),
                    amplitude: sign * rng.uniform(0.6, 1.0),
                }
            })
            .collect();
        Model {
            nx,
            nz,
            dx,
            v0,
            gradient,
            reflectors,
        }
    }

    /// Velocity at depth `z`, m/s.
    pub fn velocity(&self, z: f64) -> f64 {
        self.v0 + self.gradient * z
    }

    /// Slowness averaged over depths `[0, z]`, s/m.
    pub fn mean_slowness(&self, z: f64) -> f64 {
        let kz = self.gradient * z;
        if kz.abs() < 1e-9 * self.v0 {
            1.0 / self.v0
        } else {
            (1.0 + kz / self.v0).ln() / kz
        }
    }

    /// One-way straight-ray traveltime from the surface to a point at
    /// horizontal offset `h` and depth `z`, seconds.
    pub fn traveltime(&self, h: f64, z: f64) -> f64 {
        (h * h + z * z).sqrt() * self.mean_slowness(z)
    }

    /// Depth of reflector `r` at horizontal position `x`, metres.
    pub fn reflector_depth(&self, r: &Reflector, x: f64) -> f64 {
        let x_mid = 0.5 * (self.nx.saturating_sub(1)) as f64 * self.dx;
        r.z_mid + r.slope * (x - x_mid)
    }

    /// Model width, metres.
    pub fn width(&self) -> f64 {
        self.nx.saturating_sub(1) as f64 * self.dx
    }

    /// Model depth, metres.
    pub fn depth(&self) -> f64 {
        self.nz.saturating_sub(1) as f64 * self.dx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_and_in_range() {
        let a = Model::generate(200, 100, 10.0, 3, 7);
        assert_eq!(a, Model::generate(200, 100, 10.0, 3, 7));
        assert_ne!(a, Model::generate(200, 100, 10.0, 3, 8));
        for r in &a.reflectors {
            for x in [0.0, a.width()] {
                let z = a.reflector_depth(r, x);
                assert!(z > 0.05 * a.depth() && z < a.depth(), "{z}");
            }
        }
        assert!(a.reflectors.windows(2).all(|w| w[0].z_mid < w[1].z_mid));
    }

    #[test]
    fn traveltimes_match_the_integral() {
        let m = Model::generate(10, 10, 10.0, 1, 1);
        // Vertical ray: t = ∫ dz / v(z), checked by a midpoint sum.
        let z = 2000.0;
        let n = 100_000;
        let sum: f64 = (0..n)
            .map(|i| (z / n as f64) / m.velocity((i as f64 + 0.5) * z / n as f64))
            .sum();
        assert!((m.traveltime(0.0, z) - sum).abs() < 1e-9);
        assert!((m.traveltime(300.0, 0.0) - 300.0 / m.v0).abs() < 1e-12);
    }
}
