//! The worker's messages of the failure path: a rank declared failed, and
//! the buddy's acknowledgement of a replica.

use super::Worker;
use actix::prelude::*;
use taskfold_core::wire::TaskFailure;
use taskfold_core::{Rank, ReduceError};

/// The master declared `rank` failed (possibly this very rank: fenced).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct RankFailedIn {
    pub(crate) rank: Rank,
}

impl Handler<RankFailedIn> for Worker {
    type Result = ();

    fn handle(&mut self, m: RankFailedIn, ctx: &mut Context<Self>) {
        let rank = m.rank;
        self.dead.insert(rank.0 as usize);
        if self.same_node_buddy == Some(rank) {
            self.same_node_buddy = None;
        }
        if rank == self.rank {
            tracing::error!(rank = %self.rank, "this rank was declared failed: fenced");
            self.fenced = true;
            self.fail_all(ReduceError::Fenced);
            self.fail_waiters(&ReduceError::Fenced);
            return;
        }
        // Views this rank keeps of the dead rank's originals get checksums.
        self.store
            .do_send(crate::replica::OwnerDied { owner: rank });
        // Fetches from the dead rank would hang on a stopped process: cancel
        // them and let the master reschedule (DESIGN.md §2, place 3).
        let stuck: Vec<u64> = self
            .locals
            .iter()
            .filter(|(_, l)| {
                l.fetch
                    .as_ref()
                    .is_some_and(|f| f.from == rank || f.task.provider == rank.0)
            })
            .map(|(k, _)| *k)
            .collect();
        for key in stuck {
            let pieces = self
                .locals
                .get(&key)
                .and_then(|l| l.fetch.as_ref())
                .and_then(|f| f.pieces.clone());
            // A piecewise fold holds the value: it comes back unchanged if
            // it can be taken from the fold now. If not, the job that ends
            // the fold has it (the get already ended, and its last pieces
            // are being folded): that job's answer settles the task, with
            // the value unchanged or folded whole, so it is not cancelled.
            let fold = match &pieces {
                Some(p) => match Self::take_pieces(p) {
                    Some(fold) => Some(fold),
                    None => continue,
                },
                None => None,
            };
            let f = self
                .locals
                .get_mut(&key)
                .and_then(|l| l.fetch.take())
                .expect("listed above");
            // Taking `fetch` is what cancels: a fetch that completes in the
            // same turn still runs its continuation, which then finds no
            // fetch of its task and drops the data (`Worker::fetched`).
            ctx.cancel_future(f.handle);
            if let (Some(fold), Some(local)) = (fold, self.locals.get_mut(&key)) {
                local.value = Some(fold.abort());
            }
            let reason = TaskFailure::Fetch {
                reason: format!("{rank} was declared failed"),
                peer_down: true,
            };
            self.fail_task(&f.task, reason);
        }
        // A join waiting on a dead buddy: offer to the next.
        let waiting: Vec<u64> = self
            .locals
            .iter()
            .filter(|(_, l)| !l.joined && l.waits_for_buddy() && l.buddy == Some(rank))
            .map(|(k, _)| *k)
            .collect();
        for key in waiting {
            let disk_written = self.locals.get(&key).is_some_and(|l| l.disk_written);
            if self.offer(key).is_none() && disk_written {
                self.send_join(key, None, ctx);
            }
        }
    }
}

/// The buddy stored (or refused) a copy of this rank's original.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ReplicaAckIn {
    pub(crate) from: Rank,
    pub(crate) key: u64,
    pub(crate) ok: bool,
    /// The buddy is on this rank's node and reads its memory in place.
    pub(crate) same_node: bool,
}

impl Handler<ReplicaAckIn> for Worker {
    type Result = ();

    fn handle(&mut self, m: ReplicaAckIn, ctx: &mut Context<Self>) {
        // Only a stored copy says where the buddy is: a refusal (store
        // full, reduction ended) may not know.
        if m.ok {
            if m.same_node {
                self.same_node_buddy = Some(m.from);
            } else if self.same_node_buddy == Some(m.from) {
                self.same_node_buddy = None;
            }
        }
        let Some(local) = self.locals.get(&m.key) else {
            return;
        };
        if local.joined || !local.waits_for_buddy() || local.buddy != Some(m.from) {
            return;
        }
        if m.ok {
            let disk_written = local.disk_written;
            if let Some(l) = self.locals.get_mut(&m.key) {
                l.buddy_acked = true;
            }
            if disk_written {
                self.send_join(m.key, Some(m.from), ctx);
            }
        } else {
            // The buddy's store is full: the reduction goes on, but this
            // original is not recoverable; say so loudly.
            metrics::counter!(crate::metrics::REPLICA_ERRORS).increment(1);
            tracing::error!(rank = %self.rank, buddy = %m.from, "buddy refused the replica; continuing without it");
            let disk_written = local.disk_written;
            if let Some(l) = self.locals.get_mut(&m.key) {
                l.buddy = None;
            }
            if disk_written {
                self.send_join(m.key, None, ctx);
            }
        }
    }
}
