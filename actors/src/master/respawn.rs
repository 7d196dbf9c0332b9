//! Replaced ranks at the master (see the book's chapter Surviving
//! failures of the application): a dead rank awaited while replacements
//! are left ([`taskfold_core::respawn::Respawns`]); its replacement let in
//! once every live rank let it in on its own transport; the reductions
//! that wait for its original completed by the replacement's join.
//!
//! What a crash of the master loses here: the book of replacements and the
//! keys of the reductions that ended. A standby that takes over expects no replacement (they
//! register with the first master's address).

use super::Master;
use actix::prelude::*;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;
use taskfold_core::respawn::{Death, Respawns, Slot};
use taskfold_core::settings::RespawnConfig;
use taskfold_core::wire::Msg;
use taskfold_core::{Rank, ReduceError};

/// Ended reductions remembered for replacements that join them again.
const ENDED_LIMIT: usize = 65_536;

/// A new process asks to replace dead rank `peer` (the transport's
/// `Event::Replacement`, on the master's rank).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ReplacementIn {
    pub(crate) peer: Rank,
    pub(crate) incarnation: u32,
    pub(crate) node: u64,
    pub(crate) addr: Vec<u8>,
}

/// A replacement that asked: its incarnation, where it listens, its node.
#[derive(Clone, Debug)]
pub(super) struct Asking {
    incarnation: u32,
    addr: Vec<u8>,
    node: u64,
}

impl Asking {
    /// The notice that lets it in at a live rank.
    fn notice(&self, rank: u32) -> Msg {
        Msg::Respawned {
            rank,
            incarnation: self.incarnation,
            addr: self.addr.clone(),
            node: self.node,
        }
    }
}

/// Rank `from` let replacement `incarnation` of `rank` in.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ReadmittedIn {
    pub(crate) from: Rank,
    pub(crate) rank: u32,
    pub(crate) incarnation: u32,
}

/// The wait for `rank`'s replacement, after its death at `died`, is over.
#[derive(Message)]
#[rtype(result = "()")]
struct GiveUp {
    rank: u32,
    died: std::time::Instant,
}

/// What the master knows of replacements.
pub(super) struct Replacements {
    pub(super) book: Respawns,
    /// How long a reduction waits for a replacement.
    wait: Duration,
    /// Reductions that ended lately, oldest first, with their error
    /// (`None`: completed): a replacement that joins one again is told
    /// how it ended, as its dead process was or would have been.
    ended: HashMap<u64, Option<ReduceError>>,
    order: VecDeque<u64>,
    /// Replacements that asked before their rank was declared dead (the
    /// launcher's report of the death is on its way): asked again then.
    early: std::collections::HashMap<u32, Asking>,
    /// Replacements being let in, by rank.
    admitting: std::collections::BTreeMap<u32, Asking>,
    /// When each awaited rank died: its wait runs from then.
    pub(super) died: std::collections::HashMap<u32, std::time::Instant>,
    /// The job has spares (`TASKFOLD_SPARES`): the master calls one for
    /// each awaited rank.
    pub(super) spares: bool,
    /// The job's spares, and how many were called so far.
    pub(super) spares_total: u32,
    pub(super) spares_called: u32,
    /// The launcher may start replacements itself (`TASKFOLD_RESPAWN`).
    pub(super) launcher: bool,
    /// A standby's: the ranks dead when it took over, awaited once it
    /// runs.
    pub(super) pending: Vec<u32>,
    /// A standby's: the replacements its view names that have not
    /// reported to it (rank → incarnation). One whose admission the dead
    /// master cut never ran, and asks this master again.
    pub(super) unproven: std::collections::HashMap<u32, u32>,
    /// Until when an unproven rank's silence is not yet a death.
    pub(super) unproven_until: Option<std::time::Instant>,
}

/// How long a standby gives a replacement whose admission the dead
/// master cut to ask it again: the replacement retries its registration
/// with a backoff of at most half a second, reading the rendezvous the
/// standby rewrote; a few seconds cover a busy machine.
pub(super) const CUT_ADMISSION_GRACE: Duration = Duration::from_secs(5);

