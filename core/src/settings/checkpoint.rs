//! The checkpoints' settings ([`CheckpointConfig`]; see the book's
//! Checkpoints chapter).

use crate::checkpoint::Intervals;
use std::path::PathBuf;

/// Where and how often a rank's checkpoints are written, and which job
/// they belong to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointConfig {
    /// The root of the ranks' local directories, L1
    /// (`TASKFOLD_CHECKPOINT_DIR`). Each rank keeps its pieces in
    /// `<dir>/job-<job id>/r<rank>`. `None` (default): a fresh private
    /// directory per process, removed when the runtime ends, so L1 then
    /// survives a failed reduction but not the process.
    pub dir: Option<PathBuf>,
    /// The job's shared directory, L4 (`TASKFOLD_CHECKPOINT_SHARED_DIR`;
    /// default none: nothing is written at L4). Laid out as [`Self::dir`].
    pub shared_dir: Option<PathBuf>,
    /// Every how many versions each level is written
    /// (`TASKFOLD_CHECKPOINT_L1` to `_L4`; 0 turns a level off; default L1
    /// every version, L2 and L3 off, L4 every version when there is a
    /// shared directory).
    pub intervals: Intervals,
    /// Ranks of an L3 erasure-coded group, `k`
    /// (`TASKFOLD_CHECKPOINT_GROUP`, 1 to 128, default 4).
    pub group: u16,
    /// Parity pieces of an L3 group, `m`: any `m` lost ranks of a group
    /// are rebuilt (`TASKFOLD_CHECKPOINT_PARITY`, 1 to 128, default 2).
    pub parity: u16,
    /// Versions of each piece kept (`TASKFOLD_CHECKPOINT_KEEP`, at least
    /// 1, default 2): the older ones are deleted once a newer one is in
    /// place.
    pub keep: usize,
    /// The name pieces are stamped with (`TASKFOLD_CHECKPOINT_JOB`; default
    /// the job's name, `TASKFOLD_JOB`). A piece stamped with another name
    /// is refused at restore: a job that resumes from the checkpoints of
    /// an earlier run gives both runs this name (`taskfold run` names
    /// every run afresh).
    pub job: Option<String>,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig {
            dir: None,
            shared_dir: None,
            intervals: Intervals([1, 0, 0, 1]),
            group: 4,
            parity: 2,
            keep: 2,
            job: None,
        }
    }
}
