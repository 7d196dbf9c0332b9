//! Inferring a dead rank's disk copy.
//!
//! A rank writes its original to its replica directory *before* it
//! announces its contribution, and names that directory in the
//! announcement. A rank killed between the two (its join and its buddy
//! offer still queued in the process) leaves a disk copy that nobody was
//! told about. When every rank's directory sits under one shared replica
//! directory (`taskfold run` gives each job one, or `TASKFOLD_REPLICA_DIR`),
//! the master knows where that copy would be — `<root>/rank-<r>/<key>-<r>.replica`
//! — and may use it if it is certainly the original of *this* reduction.
//!
//! # The guard
//!
//! A file at that path is the dead rank's original of the current reduction
//! unless it was left by an earlier job or an earlier reduction with the
//! same key. The master accepts it only if its modification time `m`
//! (the moment its content was written; renaming does not change it) and
//! its header pass [`judge`]:
//!
//! 1. `m > not_before`, where `not_before` is the latest of: the moment
//!    rank 0 started (before its bootstrap, so before any rank of this job
//!    could write), the moment the master ended the previous reduction with
//!    this key, and the moment a rank's late announcement for that key
//!    arrived. Every stale file was written before that bound:
//!    - a rank whose announcement of an earlier reduction arrived wrote its
//!      file before announcing (the write precedes the join), so before
//!      that reduction ended;
//!    - a rank whose announcement had not arrived when the reduction ended
//!      may still have had its write in flight: for that key the master
//!      refuses to infer its copy (`not_before` is `None`) until its late
//!      announcement arrives, which again follows its write;
//!    - a rank seals a reduction's writes when it ends there
//!      ([`crate::replica::ReplicaDisk::seal`]), before it can start
//!      another with the same key: no write of an ended reduction can land
//!      later.
//! 2. `m <= dead_at`, the moment the master declared the rank failed: a
//!    killed process writes nothing afterwards, and a stopped process that
//!    resumes is fenced; anything it writes later is not trusted.
//! 3. The header is a replica header whose length matches the file's. The
//!    checksum of the payload is verified by the rank that reads the copy;
//!    a mismatch there is a failed fetch, and the reduction ends with
//!    `RanksLost` — never a wrong result.
//!
//! The timestamps are the file system's, the bounds the master's clock.
//! On one node they are the same clock (the file system's timestamps lag
//! it by at most a tick, which only makes the guard stricter). On a shared
//! file system the master checks at start that the file system's clock is
//! not ahead of its own (a probe file) and infers nothing if it is.
//!
//! The record of ended reductions is bounded: when an entry is evicted its
//! end becomes a floor for every key, and ranks whose write may still have
//! been in flight are never inferred again in this run.

use super::state::Reduction;
use crate::replica::disk::{file_facts, file_in, rank_dir};
use crate::replica::stale::{judge, KeyEnds, ENDS_LIMIT};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::SystemTime;
use taskfold_core::Rank;

/// The master's means of inferring disk copies: present only when rank 0
/// has a shared replica directory and the file system's clock passed the
/// start-up probe.
#[derive(Debug)]
pub(crate) struct DiskInference {
    root: PathBuf,
    pub(crate) ends: KeyEnds,
}

impl DiskInference {
    /// `root` is the shared replica directory; `since` the moment rank 0
    /// started, before which no file of this job exists.
    pub(crate) fn new(root: PathBuf, since: SystemTime) -> Self {
        DiskInference {
            root,
            ends: KeyEnds::new(ENDS_LIMIT, since),
        }
    }

    /// For every dead member of `r` (reduction `key`) whose announcement
    /// never arrived, whose disk directory is unknown and whose original has
    /// no live buddy copy, looks for its disk copy and records its
    /// directory in `r.roster` if the copy passes the guard. Each member is
    /// looked at once per reduction
    /// (`taskfold_core::roster::Roster::look_for_disk`). Returns the ranks
    /// whose copies were inferred.
    pub(crate) fn infer(
        &self,
        key: u64,
        r: &mut Reduction,
        dead: &taskfold_core::RankSet,
        dead_at: &HashMap<u32, SystemTime>,
    ) -> Vec<u32> {
        let mut inferred = Vec::new();
        for i in 0..r.group.len() {
            let rank = r.group.rank_at(i);
            // The root's copy is never written: a lost root ends the
            // reduction.
            if rank == r.root || !r.roster.look_for_disk(i, dead) {
                continue;
            }
            let Some(&died) = dead_at.get(&rank.0) else {
                continue;
            };
            let dir = rank_dir(&self.root, rank.0);
            let path = file_in(&dir, key, rank.0);
            let Some(facts) = file_facts(&path) else {
                tracing::info!(id = %r.id, %rank, path = %path.display(), "no disk copy to infer");
                continue;
            };
            match judge(&facts, self.ends.not_before(key, rank.0), died) {
                Ok(()) => {
                    tracing::warn!(
                        id = %r.id,
                        %rank,
                        path = %path.display(),
                        "inferred the disk copy of a rank that died before announcing it"
                    );
                    metrics::counter!(crate::metrics::DISK_COPIES_INFERRED).increment(1);
                    r.roster.found_disk(i, dir.to_string_lossy().into_owned());
                    inferred.push(rank.0);
                }
                Err(why) => {
                    tracing::warn!(
                        id = %r.id,
                        %rank,
                        path = %path.display(),
                        reason = %why,
                        "disk copy of a dead rank not used"
                    );
                    metrics::counter!(crate::metrics::DISK_COPIES_REFUSED).increment(1);
                }
            }
        }
        inferred
    }
}

/// Ranks of `r` whose own announcement never arrived (for [`KeyEnds::ended`]).
pub(crate) fn unannounced(r: &Reduction) -> Vec<u32> {
    r.roster
        .unannounced()
        .map(|i| r.group.rank_at(i).0)
        .filter(|&rank| Rank(rank) != r.root)
        .collect()
}
