//! The router's side of a master's death: which rank takes over
//! ([`taskfold_core::membership::Membership::standby`]), turning this rank to it, and,
//! on the standby, starting the new master (see the book's Fault
//! tolerance chapter, A master that dies).

use super::Router;
use crate::master::spawn::{standby_master, Spare};
use crate::worker::{Failover, MasterGone};
use std::collections::HashSet;
use std::time::Instant;
use taskfold_core::membership::Change;
use taskfold_core::watch::{Lost, MasterWatch};
use taskfold_core::wire::Msg;
use taskfold_core::Rank;

/// Most messages for the master a standby keeps before it takes over
/// itself (ranks that saw the master die first report at once).
const EARLY_LIMIT: usize = 65_536;

/// What a rank knows to take over, or turn to whoever does (the dead
/// ranks and the master are in the membership view).
pub(crate) struct Standby {
    spare: Spare,
    /// Messages for the master that came before this standby took over.
    early: Vec<(Rank, Msg, usize)>,
    /// Ranks whose report ([`Msg::Rejoin`]) is among them: they turned
    /// to this rank as their master, and their next messages are kept too.
    turned: HashSet<Rank>,
}

impl Standby {
    pub(crate) fn new(spare: Spare) -> Self {
        Standby {
            spare,
            early: Vec::new(),
            turned: HashSet::new(),
        }
    }
}

impl Router {
    /// The rank that takes over if the current master dies.
    fn next_master(&self) -> Option<Rank> {
        let view = self.out.view();
        let policy = self.standby.spare.config.standby;
        let nodes = view.nodes();
        let standby = view.read().standby(nodes.as_deref(), policy);
        standby.map(Rank)
    }

    /// Keeps a message for the master that came to this rank before it
    /// took over (`None`), if this rank is the one that takes over, or if
    /// its sender turned to this rank already; else hands it back.
    ///
    /// Why the sender's turn counts: after deaths close together, a rank
    /// that saw the master and its standby die first turns to the next
    /// standby and reports there before that standby has heard of either
    /// death (it still names the dead master's standby as the next
    /// master). Dropped, that report is never sent again, and the
    /// takeover waits for it as long as its sender lives. A report is the
    /// first message a rank sends to a new master, so it marks the turn.
    pub(crate) fn keep_for_takeover(&mut self, from: Rank, msg: Msg, wire: usize) -> Option<Msg> {
        if self.master.is_some() {
            return Some(msg);
        }
        let turned = matches!(msg, Msg::Rejoin(_)) || self.standby.turned.contains(&from);
        if !turned && self.next_master() != Some(self.rank) {
            return Some(msg);
        }
        if self.standby.early.len() >= EARLY_LIMIT {
            tracing::error!(%from, "too many messages before the takeover; dropped");
            return None;
        }
        if matches!(msg, Msg::Rejoin(_)) {
            self.standby.turned.insert(from);
        }
        self.standby.early.push((from, msg, wire));
        None
    }

    /// The watch just declared the master lost (`Some`): this rank turns
    /// to the standby, or takes over itself; without a standby the worker
    /// ends everything that waits for the master.
    pub(crate) fn master_lost(&mut self, lost: Option<Lost>) {
        let Some(lost) = lost else {
            return;
        };
        let old = self.out.master();
        let next = self.next_master();
        let view = self.out.view().clone();
        view.failed(old);
        let live = view.read().live().collect();
        self.spread.do_send(crate::spread::SpreadMasterLost {
            reason: lost.to_string(),
            to: next,
            live,
        });
        let Some(next) = next else {
            tracing::error!(rank = %self.rank, reason = %lost, "the master is lost");
            self.worker.do_send(MasterGone {
                reason: lost.to_string(),
            });
            return;
        };
        tracing::warn!(rank = %self.rank, reason = %lost, standby = %next, "the master is lost; turning to the standby");
        let term = view.read().term() + 1;
        view.apply(Change::MasterMoved { to: next.0, term });
        if next == self.rank {
            self.take_over(old);
        } else if let Some((w, _)) = &mut self.watch {
            *w = MasterWatch::new(Instant::now());
        }
        self.worker.do_send(Failover {
            lost: old,
            to: next,
        });
    }

    /// Starts this rank's master, taking over from `lost`, and hands it
    /// what came early.
    fn take_over(&mut self, lost: Rank) {
        let dead = self.out.view().dead();
        let (m, d) = standby_master(&self.standby.spare, &self.out, lost, &dead);
        self.master = Some(m);
        self.detector = Some(d);
        // The master's own rank watches nobody.
        self.watch = None;
        for (from, msg, wire) in std::mem::take(&mut self.standby.early) {
            if let Some(msg) = self.route_to_master(from, msg, wire) {
                tracing::warn!(%from, ?msg, "not a message for the master; dropped");
            }
        }
    }
}
