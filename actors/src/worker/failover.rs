//! The worker's side of a master's death with a standby: the tasks the
//! dead master gave are let end without a report, then the new master is
//! told what this rank holds ([`Msg::Rejoin`]; see
//! [`taskfold_core::failover`] and the book's Fault tolerance chapter, A
//! master that dies).

use super::Worker;
use crate::replica::ListCopies;
use actix::prelude::*;
use std::collections::{HashSet, VecDeque};
use taskfold_core::contribution::{Phase, Work};
use taskfold_core::wire::{Failure, Held, Joining, Msg, Rejoin, Standing};
use taskfold_core::Rank;

/// Most reductions remembered as ended, for a new master (a member that
/// missed the dead master's completion notice learns it from another's
/// report).
const ENDED_KEPT: usize = 4096;

/// The master `lost` died; `to` runs the master from now on.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Failover {
    pub(crate) lost: Rank,
    pub(crate) to: Rank,
}

/// A report to a new master being prepared: the reductions joined under
/// the dead master (those joined since go to the new one by their join),
/// and its tasks that have not ended here yet (`(key, task id)`). Their
/// ends are not reported (the new master does not know them); once none
/// is left the report goes.
pub(crate) struct Rejoining {
    lost: Rank,
    joined: HashSet<u64>,
    tasks: HashSet<(u64, u64)>,
}

/// What a join named of its copies, and the master it went to, for a
/// report to a new master.
#[derive(Clone, Default)]
pub(crate) struct Announced {
    pub(crate) replica: Option<u32>,
    pub(crate) standing: Option<Standing>,
    /// The master the join was sent to: a join that went to the new
    /// master already is not reported again.
    pub(crate) to: Option<Rank>,
}

/// Reductions that ended here lately, with their error.
#[derive(Default)]
pub(crate) struct Ended(VecDeque<(u64, Option<Failure>)>);

impl Ended {
    /// Forgets every end (the job rolled back: the next epoch uses the
    /// same keys again, and a new master must never take one of these
    /// ends for a reduction of that epoch).
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }

    pub(crate) fn push(&mut self, key: u64, error: Option<Failure>) {
        if self.0.len() >= ENDED_KEPT {
            self.0.pop_front();
        }
        self.0.push_back((key, error));
    }
}

impl Handler<Failover> for Worker {
    type Result = ();

    fn handle(&mut self, m: Failover, ctx: &mut Context<Self>) {
        if self.fenced || self.master_lost.is_some() {
            return;
        }
        tracing::warn!(rank = %self.rank, lost = %m.lost, master = %m.to, "a standby takes over from the dead master");
        metrics::counter!(crate::metrics::FAILOVERS).increment(1);
        // The tasks the dead master gave (a previous report not sent yet
        // keeps its own), and the ones a test hook queued: the new master
        // schedules anew.
        let mut r = self.rejoining.take().unwrap_or_else(|| Rejoining {
            lost: m.lost,
            joined: HashSet::new(),
            tasks: HashSet::new(),
        });
        r.lost = m.lost;
        for (&key, l) in self.locals.iter_mut() {
            if l.state.joined() && l.announced.to == Some(m.lost) {
                r.joined.insert(key);
            }
            l.held.clear();
            if let Phase::Joined(Work::Task { id, .. }) = l.state.phase() {
                r.tasks.insert((key, id));
            }
        }
        self.rejoining = Some(r);
        // The dead master's own originals and copies, as any dead rank's.
        self.rank_died(m.lost, ctx);
        self.adopt_disk_copies(m.lost);
        self.rejoin_if_settled(ctx);
    }
}

/// Every task of the dead master ended here: the report may go.
#[derive(Message)]
#[rtype(result = "()")]
struct SendRejoin;

impl Handler<SendRejoin> for Worker {
    type Result = ();

    fn handle(&mut self, _: SendRejoin, ctx: &mut Context<Self>) {
        self.rejoin_if_settled(ctx);
    }
}

impl Worker {
    /// Whether task `id` of `key` was the dead master's: its end is not
    /// reported, and the report to the new master may go now.
    pub(super) fn settle_old_task(&mut self, key: u64, id: u64) -> bool {
        let Some(r) = &mut self.rejoining else {
            return false;
        };
        if !r.tasks.remove(&(key, id)) {
            return false;
        }
        if r.tasks.is_empty() {
            if let Some(me) = &self.me {
                me.do_send(SendRejoin);
            }
        }
        true
    }

