//! The router: decodes frames from the transport and hands each message to
//! the actor that owns it; forwards application commands.
//!
//! Every frame is untrusted: it is validated by [`taskfold_core::wire::decode`]
//! and checked against who may send it (tasks and completions only from the
//! master, launcher reports only from the launcher). A bad frame is logged
//! and dropped; the runtime keeps serving everyone else.

use crate::detector::{FailureDetector, PongIn, RankDown};
use crate::master::{
    BarrierIn, ExitReport, FinalizeIn, GetStats, JoinIn, LeaveReinitIn, Master, ReadmittedIn,
    ReinitReadyIn, RejoinIn, ReplacementIn, ReplicatedIn, TaskDoneIn, TaskFailedIn,
};
mod results;
pub(crate) mod standby;

use crate::commands::Command;
use crate::perf::{GetLocalStats, PerformanceCounter};
use crate::replica::{OfferIn, PeerGone, ReplicaStore};
use crate::worker::{
    BarrierDoneIn, CompleteIn, FinalizeAckIn, RankFailedIn, ReleaseIn, ReplicaAckIn, TaskIn, Worker,
};
use actix::prelude::*;
use std::time::Instant;
use taskfold_core::membership::Change;
use taskfold_core::watch::{MasterWatch, Timing};
use taskfold_core::wire::{self, Msg};
use taskfold_core::Rank;
use taskfold_transports::{Event, LAUNCHER};

/// Routes transport events and commands to the actors.
pub(crate) struct Router {
    pub(crate) rank: Rank,
    pub(crate) worker: Addr<Worker>,
    pub(crate) master: Option<Addr<Master>>,
    pub(crate) perf: Addr<PerformanceCounter>,
    pub(crate) store: Addr<ReplicaStore>,
    pub(crate) detector: Option<Addr<FailureDetector>>,
    pub(crate) out: crate::outbox::Outbox,
    /// The master's notice board, mapped when it says where it lies.
    pub(crate) notices: crate::notices::Notices,
    /// This rank's watch over the master (`None` on the master's rank):
    /// its pings and its link feed it, a timer checks it every ping period.
    pub(crate) watch: Option<(MasterWatch, Timing)>,
    /// Who takes over if the master dies (see `crate::standby`).
    pub(crate) standby: standby::Standby,
    /// This process's lifecycle and the application's failure events.
    pub(crate) recovery: crate::lifecycle::Recovery,
    /// The global restart's state, shared with the runtime.
    pub(crate) rollbacks: crate::reinit::Rollbacks,
    /// The rank's checkpoint engine.
    pub(crate) checkpoints: crate::checkpoint::Inbox,
    /// Allreduce results and broadcast values going to every member.
    pub(crate) spread: Addr<crate::spread::Spreader>,
}

impl Actor for Router {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if let Some((_, timing)) = &self.watch {
            ctx.run_interval(timing.period, |act, _| act.check_master());
        }
    }
}

impl StreamHandler<Event> for Router {
    fn handle(&mut self, ev: Event, _: &mut Context<Self>) {
        match ev {
            Event::Message { from, frame } => match wire::decode(&frame) {
                Ok(msg) => self.route(from, msg, frame.len()),
                Err(e) => {
                    metrics::counter!(crate::metrics::BAD_FRAMES).increment(1);
                    tracing::error!(%from, error = %e, "dropping an invalid control frame");
                }
            },
            Event::LinkDown { peer, reason } => {
                tracing::warn!(rank = %self.rank, %peer, %reason, "link down");
                let view = self.out.view();
                let incarnation = view.read().incarnation(peer.0);
                view.apply(Change::Unreachable {
                    rank: peer.0,
                    incarnation,
                });
                if let Some(m) = &self.master {
                    m.do_send(RankDown {
                        rank: peer,
                        reason: reason.clone(),
                        latency: None,
                    });
                    // The spreads' coordinator counts the rank gone even
                    // if the master does not declare it failed (it had
                    // finalized: its process may end, its values with it).
                    self.spread
                        .do_send(crate::spread::SpreadDead { rank: peer });
                }
                if peer == self.out.master() && self.master.is_none() {
                    let lost = self.watch.as_mut().and_then(|(w, _)| w.link_down(&reason));
                    self.master_lost(lost);
                }
                // After every offer `peer` sent, which this router handed to
                // the store before this event.
                self.store.do_send(PeerGone { peer });
                self.checkpoints.dead(peer);
            }
            Event::Replacement {
                peer,
                incarnation,
                node,
                addr,
            } => match &self.master {
                Some(m) => m.do_send(ReplacementIn {
                    peer,
                    incarnation,
                    node,
                    addr,
                }),
                None => {
                    let why = "this rank is not the master";
                    self.out
                        .transport()
                        .refuse_replacement(peer, incarnation, why);
                }
            },
        }
    }

