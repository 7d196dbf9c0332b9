//! A standby taking over from a dead master: it waits for every live
//! rank's report, then rebuilds every live reduction from them and goes on
//! (see [`taskfold_core::failover`] and the book's Fault tolerance
//! chapter, A master that dies).
//!
//! Until every report is in, the joins, barriers, finalizes and copy
//! notices that come are kept and handed in afterwards, in their order: a
//! reduction is rebuilt from what its members held under the dead master
//! before anything new is counted.

use super::handlers::protocol;
use super::state::Reduction;
use super::{BarrierIn, Master};
use actix::prelude::*;
use std::collections::{HashMap, HashSet};
use taskfold_core::failover::{reconcile, Holding, Takeover};
use taskfold_core::roster::{Announcement, StandingCopy};
use taskfold_core::schedule::Schedule;
use taskfold_core::wire::{Failure, Held, Msg, Rejoin};
use taskfold_core::{Rank, RankSet, ReduceError};

/// A rank's report to this new master (`wire` bytes long).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct RejoinIn {
    pub(crate) from: Rank,
    pub(crate) rejoin: Rejoin,
    pub(crate) wire: usize,
}

/// A message kept while the reports come in: it is sent to the master
/// again, once they are in, by this call.
type Deferred = Box<dyn FnOnce(&Addr<Master>)>;

/// The new master's wait and what it gathered meanwhile.
pub(crate) struct Taking {
    pub(crate) state: Takeover,
    reports: Vec<Rejoin>,
    deferred: Vec<Deferred>,
}

impl Taking {
    /// A master that starts the job: nothing to wait for.
    pub(crate) fn running() -> Self {
        Taking {
            state: Takeover::Running,
            reports: Vec::new(),
            deferred: Vec::new(),
        }
    }
}

/// What the live ranks' reports say, gathered by reduction.
#[derive(Default)]
struct Gathered {
    /// Per reduction, the replica copies: (owner, holder).
    copies: HashMap<u64, Vec<(u32, u32)>>,
    /// Reductions that ended under the dead master, and how.
    ended: HashMap<u64, Option<Failure>>,
    /// Per reduction, what each reporting member holds of it.
    held: HashMap<u64, Vec<Held>>,
    /// The newest barrier some rank passed.
    passed: u64,
    /// The newest global restart's epoch some rank reached.
    epoch: u32,
    /// Some rank reported from an older epoch: it had not heard of the
    /// newest rollback when the master died.
    lagging: bool,
    /// The barriers ranks wait in.
    barriers: Vec<(Rank, u64)>,
    /// The ranks that had finalized.
    finalized: Vec<Rank>,
    /// The ranks whose leave of the re-init entry point the dead master
    /// had taken.
    left: Vec<u32>,
    /// Roots' results kept: (key, root, holder), first copies...
    results: Vec<(u64, u32, u32)>,
    /// ...and the copies a holder relayed for a dead root.
    relayed: Vec<(u64, u32, u32)>,
}

impl Gathered {
    fn from_reports(reports: Vec<Rejoin>) -> Self {
        let mut g = Gathered {
            passed: reports.iter().map(|r| r.passed).max().unwrap_or(0),
            epoch: reports.iter().map(|r| r.epoch).max().unwrap_or(0),
            ..Gathered::default()
        };
        for r in reports {
            if r.finalized {
                g.finalized.push(Rank(r.rank));
            }
            if r.left {
                g.left.push(r.rank);
            }
            if r.epoch < g.epoch {
                // Its reductions, barriers and copies are of a rolled-back
                // epoch, whose keys the newer one numbers afresh: never
                // mixed in. It rolls back with the others (`resume_epoch`).
                g.lagging = true;
                continue;
            }
            for (key, owner) in r.copies {
                g.copies.entry(key).or_default().push((owner, r.rank));
            }
            for &(key, root) in &r.results {
                if !r.relayed.contains(&(key, root)) {
                    g.results.push((key, root, r.rank));
                }
            }
            g.relayed
                .extend(r.relayed.iter().map(|&(key, root)| (key, root, r.rank)));
            for (key, error) in r.ended {
                g.ended.entry(key).or_insert(error);
            }
            for h in r.holding {
                g.held.entry(h.joining.key).or_default().push(h);
            }
            g.barriers
                .extend(r.barriers.iter().map(|&seq| (Rank(r.rank), seq)));
        }
        g
    }
}

