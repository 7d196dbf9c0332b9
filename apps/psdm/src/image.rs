//! The migrated image: checksum, comparison, PNG and raw output, and a
//! check that its energy sits on the modelled reflectors.

use crate::model::Model;
use std::io::{Read, Write};
use std::path::Path;

/// Two images whose relative L2 difference is at most this are "the same".
///
/// The image is an `f32` sum over every trace. Rank count and arrival order
/// change how the runtime groups those sums, and `f32` addition is not
/// associative: each reassociated sum moves by a few units in the last place
/// (2⁻²⁴ ≈ 6e-8 relative) per level of the tree. `1e-5` is far above that
/// and far below any lost or doubled trace (which moves the image by about
/// `1 / traces`, 1e-4 and more for every size psdm runs).
pub const TOLERANCE: f64 = 1e-5;

/// A depth image, `nz` rows of `nx` samples.
#[derive(Clone, Debug, PartialEq)]
pub struct Image {
    /// Columns.
    pub nx: usize,
    /// Rows (depth).
    pub nz: usize,
    /// Row-major samples.
    pub data: Vec<f32>,
}

const RAW_MAGIC: &[u8; 8] = b"PSDMF32\0";

impl Image {
    /// A zero image.
    pub fn zeros(nx: usize, nz: usize) -> Image {
        Image {
            nx,
            nz,
            data: vec![0.0; nx * nz],
        }
    }

    /// Adds `other` sample by sample.
    pub fn add(&mut self, other: &[f32]) {
        assert_eq!(self.data.len(), other.len(), "image sizes differ");
        for (a, b) in self.data.iter_mut().zip(other) {
            *a += b;
        }
    }

    /// L2 norm.
    pub fn norm(&self) -> f64 {
        self.data
            .iter()
            .map(|&v| (v as f64) * (v as f64))
            .sum::<f64>()
            .sqrt()
    }

    /// A position-weighted sum of the samples: a checksum that is stable
    /// under floating-point reassociation (it moves by about the image's
    /// relative error, see [`TOLERANCE`]) yet changes if samples move.
    pub fn checksum(&self) -> f64 {
        self.data
            .iter()
            .enumerate()
            .map(|(i, &v)| v as f64 * (1.0 + ((i as u64 * 2_654_435_761) % 1000) as f64 / 1000.0))
            .sum()
    }

    /// `‖self - other‖₂ / ‖other‖₂` (the difference's norm if `other` is 0).
    pub fn relative_difference(&self, other: &Image) -> f64 {
        assert_eq!(
            (self.nx, self.nz),
            (other.nx, other.nz),
            "image sizes differ"
        );
        let diff: f64 = self
            .data
            .iter()
            .zip(&other.data)
            .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
            .sum::<f64>()
            .sqrt();
        let n = other.norm();
        if n > 0.0 {
            diff / n
        } else {
            diff
        }
    }

    /// Fraction of the image's energy (sum of squares) within `halfwidth`
    /// rows of a modelled reflector, over the middle 80% of the columns
    /// (the edges are under-illuminated).
    pub fn energy_near_reflectors(&self, model: &Model, halfwidth: usize) -> f64 {
        let (lo, hi) = (self.nx / 10, self.nx - self.nx / 10);
        let mut near = 0.0;
        let mut total = 0.0;
        for ix in lo..hi {
            let x = ix as f64 * model.dx;
            let rows: Vec<f64> = model
                .reflectors
                .iter()
                .map(|r| model.reflector_depth(r, x) / model.dx)
                .collect();
            for iz in 0..self.nz {
                let e = (self.data[iz * self.nx + ix] as f64).powi(2);
                total += e;
                if rows
                    .iter()
                    .any(|&r| (iz as f64 - r).abs() <= halfwidth as f64)
                {
                    near += e;
                }
            }
        }
        if total > 0.0 {
            near / total
        } else {
            0.0
        }
    }

