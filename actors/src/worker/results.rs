//! A root's side of keeping its results for a replacement (see
//! [`taskfold_core::results`] and the book's chapter Surviving failures of
//! the application, A replaced root).
//!
//! When its value becomes whole, a root that keeps results (switch on, a
//! group of two or more; the master's rank too, which is replaced once a
//! standby took over) holds its last report: it serialises the result into a checksummed
//! buffer, exposes it, and offers it to its buddy ([`Handover`]). Once the
//! buddy stored it, the root tells the master where (`ResultMsg::Kept`),
//! then sends the held report, and its future completes: the copy exists
//! before the application can see the result, and the master learns of it
//! on the same ordered link before the completion. If no copy can be made
//! the root goes on without one (counted and logged: a replacement would
//! get `ResultLost`).
//!
//! Until its release, a result handed over stays in the ledger with the
//! root's own serialised copy: if its holder dies, the root offers it to
//! its next buddy over the whole job and tells the master the new holder.
//!
//! A replacement root sent to a kept result (`ResultMsg::At`) fetches it
//! from its holder, checks its checksum, and completes with it as its
//! value: its own redone original is not folded in (the result holds the
//! dead process's original already).
//!
//! What a crash of this rank loses here: nothing the job needs: its copies
//! stay at their holders for its replacement, and the master's records
//! say where.

use super::Worker;
use crate::results::Handoff;
use actix::prelude::*;
use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use taskfold_core::replica::{self, HEADER_LEN};
use taskfold_core::results::{held_result_key, result_key, Handover, Next, Release, MAX_HOLDERS};
use taskfold_core::wire::results::ResultMsg;
use taskfold_core::wire::Msg;
use taskfold_core::{FoldError, Rank, RankSet, ReduceError, ReduceValue};
use taskfold_transports::{BufferKey, Received, TransportError};

/// Results up to this size are serialised on the actor's own thread (as
/// a contribution's data is: see `prepare`); larger ones on the pool, so
/// that control messages are not held up.
const RESULT_INLINE_BYTES: usize = 256 << 10;

/// A result on its way to its buddy, its root's last report held.
pub(crate) struct Keeping {
    handover: Handover,
    /// The report the root sends once the copy is settled (`None`: a
    /// dead master's task, whose report the new master has already).
    done: Option<Msg>,
    /// The master the report is for: if another took over meanwhile, the
    /// report is not sent (the root's report to the new one holds it).
    master: Rank,
    /// The master's completion notice came while the copy was made: the
    /// reduction ends here once it is settled.
    completed: bool,
    len: u64,
    crc: u32,
}

/// The root's side: whether it keeps results, the results handed to the
/// application (shared with the runtime), and those on their way.
pub(crate) struct RootSide {
    pub(crate) kept: crate::results::Kept,
    keeping: HashMap<u64, Keeping>,
    /// Results being serialised on the pool, before their handover starts.
    encoding: HashSet<u64>,
    /// A replacement root's fetches of its kept results: key → holder and
    /// the fetch (cancelled if the holder is declared failed: a stopped
    /// holder would hold the future forever).
    fetching: HashMap<u64, (u32, SpawnHandle)>,
    /// Fetches that failed, per key: the master is asked again where the
    /// result is kept (a second copy), at most [`MAX_HOLDERS`] times.
    asked_again: HashMap<u64, u32>,
}

impl RootSide {
    pub(crate) fn new(kept: crate::results::Kept) -> Self {
        RootSide {
            kept,
            keeping: HashMap::new(),
            encoding: HashSet::new(),
            fetching: HashMap::new(),
            asked_again: HashMap::new(),
        }
    }
}

/// A root's result was serialised (on the pool if large).
#[derive(Message)]
#[rtype(result = "()")]
struct ResultEncoded {
    key: u64,
    value: Box<dyn ReduceValue>,
    encoded: Result<Bytes, FoldError>,
    done: Option<Msg>,
}

/// The buddy stored (or refused) this root's result of `key`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ResultStoredIn {
    pub(crate) from: Rank,
    pub(crate) key: u64,
    pub(crate) ok: bool,
}