impl Master {
    /// This master takes over from `lost`, with `dead` the ranks known
    /// dead before: it waits for every other rank's report.
    pub(crate) fn take_over(&mut self, lost: Rank, dead: &RankSet) {
        let mut all = dead.clone();
        all.insert(lost.0 as usize);
        for r in all.iter() {
            // Marked dead in the view by the router already: a no-op then.
            self.out.view().failed(Rank(r as u32));
            self.dead_at.insert(r as u32, std::time::SystemTime::now());
        }
        self.stats.dead.extend(all.iter().map(|r| r as u32));
        self.taking = Taking {
            state: Takeover::new(self.size, &all),
            reports: Vec::new(),
            deferred: Vec::new(),
        };
        // The dead ranks' replacements are awaited here from now on (once
        // this actor runs: their waits are timers).
        self.respawn.pending = all.iter().map(|r| r as u32).collect();
        self.respawn.unproven = {
            let v = self.out.view().read();
            v.live()
                .map(|r| (r, v.incarnation(r)))
                .filter(|&(_, i)| i > 0)
                .collect()
        };
        self.respawn.unproven_until =
            Some(std::time::Instant::now() + super::respawn::CUT_ADMISSION_GRACE);
        // Replacements, spares and the launcher find this rank now.
        if let Err(e) = self.out.transport().become_master() {
            tracing::error!(error = %e, "cannot tell newcomers where the master is now");
        }
        tracing::warn!(master = %self.out.master(), %lost, "taking over from the dead master");
    }

    /// The dead ranks a standby took over with: each awaits its
    /// replacement here, as under the dead master (while replacements
    /// are left).
    pub(super) fn await_the_dead(&mut self) {
        for rank in std::mem::take(&mut self.respawn.pending) {
            // Every rank heard of these deaths from the dead master.
            if self.respawn_on_death(rank) {
                self.ask_held(rank);
            }
        }
    }

    /// Whether the reports are still coming: a message is then kept
    /// ([`Master::keep`]), to be handed in once they are in.
    pub(super) fn awaiting_reports(&self) -> bool {
        self.taking.state.is_awaiting()
    }

    /// Keeps `m` until the reports are in (any message of the master's:
    /// joins, barriers, finalizes, copy notices).
    pub(super) fn keep<M>(&mut self, m: M)
    where
        M: Message<Result = ()> + Send + 'static,
        Master: Handler<M>,
    {
        self.taking
            .deferred
            .push(Box::new(move |me: &Addr<Master>| me.do_send(m)));
    }

    /// `rank` reported or died: once every live rank did, the reductions
    /// are rebuilt and the kept messages handed in.
    pub(super) fn heard_for_takeover(&mut self, rank: u32) {
        if !self.taking.state.heard(rank) {
            return;
        }
        let reports = std::mem::take(&mut self.taking.reports);
        self.rebuild(reports);
        let Some(me) = self.me.clone() else {
            return;
        };
        for send in std::mem::take(&mut self.taking.deferred) {
            send(&me);
        }
    }