impl Replacements {
    /// None expected: a job without respawn, or a standby's master.
    pub(super) fn none(size: u32, master: u32) -> Self {
        Replacements {
            book: Respawns::new(size, 0, master),
            wait: Duration::ZERO,
            ended: HashMap::new(),
            order: VecDeque::new(),
            early: Default::default(),
            admitting: Default::default(),
            died: Default::default(),
            spares: false,
            spares_total: 0,
            spares_called: 0,
            launcher: false,
            pending: Vec::new(),
            unproven: Default::default(),
            unproven_until: None,
        }
    }

    /// Forgets the ended reductions (a rollback numbers them afresh).
    pub(super) fn forget_ended(&mut self) {
        self.ended.clear();
        self.order.clear();
    }

    /// Records that reduction `key` ended (with `error`; `None`:
    /// completed), if replacements may come.
    pub(super) fn ended(&mut self, key: u64, error: Option<ReduceError>, enabled: bool) {
        if !enabled || self.ended.insert(key, error).is_some() {
            return;
        }
        self.order.push_back(key);
        if self.order.len() > ENDED_LIMIT {
            if let Some(old) = self.order.pop_front() {
                self.ended.remove(&old);
            }
        }
    }
}

impl Master {
    /// Expects the replacements `c` allows (the launcher's and the
    /// spares), each waited for at most its wait, and comes back from
    /// them by its restart.
    pub(crate) fn set_respawn(&mut self, c: &RespawnConfig) {
        self.restart = c.restart;
        let own = self.out.transport().rank().0;
        let incarnations = self.out.view().read().incarnations();
        // Spares that took ranks while the job started were called.
        let taken: u32 = match c.budget {
            0 => incarnations.iter().sum(),
            _ => 0,
        };
        self.respawn = Replacements {
            spares_called: taken,
            book: Respawns::joined(&incarnations, c.replacements(), own),
            wait: c.wait,
            spares: c.spares > 0,
            spares_total: c.spares,
            launcher: c.budget > 0,
            ..Replacements::none(self.size, own)
        };
    }

    /// True if replacements may join reductions again: some were allowed.
    fn respawn_enabled(&self) -> bool {
        self.respawn.wait > Duration::ZERO
    }

    /// Notes a completed reduction for replacements that join it again.
    pub(super) fn note_completed(&mut self, key: u64) {
        let on = self.respawn_enabled();
        self.respawn.ended(key, None, on);
    }

    /// Notes a failed reduction for replacements that join it again: a
    /// replacement that replays a step from its checkpoint must hear the
    /// failure the live ranks heard, not open the reduction afresh and
    /// wait for members that went on.
    pub(super) fn note_failed(&mut self, key: u64, error: &ReduceError) {
        let on = self.respawn_enabled();
        self.respawn.ended(key, Some(error.clone()), on);
    }

    /// `rank` was just declared dead: true if its replacement is awaited
    /// (the wait for it is started); admissions it held up are finished.
    /// A replacement that asked before the death was declared is let in
    /// by [`Master::ask_held`], once the ranks were told of the death.
    pub(super) fn respawn_on_death(&mut self, rank: u32) -> bool {
        let (death, done) = self.respawn.book.died(rank);
        for (r, inc) in done {
            self.admitted(r, inc);
        }
        if death == Death::Final {
            self.left_rollback(rank);
            return false;
        }
        tracing::warn!(rank, wait = ?self.respawn.wait, "a replacement of the dead rank is awaited");
        let died = std::time::Instant::now();
        self.respawn.died.insert(rank, died);
        if !self.call_spare(rank, died) {
            // No spare left, and no launcher to start one: final now.
            self.respawn.died.remove(&rank);
            self.respawn.book.give_up(rank);
            self.left_rollback(rank);
            return false;
        }
        if let Some(me) = &self.me {
            let (me, wait) = (me.clone(), self.respawn.wait);
            actix::spawn(async move {
                actix_rt::time::sleep(wait).await;
                me.do_send(GiveUp { rank, died });
            });
        }
        true
    }