    /// On the dead master `lost`'s node, asks the store to take up each
    /// of its disk copies found there (see `crate::replica::adopt`),
    /// before the store lists its copies for the report: those of the
    /// reductions this rank is a member of — live here, or whose key
    /// ended here before (the next with that key, not started here yet,
    /// is noted by the new master for when it opens). A key is a group's
    /// (`ReductionKey::of`): a file of a key this rank never saw may be a
    /// group's without it, whose earlier reduction could have left it, so
    /// it is not taken. Only a master's first incarnation: a replacement
    /// replays reductions that ended long ago, whose disk copies it writes
    /// again and that could pass for a later reduction's with the same key.
    fn adopt_disk_copies(&mut self, lost: Rank) {
        let (own, node, first) = {
            let v = self.out.view().read();
            (
                v.node(self.rank.0),
                v.node(lost.0),
                v.incarnation(lost.0) == 0,
            )
        };
        if own == 0 || own != node || !first {
            return;
        }
        let Some(dir) = self.disk.peer_dir(lost.0) else {
            return; // no shared layout: its directory cannot be found
        };
        let died = std::time::SystemTime::now();
        let member = |key: u64| self.locals.contains_key(&key) || self.file_ends.seen(key);
        for key in crate::replica::disk::keys_in(&dir, lost.0) {
            if !member(key) {
                continue;
            }
            self.store.do_send(crate::replica::AdoptDiskCopy {
                key,
                owner: lost.0,
                dir: dir.clone(),
                not_before: self.file_ends.not_before(key, lost.0),
                died,
            });
        }
    }

    /// A report awaited something that just ended here: it may go now.
    pub(super) fn rejoin_may_go(&self) {
        if let (Some(_), Some(me)) = (&self.rejoining, &self.me) {
            me.do_send(SendRejoin);
        }
    }

    /// Sends the report to the new master once every task of the dead one
    /// ended here, and every result of those reductions this rank made
    /// whole as their root is kept at its buddy.
    ///
    /// Why the copies: a report of a whole value lets the new master
    /// complete the reduction at once, and every member releases its
    /// original; should this rank die before its copy is made, its
    /// replacement would find the reduction complete and its result
    /// lost. Reported after the copy, the reduction ended here (its
    /// result kept), or is still live without it, so that this rank's
    /// death has it redone.
    fn rejoin_if_settled(&mut self, ctx: &mut Context<Self>) {
        let ready = self
            .rejoining
            .as_ref()
            .is_some_and(|r| r.tasks.is_empty() && !self.keeping_any(&r.joined));
        if !ready {
            return;
        }
        let Some(Rejoining { lost, joined, .. }) = self.rejoining.take() else {
            return;
        };
        let mut msg = self.rejoin(lost, &joined);
        let copies = self.store.send(ListCopies);
        ctx.spawn(
            actix::fut::wrap_future(copies).map(move |held, act: &mut Worker, _| {
                let listed = held.unwrap_or_default();
                (msg.copies, msg.results, msg.relayed) =
                    (listed.copies, listed.results, listed.relayed);
                act.to_master(&Msg::Rejoin(msg));
            }),
        );
    }

    /// This rank's report of the reductions it `joined` under the dead
    /// master, without the copies its store keeps.
    fn rejoin(&mut self, lost: Rank, joined: &HashSet<u64>) -> Rejoin {
        let holding = self
            .locals
            .iter()
            .filter(|(k, l)| joined.contains(k) && l.state.joined())
            .map(|(&key, l)| Held {
                joining: Joining {
                    key,
                    rank: self.rank.0,
                    join: l.join.clone(),
                    replica: l.announced.replica,
                    standing: l.announced.standing.clone(),
                    direct: None,
                },
                path: l.state.path().clone(),
                has_value: l.value.is_some(),
            })
            .collect();
        // The new master knows them from this report: should it die too,
        // they are reported to the next.
        let to = self.out.master();
        for key in joined {
            if let Some(l) = self.locals.get_mut(key) {
                l.announced.to = Some(to);
            }
        }
        // A barrier whose release is on the dead master's board was passed.
        let mut passed = self.barrier_passed;
        self.barriers.retain(|&seq, reply| {
            let released = reply.board().is_some_and(|b| b.barrier_released(seq));
            if released {
                passed = passed.max(seq);
            }
            !released
        });
        Rejoin {
            rank: self.rank.0,
            lost: lost.0,
            holding,
            copies: Vec::new(),
            ended: self.ended.0.iter().cloned().collect(),
            barriers: self.barriers.keys().copied().collect(),
            passed,
            finalized: self.finalizing == super::end::Finalize::Sent,
            left: self.left_reinit,
            epoch: self.epoch,
            results: Vec::new(),
            relayed: Vec::new(),
            incarnations: self.out.view().read().incarnations(),
        }
    }
}