    /// Every reduction, barrier and finalize of the reports, as the dead
    /// master left them.
    fn rebuild(&mut self, reports: Vec<Rejoin>) {
        let mut g = Gathered::from_reports(reports);
        // Before anything decides on a rollback: a rank that left its
        // entry point will not meet the others again.
        self.left.extend(g.left.iter().copied());
        if self.rollback_follows_reports(&g) {
            // Every reduction, barrier and end of this epoch goes with the
            // rollback: none is rebuilt first (a rebuilt reduction could
            // complete on the way, in the epoch the ranks are leaving).
            tracing::warn!("took over: the job rolls back");
            self.resume_epoch(g.epoch, g.lagging);
            self.ask_early();
            return self.check_finalize();
        }
        Self::completed_at_dead_roots(&mut g);
        // A copy of a reduction that is rebuilt live is its live root's
        // result, kept but not yet reported complete: it is recorded when
        // the reduction completes, as the root's own notice would be.
        let live = |key: &u64| g.held.contains_key(key) && !g.ended.contains_key(key);
        for (key, root, holder) in std::mem::take(&mut g.results) {
            match live(&key) {
                true => self.live_result_reported(key, root, holder),
                false => self.result_reported(key, root, holder),
            }
        }
        // Second copies after every first one: each is a spare of its
        // record, or the record if its first copy's holder is gone.
        for (key, root, holder) in std::mem::take(&mut g.relayed) {
            match live(&key) {
                true => self.early_spare(key, root, holder),
                false => self.relayed_reported(key, root, holder),
            }
        }
        self.note_ended(&g.ended, &g.held);
        let rebuilt = g.held.len();
        for (key, members) in std::mem::take(&mut g.held) {
            self.rebuild_held(key, members, &g.ended, &mut g.copies);
        }
        for (key, list) in g.copies {
            // Copies of reductions nobody reported joined: noted as any
            // early copy notice, for when they open.
            for (owner, holder) in list {
                let size = self.size;
                self.reductions.early.note(key, (owner, holder, true), size);
            }
        }
        for (rank, seq) in g.barriers {
            self.rejoin_barrier(rank, seq, g.passed);
        }
        // After the reductions: a finalized rank ends those it did not join.
        for rank in g.finalized {
            if self.finalized.insert(rank.0) {
                self.rank_left(rank);
            }
        }
        tracing::warn!(
            reductions = rebuilt,
            "took over: the live reductions are rebuilt"
        );
        self.resume_epoch(g.epoch, g.lagging);
        // Replacements that asked while the reports were awaited.
        self.ask_early();
        self.check_finalize();
    }

    /// Reductions the members hold live whose dead root's result has a
    /// copy: the root made it whole (it keeps a copy only then) and its
    /// report died with the master. They completed: the members are told
    /// so, and the copy is the record a replacement root gets the result
    /// from. Waiting for the root instead would wait for a replacement
    /// that resumes past the reduction (its application had the result,
    /// and may have checkpointed past it), and end it in an error.
    fn completed_at_dead_roots(g: &mut Gathered) {
        let whole: Vec<u64> = g
            .results
            .iter()
            .chain(&g.relayed)
            .filter(|(key, root, _)| {
                // A live root reports the reduction: held, or ended.
                let held = g.held.get(key);
                let root_holds = held.is_some_and(|m| m.iter().any(|h| h.joining.rank == *root));
                held.is_some() && !g.ended.contains_key(key) && !root_holds
            })
            .map(|&(key, _, _)| key)
            .collect();
        for key in whole {
            g.ended.insert(key, None);
        }
    }

    /// Whether the takeover `g` reports ends in a rollback. The ranks
    /// that finalized count first: from the first finalize, nothing
    /// rolls back.
    fn rollback_follows_reports(&self, g: &Gathered) -> bool {
        let finalized = !g.finalized.is_empty() || !self.finalized.is_empty();
        !finalized && self.rollback_follows(g.lagging)
    }

    /// Reductions that ended under the dead master: a replacement that
    /// joins one again that completed is told so; a member yet to join
    /// one that failed (no report holds it) is told then.
    fn note_ended(
        &mut self,
        ended: &HashMap<u64, Option<Failure>>,
        held: &HashMap<u64, Vec<Held>>,
    ) {
        for (&key, error) in ended {
            match error {
                None => self.note_completed(key),
                Some(f) => self.note_failed(key, &f.clone().into()),
            }
            if let (Some(f), false) = (error, held.contains_key(&key)) {
                let everyone = (0..self.size).collect();
                self.reductions
                    .ended
                    .remember(key, f.clone().into(), everyone);
            }
        }
    }

