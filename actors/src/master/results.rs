//! Results kept for a replacement root, at the master (see
//! [`taskfold_core::results`] and the book's chapter Surviving failures of
//! the application, A replaced root): where each root's result is kept, so
//! that a replacement root that joins a completed reduction again is sent
//! to the copy (`ResultMsg::At`), or told the result is lost
//! ([`ReduceError::ResultLost`]) — never completed with its own original.
//!
//! A root announces its copy (`ResultMsg::Kept`) just before its last
//! task's report, on the same ordered link: the record is pending until
//! the reduction completes, dropped (and the copy with it) if it fails.
//! Records leave when the root releases them; a holder's death leaves
//! them without a copy (a replay is then an error) until their live root
//! copies them again to another buddy (`Kept` for a completed reduction);
//! a dead root's holder copies each of its results on to a second rank,
//! which says so (`ResultMsg::AlsoKept`): the record takes it as a spare
//! that answers if the holder dies too. The notice names the holder that
//! relayed it: a root dead before its `Kept` left no record, and both
//! copies are then recorded from the notice. A second copy made at once
//! (`Config::second_result_copies`) may come before the record: it waits
//! for the completion that makes it. The book is bounded
//! ([`taskfold_core::results::RESULTS_LIMIT`]).
//!
//! What a crash of the master loses here: the records of copies announced
//! for reductions still live. A standby that takes over learns every
//! stored copy from its holder's report (`Rejoin::results`, the second
//! copies among them in `Rejoin::relayed`, recorded after every first
//! copy); a replaced
//! root whose copy is not among them gets `ResultLost` for a reduction
//! that had completed, never its own original as the result.

use super::Master;
use actix::prelude::*;
use std::collections::HashMap;
use taskfold_core::results::{Book, Drop, Lookup};
use taskfold_core::wire::results::ResultMsg;
use taskfold_core::wire::{Join, Msg};
use taskfold_core::{Rank, ReduceError};

/// The master's records of kept results.
#[derive(Default)]
pub(super) struct Results {
    /// Whether replacement roots are answered from the records (any
    /// master of a job whose roots keep their results).
    on: bool,
    book: Book,
    /// Announced copies of live reductions: key → (root, holder).
    pending: HashMap<u64, (u32, u32)>,
    /// Further copies of live roots' results announced before the record
    /// (`Config::further_result_copies`): key → (root, holders), taken as
    /// spares when the reduction completes.
    early_spares: HashMap<u64, (u32, Vec<u32>)>,
}

/// A root says where its result of `key` is kept.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ResultKeptIn {
    pub(crate) from: Rank,
    pub(crate) key: u64,
    pub(crate) holder: u32,
}

/// `from` keeps a second copy of dead `root`'s result of `key`, relayed
/// by its holder `first`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ResultAlsoKeptIn {
    pub(crate) from: Rank,
    pub(crate) root: u32,
    pub(crate) key: u64,
    pub(crate) first: u32,
}

/// A replacement root's fetch of its kept result of `key` failed: it asks
/// where else the result is kept.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ResultWhereIn {
    pub(crate) from: Rank,
    pub(crate) key: u64,
    pub(crate) id: String,
}

/// A root released results (its application checkpointed past them).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ResultsReleasedIn {
    pub(crate) from: Rank,
    pub(crate) keys: Vec<u64>,
}

impl Master {
    /// Answers replacement roots from the records of kept results (see
    /// `Config::keeps_results`).
    pub(crate) fn set_keep_results(&mut self, on: bool) {
        self.results.on = on;
    }

    /// A rank's report to this standby says it keeps `root`'s result of
    /// `key`: recorded, as the dead master had it (or would have once the
    /// reduction completed).
    pub(super) fn result_reported(&mut self, key: u64, root: u32, holder: u32) {
        if !self.results.on {
            return;
        }
        let drops = self.results.book.kept(key, root, holder);
        self.drop_copies(&drops);
        self.count_results();
    }

    /// A rank's report to this standby says it keeps `root`'s result of
    /// `key`, a reduction the standby rebuilds live: the root made it
    /// whole and kept it, and the dead master did not hear it complete.
    /// Noted as the root's announcement of its copy is (recording it now
    /// would make its completion look like a second result with that id,
    /// and drop both); a second such report is a spare of it.
    pub(super) fn live_result_reported(&mut self, key: u64, root: u32, holder: u32) {
        if !self.results.on {
            return;
        }
        match self.results.pending.get(&key) {
            Some(&(r, h)) if r == root && h != holder => self.early_spare(key, root, holder),
            Some(&(r, _)) if r == root => {}
            _ => {
                self.results.pending.insert(key, (root, holder));
            }
        }
    }

