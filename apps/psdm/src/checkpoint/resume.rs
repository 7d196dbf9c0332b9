//! Resuming on start: restore this rank's newest version, agree on the cut
//! with the other ranks ([`Start::Cut`]) or keep its own ([`Start::Own`]),
//! and read the agreed version if it is older than this rank's newest.

use super::{fingerprint, Cadence, Start, State};
use crate::job::Job;
use std::time::{Duration, Instant};
use taskfold::checkpoint::CheckpointError;
use taskfold::config::CheckpointConfig;
use taskfold::{Completion, Min, Reduce, ReduceError, Runtime};

/// Why a rank cannot resume.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// The runtime could not read the checkpoints.
    #[error("cannot restore a checkpoint: {0}")]
    Restore(#[from] CheckpointError),
    /// The newest version was written by another configuration of the job.
    #[error(
        "checkpoint version {version} was written by another configuration of the job (sizes, \
         seed, batch, jitter, rank count, root or --checkpoint-every differ): give this one its \
         own TASKFOLD_CHECKPOINT_JOB"
    )]
    OtherJob {
        /// The version.
        version: u64,
    },
    /// The ranks agreed on a version this rank no longer holds.
    #[error(
        "the ranks agreed to resume from version {version}, which rank {rank} no longer holds \
         intact (raise TASKFOLD_CHECKPOINT_KEEP)"
    )]
    NotKept {
        /// The version.
        version: u64,
        /// This rank.
        rank: u32,
    },
    /// The root's process was replaced alone (local restart): the batch
    /// images that reached its dead incarnation are gone with it.
    #[error(
        "the root, rank {0}, cannot resume alone: the batch images its dead process held are \
         gone; launch the job again (checkpoint/restart)"
    )]
    RootReplaced(u32),
    /// A rank's process was replaced alone (local restart) with
    /// `--allreduce`: the batch images its dead process received are gone
    /// with it, and the batches' allreduces finished without it.
    #[error(
        "rank {0} cannot resume alone with --allreduce: the batch images its dead process held \
         are gone; use TASKFOLD_RESTART=global, or launch the job again (checkpoint/restart)"
    )]
    ReplacedWithAllreduce(u32),
    /// The reduction that agrees on the version failed.
    #[error("the ranks could not agree on a version to resume from: {0}")]
    Agree(#[from] ReduceError),
}

/// What a rank resumes from.
#[derive(Debug)]
pub struct Resumed {
    /// How it started.
    pub start: Start,
    /// The version, 0 if none (batch 0).
    pub version: u64,
    /// The state of that version, `None` for version 0.
    pub state: Option<State>,
    /// Time spent restoring (reading, agreeing, reading again).
    pub took: Duration,
}

/// Resumes rank `rt` of `job` as `start` says. Every rank of a
/// [`Start::Cut`] must call it: it joins one reduction per rank.
pub fn resume(rt: &Runtime, job: &Job, start: Start) -> Result<Resumed, ResumeError> {
    let began = Instant::now();
    let fresh = |start| Resumed {
        start,
        version: 0,
        state: None,
        took: Duration::ZERO,
    };
    if start == Start::Fresh {
        return Ok(fresh(start));
    }
    if start == Start::Own && rt.rank() == job.args.root {
        return Err(ResumeError::RootReplaced(rt.rank()));
    }
    if start == Start::Own && job.args.allreduce {
        return Err(ResumeError::ReplacedWithAllreduce(rt.rank()));
    }
    let want = fingerprint(job, rt.size());
    let newest = match rt.checkpoints().restore::<State>()? {
        Some((v, s)) if s.fingerprint != want || s.rank != rt.rank() => {
            return Err(ResumeError::OtherJob { version: v });
        }
        other => other,
    };
    let mine = newest.as_ref().map_or(0, |(v, _)| *v);
    let version = match start {
        Start::Cut => agree(rt, mine)?,
        _ => {
            // A replacement joins the agreement too: its dead process may
            // have died before contributing, and the others wait for it
            // (a join of an agreement that completed is answered at once).
            if matches!(rt.lifecycle(), taskfold::Lifecycle::Restarted { .. }) {
                agreement(rt, mine)?;
            }
            mine
        }
    };
    let state = match newest {
        _ if version == 0 => None,
        Some((v, s)) if v == version => Some(s),
        _ => Some(read_version(rt, version, want)?),
    };
    // The root's image is the job's size (every rank's with
    // `--allreduce`), the others hold none.
    let cells = if rt.rank() == job.args.root || job.args.allreduce {
        job.model.nx * job.model.nz
    } else {
        0
    };
    if state.as_ref().is_some_and(|s| s.image.len() != cells) {
        return Err(ResumeError::OtherJob { version });
    }
    Ok(Resumed {
        start,
        version,
        state,
        took: began.elapsed(),
    })
}

