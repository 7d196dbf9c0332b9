//! Resuming on start: restore this rank's newest version, agree on the cut
//! with the other ranks ([`Start::Cut`]) or keep its own ([`Start::Own`]),
//! and read the agreed version if it is older than this rank's newest.

use super::{fingerprint, Cadence, Start, State};
use crate::job::Job;
use std::time::{Duration, Instant};
use taskfold::checkpoint::{rank_dir, CheckpointError, FileStore, Level, PieceKey};
use taskfold::config::CheckpointConfig;
use taskfold::rkyv::{rancor, util::AlignedVec};
use taskfold::{Completion, Min, Reduce, ReduceError, Runtime};
use taskfold_core::checkpoint::Expect;

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

/// Resumes rank `rt` of `job` as `start` says; `config` is the
/// runtime's checkpoint configuration (to read an agreed version older
/// than the newest). Every rank of a [`Start::Cut`] must call it: it
/// joins one reduction per rank.
pub fn resume(
    rt: &Runtime,
    job: &Job,
    start: Start,
    config: &CheckpointConfig,
) -> Result<Resumed, ResumeError> {
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
    let want = fingerprint(job, rt.size());
    let newest = match rt.restore::<State>()? {
        Some((v, s)) if s.fingerprint != want || s.rank != rt.rank() => {
            return Err(ResumeError::OtherJob { version: v });
        }
        other => other,
    };
    let mine = newest.as_ref().map_or(0, |(v, _)| *v);
    let version = match start {
        Start::Cut => agree(rt, mine)?,
        _ => mine,
    };
    let state = match newest {
        _ if version == 0 => None,
        Some((v, s)) if v == version => Some(s),
        _ => Some(read_version(rt, config, version, want)?),
    };
    // The root's image is the job's size, the others hold none.
    let cells = if rt.rank() == job.args.root {
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
    let futures: Vec<_> = (0..rt.size())
        .map(|root| {
            let opts = Reduce::root(root)
                .id(format!("psdm-resume-to-{root}"))
                .completion(Completion::Result);
            rt.reduce(Min(vec![mine]), opts)
        })
        .collect::<Result<_, _>>()?;
    let mut agreed = None;
    for f in futures {
        if let Some(Min(v)) = f.get()? {
            agreed = v.first().copied();
        }
    }
    Ok(agreed.expect("this rank is the root of one of the reductions"))
}

/// Reads version `version` of this rank's state, L1 then L4, checking it
/// as the runtime's `restore` does.
fn read_version(
    rt: &Runtime,
    config: &CheckpointConfig,
    version: u64,
    want: u64,
) -> Result<State, ResumeError> {
    let rank = rt.rank();
    let levels = [(Level::L1, &config.dir), (Level::L4, &config.shared_dir)];
    for (level, root) in levels {
        let Some(root) = root else { continue };
        let dir = rank_dir(root, rt.checkpoint_job(), rank);
        let Ok(store) = FileStore::open(&dir, config.keep) else {
            continue;
        };
        let expect = Expect {
            job: rt.checkpoint_job(),
            type_tag: taskfold_core::checkpoint::type_tag(std::any::type_name::<State>()),
            owner: Some(rank),
            version: Some(version),
            level: Some(level),
        };
        let key = PieceKey {
            owner: rank,
            level,
            shard: None,
            version,
        };
        match store.read(&key, &expect) {
            Ok(stored) => match decode(&stored.payload) {
                Some(s) if s.fingerprint == want && s.rank == rank => return Ok(s),
                Some(_) => return Err(ResumeError::OtherJob { version }),
                None => {
                    eprintln!("psdm: rank {rank}: version {version} at {level} does not decode")
                }
            },
            Err(e) => eprintln!("psdm: rank {rank}: version {version} at {level}: {e}"),
        }
    }
    Err(ResumeError::NotKept { version, rank })
}

/// A [`State`] from its archive (validated before it is read).
fn decode(payload: &[u8]) -> Option<State> {
    // The payload is not aligned in the piece: copied into a buffer that is.
    let mut aligned = AlignedVec::<16>::with_capacity(payload.len());
    aligned.extend_from_slice(payload);
    taskfold::rkyv::from_bytes::<State, rancor::Error>(&aligned).ok()
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