    /// Reduction `key` as its reporting `members` hold it: rebuilt, or, if
    /// it ended under the dead master, the notice they missed.
    fn rebuild_held(
        &mut self,
        key: u64,
        members: Vec<Held>,
        ended: &HashMap<u64, Option<Failure>>,
        copies: &mut HashMap<u64, Vec<(u32, u32)>>,
    ) {
        // A replacement root that joined a reduction again which had
        // completed under its dead process gets its kept result (or
        // `ResultLost`), never a rebuilt reduction or a completion that
        // would hand it its own original as the result. Unless the
        // reduction is live: it did not complete under the dead master,
        // and other members hold it. Its dead root may have made it whole
        // and kept the result before dying, unreported; the dead master
        // then took the replacement's join into the live reduction, and so
        // does this one (answered with that result, the replacement would
        // leave the rebuilt reduction without a root).
        let completed = matches!(ended.get(&key), Some(None));
        let live = !completed
            && members
                .iter()
                .any(|h| h.joining.rank != h.joining.join.root);
        let members: Vec<Held> = members
            .into_iter()
            .filter(|h| {
                live || !self.answer_replayed_root(key, Rank(h.joining.rank), &h.joining.join)
            })
            .collect();
        if members.is_empty() {
            return;
        }
        match ended.get(&key) {
            // It ended under the dead master; these members missed the
            // notice.
            Some(error) => {
                let msg = Msg::Complete {
                    key,
                    error: error.clone(),
                    number: None,
                };
                for h in &members {
                    self.send(Rank(h.joining.rank), &msg);
                }
            }
            None => self.rebuild_one(key, members, copies.remove(&key).unwrap_or_default()),
        }
    }

    /// A barrier `rank` waits in: released if some rank passed it under the
    /// dead master, else counted as if it came now.
    fn rejoin_barrier(&mut self, rank: Rank, seq: u64, passed: u64) {
        if seq <= passed {
            self.send(rank, &Msg::BarrierDone { seq, error: None });
            return;
        }
        let m = BarrierIn {
            from: rank,
            seq,
            board: false,
            wire: 0,
        };
        if let Some(me) = &self.me {
            me.do_send(m);
        }
    }

    /// Rebuilds reduction `key` from its members' reports and the copies
    /// kept of its originals (`(owner, holder)`), and goes on with it.
    fn rebuild_one(&mut self, key: u64, members: Vec<Held>, copies: Vec<(u32, u32)>) {
        let first = &members[0].joining;
        let mut r = match Reduction::new(&first.join, self.size) {
            Ok(r) => r,
            Err(detail) => {
                let error = ReduceError::InvalidOptions(detail);
                let msg = super::failed_msg(key, &error);
                for h in &members {
                    self.send(Rank(h.joining.rank), &msg);
                }
                return;
            }
        };
        let outcome = admit_reports(&mut r, &members).and_then(|holdings| {
            let rebuilt = reconcile(r.group.len(), &holdings)
                .map_err(|e| protocol(&r.id, Rank(first.rank), e))?;
            let root = r.group.index_of(r.root).expect("checked by Reduction::new");
            r.schedule = Schedule::resume(r.group.len(), root, rebuilt.joined, rebuilt.entries);
            // A live rank whose original is in but that did not report it:
            // a replacement, whose dead process's original was folded in.
            for i in rebuilt.unreported.iter() {
                if !self.out.view().is_dead(r.group.rank_at(i).0) {
                    r.schedule.stand_in(i);
                }
            }
            Ok(rebuilt.stale)
        });
        for (owner, holder) in copies {
            if let Some(i) = r.group.index_of(Rank(owner)) {
                r.roster.replicated(i, holder, true);
            }
        }
        let joined: Vec<Rank> = members.iter().map(|h| Rank(h.joining.rank)).collect();
        let outcome = outcome.and_then(|stale| {
            self.admit_the_dead(key, &mut r)?;
            Ok(stale)
        });
        let stale: Vec<Rank> = match &outcome {
            Ok(stale) => stale.iter().map(|&i| r.group.rank_at(i)).collect(),
            Err(_) => Vec::new(),
        };
        self.reductions.live.insert(key, r);
        match outcome {
            Ok(_) => {
                for provider in stale {
                    self.send(provider, &Msg::Release { key });
                }
                self.drive(key);
            }
            Err(error) => {
                let msg = super::failed_msg(key, &error);
                self.fail(key, error);
                for rank in joined {
                    self.send(rank, &msg);
                }
            }
        }
    }
}