    fn finished(&mut self, _: &mut Context<Self>) {
        // The transport closed its event stream (shutdown): nothing to do.
    }
}

impl Router {
    /// Whether `msg` says this very process is out of the job. Taken from
    /// whichever rank of the job sends it, not only from the master this
    /// rank follows: a rank that turned to another master than the job's
    /// (it had not heard of a death when the master died) would otherwise
    /// never hear it was fenced, and would live on as a process its
    /// launcher never replaces, cycling through masters that are not.
    fn fences_me(&self, msg: &Msg) -> bool {
        matches!(
            msg,
            Msg::RankFailed { rank, incarnation }
                if *rank == self.rank.0 && *incarnation == self.out.transport().incarnation()
        )
    }

    /// Hands `msg` from `from` (`wire` bytes long) to the actor that owns
    /// it, if `from` may send it.
    fn route(&mut self, from: Rank, msg: Msg, wire: usize) {
        let Some(msg) = self.route_to_master(from, msg, wire) else {
            return;
        };
        let msg = match from == self.out.master() || self.fences_me(&msg) {
            true => match self.route_from_master(msg) {
                Some(msg) => msg,
                None => return,
            },
            false => msg,
        };
        match msg {
            Msg::Pong { .. } => {
                if let Some(d) = &self.detector {
                    d.do_send(PongIn { from });
                }
            }
            Msg::ReplicaOffer {
                key,
                owner,
                len,
                crc,
                node,
                file,
                heap,
                warm,
                wants_ack,
                data,
                after,
            } if owner == from.0 || from == self.out.master() => self.store.do_send(OfferIn {
                // From the master: on behalf of an owner that died with a
                // standing copy here (`Joining::standing`).
                key,
                owner: Rank(owner),
                len,
                crc,
                node,
                file,
                heap,
                warm,
                wants_ack,
                data,
                after,
            }),
            Msg::ReplicaAck {
                key,
                owner,
                ok,
                same_node,
            } if owner == self.rank.0 => self.worker.do_send(ReplicaAckIn {
                from,
                key,
                ok,
                same_node,
            }),
            Msg::Checkpoint(m) if from != LAUNCHER => self.checkpoints.deliver(from, m),
            Msg::Results(m) if from != LAUNCHER => self.route_results(from, m),
            Msg::Spread(msg) if from != LAUNCHER => {
                self.spread.do_send(crate::spread::SpreadIn { from, msg })
            }
            other => {
                metrics::counter!(crate::metrics::BAD_FRAMES).increment(1);
                tracing::error!(%from, msg = ?other, "message not accepted from this sender; dropped");
            }
        }
    }

    /// The messages for the master, from any rank (launcher reports only
    /// from the launcher); any other message is handed back. On the
    /// standby, those that come before it took over are kept for then.
    pub(crate) fn route_to_master(&mut self, from: Rank, msg: Msg, wire: usize) -> Option<Msg> {
        let msg = match for_master(&msg) {
            true => self.keep_for_takeover(from, msg, wire)?,
            false => msg,
        };
        match msg {
            Msg::Rejoin(rejoin) => {
                self.master_or_drop(from, |m| m.do_send(RejoinIn { from, rejoin, wire }))
            }
            Msg::Join(joining) => self.master_or_drop(from, |m| {
                m.do_send(JoinIn {
                    from,
                    joining,
                    wire,
                })
            }),
            Msg::TaskDone(done) => {
                self.master_or_drop(from, |m| m.do_send(TaskDoneIn { from, done, wire }))
            }
            Msg::TaskFailed(failed) => {
                self.master_or_drop(from, |m| m.do_send(TaskFailedIn { from, failed, wire }))
            }
            Msg::Finalize => self.master_or_drop(from, |m| m.do_send(FinalizeIn { from })),
            Msg::Barrier { seq, board } => self.master_or_drop(from, |m| {
                m.do_send(BarrierIn {
                    from,
                    seq,
                    board,
                    wire,
                })
            }),
            Msg::ReinitReady { epoch, held } => {
                self.master_or_drop(from, |m| m.do_send(ReinitReadyIn { from, epoch, held }))
            }
            Msg::LeaveReinit { epoch } => {
                self.master_or_drop(from, |m| m.do_send(LeaveReinitIn { from, epoch }))
            }
            Msg::Readmitted { rank, incarnation } => self.master_or_drop(from, |m| {
                m.do_send(ReadmittedIn {
                    from,
                    rank,
                    incarnation,
                })
            }),
            Msg::RankExited {
                rank,
                code,
                signal,
                incarnation,
            } if from == LAUNCHER => self.master_or_drop(from, |m| {
                m.do_send(ExitReport {
                    rank,
                    code,
                    signal,
                    incarnation,
                })
            }),
            Msg::Replicated { key, owner, ok } => self.master_or_drop(from, |m| {
                m.do_send(ReplicatedIn {
                    holder: from,
                    key,
                    owner,
                    ok,
                    wire,
                })
            }),
            other => return Some(other),
        }
        None
    }