/// The master: reduction `key`, which this replacement root joined again,
/// completed under the dead process; its result is kept at `holder`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ResultAtIn {
    pub(crate) key: u64,
    pub(crate) holder: u32,
}

/// The application's checkpoint that followed these handovers is durable:
/// release them.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ReleaseResults {
    pub(crate) seqs: Vec<u64>,
}

impl Worker {
    /// Whether this rank, the root of `key` whose value is whole, keeps
    /// the result at its buddy before it completes.
    pub(super) fn keeps_result(&self, key: u64) -> bool {
        self.results.kept.on() && self.locals.get(&key).is_some_and(|l| l.group.len() > 1)
    }

    /// Holds the root's last report `done` of `key` until its result's
    /// copy is settled: serialises the result first.
    pub(super) fn keep_result(&mut self, key: u64, done: Option<Msg>) {
        let Some(value) = self.locals.get_mut(&key).and_then(|l| l.value.take()) else {
            return self.result_done(key, None, Some(done));
        };
        let small = value.encoded_len_hint() <= RESULT_INLINE_BYTES;
        let job = move || {
            let encoded = value.encode_after(HEADER_LEN).map(|mut buf| {
                let (head, payload) = buf.split_at_mut(HEADER_LEN);
                replica::write_header(head, payload);
                taskfold_core::pool::bytes(buf)
            });
            ResultEncoded {
                key,
                value,
                encoded,
                done,
            }
        };
        match (&self.me, small) {
            (Some(me), false) => {
                let me = me.clone();
                self.results.encoding.insert(key);
                self.pool.submit(move || me.do_send(job()));
            }
            _ => {
                let m = job();
                self.result_encoded(m);
            }
        }
    }

