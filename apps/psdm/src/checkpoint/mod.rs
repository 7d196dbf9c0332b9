//! psdm's checkpoints (see the book's Checkpoints chapter for the runtime's
//! side): every `--checkpoint-every B` batches each rank checkpoints what
//! it needs to resume, and on start it resumes from the newest version
//! there is.
//!
//! A rank's [`State`] is its progress — the batches settled, all of them
//! a prefix `0..K` — and its timing so far; at the root (every rank with
//! `--allreduce`) also the image, the sum of batches `0..K` exactly. Nothing
//! else is needed to redo batch `K` and later: a rank's traces of a batch
//! are a function of the job, its rank and the batch ([`crate::job`]), and
//! so is its `--jitter` sleep.
//! Version `v` holds `K = v · B` batches. Checkpoints are taken only while
//! no rank was lost (after a loss the survivors redistribute the lost
//! rank's traces, [`crate::recovery`], and batches no longer settle as a
//! prefix); the versions written before stay.
//!
//! # Resuming
//!
//! - [`Start::Cut`], a job launched afresh (checkpoint/restart): every rank
//!   restores its newest version, the ranks agree on the smallest of them
//!   (a reduction of the minimum to every rank, [`resume::agree`]), and
//!   every rank resumes from that one version, reading it explicitly if
//!   its own newest is newer. The cut is consistent: the root's image at
//!   `K` is the sum of exactly the batches every rank resumes after.
//! - [`Start::Own`], a replacement process of a rank whose process died
//!   while the others went on (local restart, `taskfold run --respawn`):
//!   it restores its own newest version and redoes its batches from there
//!   under the same reduction ids; the runtime answers its joins of
//!   reductions already complete as done. Not the root: the batch images
//!   its dead process received are gone, so a replaced root refuses to
//!   resume alone; with `--allreduce` every rank holds such images, and
//!   no replaced rank resumes alone (global restart serves instead).
//!
//! Which one follows from the process's [`Lifecycle`]: a new process or
//! one rolled back with all the others (global restart) takes the cut, a
//! replacement alone its own version, as the runtime's lifecycle and
//! restart mode say (`Runtime::lifecycle`, `TASKFOLD_RESTART`).
//!
//! The agreed version is kept on every rank: a rank waits for its
//! checkpoint `v` to be durable before it contributes to batch
//! `(v + s) · B - 1` ([`Cadence::wait_before`]), so when any rank holds
//! version `w` every rank holds `w - s` ([`Cadence::spread`]), and
//! `TASKFOLD_CHECKPOINT_KEEP` must be at least `s + 1`
//! ([`Cadence::keep_needed`], checked at start).
//!
//! What a failure does: a checkpoint that fails to write is reported on
//! stderr and the run goes on (the versions before stay); a version that
//! does not decode, was written by another job configuration, or is no
//! longer kept ends the rank with a [`resume::ResumeError`] naming it.

pub mod resume;
pub mod writer;

#[cfg(test)]
mod tests;

use crate::job::Job;
use taskfold::rkyv::{Archive, Deserialize, Serialize};

/// What one rank checkpoints (see the module's documentation).
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[rkyv(crate = taskfold::rkyv)]
pub struct State {
    /// The job configuration it belongs to ([`fingerprint`]).
    pub fingerprint: u64,
    /// The rank it is of.
    pub rank: u32,
    /// Batches settled, `0..batches_done`.
    pub batches_done: u64,
    /// The rank's timing so far ([`crate::rank::Timing`] as numbers).
    pub timing: Vec<f64>,
    /// At the root (every rank with `--allreduce`): the sum of the batch
    /// images `0..batches_done`; empty on the other ranks.
    pub image: Vec<f32>,
}