    /// The messages only the master sends, to this rank's worker (or, for
    /// its pings and its board, to this router); any other message is
    /// handed back.
    fn route_from_master(&mut self, msg: Msg) -> Option<Msg> {
        match msg {
            Msg::Task(t) => self.worker.do_send(TaskIn(t)),
            Msg::Release { key } => self.worker.do_send(ReleaseIn { key }),
            Msg::Complete { key, error, number } => self.worker.do_send(CompleteIn {
                key,
                error: error.map(Into::into),
                number,
            }),
            Msg::Board { at } => self.map_board(&at),
            Msg::FinalizeAck => self.worker.do_send(FinalizeAckIn),
            Msg::BarrierDone { seq, error } => self.worker.do_send(BarrierDoneIn {
                seq,
                error: error.map(Into::into),
            }),
            Msg::RankFailed { rank, incarnation } => {
                if incarnation < self.out.view().read().incarnation(rank) {
                    // About a process replaced since, whose death this
                    // rank took in when it heard of its replacement.
                    return None;
                }
                self.rank_failed(rank, incarnation);
            }
            Msg::Respawned {
                rank,
                incarnation,
                addr,
                node,
            } => self.respawned(Rank(rank), incarnation, &addr, node),
            Msg::Reinit { epoch } => {
                tracing::warn!(rank = %self.rank, epoch, "the job rolls back to its re-init entry point");
                self.rollbacks.unwind(epoch);
                self.worker.do_send(crate::worker::ReinitIn { epoch });
                self.store.do_send(crate::replica::RolledBack);
            }
            Msg::ReinitGo { epoch, version } => self.rollbacks.go(epoch, version),
            Msg::ReinitLeft { epoch } => {
                // The worker first: a standby it reports to must know.
                self.worker.do_send(crate::worker::ReinitLeftIn);
                self.rollbacks.left(epoch);
            }
            Msg::Ping { seq } => {
                if let Some((w, _)) = &mut self.watch {
                    w.heard(Instant::now());
                }
                let _ = self.out.to_master(&Msg::Pong { seq });
                // The master's ping is this rank's clock for slow gauges.
                crate::metrics::record_buffer_pool();
            }
            other => return Some(other),
        }
        None
    }

    /// The master lets a replacement of `rank` in: this rank's transport
    /// serves it from now on (and fences the dead process), its worker
    /// counts it alive again, and the master hears it is let in here.
    fn respawned(&mut self, rank: Rank, incarnation: u32, addr: &[u8], node: u64) {
        if rank == self.rank {
            return;
        }
        let (dead, old) = {
            let v = self.out.view().read();
            (v.is_dead(rank.0), v.incarnation(rank.0))
        };
        if !dead && old < incarnation {
            // The process it replaces died without this rank hearing of
            // it (a master that declared it died before telling every
            // rank): its death is taken in first, as a notice of it would
            // have been, so that nothing here waits on the dead process.
            self.rank_failed(rank.0, old);
        }
        if let Err(e) = self.out.transport().readmit(rank, incarnation, addr) {
            // Unanswered: the master waits for this rank in vain, and the
            // replacement is refused when its registration times out.
            tracing::error!(rank = %self.rank, replaced = %rank, error = %e, "cannot let a replacement in");
            return;
        }
        // On the master's rank the master writes the view when the
        // replacement is in (every live rank let it in).
        if self.master.is_none() {
            self.out.view().apply(Change::Replaced {
                rank: rank.0,
                incarnation,
                node,
            });
        }
        let _ = self.out.to_master(&Msg::Readmitted {
            rank: rank.0,
            incarnation,
        });
        self.recovery
            .heard(crate::lifecycle::RecoveryEvent::Respawned {
                rank: rank.0,
                incarnation,
            });
    }