    fn result_encoded(&mut self, m: ResultEncoded) {
        let key = m.key;
        self.results.encoding.remove(&key);
        let Some(local) = self.locals.get_mut(&key) else {
            return; // ended meanwhile
        };
        local.value = Some(m.value);
        let bytes = match m.encoded {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(rank = %self.rank, key, error = %e, "cannot serialise the result to keep it");
                return self.result_done(key, None, Some(m.done));
            }
        };
        let (len, crc) = (bytes.len() as u64, replica::stored_crc(&bytes).unwrap_or(0));
        self.out
            .transport()
            .expose(BufferKey(result_key(key)), bytes);
        let buddy = self.next_result_buddy(key, None);
        let (handover, next) = Handover::start(buddy);
        let keeping = Keeping {
            handover,
            done: m.done,
            master: self.out.master(),
            completed: false,
            len,
            crc,
        };
        self.results.keeping.insert(key, keeping);
        self.result_next(key, next);
    }

    /// Carries out what the handover of `key` decided.
    fn result_next(&mut self, key: u64, next: Next) {
        match next {
            Next::Offer(h) => {
                let Some(k) = self.results.keeping.get(&key) else {
                    return;
                };
                let (len, crc) = (k.len, k.crc);
                let offer = Msg::Results(ResultMsg::Offer { key, len, crc });
                if let Err(e) = self.out.send(Rank(h), &offer) {
                    // Its death, declared soon, asks the next buddy.
                    tracing::warn!(rank = %self.rank, buddy = h, error = %e, "cannot offer the result");
                }
            }
            Next::Kept(h) => self.result_done(key, Some(h), None),
            Next::Lost => self.result_done(key, None, None),
            Next::Wait => {}
        }
    }

    /// The copy of `key`'s result is settled (`holder`: kept there; `None`:
    /// none): the master is told, the held report goes, and the root's
    /// future completes. `done`: the report (`Some(None)`: none to send),
    /// if no handover holds it.
    ///
    /// The copy is kept and told to the current master even if another
    /// master took over while it was made: that one completes the
    /// reduction from this rank's report, and the application will have
    /// the result, so the copy is what a replacement of this rank gets it
    /// back from.
    fn result_done(&mut self, key: u64, holder: Option<u32>, done: Option<Option<Msg>>) {
        let k = self.results.keeping.remove(&key);
        let bytes = self.out.transport().withdraw(BufferKey(result_key(key)));
        let master = k.as_ref().map_or(self.out.master(), |k| k.master);
        let completed = k.as_ref().is_some_and(|k| k.completed);
        let report = match (done, k) {
            (Some(d), _) => d,
            (None, Some(k)) => k.done,
            (None, None) => return,
        };
        match holder {
            Some(h) => self.to_master(&Msg::Results(ResultMsg::Kept { key, holder: h })),
            None => {
                metrics::counter!(crate::metrics::RESULTS_NOT_KEPT).increment(1);
                tracing::warn!(rank = %self.rank, key, "no copy of this root's result: a replacement of this rank would get ResultLost");
            }
        }
        if let (true, Some(report)) = (master == self.out.master(), report) {
            self.to_master(&report);
        }
        if let (Some(h), Some(l), Some(bytes)) = (holder, self.locals.get(&key), bytes) {
            let slot = l.slot.clone();
            let evicted = self
                .results
                .kept
                .ledger()
                .handed(key, h, Handoff { slot, bytes });
            self.send_release(evicted);
        }
        // As a root whose value became whole (see `report`): the master's
        // completion notice that follows, if it did not come already, is
        // ignored.
        if !completed {
            self.ended_early.insert(key);
        }
        self.finish(key, None);
        self.rejoin_may_go();
    }

    /// Whether the result of one of `keys` is still on its way to its
    /// copy here (serialised, or offered): a report to a new master waits
    /// for it (see `failover`).
    pub(super) fn keeping_any(&self, keys: &HashSet<u64>) -> bool {
        let r = &self.results;
        r.keeping
            .keys()
            .chain(&r.encoding)
            .any(|k| keys.contains(k))
    }

    /// The master says reduction `key` completed while this root's result
    /// is being kept: it ends here once the copy is settled (true), so
    /// that the copy exists before the application can see the result.
    pub(super) fn complete_once_kept(&mut self, key: u64) -> bool {
        match self.results.keeping.get_mut(&key) {
            Some(k) => {
                k.completed = true;
                true
            }
            None => false,
        }
    }

    /// Reduction `key` ends here otherwise (failed, or a new master
    /// completed it): its result's copy, if one was offered, is dropped.
    pub(super) fn results_ended(&mut self, key: u64) {
        self.results.asked_again.remove(&key);
        let encoding = self.results.encoding.remove(&key);
        let Some(k) = self.results.keeping.remove(&key) else {
            if encoding {
                self.rejoin_may_go();
            }
            return;
        };
        self.rejoin_may_go();
        self.out.transport().withdraw(BufferKey(result_key(key)));
        if let Handover::Offered { holder, .. } | Handover::Kept { holder } = k.handover {
            self.drop_results(holder, vec![key]);
        }
    }

    /// `rank` died: an offer awaiting its answer goes to the next buddy,
    /// and the copies it held of results handed over are made again
    /// there.
    pub(super) fn results_rank_died(&mut self, rank: Rank, ctx: &mut Context<Self>) {
        let stuck: Vec<u64> = self
            .results
            .fetching
            .iter()
            .filter(|(_, (h, _))| *h == rank.0)
            .map(|(&k, _)| k)
            .collect();
        for key in stuck {
            if let Some((holder, handle)) = self.results.fetching.remove(&key) {
                ctx.cancel_future(handle);
                let gone = Err(TransportError::LinkDown {
                    peer: holder,
                    reason: "declared failed".into(),
                });
                self.result_fetched(key, holder, gone, ctx);
            }
        }
        let next = self.job_buddy(None);
        let again = self.results.kept.ledger().holder_died(rank.0, |_| next);
        for (key, buddy) in again {
            tracing::info!(rank = %self.rank, dead = %rank, buddy, key, "a kept result is copied again to a new buddy");
            self.offer_again(key, buddy);
        }
        let waiting: Vec<u64> = self
            .results
            .keeping
            .iter()
            .filter(
                |(_, k)| matches!(k.handover, Handover::Offered { holder, .. } if holder == rank.0),
            )
            .map(|(&key, _)| key)
            .collect();
        for key in waiting {
            let next_buddy = self.next_result_buddy(key, None);
            let Some(k) = self.results.keeping.get_mut(&key) else {
                continue;
            };
            let next = k.handover.died(rank.0, next_buddy);
            self.result_next(key, next);
        }
    }

    /// The buddy of `key`'s root (this rank) by the membership view,
    /// without `refused` (a buddy that refused).
    fn next_result_buddy(&self, key: u64, refused: Option<u32>) -> Option<u32> {
        let l = self.locals.get(&key)?;
        let view = self.out.view();
        let mut dead: RankSet = view.dead();
        if let Some(r) = refused {
            dead.insert(r as usize);
        }
        let nodes = view.nodes();
        taskfold_core::replica::buddy_on(&l.group, self.rank, &dead, nodes.as_deref()).map(|r| r.0)
    }

    /// This root's buddy over the whole job (a result handed over has no
    /// live reduction, so no group, any more), without `refused`.
    fn job_buddy(&self, refused: Option<u32>) -> Option<u32> {
        let size = self.out.transport().size();
        let job = taskfold_core::Group::new(0..size, size).ok()?;
        let view = self.out.view();
        let mut dead: RankSet = view.dead();
        if let Some(r) = refused {
            dead.insert(r as usize);
        }
        let nodes = view.nodes();
        taskfold_core::replica::buddy_on(&job, self.rank, &dead, nodes.as_deref()).map(|r| r.0)
    }

    /// Offers `buddy` this root's own copy of the result of `key`, handed
    /// over and not released, whose holder died.
    fn offer_again(&mut self, key: u64, buddy: u32) {
        let Some(bytes) = self
            .results
            .kept
            .ledger()
            .get(key)
            .map(|h| h.slot.bytes.clone())
        else {
            return;
        };
        let (len, crc) = (bytes.len() as u64, replica::stored_crc(&bytes).unwrap_or(0));
        self.out
            .transport()
            .expose(BufferKey(result_key(key)), bytes);
        let offer = Msg::Results(ResultMsg::Offer { key, len, crc });
        if let Err(e) = self.out.send(Rank(buddy), &offer) {
            tracing::warn!(rank = %self.rank, buddy, error = %e, "cannot offer the result again");
        }
    }

    /// `from` answered an offer of a result handed over whose holder died.
    fn answered_again(&mut self, key: u64, from: Rank, ok: bool) {
        let next_buddy = match ok {
            true => None,
            false => self.job_buddy(Some(from.0)),
        };
        let step = self
            .results
            .kept
            .ledger()
            .answered(key, from.0, ok, next_buddy);
        match step {
            Some(Next::Kept(h)) => {
                self.out.transport().withdraw(BufferKey(result_key(key)));
                self.to_master(&Msg::Results(ResultMsg::Kept { key, holder: h }));
            }
            Some(Next::Offer(h)) => self.offer_again(key, h),
            Some(Next::Lost) => {
                self.out.transport().withdraw(BufferKey(result_key(key)));
                metrics::counter!(crate::metrics::RESULTS_NOT_KEPT).increment(1);
                tracing::warn!(rank = %self.rank, key, "a kept result could not be copied again: a replacement of this rank would get ResultLost");
            }
            Some(Next::Wait) | None if ok => self.drop_results(from.0, vec![key]),
            Some(Next::Wait) | None => {}
        }
    }

    /// The job rolled back: the results handed over are forgotten (their
    /// copies and records go with the rollback at their holders and the
    /// master; the next epoch's reductions reuse their keys).
    pub(super) fn kept_results_rolled_back(&mut self) {
        self.results.kept.ledger().clear();
        self.results.asked_again.clear();
    }

    /// Tells `holder` to drop its copies of this root's results `keys`.
    fn drop_results(&self, holder: u32, keys: Vec<u64>) {
        let msg = Msg::Results(ResultMsg::Drop {
            root: self.rank.0,
            keys,
        });
        let _ = self.out.send(Rank(holder), &msg);
    }

    /// Sends a release: to the master, and to each holder.
    fn send_release(&self, r: Release) {
        if r.is_empty() {
            return;
        }
        self.to_master(&Msg::Results(ResultMsg::Released { keys: r.master }));
        for (holder, keys) in r.holders {
            self.drop_results(holder, keys);
        }
        for key in r.offered {
            self.out.transport().withdraw(BufferKey(result_key(key)));
        }
    }

    /// A replacement root's kept result of `key` arrived from `holder`
    /// (or not): it completes the future, as the result. A fetch that
    /// failed asks the master where else it is kept (a holder that died
    /// may have copied it on), a little later each time.
    fn result_fetched(
        &mut self,
        key: u64,
        holder: u32,
        got: Result<Received, TransportError>,
        ctx: &mut Context<Self>,
    ) {
        self.results.fetching.remove(&key);
        let Some(local) = self.locals.get_mut(&key) else {
            return;
        };
        let decode = local.decode;
        let value = got.map_err(|e| e.to_string()).and_then(|got| {
            let buf = got.into_owned();
            let payload = replica::verify(&buf).map_err(|e| e.to_string())?;
            let v = decode(payload).map_err(|e| e.to_string())?;
            Ok((v, taskfold_core::pool::bytes(buf)))
        });
        match value {
            Ok((v, bytes)) => {
                local.value = Some(v);
                let slot = local.slot.clone();
                let evicted =
                    self.results
                        .kept
                        .ledger()
                        .handed(key, holder, Handoff { slot, bytes });
                self.send_release(evicted);
                tracing::info!(rank = %self.rank, key, holder, "this replacement root got its kept result");
                self.finish(key, None);
            }
            Err(e) => {
                let id = local.join.id.clone();
                let asked = self.results.asked_again.entry(key).or_insert(0);
                if *asked < MAX_HOLDERS {
                    *asked += 1;
                    tracing::warn!(rank = %self.rank, key, holder, error = %e, "the kept result could not be read; asking the master again");
                    let later = std::time::Duration::from_millis(100 * u64::from(*asked));
                    ctx.run_later(later, move |act, _| {
                        act.to_master(&Msg::Results(ResultMsg::Where { key, id }));
                    });
                    return;
                }
                let error = ReduceError::ResultLost {
                    id,
                    root: self.rank.0,
                };
                tracing::error!(rank = %self.rank, key, holder, error = %e, "the kept result could not be read");
                self.finish(key, Some(error));
            }
        }
    }
}