/// Records each report's join in `r`'s roster; the holdings to rebuild
/// its queue from.
fn admit_reports(r: &mut Reduction, members: &[Held]) -> Result<Vec<Holding>, ReduceError> {
    let mut holdings = Vec::with_capacity(members.len());
    let mut seen = HashSet::new();
    for h in members {
        let from = Rank(h.joining.rank);
        let Some(index) = r.group.index_of(from) else {
            return Err(protocol(&r.id, from, "not a member of the group"));
        };
        if let Some(detail) = r.mismatch(&h.joining.join, from) {
            return Err(ReduceError::Mismatched {
                id: r.id.clone(),
                detail,
            });
        }
        if !seen.insert(index) {
            continue; // `reconcile` refuses it
        }
        let standing = h.joining.standing.clone().and_then(|copy| {
            let buddy = r.group.index_of(Rank(copy.buddy))?;
            Some(StandingCopy { buddy, copy })
        });
        let announcement = Announcement {
            early: h.joining.join.early,
            direct: None,
            replica: h.joining.replica,
            disk: h.joining.join.disk.clone(),
            standing,
        };
        r.roster
            .join(index, announcement)
            .map_err(|e| protocol(&r.id, from, e))?;
        holdings.push(Holding {
            index,
            path: h.path.clone(),
            has_value: h.has_value,
        });
    }
    Ok(holdings)
}

impl Handler<RejoinIn> for Master {
    type Result = ();

    fn handle(&mut self, m: RejoinIn, _: &mut Context<Self>) {
        self.count_in(m.wire);
        let from = m.from;
        if self.out.view().is_dead(from.0) || m.rejoin.rank != from.0 {
            tracing::warn!(%from, "a report from a fenced rank, or in another's name; dropped");
            return;
        }
        if !self.taking.state.is_awaiting() {
            tracing::warn!(%from, "a report after the takeover; dropped");
            return;
        }
        self.respawn.unproven.remove(&from.0);
        self.tell_missed(from, &m.rejoin.incarnations);
        let mut rejoin = m.rejoin;
        if let Some(i) = self.taking.reports.iter().position(|r| r.rank == from.0) {
            carry_over(self.taking.reports.swap_remove(i), &mut rejoin);
        }
        self.taking.reports.push(rejoin);
        self.heard_for_takeover(from.0);
    }
}

/// A rank whose masters died close together may report to this one
/// once for each (it turned twice before it sent the first): its later
/// report lists again what it keeps and what ended, and `old`'s
/// reductions it does not hold again are carried over into it. Counted
/// twice, each copy of a root's result it keeps would read as two
/// results with one id, and both be dropped.
fn carry_over(old: Rejoin, new: &mut Rejoin) {
    let again: HashSet<u64> = new.holding.iter().map(|h| h.joining.key).collect();
    let kept = old
        .holding
        .into_iter()
        .filter(|h| !again.contains(&h.joining.key));
    new.holding.extend(kept);
    for seq in old.barriers {
        if !new.barriers.contains(&seq) {
            new.barriers.push(seq);
        }
    }
    new.passed = new.passed.max(old.passed);
    new.epoch = new.epoch.max(old.epoch);
    new.finalized |= old.finalized;
    new.left |= old.left;
}

impl Master {
    /// Tells `to` of every replacement its report shows it missed (it
    /// knows an older incarnation than this master's view): the notice
    /// that would have let it in died with the master that sent it, and
    /// without it `to` would take the replacement's connections for a
    /// stranger's and look for its data at the dead process's address.
    fn tell_missed(&mut self, to: Rank, known: &[u32]) {
        let missed: Vec<(u32, Msg)> = {
            let v = self.out.view().read();
            (0..self.size)
                .filter(|&r| r != to.0 && !v.is_dead(r))
                .filter(|&r| known.get(r as usize).is_some_and(|&k| k < v.incarnation(r)))
                .filter_map(|r| {
                    let addr = self.out.transport().address_of(Rank(r))?;
                    let incarnation = v.incarnation(r);
                    let node = v.node(r);
                    Some((
                        r,
                        Msg::Respawned {
                            rank: r,
                            incarnation,
                            addr,
                            node,
                        },
                    ))
                })
                .collect()
        };
        for (replaced, msg) in missed {
            tracing::warn!(rank = %to, replaced, "a rank missed a replacement: told now");
            self.send(to, &msg);
        }
    }
}
