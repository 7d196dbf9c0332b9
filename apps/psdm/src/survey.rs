//! The acquisition (shots and receivers on the surface grid) and the
//! synthetic shot gathers it records: Kirchhoff modelling of the reflectors
//! with a Ricker wavelet, the adjoint of the migration in [`crate::migrate`].
//!
//! Every reflector is sampled as a line of point scatterers, one per grid
//! column; each scatterer adds a wavelet to the trace at the two-way
//! straight-ray traveltime source → scatterer → receiver. The scatterers'
//! diffraction curves add up to the specular reflections (and cancel
//! elsewhere), as in the Born approximation.
//!
//! A trace is identified by its global index `g = shot · receivers + receiver`
//! and can be modelled on any rank independently of every other trace, as if
//! read from a file.

use crate::model::Model;

/// Angle (from vertical) below which a ray leg has full weight, degrees.
pub const APERTURE_FULL: f64 = 50.0;
/// Angle beyond which a ray leg has zero weight (cosine taper in between).
pub const APERTURE_MAX: f64 = 65.0;

/// Weight of a ray leg of horizontal offset `h` to depth `z`: 1 within
/// [`APERTURE_FULL`], tapering to 0 at [`APERTURE_MAX`]. Used by both the
/// modelling and the migration so that one is the adjoint of the other.
pub fn aperture_weight(h: f64, z: f64) -> f64 {
    let angle = h.abs().atan2(z.max(0.0)).to_degrees();
    if angle <= APERTURE_FULL {
        1.0
    } else if angle >= APERTURE_MAX {
        0.0
    } else {
        let u = (angle - APERTURE_FULL) / (APERTURE_MAX - APERTURE_FULL);
        (0.5 * (1.0 + (std::f64::consts::PI * u).cos())).clamp(0.0, 1.0)
    }
}

/// The Ricker wavelet of peak frequency `f0` at time `t` (peak at 0).
pub fn ricker(t: f64, f0: f64) -> f64 {
    let a = (std::f64::consts::PI * f0 * t).powi(2);
    (1.0 - 2.0 * a) * (-a).exp()
}

/// Where the shots and receivers are and how traces are sampled.
#[derive(Clone, Debug, PartialEq)]
pub struct Survey {
    /// Grid column of every shot.
    pub shots: Vec<usize>,
    /// Grid column of every receiver (a fixed spread: every shot records on
    /// every receiver).
    pub receivers: Vec<usize>,
    /// Sample interval, seconds.
    pub dt: f64,
    /// Samples per trace.
    pub nt: usize,
    /// Peak frequency of the Ricker wavelet, Hz.
    pub f0: f64,
}

/// `n` grid columns spread evenly over `0..nx` (the middle one if `n` is 1).
fn spread(n: usize, nx: usize) -> Vec<usize> {
    let last = nx.saturating_sub(1) as f64;
    match n {
        0 => Vec::new(),
        1 => vec![nx / 2],
        _ => (0..n)
            .map(|i| (i as f64 * last / (n - 1) as f64).round() as usize)
            .collect(),
    }
}

impl Survey {
    /// `shots` shots and `receivers` receivers evenly spread over the
    /// model's surface; traces sampled every `dt` seconds long enough for
    /// every reflection within the aperture.
    pub fn new(model: &Model, shots: usize, receivers: usize, dt: f64, f0: f64) -> Survey {
        // The longest two-way time within the aperture, plus the wavelet.
        let tan_max = APERTURE_MAX.to_radians().tan();
        let z = model.depth();
        let h = (z * tan_max).min(model.width());
        let tmax = 2.0 * model.traveltime(h, z) + 1.5 / f0;
        Survey {
            shots: spread(shots, model.nx),
            receivers: spread(receivers, model.nx),
            dt,
            nt: (tmax / dt).ceil() as usize + 2,
            f0,
        }
    }

    /// Traces in the survey.
    pub fn traces(&self) -> usize {
        self.shots.len() * self.receivers.len()
    }

    /// Grid columns of the source and the receiver of trace `g`.
    pub fn geometry(&self, g: usize) -> (usize, usize) {
        let n = self.receivers.len();
        (self.shots[g / n], self.receivers[g % n])
    }

    /// Models trace `g`: the reflections of every reflector, as recorded.
    pub fn model_trace(&self, model: &Model, g: usize) -> Vec<f32> {
        let (is, ir) = self.geometry(g);
        let (xs, xr) = (is as f64 * model.dx, ir as f64 * model.dx);
        let mut trace = vec![0.0f64; self.nt];
        // The wavelet is negligible beyond 1.5 periods of its peak.
        let half = (1.5 / self.f0 / self.dt).ceil() as isize;
        for r in &model.reflectors {
            for ix in 0..model.nx {
                let x = ix as f64 * model.dx;
                let z = model.reflector_depth(r, x);
                if z <= 0.0 {
                    continue;
                }
                let w = aperture_weight(x - xs, z) * aperture_weight(x - xr, z);
                if w == 0.0 {
                    continue;
                }
                let t = model.traveltime(x - xs, z) + model.traveltime(x - xr, z);
                let centre = (t / self.dt).round() as isize;
                let amp = w * r.amplitude;
                for k in (centre - half).max(0)..(centre + half + 1).min(self.nt as isize) {
                    trace[k as usize] += amp * ricker(k as f64 * self.dt - t, self.f0);
                }
            }
        }
        trace.into_iter().map(|v| v as f32).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_and_length() {
        let m = Model::generate(101, 50, 10.0, 2, 3);
        let s = Survey::new(&m, 3, 5, 0.002, 20.0);
        assert_eq!(s.shots, vec![0, 50, 100]);
        assert_eq!(s.receivers, vec![0, 25, 50, 75, 100]);
        assert_eq!(s.traces(), 15);
        assert_eq!(s.geometry(7), (50, 50));
        assert!(s.nt > 100);
        assert_eq!(spread(1, 101), vec![50]);
    }

    #[test]
    fn a_flat_reflector_arrives_at_its_two_way_time() {
        let mut m = Model::generate(101, 80, 10.0, 1, 3);
        m.reflectors[0].slope = 0.0;
        m.reflectors[0].amplitude = 1.0;
        let s = Survey::new(&m, 1, 1, 0.002, 20.0);
        let trace = s.model_trace(&m, 0);
        let peak = trace
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .unwrap()
            .0;
        let t0 = 2.0 * m.traveltime(0.0, m.reflectors[0].z_mid);
        // Summing a line of scatterers half-integrates the wavelet (a 45°
        // phase rotation), which moves the peak a few samples later.
        let t = peak as f64 * s.dt;
        assert!(t >= t0 - s.dt && t - t0 <= 0.25 / s.f0, "{t} vs {t0}");
    }

    #[test]
    fn aperture() {
        assert_eq!(aperture_weight(0.0, 100.0), 1.0);
        assert_eq!(aperture_weight(1000.0, 10.0), 0.0);
        let w = aperture_weight(100.0 * 57.5f64.to_radians().tan(), 100.0);
        assert!((w - 0.5).abs() < 1e-9);
    }
}
