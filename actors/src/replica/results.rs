//! Copies of roots' results, kept for their replacements (see
//! [`taskfold_core::results`] and the book's chapter Surviving failures of
//! the application, A replaced root).
//!
//! A root whose result became whole offers it here (this rank is its
//! buddy); the store fetches it with a one-sided get, checks its length
//! and checksum, keeps it in memory exposed under
//! [`held_result_key`], and answers. Unlike a copy of an original, which
//! goes when its reduction completes, a result's copy stays until its root
//! releases it (its application checkpointed past it) or the master drops
//! it: its own retention. Its bytes count against
//! [`crate::Config::replica_limit`] with the originals' copies, and at most
//! [`RESULTS_LIMIT`] copies are kept: an offer beyond either is refused,
//! loudly, and that result is not recoverable.
//!
//! When a root dies, its holder relays each copy it keeps of the root's
//! results to the next live rank after it (`ResultMsg::Relay`), which
//! fetches it from the holder's exposure and tells the master it keeps a
//! second copy (`ResultMsg::AlsoKept`): the holder's own death before the
//! root's replacement took its results then costs nothing. Where the job
//! may replace two ranks or more (`Config::further_result_copies`), the
//! holder relays each copy at once instead, with the root alive, and
//! where it may replace three or more, the second holder relays it once
//! more, to the next live rank after it that is neither the root nor the
//! first holder: that many deaths close together (the root's among them)
//! then still leave one. The first holder answers the root only once the
//! second holder said it keeps its copy (`ResultMsg::AlsoKept`, to the
//! master and to the holder that relayed it), or died, or
//! [`RELAY_ANSWER_WAIT`] passed: the root's application sees the result
//! once two copies exist, so that the root and its first holder dying
//! together after it did cost nothing.
//!
//! What a crash of this rank loses: the copies it held; the master then
//! answers their roots' replacements from a second copy if one was made,
//! else with `ResultLost`.

use super::ReplicaStore;
use actix::prelude::*;
use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use taskfold_core::replica;
use taskfold_core::results::{held_result_key, result_key, RESULTS_LIMIT};
use taskfold_core::wire::results::ResultMsg;
use taskfold_core::wire::Msg;
use taskfold_core::Rank;
use taskfold_transports::BufferKey;

/// The result copies one store keeps.
#[derive(Default)]
pub(crate) struct Held {
    /// (key, root) → bytes kept and their checksum.
    copies: HashMap<(u64, u32), (u64, u32)>,
    /// Of those, the second copies relayed by a dead root's holder.
    relayed: HashSet<(u64, u32)>,
    /// Copies this store relayed on (each once: the death notice may come
    /// again).
    relays_sent: HashSet<(u64, u32)>,
    /// Offers being fetched: (key, root) → offer number (a drop or a new
    /// offer meanwhile makes the fetch's answer stale).
    pending: HashMap<(u64, u32), u64>,
    next: u64,
    /// How many further copies of each root's result kept here are made
    /// at once (`Config::further_result_copies`), not only once the root
    /// died.
    pub(super) further: u32,
    /// Roots' offers this store kept and relayed on at once, whose answer
    /// waits for the relay's: (key, root) → the rank relayed to.
    answers_due: HashMap<(u64, u32), Rank>,
}

/// Longest a first holder waits for its relay's answer before it answers
/// the root all the same (its own copy is kept): a second holder that
/// refuses says nothing.
pub(crate) const RELAY_ANSWER_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// `from` keeps a copy of `root`'s result of `key` that this rank relayed
/// to it (`ResultMsg::AlsoKept`).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct RelayKeptIn {
    pub(crate) from: Rank,
    pub(crate) root: Rank,
    pub(crate) key: u64,
}

impl Held {
    /// The results kept, `(key, root)`.
    pub(crate) fn kept(&self) -> Vec<(u64, u32)> {
        self.copies.keys().copied().collect()
    }

    /// Of those, the second copies relayed to this rank.
    pub(crate) fn relayed(&self) -> Vec<(u64, u32)> {
        self.relayed.iter().copied().collect()
    }
}

/// A root offers its result of `key` (`from` is the root), or a dead
/// root's holder relays its copy (`from` is that holder).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ResultOfferIn {
    pub(crate) root: Rank,
    pub(crate) from: Rank,
    pub(crate) key: u64,
    pub(crate) len: u64,
    pub(crate) crc: u32,
    /// Copies still to make after this one (a relay's).
    pub(crate) more: u32,
}

impl ResultOfferIn {
    /// Whether a holder relays a dead root's result.
    fn relayed(&self) -> bool {
        self.from != self.root
    }

    /// The buffer the copy is fetched from.
    fn source(&self) -> BufferKey {
        match self.relayed() {
            true => BufferKey(held_result_key(self.key, self.root.0)),
            false => BufferKey(result_key(self.key)),
        }
    }
}

