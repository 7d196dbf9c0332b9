//! The spreader actor (every rank): an allreduce's result, or a broadcast's
//! value, going to every member of the group ready-first (see the book's
//! Architecture chapter, "Allreduce and broadcast").
//!
//! Two parts, one actor. The *member* part (this file) holds this rank's
//! spreads: it exposes a value it holds under the spread's key, asks the
//! coordinator for one it wants, fetches it from the holder the
//! coordinator names with a one-sided get, and completes the application's
//! future. The *coordinator* part (`coordinator`, active on the master's
//! rank) runs each spread's state machine, [`taskfold_core::spread`].
//!
//! What a crash loses: a member that dies loses only what it held (the
//! others fetch from another holder). The coordinator's death (the
//! master's) loses its pairing state only: holders keep serving, and every
//! live rank reports its spreads to the standby that takes over
//! ([`SpreadMsg::Report`]), which rebuilds them. Without a standby, every
//! spread that is not complete at a rank ends with
//! [`ReduceError::MasterLost`] there; ranks that held the value keep it.

mod coordinator;

use crate::future::Slot;
use crate::outbox::Outbox;
use actix::prelude::*;
use bytes::Bytes;
use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use taskfold_core::wire::spread::{Opening, Report, SpreadMsg};
use taskfold_core::wire::Msg;
use taskfold_core::{Rank, ReduceError};
use taskfold_transports::{BufferKey, Received, TransportError};

/// Decodes a fetched value into the type the application asked for; a
/// type that can (`ReduceValue::shared_decoder`) keeps the bytes instead
/// of copying them.
pub(crate) type Decode =
    Arc<dyn Fn(&Bytes) -> Result<Box<dyn Any + Send>, ReduceError> + Send + Sync>;

/// A fetch that failed is reported after this pause times the failures so
/// far (a holder whose link just broke is usually declared failed by
/// then, and the coordinator names another).
const RETRY_PAUSE: Duration = Duration::from_millis(20);
/// Fetches a member tries before it gives up with a transport error: a
/// link between two live ranks that keeps failing (every other failure is
/// a rank's death, which the coordinator sees).
const MAX_FETCH_FAILURES: u32 = 16;
/// Spreads a member remembers as finished, for its report to a
/// coordinator that takes over (a holder the dead one told to let go
/// while others were not told yet, and a replacement that redoes one
/// told it is lost). Every member reports them all to the new
/// coordinator: 32 KiB each.
const FINISHED_KEPT: usize = 4_096;
/// Most coordinator messages a rank keeps before it knows it took over.
const EARLY_LIMIT: usize = 65_536;

/// What a spread's future is filled with: the value itself (at its
/// source), or the bytes fetched, decoded when the application takes them
/// ([`Held::into_value`]).
pub(crate) enum Held {
    /// The value, as the application gave or the reduction made it.
    Value(Box<dyn Any + Send>),
    /// The value's encoding, as fetched (and served from here).
    Fetched {
        /// The encoding, aligned.
        bytes: Bytes,
        /// Its decoder.
        decode: Decode,
    },
}

impl Held {
    /// The value, decoded if it was fetched.
    pub(crate) fn into_value<T: 'static>(self) -> Result<T, ReduceError> {
        let any = match self {
            Held::Value(v) => v,
            Held::Fetched { bytes, decode } => decode(&bytes)?,
        };
        any.downcast::<T>()
            .map(|b| *b)
            .map_err(|_| ReduceError::Decode("the value has an unexpected type".into()))
    }
}

/// This rank's part in one spread.
struct Member {
    opening: Opening,
    /// The application's future.
    slot: Arc<Slot>,
    decode: Decode,
    /// The value is here and exposed under the key.
    holding: bool,
    /// The holder a fetch is out to.
    from: Option<Rank>,
    failures: u32,
}

/// The spreader of one rank.
pub(crate) struct Spreader {
    rank: Rank,
    out: Outbox,
    hooks: Vec<crate::hooks::Hook>,
    mine: HashMap<u64, Member>,
    /// The coordinator's spreads (on the master's rank).
    coordinated: coordinator::Coordinated,
    /// Set once the master is lost, or this rank fenced: every spread
    /// that is not complete here fails with it.
    ended: Option<ReduceError>,
    /// The newest spreads the coordinator said had finished.
    finished: VecDeque<u64>,
    /// Coordinator messages that came before this rank took over.
    early: Vec<(Rank, SpreadMsg)>,
    /// Takeovers seen: a fetch's failure is reported only to the
    /// coordinator that sent it (a new one has this rank's report).
    takeovers: u64,
}

