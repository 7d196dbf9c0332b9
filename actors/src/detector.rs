//! The failure detector (beside the master): pings every rank each
//! [`crate::Config::ping_period`] and declares failed a rank silent for
//! [`crate::Config::failure_timeout`] (see the book's Architecture chapter,
//! Failures during a reduction). Faster signals — a broken link, the launcher's
//! report of an exited process — reach the master directly and declare a
//! failure sooner.
//!
//! A declared-failed rank is fenced by the master (its messages are ignored
//! and it is told so); the detector stops watching it. The other way round,
//! every other rank watches the master by these pings and its link to it
//! ([`taskfold_core::watch`], fed by the router): a master that dies or
//! falls silent is declared lost there, and everything that waits for it
//! ends with [`taskfold_core::ReduceError::MasterLost`].

use crate::outbox::Outbox;
use actix::prelude::*;
use std::time::{Duration, Instant};
use taskfold_core::watch::{Lost, MasterWatch, Timing};
use taskfold_core::wire::Msg;
use taskfold_core::Rank;

/// A rank was found dead: the detector's verdict on a silent rank, or a
/// broken link or the launcher's report of an exited process (sent by the
/// router). The master handles it; the detector knows the master only as
/// the recipient of this message.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct RankDown {
    pub(crate) rank: Rank,
    pub(crate) reason: String,
    /// Time since the rank was last heard from, when known.
    pub(crate) latency: Option<std::time::Duration>,
}

/// The failure detector of a job.
pub struct FailureDetector {
    out: Outbox,
    master: Recipient<RankDown>,
    timing: Timing,
    /// Per rank, the incarnation watched and its watch: the one silence
    /// rule of [`taskfold_core::watch`], which a rank also applies to its
    /// master (this detector's own stalls are not the ranks' silence). A
    /// replacement is watched afresh from when it is seen.
    watches: Vec<(u32, MasterWatch)>,
    seq: u64,
}

impl FailureDetector {
    pub(crate) fn new(
        size: u32,
        out: Outbox,
        master: Recipient<RankDown>,
        period: Duration,
        timeout: Duration,
    ) -> Self {
        let now = Instant::now();
        let view = out.view().read();
        let watches = (0..size)
            .map(|r| (view.incarnation(r), MasterWatch::new(now)))
            .collect();
        drop(view);
        FailureDetector {
            out,
            master,
            timing: Timing { period, timeout },
            watches,
            seq: 0,
        }
    }

    /// Every ping period: each live rank silent past the timeout is
    /// declared failed (once per incarnation), the others pinged.
    fn tick(&mut self) {
        let now = Instant::now();
        self.seq += 1;
        let own = self.out.transport().rank().0;
        let view = self.out.view().clone();
        for (r, (watched, watch)) in self.watches.iter_mut().enumerate() {
            let r = r as u32;
            let (dead, incarnation) = {
                let v = view.read();
                (v.is_dead(r), v.incarnation(r))
            };
            if r == own || dead {
                continue;
            }
            if *watched != incarnation {
                (*watched, *watch) = (incarnation, MasterWatch::new(now));
            }
            if watch.is_lost() {
                continue; // declared; the master decides
            }
            if let Some(Lost::Silent(silent)) = watch.check(now, self.timing) {
                self.master.do_send(RankDown {
                    rank: Rank(r),
                    reason: format!("no answer to pings for {} ms", silent.as_millis()),
                    latency: Some(silent),
                });
            } else if self
                .out
                .send(Rank(r), &Msg::Ping { seq: self.seq })
                .is_err()
            {
                // The link is down; the transport reports it to the master.
            }
        }
    }
}

impl Actor for FailureDetector {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(self.timing.period, |act, _| act.tick());
    }
}

/// A rank answered a ping.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct PongIn {
    pub(crate) from: Rank,
}

impl Handler<PongIn> for FailureDetector {
    type Result = ();

    fn handle(&mut self, m: PongIn, _: &mut Context<Self>) {
        if let Some((_, w)) = self.watches.get_mut(m.from.0 as usize) {
            w.heard(Instant::now());
        }
    }
}

/// Watch `rank` afresh: the master lets in again the incarnation whose
/// silence was declared (a replacement whose admission a dead master cut,
/// see the book's Architecture chapter, Membership), or has just let a
/// replacement in (it could answer no ping before).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Rewatch {
    pub(crate) rank: Rank,
}

impl Handler<Rewatch> for FailureDetector {
    type Result = ();

    fn handle(&mut self, m: Rewatch, _: &mut Context<Self>) {
        if let Some((_, w)) = self.watches.get_mut(m.rank.0 as usize) {
            *w = MasterWatch::new(Instant::now());
        }
    }
}