/// Drop the copies of `root`'s results of `keys`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ResultDropIn {
    pub(crate) root: Rank,
    pub(crate) keys: Vec<u64>,
}

impl Handler<ResultOfferIn> for ReplicaStore {
    type Result = ();

    fn handle(&mut self, m: ResultOfferIn, ctx: &mut Context<Self>) {
        let (key, root) = (m.key, m.root);
        let full = self.results.copies.len() >= RESULTS_LIMIT;
        if full || self.bytes + m.len > self.limit {
            metrics::counter!(crate::metrics::REPLICA_ERRORS).increment(1);
            tracing::error!(
                rank = self.rank,
                %root,
                key,
                copies = self.results.copies.len(),
                "result store full: a root's result is not kept (its replacement would get ResultLost)"
            );
            return self.result_answer(key, root, false, m.relayed(), m.from);
        }
        self.results.next += 1;
        let offer = self.results.next;
        self.results.pending.insert((key, root.0), offer);
        let relayed = m.relayed();
        let fetch = self.out.transport().get_within(m.from, m.source(), m.len);
        ctx.spawn(fetch.into_actor(self).map(move |got, act, ctx| {
            if act.results.pending.get(&(key, root.0)) != Some(&offer) {
                return; // dropped or offered again meanwhile
            }
            act.results.pending.remove(&(key, root.0));
            let checked = got.map_err(|e| e.to_string()).and_then(|got| {
                // A view of the root's memory is copied: the copy must
                // outlive the root's buffer, which it frees once answered.
                let buf = got.into_owned();
                let fits = buf.len() as u64 == m.len && replica::stored_crc(&buf) == Some(m.crc);
                match fits {
                    true => replica::verify(&buf)
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                        .map(|()| buf),
                    false => Err("not the result offered".into()),
                }
            });
            match checked {
                Ok(buf) => {
                    let bytes = taskfold_core::pool::bytes(buf);
                    act.keep_result(key, root, bytes, m.crc, (m.from, m.more), ctx)
                }
                Err(e) => {
                    tracing::warn!(rank = act.rank, %root, key, error = %e, "could not copy a root's result");
                    act.result_answer(key, root, false, relayed, m.from);
                }
            }
        }));
    }
}

impl ReplicaStore {
    /// Keeps `bytes` (checksum `crc`) as `root`'s result of `key`, exposed
    /// for its replacement, and says so to the root (or, for a copy
    /// relayed by `from`, to the master); then makes the further copies
    /// due (`more` of them after a relayed copy).
    fn keep_result(
        &mut self,
        key: u64,
        root: Rank,
        bytes: Bytes,
        crc: u32,
        (from, more): (Rank, u32),
        ctx: &mut Context<Self>,
    ) {
        let relayed = from != root;
        let len = bytes.len() as u64;
        if self.bytes + len > self.limit {
            // Other copies came in while this one was fetched.
            tracing::error!(rank = self.rank, %root, key, "result store full: a root's result is not kept");
            return self.result_answer(key, root, false, relayed, from);
        }
        if let Some((old, _)) = self.results.copies.insert((key, root.0), (len, crc)) {
            self.bytes -= old;
        }
        if relayed {
            self.results.relayed.insert((key, root.0));
        }
        self.bytes += len;
        self.gauge();
        self.out
            .transport()
            .expose(BufferKey(held_result_key(key, root.0)), bytes);
        metrics::counter!(crate::metrics::RESULTS_KEPT).increment(1);
        // The copies still to make after this one, each from the one before.
        let more = match relayed {
            false => self.results.further,
            true => more,
        };
        let to = (more > 0).then(|| self.relay_target(root, from)).flatten();
        match (relayed, to) {
            // The root hears once the next copy is kept too (or not soon).
            (false, Some(to)) => {
                self.results.answers_due.insert((key, root.0), to);
                ctx.run_later(RELAY_ANSWER_WAIT, move |act, _| {
                    act.answer_due(key, root, |t| t == to);
                });
            }
            _ => self.result_answer(key, root, true, relayed, from),
        }
        if let Some(to) = to {
            self.relay(key, root, (len, crc), (to, more - 1));
        }
    }

    /// Answers the root; a relayed copy kept is told to the master instead
    /// (the root may be dead), and to the holder that relayed it (`from`),
    /// whose answer to the root may wait for it.
    fn result_answer(&self, key: u64, root: Rank, ok: bool, relayed: bool, from: Rank) {
        let msg = match relayed {
            false => ResultMsg::Stored { key, ok },
            true if ok => ResultMsg::AlsoKept {
                root: root.0,
                key,
                first: from.0,
            },
            true => return,
        };
        let master = self.out.master();
        let to = if relayed { master } else { root };
        let _ = self.out.send(to, &Msg::Results(msg.clone()));
        if relayed && from != master {
            let _ = self.out.send(from, &Msg::Results(msg));
        }
    }

