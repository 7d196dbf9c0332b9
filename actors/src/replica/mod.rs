//! The replica store actor (every rank): keeps copies of other ranks'
//! originals (this rank is their buddy) and serves them for recovery.
//!
//! A buddy copy is pulled with a one-sided get of the owner's exposed
//! original, verified against its checksum, kept in memory, exposed for
//! gets under [`taskfold_core::replica::replica_key`], and announced to the
//! owner (acknowledgement) and to the master (so it knows the original is
//! recoverable). It is not written to this rank's disk: the owner's own
//! disk copy is the other of the two copies (DESIGN.md §2), and a third,
//! which recovery never read, cost a copy of every original. Copies are deleted when their
//! reduction completes. Memory held by copies is bounded by
//! [`crate::Config::replica_limit`]: offers beyond it are refused, and the
//! owner's original is then not recoverable (a typed error if it is needed).
//!
//! What a crash of this rank loses: the copies it held; the master then
//! treats those originals as unrecoverable if their owners die too.

pub(crate) mod disk;

pub use disk::ReplicaDisk;

use crate::outbox::Outbox;
use actix::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;
use taskfold_core::replica::{self, original_key, replica_key};
use taskfold_core::wire::Msg;
use taskfold_core::Rank;
use taskfold_transports::{BufferKey, TransportError};

/// The replica store of one rank.
pub struct ReplicaStore {
    rank: u32,
    out: Outbox,
    disk: Arc<ReplicaDisk>,
    limit: u64,
    held: HashMap<(u64, u32), u64>,
    bytes: u64,
    /// Offers being fetched: (key, owner) → offer number, so that a copy
    /// that arrives after its reduction ended (or was re-offered) is dropped.
    pending: HashMap<(u64, u32), u64>,
    next_offer: u64,
}

impl ReplicaStore {
    pub(crate) fn new(rank: u32, out: Outbox, disk: Arc<ReplicaDisk>, limit: u64) -> Self {
        ReplicaStore {
            rank,
            out,
            disk,
            limit,
            held: HashMap::new(),
            bytes: 0,
            pending: HashMap::new(),
            next_offer: 0,
        }
    }

    fn gauge(&self) {
        metrics::gauge!(crate::metrics::REPLICA_MEMORY_BYTES, "rank" => self.rank.to_string())
            .set(self.bytes as f64);
    }
}

impl Actor for ReplicaStore {
    type Context = Context<Self>;
}

/// An owner offers a copy of its original.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct OfferIn {
    pub(crate) key: u64,
    pub(crate) owner: Rank,
    pub(crate) len: u64,
    pub(crate) crc: u32,
}

impl Handler<OfferIn> for ReplicaStore {
    type Result = ();

    fn handle(&mut self, m: OfferIn, ctx: &mut Context<Self>) {
        let (key, owner) = (m.key, m.owner);
        if self.bytes + m.len > self.limit {
            tracing::warn!(rank = self.rank, %owner, "replica store full; offer refused");
            let _ = self.out.send(
                owner,
                &Msg::ReplicaAck {
                    key,
                    owner: owner.0,
                    ok: false,
                },
            );
            return;
        }
        self.next_offer += 1;
        let offer = self.next_offer;
        self.pending.insert((key, owner.0), offer);
        let fetch = self
            .out
            .transport()
            .get(owner, BufferKey(original_key(key)));
        ctx.spawn(fetch.into_actor(self).map(move |res, act, _| {
            if act.pending.get(&(key, owner.0)) != Some(&offer) {
                return; // the reduction ended meanwhile
            }
            act.pending.remove(&(key, owner.0));
            if let Err(TransportError::NotExposed { .. }) = &res {
                // The owner withdrew its original: the reduction ended there
                // before this rank heard of it. Nothing is lost (it no longer
                // needs a copy); say so, and nothing more.
                tracing::debug!(rank = act.rank, %owner, key, "the original was withdrawn before it was copied");
                let _ = act.out.send(owner, &Msg::ReplicaAck { key, owner: owner.0, ok: false });
                return;
            }
            let checked = res.map_err(|e| e.to_string()).and_then(|buf| {
                replica::verify(&buf).map_err(|e| e.to_string())?;
                if replica::stored_crc(&buf) != Some(m.crc) {
                    return Err("the copy is not the one offered".into());
                }
                Ok(taskfold_core::pool::bytes(buf))
            });
            match checked {
                Ok(bytes) => {
                    let len = bytes.len() as u64;
                    act.out.transport().expose(BufferKey(replica_key(key, owner.0)), bytes.clone());
                    if act.held.insert((key, owner.0), len).is_none() {
                        act.bytes += len;
                    }
                    act.gauge();
                    let _ = act.out.send(Rank(0), &Msg::Replicated { key, owner: owner.0 });
                    let _ = act.out.send(owner, &Msg::ReplicaAck { key, owner: owner.0, ok: true });
                }
                Err(e) => {
                    tracing::warn!(rank = act.rank, %owner, error = %e, "could not copy an original");
                    let _ = act.out.send(owner, &Msg::ReplicaAck { key, owner: owner.0, ok: false });
                }
            }
        }));
    }
}

/// Reduction `key` ended: drop every copy of it, in memory and on disk.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct DropKey {
    pub(crate) key: u64,
}

impl Handler<DropKey> for ReplicaStore {
    type Result = ();

    fn handle(&mut self, m: DropKey, _: &mut Context<Self>) {
        // An owner may be waiting for our answer before it joins (synchronous
        // durability): refuse, so it joins and learns how the reduction ended.
        let waiting: Vec<u32> = self
            .pending
            .keys()
            .filter(|(k, _)| *k == m.key)
            .map(|(_, o)| *o)
            .collect();
        for owner in waiting {
            self.pending.remove(&(m.key, owner));
            let _ = self.out.send(
                Rank(owner),
                &Msg::ReplicaAck {
                    key: m.key,
                    owner,
                    ok: false,
                },
            );
        }
        let owners: Vec<u32> = self
            .held
            .keys()
            .filter(|(k, _)| *k == m.key)
            .map(|(_, o)| *o)
            .collect();
        for o in owners {
            if let Some(len) = self.held.remove(&(m.key, o)) {
                self.bytes -= len;
            }
            self.out
                .transport()
                .withdraw(BufferKey(replica_key(m.key, o)));
        }
        self.gauge();
        let disk = self.disk.clone();
        actix_rt::task::spawn_blocking(move || disk.remove_key(m.key));
    }
}
