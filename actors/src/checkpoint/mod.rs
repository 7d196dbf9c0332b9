//! Checkpoints of the application's state (see the book's Checkpoints
//! chapter): [`crate::checkpoint::Checkpointer::save`] and [`crate::checkpoint::Checkpointer::restore`],
//! and the files they use.
//!
//! A [`FileStore`] is one directory of pieces: a rank's local directory
//! (its L1 pieces and its own L3 data pieces; the L2 copies and L3 parity
//! it holds for others in private subdirectories, `held-r<owner>` and
//! `held-g<group>`) or the job's shared directory (L4). The format,
//! placement and retrieval rules are pure and live in
//! [`taskfold_core::checkpoint`]; a rank's engine thread (`engine`)
//! writes its levels, moves L2 copies and L3 shards between ranks over
//! the transport (control frames for the messages, one-sided gets for
//! the bodies), and serves the pieces it holds; a restore reads on the
//! calling thread ([`Retrieval`]: aware of the failure, or FTI-style
//! probing).
//!
//! What a failure does: a write is atomic (a temporary file, synced, then
//! renamed), so a crash mid-write leaves the previous version whole. A
//! piece that is damaged, of another job or type, or a symbolic link is
//! skipped with a warning naming the reason, and the next older version is
//! read instead; nothing unchecked is ever restored. A directory that is a
//! symbolic link, not owned by this user or open to others is refused at
//! open and at every write. A level that fails (a write, a partner that
//! died or refused, a group whose encoder or parity holder died) fails
//! the [`CheckpointFuture`] with [`CheckpointError::Levels`], which names
//! it and the levels that were written; the previous versions stay.

mod coding;
mod ctx;
mod engine;
mod future;
mod handle;
mod holder;
mod retrieve;
mod service;
mod store;

pub use ctx::rank_dir;
pub use future::{CheckpointFuture, Written};
pub use handle::Checkpointer;
pub use retrieve::{Restored, Retrieval};
pub use service::DEFAULT_JOB;
pub(crate) use service::{Checkpoints, Inbox};
pub use store::{FileStore, PieceKey, StoreError, Stored};
pub use taskfold_core::checkpoint::{Failure, Placement};
pub use taskfold_core::checkpoint::{JobId, Level};

use std::io;

/// Why a checkpoint was not written, or nothing could be restored.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The state could not be serialised.
    #[error("cannot serialise the state: {0}")]
    Serialize(String),
    /// A directory of pieces is refused or cannot be made (see
    /// [`StoreError`]).
    #[error("checkpoint directory: {0}")]
    Open(#[source] StoreError),
    /// The fresh local directory (no `TASKFOLD_CHECKPOINT_DIR`) could not
    /// be made.
    #[error("cannot make a checkpoint directory: {0}")]
    FreshDir(#[source] io::Error),
    /// A level due was not made durable (its write failed, its partner
    /// or its group's encoder or a parity holder died, refused or did not
    /// answer); the levels in `written` are durable, and the versions
    /// before stay.
    #[error("checkpoint {version}: {} failed; written at {written:?}", failed_levels(.failed))]
    Levels {
        /// The version.
        version: u64,
        /// The levels durable.
        written: Vec<Level>,
        /// The levels failed, each with why.
        failed: Vec<(Level, String)>,
    },
    /// The writer's thread could not be started.
    #[error("cannot start the checkpoint writer: {0}")]
    Thread(#[source] io::Error),
    /// The runtime stopped before the checkpoint was written.
    #[error("the runtime stopped before the checkpoint was written")]
    Shutdown,
}

fn failed_levels(failed: &[(Level, String)]) -> String {
    let each: Vec<String> = failed.iter().map(|(l, r)| format!("{l} ({r})")).collect();
    each.join(", ")
}
