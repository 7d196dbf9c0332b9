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

use crate::master::{Master, RankDown};
use crate::outbox::Outbox;
use actix::prelude::*;
use std::collections::HashSet;
use std::time::{Duration, Instant};
use taskfold_core::wire::Msg;
use taskfold_core::Rank;

/// The failure detector of a job.
pub struct FailureDetector {
    size: u32,
    out: Outbox,
    master: Addr<Master>,
    period: Duration,
    timeout: Duration,
    last: Vec<Instant>,
    declared: HashSet<u32>,
    seq: u64,
}

impl FailureDetector {
    pub(crate) fn new(
        size: u32,
        out: Outbox,
        master: Addr<Master>,
        period: Duration,
        timeout: Duration,
    ) -> Self {
        FailureDetector {
            size,
            out,
            master,
            period,
            timeout,
            last: vec![Instant::now(); size as usize],
            declared: HashSet::new(),
            seq: 0,
        }
    }

    fn tick(&mut self) {
        let now = Instant::now();
        self.seq += 1;
        let own = self.out.transport().rank().0;
        for r in 0..self.size {
            if r == own || self.declared.contains(&r) {
                continue;
            }
            let silent = now.duration_since(self.last[r as usize]);
            if silent > self.timeout {
                self.declared.insert(r);
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
        ctx.run_interval(self.period, |act, _| act.tick());
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
        if let Some(t) = self.last.get_mut(m.from.0 as usize) {
            *t = Instant::now();
        }
    }
}

/// The master declared a rank failed by other means: stop watching it.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Forget {
    pub(crate) rank: Rank,
}

/// A replacement of `rank` was let in: watch it again, from now.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Watch {
    pub(crate) rank: Rank,
}

impl Handler<Watch> for FailureDetector {
    type Result = ();

    fn handle(&mut self, m: Watch, _: &mut Context<Self>) {
        if let Some(t) = self.last.get_mut(m.rank.0 as usize) {
            *t = Instant::now();
            self.declared.remove(&m.rank.0);
        }
    }
}

impl Handler<Forget> for FailureDetector {
    type Result = ();

    fn handle(&mut self, m: Forget, _: &mut Context<Self>) {
        self.declared.insert(m.rank.0);
    }
}