    /// Answers `root`'s offer of `key` if its answer still waits for a
    /// relay to a rank `target` matches: its own copy is kept.
    fn answer_due(&mut self, key: u64, root: Rank, target: impl Fn(Rank) -> bool) {
        let due = self.results.answers_due.get(&(key, root.0)).copied();
        if due.is_some_and(target) {
            self.results.answers_due.remove(&(key, root.0));
            self.result_answer(key, root, true, false, root);
        }
    }

    /// `owner` died: the answers waiting for its copy go now; those to it
    /// as a root are not due any more.
    pub(super) fn answers_owner_died(&mut self, owner: Rank) {
        self.results
            .answers_due
            .retain(|&(_, root), _| root != owner.0);
        let waiting: Vec<(u64, u32)> = self
            .results
            .answers_due
            .iter()
            .filter(|(_, &to)| to == owner)
            .map(|(&k, _)| k)
            .collect();
        for (key, root) in waiting {
            self.answer_due(key, Rank(root), |t| t == owner);
        }
    }

    /// `root` died: relays each copy this rank keeps of its results (not
    /// one relayed to it) to the next live rank after it.
    pub(super) fn relay_results(&mut self, root: Rank) {
        let mine: Vec<(u64, (u64, u32))> = self
            .results
            .copies
            .iter()
            .filter(|(k, _)| k.1 == root.0 && !self.results.relayed.contains(k))
            .filter(|(k, _)| !self.results.relays_sent.contains(k))
            .map(|(&(key, _), &v)| (key, v))
            .collect();
        let Some(to) = self.relay_target(root, root) else {
            return;
        };
        for (key, copy) in mine {
            tracing::info!(rank = self.rank, %root, key, %to, "a dead root's result is copied on to a second holder");
            self.relay(key, root, copy, (to, 0));
        }
    }

    /// Offers the copy of `root`'s result of `key` kept here (its length
    /// and checksum) to `to`, as a further copy, after which `more` are
    /// still to make.
    fn relay(&mut self, key: u64, root: Rank, (len, crc): (u64, u32), (to, more): (Rank, u32)) {
        let msg = ResultMsg::Relay {
            root: root.0,
            key,
            len,
            crc,
            more,
        };
        self.results.relays_sent.insert((key, root.0));
        match self.out.send(to, &Msg::Results(msg)) {
            Ok(_) => {
                tracing::debug!(rank = self.rank, %root, key, %to, "a root's result is copied on to a second holder")
            }
            Err(e) => {
                tracing::warn!(rank = self.rank, %root, key, error = %e, "cannot copy a root's result on")
            }
        }
    }

    /// The rank that keeps a further copy: this rank's buddy over the
    /// whole job (as a root picks one), `root` and the holder that relayed
    /// this rank its copy (`from`) counted dead: each copy on a rank of
    /// its own.
    fn relay_target(&self, root: Rank, from: Rank) -> Option<Rank> {
        let view = self.out.view();
        let (size, mut dead) = {
            let v = view.read();
            (v.size(), v.unreachable())
        };
        let job = taskfold_core::Group::new(0..size, size).ok()?;
        dead.insert(root.0 as usize);
        dead.insert(from.0 as usize);
        let nodes = view.nodes();
        taskfold_core::replica::buddy_on(&job, Rank(self.rank), &dead, nodes.as_deref())
    }
}

impl ReplicaStore {
    /// Drops every copy of a root's result this store keeps, and forgets
    /// the fetches in flight (the job rolled back).
    pub(super) fn drop_all_results(&mut self) {
        for ((key, root), (len, _)) in std::mem::take(&mut self.results.copies) {
            self.bytes -= len;
            self.out
                .transport()
                .withdraw(BufferKey(held_result_key(key, root)));
        }
        self.results.pending.clear();
        self.results.relayed.clear();
        self.results.relays_sent.clear();
        self.results.answers_due.clear();
        self.gauge();
    }
}

impl Handler<RelayKeptIn> for ReplicaStore {
    type Result = ();

    fn handle(&mut self, m: RelayKeptIn, _: &mut Context<Self>) {
        self.answer_due(m.key, m.root, |to| to == m.from);
    }
}

impl Handler<ResultDropIn> for ReplicaStore {
    type Result = ();

    fn handle(&mut self, m: ResultDropIn, _: &mut Context<Self>) {
        for key in m.keys {
            self.results.pending.remove(&(key, m.root.0));
            self.results.answers_due.remove(&(key, m.root.0));
            self.results.relayed.remove(&(key, m.root.0));
            self.results.relays_sent.remove(&(key, m.root.0));
            if let Some((len, _)) = self.results.copies.remove(&(key, m.root.0)) {
                self.bytes -= len;
                self.out
                    .transport()
                    .withdraw(BufferKey(held_result_key(key, m.root.0)));
            }
        }
        self.gauge();
    }
}
