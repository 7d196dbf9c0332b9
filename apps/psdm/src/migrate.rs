//! The Kirchhoff migration kernel: every trace is spread back along its
//! isochron, `image(x, z) += w · trace(t_s(x, z) + t_r(x, z))`.
//!
//! In a v(z) medium the one-way traveltime only depends on the horizontal
//! offset and the depth, so one table `T[z][|x - x_surface|]` (in samples)
//! serves every source and receiver on the surface grid: a trace costs two
//! table reads, a linear interpolation and an add per image point within
//! the aperture.

use crate::model::Model;
use crate::survey::{aperture_weight, Survey};

/// Traveltimes and aperture weights by depth row and offset in cells.
#[derive(Clone, Debug)]
pub struct Tables {
    nx: usize,
    nz: usize,
    /// One-way traveltime in samples, `[iz * nx + offset]`.
    samples: Vec<f32>,
    /// Aperture weight, `[iz * nx + offset]`.
    weight: Vec<f32>,
    /// Largest offset with a non-zero weight, per row.
    reach: Vec<usize>,
}

impl Tables {
    /// Tables for `model`'s grid, in units of `survey`'s sample interval.
    pub fn new(model: &Model, survey: &Survey) -> Tables {
        let (nx, nz) = (model.nx, model.nz);
        let mut samples = vec![0.0f32; nx * nz];
        let mut weight = vec![0.0f32; nx * nz];
        let mut reach = vec![0usize; nz];
        for iz in 0..nz {
            let z = iz as f64 * model.dx;
            for d in 0..nx {
                let h = d as f64 * model.dx;
                samples[iz * nx + d] = (model.traveltime(h, z) / survey.dt) as f32;
                let w = aperture_weight(h, z);
                weight[iz * nx + d] = w as f32;
                if w > 0.0 {
                    reach[iz] = d;
                }
            }
        }
        Tables {
            nx,
            nz,
            samples,
            weight,
            reach,
        }
    }

    /// Migrates one trace recorded by a source at column `is` and a receiver
    /// at column `ir` into `image` (`nz` rows of `nx`, row-major).
    pub fn migrate_trace(&self, image: &mut [f32], trace: &[f32], is: usize, ir: usize) {
        let nx = self.nx;
        assert_eq!(image.len(), nx * self.nz, "image size");
        if trace.len() < 2 {
            return;
        }
        let last = (trace.len() - 1) as f32;
        for iz in 0..self.nz {
            let reach = self.reach[iz];
            // Columns within reach of both the source and the receiver.
            let lo = is.max(ir).saturating_sub(reach);
            let hi = (is.min(ir) + reach).min(nx - 1);
            if lo > hi {
                continue;
            }
            let t = &self.samples[iz * nx..(iz + 1) * nx];
            let w = &self.weight[iz * nx..(iz + 1) * nx];
            let row = &mut image[iz * nx..(iz + 1) * nx];
            for (ix, px) in row.iter_mut().enumerate().take(hi + 1).skip(lo) {
                let (ds, dr) = (ix.abs_diff(is), ix.abs_diff(ir));
                let tt = t[ds] + t[dr];
                if tt >= last {
                    continue;
                }
                let i = tt as usize;
                let f = tt - i as f32;
                let v = trace[i] + f * (trace[i + 1] - trace[i]);
                *px += w[ds] * w[dr] * v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spike_migrates_onto_its_isochron() {
        let m = Model::generate(81, 60, 10.0, 1, 5);
        let s = Survey::new(&m, 1, 1, 0.002, 20.0);
        let tables = Tables::new(&m, &s);
        let (is, ir) = s.geometry(0);
        let mut trace = vec![0.0f32; s.nt];
        let k = 300;
        trace[k] = 1.0;
        let mut image = vec![0.0f32; 81 * 60];
        tables.migrate_trace(&mut image, &trace, is, ir);
        // Right below the shot (zero offset), the spike lands at the depth
        // whose two-way time is k samples.
        let col: Vec<f32> = (0..60).map(|iz| image[iz * 81 + is]).collect();
        let iz = col
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .unwrap()
            .0;
        let t = 2.0 * m.traveltime(0.0, iz as f64 * 10.0) / s.dt;
        // One row is about 5 samples of two-way time here.
        assert!((t - k as f64).abs() <= 3.0, "row {iz}: {t} samples vs {k}");
        assert!(image.iter().all(|v| v.is_finite()));
    }
}
