//! [`Checkpointer`]: a rank's checkpoints as the application sees them
//! (`rt.checkpoints()`): write a version of its state, restore the newest
//! that survived, and what the restore knows (the failures, the
//! placement, the job id).

use super::{
    CheckpointError, CheckpointFuture, Checkpoints, Failure, JobId, Placement, Restored, Retrieval,
    Written,
};
use crate::commands::Command;
use crate::results::Kept;
use rkyv::api::high::{HighDeserializer, HighSerializer, HighValidator};
use rkyv::bytecheck::CheckBytes;
use rkyv::rancor;
use rkyv::ser::allocator::ArenaHandle;
use rkyv::util::AlignedVec;

/// This rank's checkpoints, borrowed from its [`crate::Runtime`]
/// ([`crate::Runtime::checkpoints`]).
pub struct Checkpointer<'a> {
    checkpoints: &'a Checkpoints,
    results: &'a Kept,
    cmd: &'a flume::Sender<Command>,
}

impl<'a> Checkpointer<'a> {
    pub(crate) fn new(
        checkpoints: &'a Checkpoints,
        results: &'a Kept,
        cmd: &'a flume::Sender<Command>,
    ) -> Self {
        Checkpointer {
            checkpoints,
            results,
            cmd,
        }
    }

    /// Checkpoints `state` as version `version` of this rank's state (see
    /// the book's Checkpoints chapter) and returns at once: the state is
    /// serialised on this thread, and the levels due at `version`
    /// ([`crate::Config::checkpoint`]'s intervals) are made durable by a thread of
    /// the runtime's own while the application goes on: L1 (the rank's
    /// directory) and L4 (the shared one) written there; L2 a copy stored
    /// by the rank's partner; L3 the group's states coded into parity
    /// pieces stored by their holders (every member of a group checkpoints
    /// the versions due at L3). The future completes when every level due
    /// is durable (for L2 and L3, once their holders said so), or with
    /// [`CheckpointError::Levels`] naming the levels that failed and those
    /// written; at once if no level is due. The versions kept are the
    /// newest `keep` written: number versions upwards. A checkpoint queued
    /// behind others holds its archive in memory until it is written:
    /// wait for a future before queueing many more.
    ///
    /// The piece is stamped with the job ([`Checkpointer::job`]),
    /// this rank, the version and the type's name, so that
    /// [`Checkpointer::restore`] never takes another job's, rank's or type's
    /// state for this one.
    pub fn save<T>(&self, version: u64, state: &T) -> CheckpointFuture
    where
        T: for<'b> rkyv::Serialize<HighSerializer<AlignedVec, ArenaHandle<'b>, rancor::Error>>,
    {
        let levels = self.checkpoints.due(version);
        if levels.is_empty() {
            return CheckpointFuture::ready(version, Ok(Written { version, levels }));
        }
        // What the application took before this call is in this state:
        // released once it is durable (see `crate::results`).
        let taken = self.results.taken();
        match rkyv::to_bytes::<rancor::Error>(state) {
            Ok(payload) => {
                let f = self
                    .checkpoints
                    .write(version, state_tag::<T>(), payload, levels);
                if !taken.is_empty() {
                    let cmd = self.cmd.clone();
                    f.on_durable(move || {
                        let _ = cmd.send(Command::ReleaseResults(taken));
                    });
                }
                f
            }
            Err(e) => {
                CheckpointFuture::ready(version, Err(CheckpointError::Serialize(e.to_string())))
            }
        }
    }

    /// The newest version of this rank's state of type `T` that survived,
    /// with its version, read knowing what this rank learnt of the
    /// failures ([`Checkpointer::failure`]): [`Checkpointer::restore_after`]
    /// that failure.
    pub fn restore<T>(&self) -> Result<Option<(u64, T)>, CheckpointError>
    where
        T: rkyv::Archive,
        T::Archived: for<'b> CheckBytes<HighValidator<'b, rancor::Error>>
            + rkyv::Deserialize<T, HighDeserializer<rancor::Error>>,
    {
        self.restore_after(&self.checkpoints.failure())
    }