/// The smallest of every rank's `mine`, on every rank: one reduction of the
/// minimum per rank, each to that rank (the runtime reduces to one root).
pub fn agree(rt: &Runtime, mine: u64) -> Result<u64, ReduceError> {
    match agreement(rt, mine) {
        Ok(agreed) => {
            agreed.ok_or_else(|| ReduceError::Decode("no agreed version reached this rank".into()))
        }
        // Versions count from 0: a rank with nothing to resume from knows
        // the least of them whatever the others said, and starts afresh
        // even if a dead rank's vote was lost (the master killed as the
        // job starts, with a standby and no replacement).
        Err(ReduceError::RanksLost { .. } | ReduceError::RootLost { .. }) if mine == 0 => Ok(0),
        Err(e) => Err(e),
    }
}

/// Joins the agreement with `mine`: the least version, as this rank's
/// reduction received it (`None` for a replacement whose dead process's
/// agreement had completed).
fn agreement(rt: &Runtime, mine: u64) -> Result<Option<u64>, ReduceError> {
    let futures: Vec<_> = (0..rt.size())
        .map(|root| {
            let opts = Reduce::root(root)
                .id(format!("psdm-resume-to-{root}"))
                .completion(Completion::Result);
            rt.reduce(Min(vec![mine]), opts)
        })
        .collect::<Result<_, _>>()?;
    let mut agreed = None;
    for (root, f) in futures.into_iter().enumerate() {
        match f.get() {
            Ok(Some(Min(v))) => agreed = v.first().copied(),
            Ok(None) => {}
            // Another rank's agreement, its root dead: this rank needs only
            // its own.
            Err(ReduceError::RootLost { .. }) if root as u32 != rt.rank() => {}
            // A replacement root's agreement that completed under its dead
            // process, whose kept copy was released by a checkpoint since:
            // the replacement resumes from its own newest version.
            Err(ReduceError::ResultLost { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(agreed)
}

/// Reads version `version` of this rank's state (the newest not above
/// it, which must be it), checked as any restore.
fn read_version(rt: &Runtime, version: u64, want: u64) -> Result<State, ResumeError> {
    let rank = rt.rank();
    match rt.checkpoints().restore_upto::<State>(Some(version))? {
        Some((v, s)) if v == version && s.fingerprint == want && s.rank == rank => Ok(s),
        Some((v, s)) if v == version && (s.fingerprint != want || s.rank != rank) => {
            Err(ResumeError::OtherJob { version })
        }
        _ => Err(ResumeError::NotKept { version, rank }),
    }
}

/// The cadence of `job`, refused if the runtime keeps too few versions.
pub fn cadence(job: &Job, config: &CheckpointConfig) -> Result<Option<Cadence>, String> {
    let every = job.args.checkpoint_every;
    if every == 0 {
        return Ok(None);
    }
    let c = Cadence {
        every,
        in_flight: job.args.in_flight,
    };
    c.check_keep(config.keep)?;
    Ok(Some(c))
}