impl Spreader {
    pub(crate) fn new(rank: Rank, out: Outbox, hooks: Vec<crate::hooks::Hook>) -> Self {
        Spreader {
            rank,
            out,
            hooks,
            mine: HashMap::new(),
            coordinated: Default::default(),
            ended: None,
            finished: VecDeque::new(),
            early: Vec::new(),
            takeovers: 0,
        }
    }

    fn to_master(&self, m: SpreadMsg) {
        if let Err(e) = self.out.to_master(&Msg::Spread(m)) {
            tracing::warn!(rank = %self.rank, error = %e, "could not reach the spread's coordinator");
        }
    }

    /// Ends every spread here: those still waiting fail with `e`; holders
    /// stop serving (no coordinator is left to send anyone to them). With
    /// `for_good`, every later spread fails with `e` too.
    fn end_all(&mut self, e: ReduceError, for_good: bool) {
        let keys: Vec<u64> = self.mine.keys().copied().collect();
        for key in keys {
            if let Some(m) = self.forget(key) {
                m.slot.fill(Err(e.clone()));
            }
        }
        self.coordinated.clear();
        if for_good {
            self.ended = Some(e);
        }
    }

    /// Forgets `key` here and stops exposing it.
    fn forget(&mut self, key: u64) -> Option<Member> {
        let m = self.mine.remove(&key)?;
        if m.holding {
            self.out.transport().withdraw(BufferKey(key));
        }
        Some(m)
    }

    /// A member's message from the coordinator.
    fn told(&mut self, msg: SpreadMsg, ctx: &mut Context<Self>) {
        match msg {
            SpreadMsg::Fetch { key, from } => self.fetch(key, Rank(from), ctx),
            SpreadMsg::Lost { key, root } => {
                if let Some(m) = self.forget(key) {
                    m.slot.fill(Err(ReduceError::RootLost {
                        id: m.opening.id,
                        root,
                    }));
                }
            }
            SpreadMsg::Refused { key, detail } => {
                if let Some(m) = self.forget(key) {
                    m.slot.fill(Err(ReduceError::Mismatched {
                        id: m.opening.id,
                        detail,
                    }));
                }
            }
            // Finished for a value this rank still wants: the spread ended
            // before it asked (a replacement redoing it), and its value is
            // gone with the holders' copies.
            SpreadMsg::Finished { key } if self.mine.get(&key).is_some_and(|m| !m.holding) => {
                if let Some(m) = self.forget(key) {
                    m.slot.fill(Err(ReduceError::ResultLost {
                        id: m.opening.id,
                        root: m.opening.source,
                    }));
                }
            }
            SpreadMsg::Finished { key } => {
                if self.forget(key).is_some() {
                    if self.finished.len() >= FINISHED_KEPT {
                        self.finished.pop_front();
                    }
                    self.finished.push_back(key);
                }
            }
            other => {
                tracing::warn!(rank = %self.rank, msg = ?other, "not a coordinator's message; dropped")
            }
        }
    }

    fn fetch(&mut self, key: u64, from: Rank, ctx: &mut Context<Self>) {
        let id = match self.mine.get(&key) {
            Some(m) if !m.holding => m.opening.id.clone(),
            // Told by a coordinator that took over before it read that
            // this rank holds it.
            Some(_) => return self.to_master(SpreadMsg::Fetched { key, ok: true }),
            None => return, // not wanted here (any more)
        };
        let point = crate::hooks::Point::BeforeSpreadGet;
        if let Some(wait) = crate::hooks::hold(&self.hooks, self.rank.0, point, &id) {
            ctx.spawn(
                wait.into_actor(self)
                    .map(move |(), act, ctx| act.get(key, from, ctx)),
            );
            return;
        }
        self.get(key, from, ctx);
    }

    fn get(&mut self, key: u64, from: Rank, ctx: &mut Context<Self>) {
        if let Some(m) = self.mine.get_mut(&key) {
            m.from = Some(from);
        }
        let get = self.out.transport().get(from, BufferKey(key));
        ctx.spawn(
            get.into_actor(self)
                .map(move |got, act, ctx| act.fetched(key, got, ctx)),
        );
    }

