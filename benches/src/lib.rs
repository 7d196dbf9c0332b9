//! taskfold's benchmark harness: figures, statistics and the baselines they
//! are compared against in the same run. `taskfold bench ...` drives it.
//!
//! Machines are shared and noisy: report medians, and ratios against a
//! baseline measured in the same run, never absolute times alone.
//!
//! # Layout
//!
//! - [`stats`]: medians and spreads.
//! - [`baseline`]: the physical floor a reduction is compared with (a
//!   `memcpy` of the same bytes).
//! - [`Figure`]: one line of a `bench reduce` report.
//! - `bench compare`, taskfold against MPI_Reduce: [`compare`] (samples,
//!   records, ratios), [`mpi`] (finds, builds and runs the MPI driver
//!   `benches/mpi/reduce_bench.c`), [`delay`] (the seeded arrival delays,
//!   the busy rank and the background load, identical on both sides),
//!   [`report`] (Markdown), [`plot`] (SVG).
//! - [`floor`]: the floor of a small reduction over N processes (a tree of
//!   pipes), a yardstick of `bench scale`.
//! - [`units`]: byte counts for people.

pub mod baseline;
pub mod compare;
pub mod delay;
pub mod floor;
pub mod mpi;
pub mod plot;
pub mod report;
pub mod sim;
pub mod stats;
pub mod units;

use serde::{Deserialize, Serialize};

/// One line of the `bench reduce` report.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Figure {
    /// Ranks.
    pub np: u32,
    /// Bytes per contribution.
    pub size: usize,
    /// Median seconds per reduction (each repetition: max over ranks).
    pub median_s: f64,
    /// Fastest repetition.
    pub min_s: f64,
    /// Slowest repetition.
    pub max_s: f64,
    /// Median seconds of a memcpy of `size` bytes, same run.
    pub memcpy_median_s: f64,
    /// `median_s / memcpy_median_s`.
    pub ratio_to_memcpy: f64,
    /// Timed repetitions.
    pub reps: u32,
}
