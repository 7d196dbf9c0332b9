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
//! What a crash of this rank loses: the copies it held; the master then
//! answers their roots' replacements with `ResultLost`.

use super::ReplicaStore;
use actix::prelude::*;
use bytes::Bytes;
use std::collections::HashMap;
use taskfold_core::replica;
use taskfold_core::results::{held_result_key, result_key, RESULTS_LIMIT};
use taskfold_core::wire::results::ResultMsg;
use taskfold_core::wire::Msg;
use taskfold_core::Rank;
use taskfold_transports::BufferKey;

/// The result copies one store keeps.
#[derive(Default)]
pub(crate) struct Held {
    /// (key, root) → bytes kept.
    copies: HashMap<(u64, u32), u64>,
    /// Offers being fetched: (key, root) → offer number (a drop or a new
    /// offer meanwhile makes the fetch's answer stale).
    pending: HashMap<(u64, u32), u64>,
    next: u64,
}

impl Held {
    /// The results kept, `(key, root)`.
    pub(crate) fn kept(&self) -> Vec<(u64, u32)> {
        self.copies.keys().copied().collect()
    }
}

/// A root offers its result of `key`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ResultOfferIn {
    pub(crate) root: Rank,
    pub(crate) key: u64,
    pub(crate) len: u64,
    pub(crate) crc: u32,
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
            return self.result_answer(key, root, false);
        }
        self.results.next += 1;
        let offer = self.results.next;
        self.results.pending.insert((key, root.0), offer);
        let fetch = self
            .out
            .transport()
            .get_within(root, BufferKey(result_key(key)), m.len);
        ctx.spawn(fetch.into_actor(self).map(move |got, act, _| {
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
                Ok(buf) => act.keep_result(key, root, taskfold_core::pool::bytes(buf)),
                Err(e) => {
                    tracing::warn!(rank = act.rank, %root, key, error = %e, "could not copy a root's result");
                    act.result_answer(key, root, false);
                }
            }
        }));
    }
}

impl ReplicaStore {
    /// Keeps `bytes` as `root`'s result of `key`, exposed for its
    /// replacement, and says so to the root.
    fn keep_result(&mut self, key: u64, root: Rank, bytes: Bytes) {
        let len = bytes.len() as u64;
        if self.bytes + len > self.limit {
            // Other copies came in while this one was fetched.
            tracing::error!(rank = self.rank, %root, key, "result store full: a root's result is not kept");
            return self.result_answer(key, root, false);
        }
        if let Some(old) = self.results.copies.insert((key, root.0), len) {
            self.bytes -= old;
        }
        self.bytes += len;
        self.gauge();
        self.out
            .transport()
            .expose(BufferKey(held_result_key(key, root.0)), bytes);
        metrics::counter!(crate::metrics::RESULTS_KEPT).increment(1);
        self.result_answer(key, root, true);
    }

    fn result_answer(&self, key: u64, root: Rank, ok: bool) {
        let _ = self
            .out
            .send(root, &Msg::Results(ResultMsg::Stored { key, ok }));
    }
}

impl Handler<ResultDropIn> for ReplicaStore {
    type Result = ();

    fn handle(&mut self, m: ResultDropIn, _: &mut Context<Self>) {
        for key in m.keys {
            self.results.pending.remove(&(key, m.root.0));
            if let Some(len) = self.results.copies.remove(&(key, m.root.0)) {
                self.bytes -= len;
                self.out
                    .transport()
                    .withdraw(BufferKey(held_result_key(key, m.root.0)));
            }
        }
        self.gauge();
    }
}
