//! A struct mixing arrays and scalars: one time step's in-situ diagnostics
//! of a domain-decomposed simulation.
//!
//! Each field has its own rule — sums, a max with its location, a logical
//! AND, a bitwise OR, an element-wise array sum — and one field (`step`)
//! must agree on every rank. This is the usual shape of a real reducer:
//! several `MPI_Allreduce` calls of different ops folded into one message
//! and one reduction.

use taskfold::rkyv::{Archive, Deserialize, Serialize};
use taskfold::{FoldError, ReducerBody};

/// Warning flag: a cell went negative.
pub const WARN_NEGATIVE_DENSITY: u32 = 1;
/// Warning flag: the time step was clamped.
pub const WARN_CFL_CLAMPED: u32 = 2;

/// One step's diagnostics of one subdomain (before the fold) or of the
/// whole domain (after it).
///
/// ```
/// use taskfold_examples::Diagnostics;
/// let mut d = Diagnostics::new(7, 4);
/// d.record_cell(12, 0.5, 3.0, 1);
/// d.record_cell(13, 0.25, 4.0, 2);
/// assert_eq!((d.cells, d.energy, d.max_speed, d.max_speed_cell), (2, 0.75, 4.0, 13));
/// assert_eq!(d.spectrum, vec![0.0, 0.5, 0.25, 0.0]);
/// ```
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[rkyv(crate = taskfold::rkyv)]
pub struct Diagnostics {
    /// The time step; every rank must report the same one.
    pub step: u64,
    /// Cells accounted for (sum).
    pub cells: u64,
    /// Total energy (sum).
    pub energy: f64,
    /// Largest speed seen (max); `-inf` when no cell was recorded.
    pub max_speed: f32,
    /// Global id of the cell with the largest speed (smallest id on ties).
    pub max_speed_cell: u64,
    /// Energy per band (element-wise sum; same length everywhere).
    pub spectrum: Vec<f64>,
    /// Whether every subdomain's solver converged (AND).
    pub converged: bool,
    /// Warning flags raised anywhere (OR of `WARN_*`).
    pub warnings: u32,
}

impl Diagnostics {
    /// Empty diagnostics of `step` with a spectrum of `bands` bands.
    pub fn new(step: u64, bands: usize) -> Self {
        Diagnostics {
            step,
            cells: 0,
            energy: 0.0,
            max_speed: f32::NEG_INFINITY,
            max_speed_cell: u64::MAX,
            spectrum: vec![0.0; bands],
            converged: true,
            warnings: 0,
        }
    }

    /// Records one cell: its global id, energy, speed and spectral band
    /// (bands outside the spectrum are clamped to the last one).
    pub fn record_cell(&mut self, cell: u64, energy: f64, speed: f32, band: usize) {
        self.cells += 1;
        self.energy += energy;
        self.take_max(speed, cell);
        if let Some(last) = self.spectrum.len().checked_sub(1) {
            self.spectrum[band.min(last)] += energy;
        }
    }

    fn take_max(&mut self, speed: f32, cell: u64) {
        if speed.is_nan() {
            return;
        }
        if speed > self.max_speed || (speed == self.max_speed && cell < self.max_speed_cell) {
            self.max_speed = speed;
            self.max_speed_cell = cell;
        }
    }
}

impl ReducerBody for Diagnostics {
    fn fold(&mut self, other: &ArchivedDiagnostics) -> Result<(), FoldError> {
        let step = other.step.to_native();
        if step != self.step {
            return Err(FoldError::Custom(format!(
                "diagnostics of different steps: {} here, {step} from the peer",
                self.step
            )));
        }
        if other.spectrum.len() != self.spectrum.len() {
            return Err(FoldError::Mismatch {
                mine: self.spectrum.len() as u64,
                theirs: other.spectrum.len() as u64,
            });
        }
        self.cells += other.cells.to_native();
        self.energy += other.energy.to_native();
        self.take_max(
            other.max_speed.to_native(),
            other.max_speed_cell.to_native(),
        );
        for (mine, theirs) in self.spectrum.iter_mut().zip(other.spectrum.iter()) {
            *mine += theirs.to_native();
        }
        self.converged &= other.converged;
        self.warnings |= other.warnings.to_native();
        Ok(())
    }

    fn shape(&self) -> Option<u64> {
        Some(self.spectrum.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::{fold_tree, reduce_on_cluster};
    use proptest::prelude::*;
    use taskfold::ReduceValue;

    /// (cell id, energy, speed, band)
    type Cell = (u64, f64, f32, usize);

    fn subdomain(step: u64, cells: &[Cell], converged: bool, warnings: u32) -> Diagnostics {
        let mut d = Diagnostics::new(step, 6);
        for &(id, e, s, b) in cells {
            d.record_cell(id, e, s, b);
        }
        d.converged = converged;
        d.warnings = warnings;
        d
    }

    proptest! {
        #[test]
        fn any_split_and_tree_matches_one_big_subdomain(
            ranks in prop::collection::vec((
                prop::collection::vec((0u64..500, 0.0..10.0f64, -5.0..50.0f32, 0usize..8), 0..20),
                prop::bool::weighted(0.8),
                0u32..4,
            ), 1..9),
            picks in prop::collection::vec(0usize..64, 0..32),
        ) {
            let all: Vec<Cell> = ranks.iter().flat_map(|r| r.0.iter().copied()).collect();
            let mut sequential = subdomain(3, &all, true, 0);
            sequential.converged = ranks.iter().all(|r| r.1);
            sequential.warnings = ranks.iter().fold(0, |w, r| w | r.2);
            let parts = ranks.iter().map(|(c, ok, w)| subdomain(3, c, *ok, *w)).collect();
            let got = fold_tree(parts, &picks).unwrap().unwrap();
            // Exact for everything but the float sums, which reassociate.
            prop_assert_eq!(
                (got.step, got.cells, got.max_speed, got.max_speed_cell, got.converged, got.warnings),
                (3, sequential.cells, sequential.max_speed, sequential.max_speed_cell,
                 sequential.converged, sequential.warnings)
            );
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * a.abs().max(1.0);
            prop_assert!(close(got.energy, sequential.energy));
            for (a, b) in got.spectrum.iter().zip(&sequential.spectrum) {
                prop_assert!(close(*a, *b), "{a} vs {b}");
            }
        }
    }

    #[test]
    fn on_four_ranks() {
        let cells = |r: u64| -> Vec<Cell> {
            (0..100)
                .map(|i| {
                    let id = r * 100 + i;
                    (id, 0.5, ((id * 37) % 101) as f32, (id % 6) as usize)
                })
                .collect()
        };
        let all: Vec<Cell> = (0..4).flat_map(cells).collect();
        let mut want = subdomain(9, &all, false, WARN_CFL_CLAMPED | WARN_NEGATIVE_DENSITY);
        want.converged = false;
        let parts = (0..4u64)
            .map(|r| {
                let warn = if r == 2 {
                    WARN_NEGATIVE_DENSITY
                } else {
                    WARN_CFL_CLAMPED
                };
                subdomain(9, &cells(r), r != 1, warn)
            })
            .collect();
        let got = reduce_on_cluster(parts, 0).unwrap();
        // Every energy is 0.5: the float sums are exact here.
        assert_eq!(got, want);
        assert_eq!(got.max_speed, 100.0);
    }

    #[test]
    fn different_steps_refuse_to_fold() {
        let mut a = Diagnostics::new(1, 3);
        let b = Diagnostics::new(2, 3).encode().unwrap();
        assert!(matches!(a.fold_bytes(&b), Err(FoldError::Custom(_))));
    }
}