    /// A rank's report to this standby says it keeps a second copy of
    /// `root`'s result of `key`, relayed after the root died: a spare of
    /// the record made from the first copies' reports, or the record
    /// itself if the first copy's holder is gone.
    pub(super) fn relayed_reported(&mut self, key: u64, root: u32, holder: u32) {
        if !self.results.on {
            return;
        }
        if !self.results.book.also_kept(key, root, holder)
            && self.results.book.lookup(key, root) == Lookup::Unknown
        {
            let drops = self.results.book.kept(key, root, holder);
            self.drop_copies(&drops);
        }
        self.count_results();
    }

    /// Reduction `key`, rooted at `root`, completed: its announced copy is
    /// recorded.
    pub(super) fn result_completed(&mut self, key: u64, root: Rank) {
        let Some((r, holder)) = self.results.pending.remove(&key) else {
            return;
        };
        if r != root.0 {
            return self.drop_copies(&[Drop {
                holder,
                root: r,
                key,
            }]);
        }
        let drops = self.results.book.kept(key, r, holder);
        self.drop_copies(&drops);
        if let Some((root, spares)) = self.results.early_spares.remove(&key) {
            for spare in spares {
                if root != r || !self.results.book.also_kept(key, r, spare) {
                    self.drop_copies(&[Drop {
                        holder: spare,
                        root,
                        key,
                    }]);
                }
            }
        }
        self.count_results();
    }

    /// A live root's result of `key` has a further copy at `holder`, made
    /// before the reduction completed here: a spare of its record then.
    pub(super) fn early_spare(&mut self, key: u64, root: u32, holder: u32) {
        let entry = self
            .results
            .early_spares
            .entry(key)
            .or_insert_with(|| (root, Vec::new()));
        if entry.0 != root {
            // Another root's copies of a reused id: those serve nobody.
            let (old, spares) = std::mem::replace(entry, (root, Vec::new()));
            self.drop_all(key, old, spares);
        }
        let spares = &mut self.results.early_spares.get_mut(&key).expect("just set").1;
        if !spares.contains(&holder) {
            spares.push(holder);
        }
        // Bounded as the book is: such a notice outlives its reduction
        // only if it failed unannounced here.
        if self.results.early_spares.len() > taskfold_core::results::RESULTS_LIMIT {
            let oldest = self.results.early_spares.keys().next().copied();
            if let Some((k, (root, spares))) =
                oldest.and_then(|k| self.results.early_spares.remove(&k).map(|v| (k, v)))
            {
                self.drop_all(k, root, spares);
            }
        }
    }

    /// Tells each of `holders` to drop its copy of `root`'s result of `key`.
    fn drop_all(&mut self, key: u64, root: u32, holders: Vec<u32>) {
        let drops: Vec<Drop> = holders
            .into_iter()
            .map(|holder| Drop { holder, root, key })
            .collect();
        self.drop_copies(&drops);
    }

    /// Reduction `key` failed: the copy its root announced is dropped.
    pub(super) fn result_abandoned(&mut self, key: u64) {
        if let Some((root, spares)) = self.results.early_spares.remove(&key) {
            self.drop_all(key, root, spares);
        }
        if let Some((root, holder)) = self.results.pending.remove(&key) {
            self.drop_copies(&[Drop { holder, root, key }]);
        }
    }

    /// The job rolled back: every record goes (the next epoch's
    /// reductions reuse the keys; each holder drops its copies itself).
    pub(super) fn results_rolled_back(&mut self) {
        let _ = self.results.book.clear();
        self.results.pending.clear();
        self.results.early_spares.clear();
        self.count_results();
    }

    /// `rank` died: the copies it kept are gone.
    pub(super) fn results_rank_died(&mut self, rank: u32) {
        let gone = self.results.book.holder_died(rank);
        self.results.pending.retain(|_, (_, h)| *h != rank);
        self.results.early_spares.retain(|_, (_, spares)| {
            spares.retain(|&h| h != rank);
            !spares.is_empty()
        });
        self.count_results();
        if gone > 0 {
            tracing::warn!(
                rank,
                results = gone,
                "the kept results this rank held are lost: their roots' replacements would get ResultLost"
            );
        }
    }