    /// True unless `rank`'s process `incarnation` was replaced: a report
    /// of its exit is stale then.
    pub(super) fn serves(&self, rank: u32, incarnation: u32) -> bool {
        use taskfold_core::respawn::Slot as S;
        match self.respawn.book.slot(rank) {
            Some(S::Live(i) | S::Awaited(i) | S::Gone(i)) => *i <= incarnation,
            Some(S::Admitting { .. }) => false,
            None => true,
        }
    }

    /// Whether reduction `key` completed lately (see `Replacements`).
    pub(super) fn completed_lately(&self, key: u64) -> bool {
        matches!(self.respawn.ended.get(&key), Some(None))
    }

    /// A replacement's join of reduction `key`, which ended already: it is
    /// told how (completed: its dead incarnation's original was counted;
    /// failed: as every member was). True if answered.
    pub(super) fn answer_replayed_join(&mut self, key: u64, from: Rank) -> bool {
        let replaced = matches!(
            self.respawn.book.slot(from.0),
            Some(taskfold_core::respawn::Slot::Live(i)) if *i > 0
        );
        let msg = match self.respawn.ended.get(&key) {
            Some(None) if replaced => Msg::Complete {
                key,
                error: None,
                number: None,
            },
            Some(Some(error)) if replaced => super::failed_msg(key, error),
            _ => return false,
        };
        self.send(from, &msg);
        true
    }

    /// Lets replacement `incarnation` of `rank` start: every live rank
    /// lets it in, its transport is answered, and every reduction waiting
    /// for it waits for its join.
    fn admitted(&mut self, rank: u32, incarnation: u32) {
        let asking = self.respawn.admitting.remove(&rank);
        // The deaths go with the admission, not only as the notices sent
        // below: should this master die before those reach the
        // replacement, it still turns to the standby every rank does.
        let dead: Vec<u32> = (self.out.view().dead().iter())
            .map(|r| r as u32)
            .filter(|&r| r != rank)
            .collect();
        if let Err(e) = self.out.transport().admit(Rank(rank), incarnation, &dead) {
            // Its registration is gone: it died while the ranks let it in
            // (a newer replacement may be asking already). As a death of
            // that incarnation: the next is awaited, within the budget.
            tracing::warn!(rank, incarnation, error = %e, "the replacement could not be let in: it is gone");
            if self.respawn_on_death(rank) {
                self.ask_held(rank);
            }
            return;
        }
        let node = asking.map_or(0, |a| a.node);
        self.out
            .view()
            .apply(taskfold_core::membership::Change::Replaced {
                rank,
                incarnation,
                node,
            });
        self.dead_at.remove(&rank);
        // Its silence counts from now: it could answer no ping before.
        if let Some(d) = &self.detector {
            d.do_send(crate::detector::Rewatch { rank: Rank(rank) });
        }
        for r in self.reductions.live.values_mut() {
            r.roster.holder_replaced(rank);
            if let Some(i) = r.group.index_of(Rank(rank)) {
                // Whether the dead original can be had is still asked of
                // its buddy: the position revives once the answer is in
                // (`decide`).
                if !r.roster.awaits(i) {
                    r.schedule.revive(i);
                }
            }
        }
        if let Some(b) = &self.board {
            let msg = Msg::Board {
                at: b.reference().encode(),
            };
            self.send(Rank(rank), &msg);
        }
        // The replacement learns the job's failures as the others did:
        // its buddies, its standby and its checkpoint retrieval know
        // which ranks (and so which nodes) are gone.
        let failed: Vec<Msg> = {
            let v = self.out.view().read();
            v.dead()
                .iter()
                .map(|r| Msg::RankFailed {
                    rank: r as u32,
                    incarnation: v.incarnation(r as u32),
                })
                .collect()
        };
        for msg in failed {
            self.send(Rank(rank), &msg);
        }
        // And the replacements being let in meanwhile, which the live
        // ranks were told of before it was one of them.
        let others: Vec<Msg> = self
            .respawn
            .admitting
            .iter()
            .map(|(&r, a)| a.notice(r))
            .collect();
        for msg in others {
            self.send(Rank(rank), &msg);
        }
        self.stats.respawned.push(rank);
        metrics::counter!(crate::metrics::RESPAWNS).increment(1);
        tracing::warn!(rank, incarnation, "a replacement joined the job");
    }
}