impl Handler<ResultEncoded> for Worker {
    type Result = ();

    fn handle(&mut self, m: ResultEncoded, _: &mut Context<Self>) {
        self.result_encoded(m);
    }
}

impl Handler<ResultStoredIn> for Worker {
    type Result = ();

    fn handle(&mut self, m: ResultStoredIn, _: &mut Context<Self>) {
        if !m.ok {
            metrics::counter!(crate::metrics::REPLICA_ERRORS).increment(1);
            tracing::error!(rank = %self.rank, buddy = %m.from, key = m.key, "the buddy refused this root's result");
        }
        let next_buddy = match m.ok {
            true => None,
            false => self.next_result_buddy(m.key, Some(m.from.0)),
        };
        let Some(k) = self.results.keeping.get_mut(&m.key) else {
            // A result handed over, copied again; or one that ended here
            // meanwhile, whose copy serves nobody.
            return self.answered_again(m.key, m.from, m.ok);
        };
        let next = k.handover.answered(m.from.0, m.ok, next_buddy);
        let kept_there = matches!(k.handover, Handover::Kept { holder } if holder == m.from.0);
        if next == Next::Wait && m.ok && !kept_there {
            // A buddy asked before, answering late: its copy serves nobody.
            self.drop_results(m.from.0, vec![m.key]);
        }
        self.result_next(m.key, next);
    }
}

impl Handler<ResultAtIn> for Worker {
    type Result = ();

    fn handle(&mut self, m: ResultAtIn, ctx: &mut Context<Self>) {
        let (key, holder) = (m.key, m.holder);
        if !self.locals.get(&key).is_some_and(|l| l.state.setup().root) {
            return;
        }
        let get = self
            .out
            .transport()
            .get(Rank(holder), BufferKey(held_result_key(key, self.rank.0)));
        let handle = ctx.spawn(
            get.into_actor(self)
                .map(move |got, act, ctx| act.result_fetched(key, holder, got, ctx)),
        );
        self.results.fetching.insert(key, (holder, handle));
    }
}

impl Handler<ReleaseResults> for Worker {
    type Result = ();

    fn handle(&mut self, m: ReleaseResults, _: &mut Context<Self>) {
        let release = self.results.kept.ledger().release(&m.seqs);
        self.send_release(release);
    }
}
