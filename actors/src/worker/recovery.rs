//! The worker's messages of the failure path: a rank declared failed, and
//! the buddy's acknowledgement of a replica.

use super::Worker;
use actix::prelude::*;
use taskfold_core::contribution::Action;
use taskfold_core::wire::TaskFailure;
use taskfold_core::{Rank, ReduceError};

/// The master declared `rank` failed (possibly this very rank: fenced).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct RankFailedIn {
    pub(crate) rank: Rank,
}

/// The master rolls the job back (global restart): every live reduction
/// and barrier of this rank ends with `ReduceError::Reinit`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ReinitIn {
    pub(crate) epoch: u32,
}

impl Handler<ReinitIn> for Worker {
    type Result = ();

    fn handle(&mut self, m: ReinitIn, _: &mut Context<Self>) {
        self.epoch = self.epoch.max(m.epoch);
        let error = ReduceError::Reinit { epoch: m.epoch };
        self.fail_all(error.clone());
        // After the ends just recorded: none of this epoch's ends is news
        // to a master of the next, whose reductions reuse their keys (a
        // completion of one reported to a standby would complete the
        // next epoch's reduction of that key with partial data).
        self.ended.clear();
        // The results handed over are of this epoch too: their copies go
        // with the rollback, and none is ever released by key again.
        self.kept_results_rolled_back();
        if self.finalizing == super::end::Finalize::Sent {
            // This rank left its entry point for good: the master counts
            // it out of the meeting, and its finalize waits for the job's
            // end as before.
            return self.fail_barriers(&error);
        }
        self.fail_waiters(&error);
    }
}

/// The master took this rank's leave of its re-init entry point (see
/// `crate::reinit`).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ReinitLeftIn;

impl Handler<ReinitLeftIn> for Worker {
    type Result = ();

    fn handle(&mut self, _: ReinitLeftIn, _: &mut Context<Self>) {
        self.left_reinit = true;
    }
}

impl Handler<RankFailedIn> for Worker {
    type Result = ();

    fn handle(&mut self, m: RankFailedIn, ctx: &mut Context<Self>) {
        self.rank_died(m.rank, ctx);
    }
}

impl Worker {
    /// `rank` died (declared by the master, or the master itself lost with
    /// a standby to go on with): fenced if it is this rank; else its copies
    /// of this rank's originals are made again elsewhere, fetches from it
    /// cancelled, and joins awaiting it as a buddy offered to the next.
    pub(super) fn rank_died(&mut self, rank: Rank, ctx: &mut Context<Self>) {
        let orphaned = self.copies_held_by(rank);
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
        self.results_rank_died(rank, ctx);
        // Views this rank keeps of the dead rank's originals get checksums.
        self.store
            .do_send(crate::replica::OwnerDied { owner: rank });
        self.cancel_fetches_from(rank, ctx);
        // A join waiting on a dead buddy: offer to the next.
        let waiting: Vec<u64> = self
            .locals
            .iter()
            .filter(|(_, l)| l.state.awaited_buddy() == Some(rank.0))
            .map(|(k, _)| *k)
            .collect();
        for key in waiting {
            if let Some(l) = self.locals.get_mut(&key) {
                let action = l.state.buddy_failed(rank.0);
                self.act(key, action, ctx);
            }
        }
        // Joined originals whose only copy died with their buddy: copied
        // again to the next buddy (the same placement without the dead
        // rank), whose notice to the master names the new holder.
        for key in orphaned {
            let (to, _) = self.offer(key, false, false);
            tracing::info!(rank = %self.rank, dead = %rank, buddy = ?to, key, "original copied again to a new buddy");
        }
    }

    /// The reductions whose joined original was offered to `rank` last,
    /// to be copied again when `rank` dies. Only checksummed originals:
    /// one viewed in place on this node is offered by the master on this
    /// rank's behalf, and one without durability has no copy.
    fn copies_held_by(&self, rank: Rank) -> Vec<u64> {
        if rank == self.rank {
            return Vec::new();
        }
        self.locals
            .iter()
            .filter(|(_, l)| l.state.joined())
            .filter(|(_, l)| {
                l.original
                    .as_deref()
                    .is_some_and(|o| taskfold_core::replica::announced_len(o).is_some())
            })
            .filter(|(_, l)| l.holder == Some(rank))
            .map(|(k, _)| *k)
            .collect()
    }

    /// Fetches from the dead `rank` would hang on a stopped process: they
    /// are cancelled, and the master reschedules their tasks (a task whose
    /// provider died is done again from the provider's replica).
    fn cancel_fetches_from(&mut self, rank: Rank, ctx: &mut Context<Self>) {
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
            let Some(local) = self.locals.get_mut(&key) else {
                continue;
            };
            // A piecewise fold holds the value: it comes back unchanged if
            // it can be taken from the fold now. If not, the job that ends
            // the fold has it (the get already ended, and its last pieces
            // are being folded): that job's answer settles the task, with
            // the value unchanged or folded whole, so it is not cancelled.
            let fold = match local.fetch.as_ref().and_then(|f| f.pieces.as_ref()) {
                Some(p) => match Self::take_pieces(p) {
                    Some(fold) => Some(fold),
                    None => continue,
                },
                None => None,
            };
            let Some(f) = local.fetch.take() else {
                continue;
            };
            // Taking `fetch` is what cancels: a fetch that completes in the
            // same turn still runs its continuation, which then finds its
            // task no longer fetching and drops the data (`Worker::fetched`).
            ctx.cancel_future(f.handle);
            if let Some(fold) = fold {
                local.value = Some(fold.abort());
            }
            // The link is down only if the data was read from the dead
            // rank itself; a read from a live copy's holder, cancelled
            // because the copy's owner died, blames nobody.
            let reason = TaskFailure::Fetch {
                reason: format!("{rank} was declared failed"),
                peer_down: f.from == rank,
            };
            self.task_failed(&f.task, reason);
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
        let Some(local) = self.locals.get_mut(&m.key) else {
            return;
        };
        let action = local.state.buddy_answered(m.from.0, m.ok);
        if !m.ok && action != Action::Nothing {
            // The buddy's store is full: the reduction goes on, but this
            // original is not recoverable; say so loudly.
            metrics::counter!(crate::metrics::REPLICA_ERRORS).increment(1);
            tracing::error!(rank = %self.rank, buddy = %m.from, "buddy refused the replica; continuing without it");
        }
        self.act(m.key, action, ctx);
    }
}