    /// The newest version of this rank's state of type `T` that survived
    /// `failure`, with its version: read from the cheapest level that
    /// survived it (L1, the local directory; L2, the partner's copy; L3,
    /// the group's surviving shards and parity, decoded; L4, the shared
    /// directory), asking no holder that `failure` names dead; the next
    /// surviving level if that one holds nothing fit. Its checksum is
    /// verified and its archive validated before it is deserialised. A
    /// piece that is damaged, another job's, another type's or another
    /// rank's is skipped with a warning naming the reason, and the version
    /// before tried; `None` if no version is fit. Checkpoints whose future
    /// has not completed may not be seen.
    pub fn restore_after<T>(&self, failure: &Failure) -> Result<Option<(u64, T)>, CheckpointError>
    where
        T: rkyv::Archive,
        T::Archived: for<'b> CheckBytes<HighValidator<'b, rancor::Error>>
            + rkyv::Deserialize<T, HighDeserializer<rancor::Error>>,
    {
        let r = self.restore_with::<T>(&Retrieval::Aware(failure.clone()))?;
        Ok(r.map(|r| (r.version, r.state)))
    }

    /// [`Checkpointer::restore_after`] with the retrieval chosen: aware of a
    /// failure, or FTI-style probing of L1, L2, L3, L4 in turn (a holder
    /// dead or silent costs `Config::failure_timeout`); says which level
    /// the state came from and which levels were tried.
    pub fn restore_with<T>(&self, how: &Retrieval) -> Result<Option<Restored<T>>, CheckpointError>
    where
        T: rkyv::Archive,
        T::Archived: for<'b> CheckBytes<HighValidator<'b, rancor::Error>>
            + rkyv::Deserialize<T, HighDeserializer<rancor::Error>>,
    {
        self.restore_from(how, None)
    }

    /// As [`Checkpointer::restore`], the newest version not above `max` (all
    /// versions if `None`): what a global restart resumes from
    /// ([`crate::Runtime::run_reinit`] gives the version every rank holds).
    pub fn restore_upto<T>(&self, max: Option<u64>) -> Result<Option<(u64, T)>, CheckpointError>
    where
        T: rkyv::Archive,
        T::Archived: for<'b> CheckBytes<HighValidator<'b, rancor::Error>>
            + rkyv::Deserialize<T, HighDeserializer<rancor::Error>>,
    {
        let how = Retrieval::Aware(self.checkpoints.failure());
        let r = self.restore_from::<T>(&how, max)?;
        Ok(r.map(|r| (r.version, r.state)))
    }

    fn restore_from<T>(
        &self,
        how: &Retrieval,
        max: Option<u64>,
    ) -> Result<Option<Restored<T>>, CheckpointError>
    where
        T: rkyv::Archive,
        T::Archived: for<'b> CheckBytes<HighValidator<'b, rancor::Error>>
            + rkyv::Deserialize<T, HighDeserializer<rancor::Error>>,
    {
        let decode = |payload: &[u8]| {
            // The payload is not aligned in the piece: copied into a
            // buffer that is, to be validated and read.
            let mut aligned = AlignedVec::<16>::with_capacity(payload.len());
            aligned.extend_from_slice(payload);
            rkyv::from_bytes::<T, rancor::Error>(&aligned).map_err(|e| e.to_string())
        };
        let restored = self
            .checkpoints
            .restore(how, state_tag::<T>(), max, &decode);
        // A global restart's meeting held the versions this rank reported
        // (`Checkpoints::held_versions`) for this read.
        self.checkpoints.release_held();
        restored
    }

    /// What this rank learnt of the failures: the ranks declared failed
    /// or whose link broke, and the nodes none of whose ranks is alive.
    pub fn failure(&self) -> Failure {
        self.checkpoints.failure()
    }

    /// Where this job's checkpoint pieces go: every rank's partner (L2)
    /// and the L3 groups with their parity holders (`None` if the
    /// settings allow no groups).
    pub fn placement(&self) -> Option<&Placement> {
        self.checkpoints.placement()
    }

    /// The job id this rank's checkpoints are stamped with:
    /// `TASKFOLD_CHECKPOINT_JOB`, else the job's name, else
    /// [`crate::checkpoint::DEFAULT_JOB`].
    pub fn job(&self) -> JobId {
        self.checkpoints.job()
    }
}

/// The tag a state of type `T` is stamped with.
fn state_tag<T>() -> u64 {
    taskfold_core::checkpoint::type_tag(std::any::type_name::<T>())
}
