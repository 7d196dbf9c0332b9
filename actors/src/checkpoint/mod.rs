//! Checkpoint pieces in files (see the book's Checkpoints chapter).
//!
//! A [`FileStore`] is one directory of pieces: a rank's local directory
//! (its L1 pieces, and the L2 copies and L3 shards it holds for others)
//! or the job's shared directory (L4). The format, placement and
//! retrieval rules are pure and live in [`taskfold_core::checkpoint`].
//!
//! What a failure does: a write is atomic (a temporary file, synced, then
//! renamed), so a crash mid-write leaves the previous version whole. A
//! piece that is damaged, of another job or type, or a symbolic link is
//! skipped with a warning naming the reason, and the next older version is
//! read instead; nothing unchecked is ever restored. A directory that is a
//! symbolic link, not owned by this user or open to others is refused at
//! open and at every write.

mod store;

pub use store::{FileStore, PieceKey, StoreError, Stored};
