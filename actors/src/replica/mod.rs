//! The replica store actor (every rank): keeps copies of other ranks'
//! originals (this rank is their buddy) and serves them for recovery.
//!
//! A buddy copy is pulled with a one-sided get of the owner's exposed
//! original (or, for a small original of an owner on another node, taken
//! from the bytes its offer carries), verified against its checksum, kept
//! in memory, exposed for gets under
//! [`taskfold_core::replica::replica_key`], and announced to the owner
//! (acknowledgement, if it asked) and to the master (so it knows the
//! original is recoverable). It is not written to this rank's disk: the
//! owner's own disk copy is the other of the two copies a single failure
//! needs, and a third would cost a copy of every original that recovery
//! never reads.
//!
//! A buddy on the owner's node (same node token) does not copy the bytes:
//! - the owner offers once its disk copy is written, naming the file, and
//!   the buddy maps it read-only ([`taskfold_transports::shared_file`])
//!   after checking its header against the offer;
//! - or, once the owner knows that its buddy maps its shared heap (the
//!   answer to an earlier offer said so), it writes no disk copy of an
//!   original in that heap, and the buddy's mapping is the second copy: a
//!   *standing copy*, which the owner keeps unchanged (see the worker's
//!   `fail_all` for the abnormal ends) and the mapping keeps if the owner
//!   dies. With synchronous durability the owner still offers it (the
//!   buddy keeps a view, [`taskfold_transports::SameNode::view`], and
//!   answers). With asynchronous durability nothing is offered: the join
//!   names the copy (`Joining::standing`), and only if the owner dies does
//!   the master offer the original to this store on its behalf, before it
//!   declares the owner failed. The owner's heap stays mapped here until
//!   then, even after its link went down (`PeerGone`, `OwnerDied`).
//!
//! A node's failure takes both with it either way; a process's death leaves
//! the file or the mapping. If neither works, the buddy copies the bytes
//! with a get (a loan, read in place, where the transport can). Copies are
//! deleted when their reduction completes. Memory held by copies is bounded by
//! [`crate::Config::replica_limit`]: offers beyond it are refused, and the
//! owner's original is then not recoverable (a typed error if it is needed).
//!
//! What a crash of this rank loses: the copies it held; the master then
//! treats those originals as unrecoverable if their owners die too.

mod adopt;
pub(crate) mod disk;
mod offer;
mod results;
pub(crate) mod stale;

pub(crate) use adopt::AdoptDiskCopy;
pub(crate) use disk::ReplicaDisk;
pub(crate) use offer::OfferIn;

#[cfg(test)]
mod tests;
pub(crate) use results::{RelayKeptIn, ResultDropIn, ResultOfferIn};

use crate::outbox::Outbox;
use actix::prelude::*;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Arc;
use taskfold_core::replica::{self, replica_key};
use taskfold_core::Rank;
use taskfold_transports::BufferKey;

/// A copy kept of an owner's original.
struct Held {
    len: u64,
    /// The last completion number of its key that its owner had seen when
    /// it offered the copy (`Msg::ReplicaOffer::after`): a `DropKey` up to
    /// that number is for an earlier use of the key and leaves it.
    after: u64,
}

/// The replica store of one rank.
pub struct ReplicaStore {
    rank: u32,
    out: Outbox,
    disk: Arc<ReplicaDisk>,
    limit: u64,
    /// The copies kept: (key, owner) → its length and the last completion
    /// number of `key` its owner had seen when it offered it.
    held: HashMap<(u64, u32), Held>,
    /// Copies that are views of their owner's buffer, with a tag instead of
    /// a checksum (`TFRV`): given one when their owner dies (`OwnerDied`).
    viewed: HashMap<(u64, u32), Bytes>,
    bytes: u64,
    /// Offers being fetched: (key, owner) → offer number, so that a copy
    /// that arrives after its reduction ended (or was re-offered) is
    /// dropped, and the offer's completion number (as in `held`).
    pending: HashMap<(u64, u32), (u64, u64)>,
    next_offer: u64,
    /// Owners declared failed (`OwnerDied`): a view of one of their
    /// originals made after that (an offer read after its owner died) is
    /// given a checksum at once.
    dead_owners: std::collections::HashSet<u32>,
    /// This actor's address (to send itself `OwnerDied`).
    me: Option<Addr<ReplicaStore>>,
    /// Owners told that this rank maps their shared heap: their later
    /// originals there are standing copies (`Joining::standing`), never
    /// offered unless they die, when the master offers them on their
    /// behalf. Their heap stays mapped after their link goes down until
    /// they are declared failed (`OwnerDied`).
    standing_owners: std::collections::HashSet<u32>,
    /// Standing owners whose link went down and every frame of which was
    /// read (`PeerGone`): their memory is forgotten once they are declared
    /// failed.
    gone: std::collections::HashSet<u32>,
    /// Copies of roots' results, kept until their roots release them
    /// (see `results`).
    results: results::Held,
}

