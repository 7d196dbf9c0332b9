//! What the contribution machine answers: the actions the worker carries
//! out, and the verdicts and instructions of its events.

use crate::rankset::RankSet;

/// The fields of the join that the machine decides (the actor adds the
/// rest: where the data and the standing copy lie, the directory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JoinFields {
    /// The buddy that acknowledged a copy (synchronous durability).
    pub replica: Option<u32>,
    /// The same-node buddy whose mapping of the heap is the original's
    /// standing copy (asynchronous durability, no offer made).
    pub standing: Option<u32>,
    /// Name this rank's replica directory: its disk copy was written.
    pub disk: bool,
    /// The contribution is safe from now on (see [`Contribution::is_safe`](super::Contribution::is_safe)):
    /// the actor marks the future once the join went out.
    pub safe: bool,
}

/// What the actor does after an event of the join's path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing now (waiting, or the event does not apply).
    Nothing,
    /// Write the original's disk copy (with a checksum), then report
    /// [`Contribution::disk_written`](super::Contribution::disk_written).
    WriteDisk,
    /// Offer the original to the buddy, then report
    /// [`Contribution::offered`](super::Contribution::offered).
    Offer {
        /// Name the disk copy (else the original's place in the heap).
        file: bool,
        /// The join waits for the answer.
        awaited: bool,
    },
    /// The offer went out; the join waits for the buddy's answer.
    AwaitBuddy {
        /// The original is kept in memory only (no disk copy).
        in_memory: bool,
    },
    /// Send the join.
    Join(JoinFields),
}

/// What a task that arrived asks of the actor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskVerdict {
    /// Start it (fetch, fold).
    Start,
    /// Queue it: a test hook holds tasks after the join.
    Queue,
    /// Refuse it: its paths overlap (an original would be folded twice).
    Overlap,
    /// Refuse it: this rank does not hold the data it names.
    Unknown,
}

/// A task as the machine checks it.
#[derive(Clone, Copy, Debug)]
pub struct TaskCheck<'a> {
    /// The task's id.
    pub id: u64,
    /// The receiver's path the master expects.
    pub receiver_path: &'a RankSet,
    /// The provider's path.
    pub provider_path: &'a RankSet,
    /// The task reloads this rank's own original first.
    pub restore: bool,
    /// This rank holds its value now (not folding, not released).
    pub has_value: bool,
}

/// What a release asks of the actor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Release {
    /// Withdraw the data and drop the value: it holds more than this
    /// rank's single original (which is kept until the end).
    pub drop_value: bool,
    /// Fill the future (`Completion::Contributed`).
    pub fill: bool,
    /// The contribution became safe with this release (its data was folded
    /// in): the actor marks the future.
    pub safe: bool,
}

/// What the end asks of the actor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Finish {
    /// Fill the future (it was not filled by a release).
    pub fill: bool,
    /// Remove this rank's files of the reduction (a disk copy may exist).
    pub remove_disk: bool,
    /// Keep the original's buffer, unchanged, until the process ends: a
    /// buddy may still view it in place.
    pub strand: bool,
}
