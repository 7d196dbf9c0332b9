//! Custom [`taskfold::ReducerBody`] types that users ask for, each with
//! tests against a sequential fold.
//!
//! Every type here derives rkyv's `Archive`, `Serialize` and `Deserialize`
//! through `taskfold::rkyv` and implements `ReducerBody`, so it can be handed
//! to [`taskfold::Runtime::reduce`] as is:
//!
//! ```
//! use taskfold::{LocalCluster, Reduce};
//! use taskfold_examples::Moments;
//!
//! let cluster = LocalCluster::new(3).unwrap();
//! let futures: Vec<_> = cluster
//!     .ranks()
//!     .iter()
//!     .map(|rt| {
//!         let mut m = Moments::default();
//!         m.extend((0..100).map(|i| (i + 100 * rt.rank()) as f64));
//!         rt.reduce(m, Reduce::root(0).id("moments")).unwrap()
//!     })
//!     .collect();
//! let all: Vec<_> = futures.into_iter().map(|f| f.get().unwrap()).collect();
//! let m = all[0].as_ref().unwrap();
//! assert_eq!((m.count, m.mean), (300, 149.5));
//! ```
//!
//! # Layout
//!
//! - [`histogram`]: [`Histogram`], fixed bins with underflow, overflow and
//!   NaN counters.
//! - [`moments`]: [`Moments`], streaming mean and variance (Welford on each
//!   rank, Chan et al.'s parallel merge in the fold).
//! - [`topk`]: [`TopK`], the `k` best-scoring items.
//! - [`sparse`]: [`SparseSum`], a sparse map merge (keys to sums).
//! - [`diagnostics`]: [`Diagnostics`], a struct mixing arrays and scalars,
//!   each field with its own rule.
//! - [`harness`]: fold along an arbitrary tree through the wire format, or
//!   on a [`taskfold::LocalCluster`]; what the tests compare against their
//!   sequential folds.

pub mod diagnostics;
pub mod harness;
pub mod histogram;
pub mod moments;
pub mod sparse;
pub mod topk;

pub use diagnostics::Diagnostics;
pub use histogram::Histogram;
pub use moments::Moments;
pub use sparse::SparseSum;
pub use topk::{Scored, TopK};