impl ReplicaStore {
    pub(crate) fn new(rank: u32, out: Outbox, disk: Arc<ReplicaDisk>, limit: u64) -> Self {
        ReplicaStore {
            rank,
            out,
            disk,
            limit,
            held: HashMap::new(),
            viewed: HashMap::new(),
            bytes: 0,
            pending: HashMap::new(),
            next_offer: 0,
            dead_owners: std::collections::HashSet::new(),
            me: None,
            standing_owners: std::collections::HashSet::new(),
            gone: std::collections::HashSet::new(),
            results: Default::default(),
        }
    }

    /// Makes `further` copies of each root's result kept here at once
    /// (see `Config::further_result_copies`).
    pub(crate) fn with_further_result_copies(mut self, further: u32) -> Self {
        self.results.further = further;
        self
    }

    fn gauge(&self) {
        metrics::gauge!(crate::metrics::REPLICA_MEMORY_BYTES, "rank" => self.rank.to_string())
            .set(self.bytes as f64);
    }
}

impl Actor for ReplicaStore {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.me = Some(ctx.address());
    }
}

/// Which copies of other ranks' originals, and of roots' results, this
/// store keeps (for a new master, see `taskfold_core::failover`).
#[derive(Message)]
#[rtype(result = "Listed")]
pub(crate) struct ListCopies;

impl Handler<ListCopies> for ReplicaStore {
    type Result = MessageResult<ListCopies>;

    fn handle(&mut self, _: ListCopies, _: &mut Context<Self>) -> Self::Result {
        MessageResult(Listed {
            copies: self
                .held
                .keys()
                .chain(self.viewed.keys())
                .copied()
                .collect(),
            results: self.results.kept(),
            relayed: self.results.relayed(),
        })
    }
}

/// What a store keeps, for a report to a new master.
#[derive(Default)]
pub(crate) struct Listed {
    /// Copies of other ranks' originals: `(key, owner)`.
    pub(crate) copies: Vec<(u64, u32)>,
    /// Roots' results: `(key, root)`.
    pub(crate) results: Vec<(u64, u32)>,
    /// Of those, the second copies relayed to this store.
    pub(crate) relayed: Vec<(u64, u32)>,
}

/// Reduction `key` ended: drop every copy of it, in memory and on disk —
/// but the copies offered for a later use of the key.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct DropKey {
    pub(crate) key: u64,
    /// The master's number of the completion that ended it here, or
    /// `u64::MAX` if it ended otherwise: only copies whose owners had seen
    /// a completion of `key` numbered below it go. An owner that saw this
    /// completion, or a later one, offered its copy for a later use of
    /// `key`, which may reach this store first (see the book's
    /// Architecture chapter, Copies of a reused key).
    pub(crate) upto: u64,
    /// Where this rank's own disk copy of its original of `key`, if it may
    /// have written one, is removed.
    pub(crate) disk: Removal,
}

/// How a rank's own disk copy of an original goes when its reduction ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Removal {
    /// None was written: no directory is read.
    Nothing,
    /// A small one (written on the actors' thread too): retired there, a
    /// rename, rather than for the price of a wake-up of a blocking thread
    /// per reduction; only older spares it pushes out of the bounds, which
    /// may be large, are deleted by a blocking task.
    Here,
    /// A large one: by a blocking task (its blocks may be freed).
    Blocking,
}

impl Removal {
    /// The removal of the disk copy of an original of `len` bytes, if one
    /// may have been written.
    pub(crate) fn of(written: bool, len: usize) -> Self {
        match (written, crate::worker::original_inline(len)) {
            (false, _) => Removal::Nothing,
            (true, true) => Removal::Here,
            (true, false) => Removal::Blocking,
        }
    }
}

impl Handler<DropKey> for ReplicaStore {
    type Result = ();