    /// A replacement root's join of `key` (`join`), which completed under
    /// its dead process: sent to the result's copy, or told it is lost.
    /// True if answered; false for anything else (a member that is not
    /// the root, a root that was never replaced, a group of one, whose
    /// redone original is the result, or a reduction not completed or
    /// live again).
    pub(super) fn answer_replayed_root(&mut self, key: u64, from: Rank, join: &Join) -> bool {
        if self.rolls_back() {
            // Global restart before any rank finalized: a replacement comes
            // back through a rollback, whose epoch numbers its reductions
            // afresh; nothing it joins is a replay.
            return false;
        }
        let replaced = matches!(
            self.respawn.book.slot(from.0),
            Some(taskfold_core::respawn::Slot::Live(i)) if *i > 0
        );
        // A live reduction with this key is the one joined (an id used
        // again): never answered with an earlier result.
        let live = self.reductions.live.contains_key(&key);
        if join.root != from.0 || !replaced || join.group.len() < 2 || live {
            return false;
        }
        // A master without records (a standby, or keeping switched off)
        // still never completes a replayed root with its own original:
        // a completed reduction's result is then lost.
        let lookup = match self.results.on {
            true => self.results.book.lookup(key, from.0),
            false => Lookup::Unknown,
        };
        let holder = match lookup {
            Lookup::At(h) if !self.out.view().is_dead(h) => Some(h),
            Lookup::Unknown if !self.completed_lately(key) => return false,
            _ => None,
        };
        match holder {
            Some(h) => {
                self.stats.results_returned += 1;
                tracing::info!(id = %join.id, root = %from, holder = h, "a replacement root gets its kept result");
                self.send(from, &Msg::Results(ResultMsg::At { key, holder: h }));
            }
            None => {
                self.stats.results_lost += 1;
                tracing::error!(id = %join.id, root = %from, "a replacement root's result is lost: no copy is left");
                let error = ReduceError::ResultLost {
                    id: join.id.clone(),
                    root: from.0,
                };
                self.send(from, &super::failed_msg(key, &error));
            }
        }
        true
    }

    /// Tells each holder to drop the copies `drops`.
    fn drop_copies(&mut self, drops: &[Drop]) {
        for d in drops {
            let msg = Msg::Results(ResultMsg::Drop {
                root: d.root,
                keys: vec![d.key],
            });
            self.send(Rank(d.holder), &msg);
        }
    }

    fn count_results(&mut self) {
        self.stats.results_kept = self.results.book.len() as u64;
        self.stats.results_without_copy = self.results.book.without_copy() as u64;
        self.stats.results_second_copies = self.results.book.second_copies() as u64;
        self.stats.results_further_copies = self.results.book.further_copies() as u64;
        self.stats.results_evicted = self.results.book.evicted;
    }
}

impl Handler<ResultKeptIn> for Master {
    type Result = ();

    fn handle(&mut self, m: ResultKeptIn, _: &mut Context<Self>) {
        if self.awaiting_reports() {
            // A root reports after its copy is settled, so its notice
            // comes first; the reduction it names is known once every
            // report is in (handled now, it would be nobody's, and the
            // copy dropped).
            return self.keep(m);
        }
        let ResultKeptIn { from, key, holder } = m;
        if self.out.view().is_dead(from.0) || self.stale(from) {
            return;
        }
        let holder_ok = self.results.on
            && holder < self.size
            && holder != from.0
            && !self.out.view().is_dead(holder);
        let live = self.reductions.live.get(&key).map(|r| r.root == from);
        // A result handed over whose holder died, copied again by its
        // root: the record takes the new holder if it can; a copy again
        // at a rank the record already names (the second copy its dead
        // holder made there) is that copy, kept, not dropped.
        let book = &mut self.results.book;
        let fits = match live {
            Some(is_root) => holder_ok && is_root,
            None => {
                holder_ok && (book.kept_at(key, from.0, holder) || book.rekept(key, from.0, holder))
            }
        };
        if live.is_none() && fits {
            return self.count_results();
        }
        if live.is_none() && holder_ok && self.completed_lately(key) {
            // A root whose copy was settled after a new master completed
            // the reduction from its report (the master changed while it
            // was made): that copy is the record, if there is none.
            if self.results.book.lookup(key, from.0) == Lookup::Unknown {
                let drops = self.results.book.kept(key, from.0, holder);
                self.drop_copies(&drops);
                return self.count_results();
            }
        }
        if !fits {
            // Not a root of a live reduction, or a master that keeps no
            // records: the copy serves nobody.
            if holder < self.size {
                self.drop_copies(&[Drop {
                    holder,
                    root: from.0,
                    key,
                }]);
            }
            return;
        }
        if let Some((root, old)) = self.results.pending.insert(key, (from.0, holder)) {
            if old != holder {
                self.drop_copies(&[Drop {
                    holder: old,
                    root,
                    key,
                }]);
            }
        }
    }
}