    /// Process `incarnation` of `rank` was declared failed: the view, the
    /// worker, the checkpoint engine, the spreads and the application hear
    /// it (on the master's rank the master applied it to the view).
    fn rank_failed(&mut self, rank: u32, incarnation: u32) {
        self.out.view().apply(Change::Failed { rank, incarnation });
        tracing::warn!(rank = %self.rank, failed = rank, incarnation, "the master declared a rank failed");
        self.checkpoints.dead(Rank(rank));
        self.worker.do_send(RankFailedIn { rank: Rank(rank) });
        self.spread
            .do_send(crate::spread::SpreadDead { rank: Rank(rank) });
        self.recovery
            .heard(crate::lifecycle::RecoveryEvent::RankFailed { rank });
    }

    /// Maps the master's notice board, once, if it lies on this node.
    fn map_board(&mut self, at: &taskfold_core::wire::Locator) {
        if self.notices.get().is_some() {
            return;
        }
        let r = taskfold_transports::board::BoardRef::decode(at);
        match taskfold_transports::board::Board::open(&r) {
            Ok(b) => self.notices.set(std::sync::Arc::new(b)),
            // Another node, or a kernel that refuses: released barriers
            // and completions come by message alone, as without a board.
            Err(e) => {
                tracing::debug!(rank = %self.rank, error = %e, "the master's notice board is not mapped here")
            }
        }
    }

    /// The periodic check of the master's silence.
    fn check_master(&mut self) {
        let lost = self
            .watch
            .as_mut()
            .and_then(|(w, t)| w.check(Instant::now(), *t));
        self.master_lost(lost);
    }

    fn master_or_drop(&self, from: Rank, f: impl FnOnce(&Addr<Master>)) {
        match &self.master {
            Some(m) => f(m),
            None => {
                metrics::counter!(crate::metrics::BAD_FRAMES).increment(1);
                tracing::error!(%from, "master message sent to a rank that is not the master; dropped");
            }
        }
    }
}

impl StreamHandler<Command> for Router {
    fn handle(&mut self, cmd: Command, ctx: &mut Context<Self>) {
        match cmd {
            Command::Start(s) => self.worker.do_send(s),
            Command::Finalize(f) => self.worker.do_send(f),
            Command::ReinitReady { epoch, held } => {
                let _ = self.out.to_master(&Msg::ReinitReady { epoch, held });
            }
            Command::LeaveReinit(epoch) => {
                let _ = self.out.to_master(&Msg::LeaveReinit { epoch });
            }
            Command::Barrier(b) => self.worker.do_send(b),
            Command::Share(m) => self.spread.do_send(m),
            Command::Ask(m) => self.spread.do_send(m),
            Command::Gone(m) => self.spread.do_send(m),
            Command::ReleaseResults(seqs) => {
                self.worker.do_send(crate::worker::ReleaseResults { seqs })
            }
            Command::MasterStats(reply) => match &self.master {
                Some(m) => {
                    let req = m.send(GetStats);
                    ctx.spawn(actix::fut::wrap_future(async move {
                        if let Ok(s) = req.await {
                            let _ = reply.send(s);
                        }
                    }));
                }
                None => drop(reply),
            },
            Command::LocalStats(reply) => {
                let req = self.perf.send(GetLocalStats);
                ctx.spawn(actix::fut::wrap_future(async move {
                    if let Ok(s) = req.await {
                        let _ = reply.send(s);
                    }
                }));
            }
            Command::Stop => match self.out.transport().driven().map(|d| d.close_on_driver()) {
                // The transport runs on this thread: it says goodbye to its
                // peers here, before the thread stops.
                Some(close) => {
                    ctx.spawn(actix::fut::wrap_future(async move {
                        close.await;
                        System::current().stop();
                    }));
                }
                None => System::current().stop(),
            },
        }
    }

    fn finished(&mut self, _: &mut Context<Self>) {
        // Every runtime handle is gone: stop the actor system.
        System::current().stop();
    }
}

/// Whether `msg` is one only the master reads.
fn for_master(msg: &Msg) -> bool {
    matches!(
        msg,
        Msg::Join(_)
            | Msg::TaskDone(_)
            | Msg::TaskFailed(_)
            | Msg::Finalize
            | Msg::Barrier { .. }
            | Msg::Replicated { .. }
            | Msg::Rejoin(_)
            | Msg::Readmitted { .. }
            | Msg::ReinitReady { .. }
    )
}

#[cfg(test)]
mod tests;