    fn handle(&mut self, m: DropKey, _: &mut Context<Self>) {
        // An owner may be waiting for our answer before it joins (synchronous
        // durability): refuse, so it joins and learns how the reduction ended.
        let waiting: Vec<u32> = self
            .pending
            .iter()
            .filter(|((k, _), (_, after))| *k == m.key && *after < m.upto)
            .map(|((_, o), _)| *o)
            .collect();
        for owner in waiting {
            self.pending.remove(&(m.key, owner));
            self.ack(m.key, Rank(owner), false, false);
        }
        let owners: Vec<u32> = self
            .held
            .iter()
            .filter(|((k, _), h)| *k == m.key && h.after < m.upto)
            .map(|((_, o), _)| *o)
            .collect();
        for o in owners {
            if let Some(h) = self.held.remove(&(m.key, o)) {
                self.bytes -= h.len;
            }
            self.viewed.remove(&(m.key, o));
            self.out
                .transport()
                .withdraw(BufferKey(replica_key(m.key, o)));
        }
        self.gauge();
        match m.disk {
            Removal::Nothing => {}
            Removal::Here => {
                // Spares pushed out may be large: deleted elsewhere.
                let evicted = self.disk.retire_key(m.key);
                if !evicted.is_empty() {
                    actix_rt::task::spawn_blocking(move || ReplicaDisk::discard(evicted));
                }
            }
            Removal::Blocking => {
                let disk = self.disk.clone();
                actix_rt::task::spawn_blocking(move || disk.remove_key(m.key));
            }
        }
    }
}

/// The job rolls back (global restart): every reduction of the epoch
/// ends, and the next epoch numbers its reductions afresh, so a copy kept
/// of another rank's original, or of a root's result, could be taken for
/// one of a later reduction with the same key. Every such copy goes (this
/// rank's own disk copies go as its reductions end).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct RolledBack;

impl Handler<RolledBack> for ReplicaStore {
    type Result = ();

    fn handle(&mut self, _: RolledBack, ctx: &mut Context<Self>) {
        let mut keys: Vec<u64> = self.held.keys().map(|(k, _)| *k).collect();
        keys.extend(self.pending.keys().map(|(k, _)| *k));
        keys.sort_unstable();
        keys.dedup();
        for key in keys {
            let m = DropKey {
                key,
                upto: u64::MAX,
                disk: Removal::Nothing,
            };
            <Self as Handler<DropKey>>::handle(self, m, ctx);
        }
        self.drop_all_results();
    }
}

/// `owner` was declared failed: the views this rank keeps of its originals
/// (kept in its memory, so with a tag instead of a checksum) are final now,
/// and each is replaced by a checksummed copy before ranks read it for
/// recovery, so that a read from another node is verified end to end like
/// any other copy. A rank that asks before the copy is made reads the view,
/// its length checked.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct OwnerDied {
    pub(crate) owner: Rank,
}

impl Handler<OwnerDied> for ReplicaStore {
    type Result = ();

    fn handle(&mut self, m: OwnerDied, ctx: &mut Context<Self>) {
        self.dead_owners.insert(m.owner.0);
        self.relay_results(m.owner);
        self.answers_owner_died(m.owner);
        // The master offered this rank the owner's standing copies before it
        // declared the owner failed, and those offers were read before this
        // notice: the views taken keep what they need of the owner's heap.
        // Its memory is forgotten now if every frame the owner sent was
        // read too (an offer of its own may still be on its way), else
        // when that is so (`PeerGone`).
        self.standing_owners.remove(&m.owner.0);
        if self.gone.remove(&m.owner.0) {
            if let Some(s) = self.out.transport().same_node() {
                s.forget_memory(m.owner);
            }
        }
        let views: Vec<((u64, u32), Bytes)> = self
            .viewed
            .iter()
            .filter(|((_, o), _)| *o == m.owner.0)
            .map(|(k, b)| (*k, b.clone()))
            .collect();
        for ((key, owner), view) in views {
            let checked = actix_rt::task::spawn_blocking(move || {
                replica::with_checksum(&view).map(Bytes::from)
            });
            ctx.spawn(checked.into_actor(self).map(move |res, act, _| {
                // Dropped meanwhile (the reduction ended): nothing to replace.
                if act.viewed.remove(&(key, owner)).is_none() {
                    return;
                }
                if let Ok(Some(copy)) = res {
                    metrics::counter!(crate::metrics::REPLICAS_CHECKSUMMED).increment(1);
                    tracing::info!(
                        rank = act.rank,
                        owner,
                        key,
                        "the view of a dead rank's original is now a checksummed copy"
                    );
                    act.out
                        .transport()
                        .expose(BufferKey(replica_key(key, owner)), copy);
                }
            }));
        }
    }
}

/// The link to `peer` went down, and every frame it sent before has been
/// handed to this store: nothing more is read from its memory (see
/// `taskfold_transports::SameNode::view_retained`).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct PeerGone {
    pub(crate) peer: Rank,
}

impl Handler<PeerGone> for ReplicaStore {
    type Result = ();

    fn handle(&mut self, m: PeerGone, _: &mut Context<Self>) {
        // An owner with standing copies here: the master may still offer
        // them on its behalf, until it declares it failed (`OwnerDied`).
        if self.standing_owners.contains(&m.peer.0) {
            self.gone.insert(m.peer.0);
        } else {
            if let Some(s) = self.out.transport().same_node() {
                s.forget_memory(m.peer);
            }
        }
    }
}