    /// 8-bit grey levels: zero is mid-grey, clipped at the 99.5th percentile
    /// of the absolute amplitudes (the usual seismic display).
    pub fn to_grey(&self) -> Vec<u8> {
        let mut mags: Vec<f32> = self.data.iter().map(|v| v.abs()).collect();
        let k = ((mags.len() as f64 * 0.995) as usize).min(mags.len().saturating_sub(1));
        let clip = if mags.is_empty() {
            1.0
        } else {
            *mags.select_nth_unstable_by(k, f32::total_cmp).1
        };
        let clip = if clip > 0.0 { clip } else { 1.0 };
        self.data
            .iter()
            .map(|&v| (127.5 + 127.5 * (v / clip).clamp(-1.0, 1.0)).round() as u8)
            .collect()
    }

    /// Writes the image as an 8-bit greyscale PNG.
    pub fn write_png(&self, path: &Path) -> std::io::Result<()> {
        let file = std::io::BufWriter::new(std::fs::File::create(path)?);
        let mut enc = png::Encoder::new(file, self.nx as u32, self.nz as u32);
        enc.set_color(png::ColorType::Grayscale);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc.write_header().map_err(std::io::Error::other)?;
        w.write_image_data(&self.to_grey())
            .map_err(std::io::Error::other)?;
        w.finish().map_err(std::io::Error::other)
    }

    /// Writes the samples as raw little-endian `f32` after a 16-byte header
    /// (`PSDMF32\0`, `nx` and `nz` as little-endian `u32`).
    pub fn write_raw(&self, path: &Path) -> std::io::Result<()> {
        let mut out = Vec::with_capacity(16 + 4 * self.data.len());
        out.extend_from_slice(RAW_MAGIC);
        out.extend_from_slice(&(self.nx as u32).to_le_bytes());
        out.extend_from_slice(&(self.nz as u32).to_le_bytes());
        for v in &self.data {
            out.extend_from_slice(&v.to_le_bytes());
        }
        std::fs::File::create(path)?.write_all(&out)
    }

    /// Reads an image written by [`Image::write_raw`].
    pub fn read_raw(path: &Path) -> std::io::Result<Image> {
        let mut bytes = Vec::new();
        std::fs::File::open(path)?.read_to_end(&mut bytes)?;
        let bad =
            |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
        if bytes.len() < 16 || &bytes[..8] != RAW_MAGIC {
            return Err(bad("not a psdm raw image"));
        }
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let (nx, nz) = (u32_at(8) as usize, u32_at(12) as usize);
        if bytes.len() != 16 + 4 * nx * nz {
            return Err(bad("truncated psdm raw image"));
        }
        let data = bytes[16..]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        Ok(Image { nx, nz, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_round_trip_and_comparison() {
        let dir = std::env::temp_dir().join(format!("psdm-image-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut img = Image::zeros(3, 2);
        img.add(&[1.0, -2.0, 3.0, 0.5, 0.0, -1.0]);
        img.write_raw(&dir.join("a.f32")).unwrap();
        let back = Image::read_raw(&dir.join("a.f32")).unwrap();
        assert_eq!(back, img);
        assert_eq!(back.relative_difference(&img), 0.0);
        let mut moved = img.clone();
        moved.data[0] += 1e-7;
        assert!(moved.relative_difference(&img) < TOLERANCE);
        moved.data.swap(0, 2);
        assert!((moved.checksum() - img.checksum()).abs() > 1e-3);
        img.write_png(&dir.join("a.png")).unwrap();
        assert!(std::fs::metadata(dir.join("a.png")).unwrap().len() > 20);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn grey_levels() {
        let mut img = Image::zeros(4, 1);
        img.add(&[0.0, 1.0, -1.0, 0.5]);
        let g = img.to_grey();
        assert_eq!(g[0], 128);
        assert_eq!((g[1], g[2]), (255, 0));
    }
}
