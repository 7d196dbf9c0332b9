//! Pure logic of taskfold: everything that can be decided without I/O.
//!
//! taskfold splits every reduction into pairwise tasks that a master hands out
//! as contributions become ready (see the book's Architecture chapter). This
//! crate holds the pieces of that algorithm that are plain data and plain
//! functions, so that they can be unit- and property-tested without sockets,
//! threads or actors. One function reads the process (its environment):
//! [`settings::Settings::from_env`], the one place every setting comes from.
//!
//! # Layout
//!
//! - [`rank`]: rank ids and groups (any subset of the job's ranks).
//! - [`rankset`]: paths as bitsets over a group, scaling to 65,536+ ranks.
//! - [`id`]: reduction ids and the 64-bit key that names a reduction on the wire.
//! - [`reducer`]: the [`ReducerBody`] trait users implement, and its
//!   type-erased codec used by the runtime.
//! - [`archived`]: a value held as its archive (non-root ranks fold and
//!   serve it without serialising it again).
//! - [`builtin`]: sum / min / max / product over numeric arrays.
//! - [`contribution`]: a rank's own part in one reduction, as a state
//!   machine (keeping its original, the join, its tasks, the end).
//! - [`inplace`]: array contributions built in their wire form (no
//!   serialising copy).
//! - [`pieces`]: folding a peer's archive piece by piece as it arrives
//!   (fetch and fold overlap).
//! - [`wire`]: versioned rkyv control messages, validated on receipt.
//! - [`schedule`]: the master's per-reduction queue and the pairing rules.
//! - [`membership`]: who is in the job as one rank knows it: every rank's
//!   incarnation and node, the dead, the master.
//! - [`roster`]: each member's lifecycle in a reduction, as the master sees
//!   it (joins, copies, deaths, the verdicts about standing copies).
//! - [`replica`]: replica buffers (checksummed), their keys, buddy placement.
//! - [`results`]: a root's results kept at its buddy for a replacement
//!   root, until its application checkpointed past them.
//! - [`checkpoint`]: multilevel checkpoints: the piece format, L3 erasure
//!   coding, partner and group placement, retrieval planning.
//! - [`perf`]: per-rank task timings behind the "faster rank" rule.
//! - `intmap`: hash maps keyed by the process's own small integers, hashed
//!   cheaply (the scheduler's per-decision look-ups).
//! - [`pool`]: recycled large buffers (serialised values, receive buffers).
//! - [`settings`]: every setting of a process ([`settings::Settings`]),
//!   parsed from `TASKFOLD_*` variables by one pure parser.
//! - [`watch`]: when a rank counts its master as lost (silence, a broken
//!   link).
//! - [`auth`]: the job key and the handshake that proves it on every
//!   connection (an authenticated job).
//! - [`error`]: typed errors shared by every layer.
//! - [`quote`]: the one way an error or a log quotes untrusted text (short).

#![forbid(unsafe_code)]

pub mod archived;
pub mod auth;
pub mod builtin;
pub mod checkpoint;
pub mod contribution;
// rkyv's derive generates undocumented variant structs for enums.
#[allow(missing_docs)]
pub mod error;
pub mod failover;
pub mod id;
pub mod inplace;
mod intmap;
pub mod membership;
mod native;
pub mod perf;
pub mod pieces;
pub mod pool;
pub mod quote;
pub mod rank;
pub mod rankset;
pub mod reducer;
pub mod reinit;
pub mod replica;
pub mod respawn;
pub mod results;
pub mod roster;
pub mod schedule;
pub mod settings;
pub mod spread;
pub mod watch;
pub mod wire;

pub use builtin::{Max, Min, Prod, Sum};
pub use error::{FoldError, ReduceError};
pub use id::{ReductionId, ReductionKey};
pub use inplace::InPlace;
pub use rank::{Group, GroupError, Rank};
pub use rankset::RankSet;
pub use reducer::{ReduceValue, ReducerBody};