impl Handler<ReplacementIn> for Master {
    type Result = ();

    fn handle(&mut self, m: ReplacementIn, _: &mut Context<Self>) {
        if self.finalized.contains(&m.peer.0) {
            // Its rank finished its work: nothing waits for a replacement.
            let why = taskfold_transports::RANK_FINISHED;
            self.out
                .transport()
                .refuse_replacement(m.peer, m.incarnation, why);
            return;
        }
        let asking = Asking {
            incarnation: m.incarnation,
            addr: m.addr,
            node: m.node,
        };
        if self.reopened(m.peer.0, m.incarnation) {
            self.asked(m.peer, asking);
            return;
        }
        if self.awaiting_reports() {
            // Let in once the reductions are rebuilt (`ask_early`).
            self.respawn.early.insert(m.peer.0, asking);
            return;
        }
        let slot = self.respawn.book.slot(m.peer.0);
        let alive = matches!(slot, Some(Slot::Live(_)));
        // An older replacement being let in died, and this one came before
        // its death was declared (a launcher starts the next at once).
        let superseded = matches!(slot, Some(Slot::Admitting { incarnation, .. }) if *incarnation < m.incarnation);
        let undeclared = (alive && !self.out.view().is_dead(m.peer.0)) || superseded;
        if undeclared && self.respawn.book.left() > 0 {
            // Its death is not declared yet (the launcher's report may come
            // after the replacement's request): asked again when it is, or
            // refused by the transport when its registration times out.
            self.respawn.early.insert(m.peer.0, asking);
            return;
        }
        self.asked(m.peer, asking);
    }
}

impl Master {
    /// Lets in the replacement of `rank`, just declared dead, that asked
    /// before the death was declared (a launcher starts the next process
    /// at once). Only once every rank was sent the notice of the death:
    /// a rank that heard of the replacement first would take that notice
    /// for one about a process replaced since and drop it, and its worker
    /// would never cancel its fetches from the dead process nor copy again
    /// the originals it held (the job then hangs).
    pub(super) fn ask_held(&mut self, rank: u32) {
        // A standby taking over lets replacements in once it rebuilt the
        // reductions (`ask_early`): one let in before would join them
        // twice, in its report and in its deferred join.
        if self.awaiting_reports() {
            return;
        }
        if let Some(a) = self.respawn.early.remove(&rank) {
            self.asked(Rank(rank), a);
        }
    }

    /// Asks again for every replacement kept while a standby awaited the
    /// ranks' reports, whose rank is awaited now.
    pub(super) fn ask_early(&mut self) {
        let ranks: Vec<u32> = self.respawn.early.keys().copied().collect();
        for rank in ranks {
            if matches!(self.respawn.book.slot(rank), Some(Slot::Awaited(_))) {
                if let Some(a) = self.respawn.early.remove(&rank) {
                    self.asked(Rank(rank), a);
                }
            }
        }
    }

    /// True if replacement `incarnation` of `rank` is one whose admission
    /// the dead master cut (this standby's view names it, yet it never
    /// reported): it is awaited again, to be let in as any replacement,
    /// and it has nothing to report to the takeover.
    fn reopened(&mut self, rank: u32, incarnation: u32) -> bool {
        if self.respawn.unproven.get(&rank) != Some(&incarnation) {
            return false;
        }
        let Some(done) = self.respawn.book.reopen(rank, incarnation) else {
            return false;
        };
        self.respawn.unproven.remove(&rank);
        tracing::warn!(
            rank,
            incarnation,
            "a replacement the dead master did not finish letting in asks again"
        );
        // Admissions that waited for it (while it seemed to run) wait no
        // more: it cannot let them in before it is in itself.
        for (r, inc) in done {
            self.admitted(r, inc);
        }
        if let Some(d) = &self.detector {
            d.do_send(crate::detector::Rewatch { rank: Rank(rank) });
        }
        if self.awaiting_reports() {
            self.heard_for_takeover(rank);
        }
        true
    }

