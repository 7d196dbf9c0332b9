//! Typed errors seen by applications.

/// Why a fold of two contributions failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FoldError {
    /// The two sides have different shapes (e.g. array lengths).
    #[error("mismatched contributions: {mine} elements here, {theirs} from the peer")]
    Mismatch {
        /// Elements on the folding side.
        mine: u64,
        /// Elements on the fetched side.
        theirs: u64,
    },
    /// The fetched bytes are not a valid archive of the expected type.
    #[error("the fetched contribution is not a valid archive: {0}")]
    Corrupt(String),
    /// A user reducer refused to fold.
    #[error("reducer failed: {0}")]
    Custom(String),
}

/// How a reduction failed. Every participant of a failed reduction receives
/// the same error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReduceError {
    /// The options are invalid (bad id, root not in the group, …).
    #[error("invalid reduction options: {0}")]
    InvalidOptions(String),
    /// This rank already has a live reduction with that id in that group.
    #[error("reduction id {0:?} is already live in this group")]
    DuplicateId(String),
    /// Ranks disagree on the reduction (different root, type or shape).
    #[error("participants disagree on reduction {id:?}: {detail}")]
    Mismatched {
        /// The reduction's id.
        id: String,
        /// What differs.
        detail: String,
    },
    /// A fold failed (mismatched lengths, corrupt data, reducer error).
    #[error("reduction {id:?} failed while folding: {error}")]
    Fold {
        /// The reduction's id.
        id: String,
        /// The fold's error.
        error: FoldError,
    },
    /// Ranks died and their contributions could not be recovered.
    #[error("reduction {id:?} lost the contributions of ranks {ranks:?}")]
    RanksLost {
        /// The reduction's id.
        id: String,
        /// The ranks whose contributions are lost.
        ranks: Vec<u32>,
    },
    /// The root died: nobody can hold the result.
    #[error("reduction {id:?} lost its root, rank {root}")]
    RootLost {
        /// The reduction's id.
        id: String,
        /// The dead root.
        root: u32,
    },
    /// A replacement joined again a reduction that had completed under
    /// its dead process, and no copy of the result it needs is left: a
    /// replaced root whose result's copy is gone (its holder died too, the
    /// copy was refused or dropped for a bound, or the id was reused
    /// before the earlier result was released), or a replaced member of
    /// an allreduce or broadcast that had finished (its holders let the
    /// value go once every live member held it). Its redo cannot get it
    /// back; the application resumes from an earlier checkpoint (global
    /// restart) or ends. See the book's chapter Surviving failures of the
    /// application.
    #[error(
        "reduction {id:?} completed before this process joined it again, and its result is lost \
         (root: rank {root})"
    )]
    ResultLost {
        /// The reduction's id.
        id: String,
        /// The reduction's root (this rank's replaced process, for a
        /// reduction to it).
        root: u32,
    },
    /// The master is unreachable or died.
    #[error("the master is unreachable: {0}")]
    MasterLost(String),
    /// `wait_timeout` elapsed before the reduction finished.
    #[error("the reduction did not finish within {0:?}")]
    Timeout(std::time::Duration),
    /// The master declared this rank failed (it was unresponsive); it is
    /// fenced from the run.
    #[error("this rank was declared failed and fenced from the run")]
    Fenced,
    /// The local runtime stopped before the reduction finished.
    #[error("the runtime shut down before the reduction finished")]
    Shutdown,
    /// A transport failed in a way that ended the reduction.
    #[error("transport error: {0}")]
    Transport(String),
    /// The result could not be decoded at the root.
    #[error("could not decode the result: {0}")]
    Decode(String),
    /// The reduction would exceed the number of live reductions allowed at
    /// once (`TASKFOLD_MAX_REDUCTIONS`, on this rank or at the master); the
    /// live ones go on. Start it again once some have ended.
    #[error("more than {limit} reductions would be live at once")]
    TooManyReductions {
        /// The limit reached.
        limit: u64,
    },
    /// A rank was replaced and the job rolls back (global restart,
    /// `TASKFOLD_RESTART=global`): every live reduction ended, and every
    /// call fails so until the application returns to its re-init entry
    /// point (`Runtime::run_reinit`), which resumes it from the newest
    /// checkpoint every rank completed.
    #[error(
        "the job rolls back after rank failures (epoch {epoch}): return to the re-init entry point"
    )]
    Reinit {
        /// The job's new epoch (one more per rollback).
        epoch: u32,
    },
}