    fn fetched(
        &mut self,
        key: u64,
        got: Result<Received, TransportError>,
        ctx: &mut Context<Self>,
    ) {
        let Some(m) = self.mine.get_mut(&key) else {
            return;
        };
        m.from = None;
        match got {
            Ok(received) => {
                let bytes = kept(received);
                m.holding = true;
                // Served first, and decoded by the application's thread
                // when it takes the value: the runtime's thread, which
                // serves gets, never spends a value's decoding time on the
                // spread's critical path.
                self.out.transport().expose(BufferKey(key), bytes.clone());
                let (slot, decode) = (m.slot.clone(), m.decode.clone());
                self.to_master(SpreadMsg::Fetched { key, ok: true });
                tracing::debug!(rank = %self.rank, key, bytes = bytes.len(), "a spread's value is here and served");
                // A value that does not decode fails the same way at every
                // member (the same bytes everywhere): it is still served.
                slot.fill(Ok(Some(Box::new(Held::Fetched { bytes, decode }))));
            }
            Err(e) => {
                m.failures += 1;
                tracing::warn!(rank = %self.rank, key, error = %e, failures = m.failures, "a spread's fetch failed");
                if m.failures >= MAX_FETCH_FAILURES {
                    let m = self.mine.remove(&key).expect("present above");
                    m.slot.fill(Err(ReduceError::Transport(e.to_string())));
                    return;
                }
                let pause = RETRY_PAUSE * m.failures;
                let term = self.takeovers;
                ctx.run_later(pause, move |act, _| {
                    if act.mine.contains_key(&key) && act.takeovers == term {
                        act.to_master(SpreadMsg::Fetched { key, ok: false });
                    }
                });
            }
        }
    }
}

/// The bytes a fetch got, as this member keeps and serves them: aligned,
/// as the decoder needs.
///
/// A loan of a same-node holder's memory ([`Received::Shared`]) is kept as
/// it is, not copied: the holder keeps lent bytes unchanged and allocated
/// until this rank drops the view (for good if the link between them goes
/// down, and a dead holder's pages outlive it in this rank's mapping), so
/// the value is read from the holder's memory by the application's
/// thread as it decodes (an `InPlace` array keeps the view itself, and is
/// copied only if changed), and served from there until the spread ends.
/// One copy of the value at each member instead of two, and none for an
/// `InPlace` array (the book's Architecture chapter, Allreduce and
/// broadcast). A view that is not aligned is copied.
fn kept(received: Received) -> Bytes {
    let align = taskfold_transports::RecvBuf::ALIGNMENT;
    match received {
        Received::Shared(v) if (v.as_ptr() as usize).is_multiple_of(align) => {
            metrics::counter!(crate::metrics::SPREAD_VALUES_VIEWED).increment(1);
            Bytes::from_owner(v)
        }
        other => taskfold_core::pool::bytes(other.into_owned()),
    }
}

impl Actor for Spreader {
    type Context = Context<Self>;
}

impl Drop for Spreader {
    fn drop(&mut self) {
        // The runtime stopped: nothing will complete the futures left.
        for m in self.mine.values() {
            m.slot.fill(Err(ReduceError::Shutdown));
        }
    }
}

/// From the application: this rank holds the value of the spread
/// `opening` (its source), encoded in `bytes`; `slot` is complete already.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Share {
    pub(crate) opening: Opening,
    pub(crate) bytes: Bytes,
    pub(crate) slot: Arc<Slot>,
    pub(crate) decode: Decode,
}

impl Handler<Share> for Spreader {
    type Result = ();

    fn handle(&mut self, s: Share, ctx: &mut Context<Self>) {
        let point = crate::hooks::Point::BeforeShare;
        if let Some(wait) = crate::hooks::hold(&self.hooks, self.rank.0, point, &s.opening.id) {
            ctx.spawn(wait.into_actor(self).map(move |(), act, _| act.share(s)));
            return;
        }
        self.share(s);
    }
}

impl Spreader {
    fn share(&mut self, s: Share) {
        let key = s.opening.key;
        if let Some(e) = &self.ended {
            tracing::warn!(rank = %self.rank, error = %e, "a spread's value is not served");
            return;
        }
        self.out.transport().expose(BufferKey(key), s.bytes);
        self.mine.insert(
            key,
            Member {
                opening: s.opening.clone(),
                slot: s.slot,
                decode: s.decode,
                holding: true,
                from: None,
                failures: 0,
            },
        );
        self.to_master(SpreadMsg::Have(s.opening));
    }
}

/// From the application: this rank wants the value of `opening`, for the
/// future `slot`; or (`gone`) this source cannot serve it.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Ask {
    pub(crate) opening: Opening,
    pub(crate) slot: Arc<Slot>,
    pub(crate) decode: Decode,
}