    /// How much longer `rank`'s silence waits, if it is a replacement this
    /// standby has not heard from yet (see [`CUT_ADMISSION_GRACE`]).
    pub(super) fn grace_for_unproven(&self, rank: u32) -> Option<Duration> {
        let until = self.respawn.unproven_until?;
        let left = until.checked_duration_since(std::time::Instant::now())?;
        self.still_unproven(rank).then_some(left)
    }

    /// Whether a replacement of `rank` is being let in.
    pub(super) fn admitting(&self, rank: u32) -> bool {
        self.respawn.admitting.contains_key(&rank)
    }

    /// Whether `rank` is a replacement this standby's view names and that
    /// has neither reported to it nor asked it again.
    pub(super) fn still_unproven(&self, rank: u32) -> bool {
        self.respawn.unproven.contains_key(&rank)
    }

    /// Replacement `incarnation` of `peer` asks to join: refused, or every
    /// live rank is told to let it in.
    fn asked(&mut self, peer: Rank, asking: Asking) {
        let (rank, inc) = (peer.0, asking.incarnation);
        let live: Vec<u32> = (0..self.size)
            .filter(|&r| !self.out.view().is_dead(r))
            .collect();
        // A rank that finalized is not waited for (its process may end),
        // but it is told: until the job ends it still serves (copies it
        // holds, a takeover), and would refuse the replacement's
        // connection as a stranger.
        let waited = live.iter().copied().filter(|r| !self.finalized.contains(r));
        match self.respawn.book.asks(rank, inc, waited) {
            Err(refusal) => {
                tracing::warn!(rank, incarnation = inc, %refusal, "a replacement is refused");
                let t = self.out.transport();
                t.refuse_replacement(peer, inc, &refusal.to_string());
            }
            Ok(now) => {
                let notice = asking.notice(rank);
                self.respawn.admitting.insert(rank, asking);
                // The master's own rank too: its router tells its worker
                // and its application (its transport lets the replacement
                // in again when admitting it, which changes nothing).
                for r in live.into_iter().filter(|&r| r != rank) {
                    self.send(Rank(r), &notice);
                }
                if now {
                    self.admitted(rank, inc);
                }
            }
        }
    }
}

impl Handler<ReadmittedIn> for Master {
    type Result = ();

    fn handle(&mut self, m: ReadmittedIn, _: &mut Context<Self>) {
        if self.respawn.book.let_in(m.from.0, m.rank, m.incarnation) {
            self.admitted(m.rank, m.incarnation);
        }
    }
}

impl Handler<GiveUp> for Master {
    type Result = ();

    fn handle(&mut self, m: GiveUp, _: &mut Context<Self>) {
        if self.respawn.died.get(&m.rank) != Some(&m.died) {
            return; // the wait of an earlier death
        }
        self.respawn.died.remove(&m.rank);
        if self.respawn.book.give_up(m.rank) {
            tracing::error!(
                rank = m.rank,
                "no replacement came in time: its originals are lost"
            );
            self.left_rollback(m.rank);
        }
        self.give_up_reductions(m.rank);
    }
}

impl Master {
    /// The wait for `rank`'s replacement is over: the reductions that
    /// waited for its original lose it (a replacement in but not joined
    /// again where its dead process's original was taken out, too).
    pub(super) fn give_up_reductions(&mut self, rank: u32) {
        let keys: Vec<u64> = self.reductions.live.keys().copied().collect();
        for key in keys {
            let Some(r) = self.reductions.live.get_mut(&key) else {
                continue;
            };
            let Some(i) = r.group.index_of(Rank(rank)) else {
                continue;
            };
            let (dead, roster) = (&self.out.view().dead(), &r.roster);
            let outcome = r.schedule.give_up(i, |k| roster.has_copy(k, dead));
            self.settle(key, outcome, false);
        }
        self.check_finalize();
    }
}