/// A hash of everything a checkpoint's meaning depends on: the sizes, the
/// seed, the batch size, the jitter, the rank count, the root and the
/// checkpoint interval. A version of another fingerprint is refused.
pub fn fingerprint(job: &Job, size: u32) -> u64 {
    let a = &job.args;
    let text = format!(
        "{} {} {} {} {} {} {} {} {} {} {} {} {} {}",
        a.nx,
        a.nz,
        a.dx,
        a.shots,
        a.receivers,
        a.reflectors,
        a.seed,
        a.dt_ms(),
        a.freq,
        a.batch,
        a.jitter_ms(),
        a.root,
        a.checkpoint_every,
        size
    );
    // FNV-1a: stable across builds and platforms.
    text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// When a rank checkpoints, and what that asks of the versions kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cadence {
    /// Batches between checkpoints (`--checkpoint-every`, at least 1).
    pub every: usize,
    /// Reductions a rank keeps in flight (`--in-flight`).
    pub in_flight: usize,
}

impl Cadence {
    /// The version to checkpoint once `done` batches are settled, if one
    /// is due: every `every` batches.
    pub fn due(&self, done: usize) -> Option<u64> {
        (done > 0 && done.is_multiple_of(self.every)).then(|| (done / self.every) as u64)
    }

    /// Batches settled at `version`.
    pub fn batches_of(&self, version: u64) -> usize {
        version as usize * self.every
    }

    /// How many versions one rank can be ahead of another's durable ones,
    /// `s`: version `v` is taken once batch `v·B - 1` is settled, when
    /// batches up to `v·B - 1 + in_flight` are already issued, so the
    /// first batch it can be made durable before is the last of an
    /// interval beyond those: `s = ceil((in_flight + 1) / B)`.
    pub fn spread(&self) -> u64 {
        (self.in_flight + 1).div_ceil(self.every) as u64
    }

    /// The batch before whose reduction checkpoint `version` must be
    /// durable: `(version + s) · B - 1`.
    pub fn wait_before(&self, version: u64) -> usize {
        self.batches_of(version + self.spread()) - 1
    }

    /// Versions each rank must keep for the agreed one to be there:
    /// `s + 1`.
    pub fn keep_needed(&self) -> usize {
        self.spread() as usize + 1
    }

    /// Refuses a `keep` (`TASKFOLD_CHECKPOINT_KEEP`) too small for this
    /// cadence, naming the variable.
    pub fn check_keep(&self, keep: usize) -> Result<(), String> {
        let need = self.keep_needed();
        if keep >= need {
            Ok(())
        } else {
            Err(format!(
                "--checkpoint-every {} with --in-flight {} needs TASKFOLD_CHECKPOINT_KEEP of at \
                 least {need} (it is {keep}): a restarted job resumes from a version up to {} \
                 older than a rank's newest",
                self.every,
                self.in_flight,
                need - 1
            ))
        }
    }
}

/// How a rank starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Checkpoints are off: from batch 0.
    Fresh,
    /// Every rank resumes from the newest version all of them hold (a
    /// job launched afresh: checkpoint/restart).
    Cut,
    /// This process replaces a dead one of its rank while the others went
    /// on (local restart): it resumes from its own newest version.
    Own,
}

/// Where this process is in its rank's life, as the runtime's restart
/// modes see it: psdm resumes accordingly ([`Start::of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    /// A rank's first process, in a job launched afresh (perhaps a job
    /// that died and is launched again).
    New,
    /// A replacement process of a rank whose process died while the
    /// others went on (local restart).
    Restarted,
    /// A process the runtime rolled back with every other rank (global
    /// restart).
    Reinited,
}

impl Start {
    /// How a process at `lifecycle` starts when checkpoints are taken
    /// every `every` batches (0: off): all ranks together from one cut,
    /// unless it alone was replaced.
    pub fn of(lifecycle: Lifecycle, every: usize) -> Start {
        match (every, lifecycle) {
            (0, _) => Start::Fresh,
            (_, Lifecycle::New | Lifecycle::Reinited) => Start::Cut,
            (_, Lifecycle::Restarted) => Start::Own,
        }
    }

    /// Its name in psdm's machine-readable lines.
    pub fn name(self) -> &'static str {
        match self {
            Start::Fresh => "fresh",
            Start::Cut => "cut",
            Start::Own => "own",
        }
    }
}

/// Milliseconds since the Unix epoch: psdm's machine-readable lines are
/// stamped with it so that another process (`taskfold bench recovery`)
/// can set them against its own clock.
pub fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}
