//! psdm: a Kirchhoff pre-stack depth migration mini-app that embeds
//! taskfold the way a real code would.
//!
//! Every rank builds the same seeded model (a v(z) velocity law and a few
//! dipping reflectors), models its own block of the synthetic shot gathers,
//! and migrates them with straight-ray traveltimes. Each batch of traces
//! ends with a non-blocking [`taskfold::Runtime::reduce`] of the batch's
//! partial image to the root (`--root`, rank 0 by default) while the rank
//! migrates the next batch; the root adds the batch images up, writes the
//! final image as a PNG and prints a checksum. The image is the same
//! whatever the rank count and arrival order, within [`image::TOLERANCE`].
//!
//! A rank other than the root that dies costs time, not the image: the
//! survivors share its traces out and redo the batches it had not
//! contributed to ([`recovery`]). A lost root (or master) ends the job
//! with an error on every rank and no image.
//!
//! ```sh
//! taskfold run -n 4 -- psdm                       # the default job, < 1 min
//! TASKFOLD_RENDEZVOUS=/tmp/psdm.addr mpiexec -n 4 psdm --nx 300 --nz 150
//! psdm --local 4                                  # 4 ranks in one process
//! ```
//!
//! # Layout
//!
//! - [`model`]: the seeded earth model and straight-ray traveltimes.
//! - [`survey`]: shots, receivers and the synthetic traces (Kirchhoff
//!   modelling with a Ricker wavelet).
//! - [`migrate`]: traveltime tables and the migration kernel.
//! - [`image`]: the image, its checksum and tolerance, PNG and raw output.
//! - [`job`]: command-line sizes, and which rank migrates which traces in
//!   which batch.
//! - [`rank`]: one rank's loop: migrate, reduce without blocking, measure
//!   the overlap.
//! - [`recovery`]: which batch reduction comes next, and which batches the
//!   survivors redo when ranks are lost.
//! - [`checkpoint`]: what each rank checkpoints every
//!   `--checkpoint-every` batches, and how it resumes on start.
//! - [`app`]: the program around it: runtime start, progress, summary.
//! - [`observe`]: logs (`RUST_LOG`) and Prometheus metrics
//!   (`TASKFOLD_METRICS_ADDR`).

pub mod app;
pub mod checkpoint;
pub mod image;
pub mod job;
pub mod migrate;
pub mod model;
pub mod observe;
pub mod rank;
pub mod recovery;
pub mod survey;