impl Handler<ResultsReleasedIn> for Master {
    type Result = ();

    fn handle(&mut self, m: ResultsReleasedIn, _: &mut Context<Self>) {
        if self.awaiting_reports() {
            // The book is whole once every report is in.
            return self.keep(m);
        }
        if self.out.view().is_dead(m.from.0) {
            return;
        }
        for key in m.keys {
            let spares = self.results.book.released(key, m.from.0);
            self.drop_copies(&spares);
            if self.results.early_spares.get(&key).map(|e| e.0) == Some(m.from.0) {
                if let Some((root, spares)) = self.results.early_spares.remove(&key) {
                    self.drop_all(key, root, spares);
                }
            }
        }
        self.count_results();
    }
}

impl Handler<ResultAlsoKeptIn> for Master {
    type Result = ();

    fn handle(&mut self, m: ResultAlsoKeptIn, _: &mut Context<Self>) {
        if self.awaiting_reports() {
            // The book is whole once every report is in.
            return self.keep(m);
        }
        let ResultAlsoKeptIn {
            from,
            root,
            key,
            first,
        } = m;
        if root >= self.size || self.out.view().is_dead(from.0) {
            return;
        }
        if self.stale(from) {
            // Made in an epoch the job is rolling back from: its copy goes
            // with the rollback at its holder.
            return;
        }
        if self.results.on && self.results.book.also_kept(key, root, from.0) {
            tracing::debug!(root, key, holder = %from, "a root's result has a second copy");
            return self.count_results();
        }
        let unknown = self.results.book.lookup(key, root) == Lookup::Unknown;
        if self.results.on && unknown && !self.out.view().is_dead(root) {
            // A second copy made at once, before the record.
            return self.early_spare(key, root, from.0);
        }
        if self.results.on && unknown {
            // Nobody reported the first copy (its root died before it
            // could): this one and the first, if its holder lives, are
            // the record, as they would be had they come in reports.
            tracing::info!(root, key, holder = %from, first, "a dead root's result is kept by the rank it was relayed to");
            if self
                .reductions
                .live
                .get(&key)
                .is_some_and(|r| r.root.0 == root)
            {
                // Live here, its root dead: the root made it whole (it
                // keeps a copy only then) and its report died with a
                // master. It completed (see `takeover`, the same rule for
                // the copies reported to a standby).
                tracing::warn!(
                    root,
                    key,
                    "a dead root had completed this reduction: it ends complete"
                );
                self.complete(key);
            }
            // The root may have said where its first copy is before it
            // died: the completion made that record, and this copy is its
            // spare (a second record of one id drops both).
            if self.results.book.also_kept(key, root, from.0) {
                return self.count_results();
            }
            let first_lives = first != from.0
                && first != root
                && first < self.size
                && !self.out.view().is_dead(first);
            let holder = if first_lives { first } else { from.0 };
            let drops = self.results.book.kept(key, root, holder);
            self.drop_copies(&drops);
            if first_lives {
                // The second copy answers if the first holder dies too.
                self.results.book.also_kept(key, root, from.0);
            }
            return self.count_results();
        }
        // Released meanwhile, or a master that keeps no records: the copy
        // serves nobody.
        self.drop_copies(&[Drop {
            holder: from.0,
            root,
            key,
        }]);
    }
}

impl Handler<ResultWhereIn> for Master {
    type Result = ();

    fn handle(&mut self, m: ResultWhereIn, _: &mut Context<Self>) {
        if self.awaiting_reports() {
            // The book is whole once every report is in.
            return self.keep(m);
        }
        let ResultWhereIn { from, key, id } = m;
        if self.out.view().is_dead(from.0) {
            return;
        }
        let lookup = match self.results.on {
            true => self.results.book.lookup(key, from.0),
            false => Lookup::Unknown,
        };
        match lookup {
            Lookup::At(h) if !self.out.view().is_dead(h) => {
                tracing::info!(%id, root = %from, holder = h, "a replacement root is sent to another copy of its result");
                self.send(from, &Msg::Results(ResultMsg::At { key, holder: h }));
            }
            _ => {
                self.stats.results_lost += 1;
                tracing::error!(%id, root = %from, "a replacement root's result is lost: no copy is left");
                let error = ReduceError::ResultLost { id, root: from.0 };
                self.send(from, &super::failed_msg(key, &error));
            }
        }
    }
}