impl Handler<Ask> for Spreader {
    type Result = ();

    fn handle(&mut self, a: Ask, _: &mut Context<Self>) {
        if let Some(e) = &self.ended {
            a.slot.fill(Err(e.clone()));
            return;
        }
        let key = a.opening.key;
        self.mine.insert(
            key,
            Member {
                opening: a.opening.clone(),
                slot: a.slot,
                decode: a.decode,
                holding: false,
                from: None,
                failures: 0,
            },
        );
        self.to_master(SpreadMsg::Want(a.opening));
    }
}

/// From the application: this source cannot serve the spread `key`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Gone {
    pub(crate) key: u64,
}

impl Handler<Gone> for Spreader {
    type Result = ();

    fn handle(&mut self, g: Gone, _: &mut Context<Self>) {
        self.to_master(SpreadMsg::Gone { key: g.key });
    }
}

/// A spread message from `from` (the router checked nothing but its form).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct SpreadIn {
    pub(crate) from: Rank,
    pub(crate) msg: SpreadMsg,
}

impl Handler<SpreadIn> for Spreader {
    type Result = ();

    fn handle(&mut self, m: SpreadIn, ctx: &mut Context<Self>) {
        let for_coordinator = matches!(
            m.msg,
            SpreadMsg::Have(_)
                | SpreadMsg::Want(_)
                | SpreadMsg::Gone { .. }
                | SpreadMsg::Fetched { .. }
                | SpreadMsg::Report(_)
        );
        if for_coordinator {
            if self.out.master() != self.rank {
                // Its sender turned to this rank as the standby before
                // this rank saw the master die: kept until it takes over.
                if self.early.len() < EARLY_LIMIT {
                    self.early.push((m.from, m.msg));
                } else {
                    tracing::warn!(rank = %self.rank, from = %m.from, "a spread message for the coordinator, which this rank is not; dropped");
                }
                return;
            }
            let dead = self.out.view().dead();
            self.coordinated.on(m.from, m.msg, &dead, &self.out);
        } else if m.from == self.out.master() {
            self.told(m.msg, ctx);
        } else {
            tracing::warn!(rank = %self.rank, from = %m.from, "a coordinator's spread message from a rank that is not the master; dropped");
        }
    }
}

/// The master declared `rank` failed.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct SpreadDead {
    pub(crate) rank: Rank,
}

impl Handler<SpreadDead> for Spreader {
    type Result = ();

    fn handle(&mut self, d: SpreadDead, _: &mut Context<Self>) {
        if d.rank == self.rank {
            self.end_all(ReduceError::Fenced, true);
            return;
        }
        self.coordinated.dead(d.rank.0, &self.out);
    }
}

/// This rank's watch declared the master lost: `to` takes over, which
/// awaits the reports of `live`; with no standby (`to: None`) every
/// spread that is not complete here fails, and every later one at once.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct SpreadMasterLost {
    pub(crate) reason: String,
    pub(crate) to: Option<Rank>,
    pub(crate) live: Vec<u32>,
}

impl Handler<SpreadMasterLost> for Spreader {
    type Result = ();

    fn handle(&mut self, l: SpreadMasterLost, _: &mut Context<Self>) {
        let Some(to) = l.to else {
            self.end_all(ReduceError::MasterLost(l.reason), true);
            return;
        };
        self.takeovers += 1;
        self.coordinated.clear();
        if to == self.rank {
            self.coordinated.take_over(l.live);
            let dead = self.out.view().dead();
            for (from, msg) in std::mem::take(&mut self.early) {
                self.coordinated.on(from, msg, &dead, &self.out);
            }
        } else {
            self.early.clear();
        }
        let report = self.report();
        tracing::info!(rank = %self.rank, coordinator = %to, holding = report.holding.len(), wanting = report.wanting.len(), "spreads reported to the new coordinator");
        if let Err(e) = self.out.send(to, &Msg::Spread(SpreadMsg::Report(report))) {
            tracing::warn!(rank = %self.rank, error = %e, "could not report the spreads to the new coordinator");
        }
    }
}

impl Spreader {
    /// Every spread this rank is in, for a coordinator that takes over.
    fn report(&self) -> Report {
        let mut r = Report {
            finished: self.finished.iter().copied().collect(),
            ..Report::default()
        };
        for m in self.mine.values() {
            match (m.holding, m.from) {
                (true, _) => r.holding.push(m.opening.clone()),
                (false, from) => r.wanting.push((m.opening.clone(), from.map(|f| f.0))),
            }
        }
        r
    }
}
