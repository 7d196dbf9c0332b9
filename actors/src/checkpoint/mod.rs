//! Checkpoints of the application's state (see the book's Checkpoints
//! chapter): [`crate::Runtime::checkpoint`] and [`crate::Runtime::restore`],
//! and the files they use.
//!
//! A [`FileStore`] is one directory of pieces: a rank's local directory
//! (its L1 pieces, and the L2 copies and L3 shards it holds for others)
//! or the job's shared directory (L4). The format, placement and
//! retrieval rules are pure and live in [`taskfold_core::checkpoint`].
//! The runtime writes L1 and L4; L2 and L3, which need pieces to travel
//! between ranks, are not written by it (a due one is skipped with a
//! warning).
//!
//! What a failure does: a write is atomic (a temporary file, synced, then
//! renamed), so a crash mid-write leaves the previous version whole. A
//! piece that is damaged, of another job or type, or a symbolic link is
//! skipped with a warning naming the reason, and the next older version is
//! read instead; nothing unchecked is ever restored. A directory that is a
//! symbolic link, not owned by this user or open to others is refused at
//! open and at every write. A write that fails fails its
//! [`CheckpointFuture`] with the reason; the previous versions stay.

mod future;
mod service;
mod store;

pub use future::{CheckpointFuture, Written};
pub(crate) use service::Checkpoints;
pub use service::{rank_dir, DEFAULT_JOB};
pub use store::{FileStore, PieceKey, StoreError, Stored};
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
    /// Writing a level's piece failed; the versions before stay.
    #[error("checkpoint {version} at {level}: {source}")]
    Write {
        /// The level.
        level: Level,
        /// The version.
        version: u64,
        /// Why.
        #[source]
        source: StoreError,
    },
    /// The writer's thread could not be started.
    #[error("cannot start the checkpoint writer: {0}")]
    Thread(#[source] io::Error),
    /// The runtime stopped before the checkpoint was written.
    #[error("the runtime stopped before the checkpoint was written")]
    Shutdown,
}
