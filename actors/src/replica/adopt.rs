//! A dead master's disk copy, taken up by a rank of its node.
//!
//! With asynchronous durability a rank's contribution is safe once its
//! disk copy is written (see the book's Fault tolerance chapter, The
//! durability window). A worker's copy is named in its join, which the
//! master keeps; but the master's own join goes to itself and dies with
//! it, and a standby on another node can read neither its record nor its
//! node's disk. So when the master dies, each surviving rank of its node
//! looks in the node's replica directory for the master's copy of every
//! reduction it is in, and keeps what passes the staleness guard
//! ([`super::stale::judge`]) as a copy of the master's original, which its
//! report to the new master lists like any buddy copy
//! ([`taskfold_core::wire::Rejoin::copies`]). The new master then recovers
//! the master's contribution from it as from any dead rank's replica.
//!
//! The bytes are read, not mapped: a process that was only stopped, not
//! dead, may come back and write that file over in place; a copy in memory
//! cannot change under the reduction. What a crash of this rank loses: the
//! copies it took up, as any copy it holds.

use super::disk::{file_facts, file_in, ReplicaDisk};
use super::stale::judge;
use super::ReplicaStore;
use actix::prelude::*;
use std::path::PathBuf;
use std::time::SystemTime;
use taskfold_core::replica::replica_key;
use taskfold_transports::BufferKey;

/// Take up the dead master `owner`'s disk copy of its original of `key`,
/// in its directory `dir` on this rank's node, if it is that reduction's
/// (written after `not_before`, no later than `died`; `None`: no bound is
/// known, the file may be stale, and nothing is taken).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct AdoptDiskCopy {
    pub(crate) key: u64,
    pub(crate) owner: u32,
    pub(crate) dir: PathBuf,
    pub(crate) not_before: Option<SystemTime>,
    pub(crate) died: SystemTime,
}

impl Handler<AdoptDiskCopy> for ReplicaStore {
    type Result = ();

    /// Reads the file here, in the handler, rather than on a blocking
    /// thread: the report to the new master lists this store's copies
    /// (`ListCopies`), which the worker asks for after this message, and
    /// must include this one. It happens once per reduction per failover.
    fn handle(&mut self, m: AdoptDiskCopy, _: &mut Context<Self>) {
        // `held` counts every copy kept here, views included.
        if self.held.contains_key(&(m.key, m.owner)) {
            return; // its buddy copy is here already
        }
        let path = file_in(&m.dir, m.key, m.owner);
        let Some(facts) = file_facts(&path) else {
            tracing::debug!(rank = self.rank, owner = m.owner, path = %path.display(), "no disk copy of the dead master");
            return;
        };
        if let Err(why) = judge(&facts, m.not_before, m.died) {
            tracing::warn!(rank = self.rank, owner = m.owner, path = %path.display(), reason = %why, "disk copy of the dead master not used");
            metrics::counter!(crate::metrics::DISK_COPIES_REFUSED).increment(1);
            return;
        }
        if self.bytes + facts.len > self.limit {
            tracing::warn!(
                rank = self.rank,
                owner = m.owner,
                "replica store full; the dead master's disk copy not taken"
            );
            return;
        }
        let bytes = match ReplicaDisk::read_other(&m.dir, m.key, m.owner) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(rank = self.rank, owner = m.owner, error = %e, "cannot read the dead master's disk copy");
                return;
            }
        };
        tracing::warn!(rank = self.rank, owner = m.owner, key = m.key, path = %path.display(), "took up the dead master's disk copy");
        metrics::counter!(crate::metrics::DISK_COPIES_ADOPTED).increment(1);
        let len = bytes.len() as u64;
        self.out
            .transport()
            .expose(BufferKey(replica_key(m.key, m.owner)), bytes);
        // Its owner's offer is unknown: any end of the key drops it.
        let h = super::Held { len, after: 0 };
        self.held.insert((m.key, m.owner), h);
        self.bytes += len;
        self.gauge();
    }
}
