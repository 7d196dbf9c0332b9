//! The replica store actor (every rank): keeps copies of other ranks'
//! originals (this rank is their buddy) and serves them for recovery.
//!
//! A buddy copy is pulled with a one-sided get of the owner's exposed
//! original, verified against its checksum, kept in memory, exposed for
//! gets under [`taskfold_core::replica::replica_key`], and announced to the
//! owner (acknowledgement) and to the master (so it knows the original is
//! recoverable). It is not written to this rank's disk: the owner's own
//! disk copy is the other of the two copies a single failure needs, and a
//! third would cost a copy of every original that recovery never reads.
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
mod results;
pub(crate) mod stale;

pub(crate) use adopt::AdoptDiskCopy;
pub(crate) use disk::ReplicaDisk;

#[cfg(test)]
mod tests;
pub(crate) use results::{RelayKeptIn, ResultDropIn, ResultOfferIn};

use crate::outbox::Outbox;
use actix::prelude::*;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Arc;
use taskfold_core::replica::{self, original_key, replica_key, HEADER_LEN};
use taskfold_core::wire::Msg;
use taskfold_core::Rank;
use taskfold_transports::{shared_file, BufferKey, Received, TransportError};

/// The replica store of one rank.
pub struct ReplicaStore {
    rank: u32,
    out: Outbox,
    disk: Arc<ReplicaDisk>,
    limit: u64,
    held: HashMap<(u64, u32), u64>,
    /// Copies that are views of their owner's buffer, with a tag instead of
    /// a checksum (`TFRV`): given one when their owner dies (`OwnerDied`).
    viewed: HashMap<(u64, u32), Bytes>,
    bytes: u64,
    /// Offers being fetched: (key, owner) → offer number, so that a copy
    /// that arrives after its reduction ended (or was re-offered) is dropped.
    pending: HashMap<(u64, u32), u64>,
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

/// An owner offers a copy of its original.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct OfferIn {
    pub(crate) key: u64,
    pub(crate) owner: Rank,
    pub(crate) len: u64,
    pub(crate) crc: u32,
    /// The owner's node token.
    pub(crate) node: u64,
    /// The owner's disk copy, if written.
    pub(crate) file: Option<String>,
    /// Where the original lies in the owner's shared memory.
    pub(crate) heap: Option<taskfold_transports::Locator>,
    /// A place in the owner's heap, to map it ahead (see the message).
    pub(crate) warm: Option<taskfold_transports::Locator>,
    /// Whether the owner wants a positive answer.
    pub(crate) wants_ack: bool,
}

impl Handler<OfferIn> for ReplicaStore {
    type Result = ();

    /// Keeps a copy of the offered original by the cheapest way that
    /// works: a mapping of the owner's disk copy, a view of its buffer in
    /// place (both on the owner's node), else a fetch.
    fn handle(&mut self, m: OfferIn, ctx: &mut Context<Self>) {
        let (key, owner) = (m.key, m.owner);
        tracing::debug!(rank = self.rank, %owner, key, heap = m.heap.is_some(), "replica offer");
        if self.bytes + m.len > self.limit {
            tracing::warn!(rank = self.rank, %owner, "replica store full; offer refused");
            self.refuse(key, owner, false);
            return;
        }
        let same_node = m.node != 0 && m.node == shared_file::node_token();
        if same_node && (self.map_disk_copy(&m) || self.view_in_place(&m)) {
            return;
        }
        self.fetch(m, same_node, ctx);
    }
}

impl ReplicaStore {
    /// Keeps a same-node owner's disk copy by mapping it; false if there is
    /// none or it is not the one offered.
    fn map_disk_copy(&mut self, m: &OfferIn) -> bool {
        let Some(path) = m.file.as_deref() else {
            return false;
        };
        match map_copy(path, m.len, m.crc) {
            Ok(bytes) => {
                metrics::counter!(crate::metrics::REPLICAS_MAPPED).increment(1);
                // Maps the owner's heap now (the view itself is not
                // needed): its later originals are standing copies there,
                // which can still be read after the owner died
                // (`view_retained`).
                let mapped = m
                    .warm
                    .as_ref()
                    .or(m.heap.as_ref())
                    .and_then(|at| self.out.transport().same_node()?.view(m.owner, at))
                    .is_some();
                self.keep(m.key, m.owner, bytes, mapped, m.wants_ack);
                true
            }
            // Gone (the reduction ended there) or not the one offered:
            // copy the bytes as from another node.
            Err(e) => {
                tracing::debug!(rank = self.rank, owner = %m.owner, error = %e, "cannot map the owner's disk copy");
                false
            }
        }
    }

    /// Keeps a same-node owner's buffer as a view of its heap: no request,
    /// no copy. The mapping keeps the pages if the owner dies; the owner
    /// keeps them unchanged meanwhile. Read also if the owner died since it
    /// sent the offer, or if the master makes the offer on behalf of a dead
    /// owner whose standing copy this is (`Joining::standing`): its heap
    /// stays mapped here until this rank has read every offer it sent
    /// (`PeerGone`), and, for an owner with standing copies here, until it
    /// is declared failed (`OwnerDied`). False if it cannot be read so.
    fn view_in_place(&mut self, m: &OfferIn) -> bool {
        let Some(at) = m.heap.as_ref() else {
            return false;
        };
        let in_place = self.out.transport().same_node();
        match in_place.and_then(|s| s.view_retained(m.owner, at)) {
            Some(view) if is_offered(&view, m.len, m.crc, replica::held_len) => {
                metrics::counter!(crate::metrics::REPLICAS_MAPPED).increment(1);
                self.keep(m.key, m.owner, view.into_bytes(), true, m.wants_ack);
                true
            }
            Some(_) => {
                tracing::debug!(rank = self.rank, owner = %m.owner, "the owner's buffer is not the original offered");
                false
            }
            None => false,
        }
    }

    /// Fetches the offered original from its owner. On the owner's node
    /// with no disk copy named, the owner's buffer itself is asked for: a
    /// transport that can lends a read-only view of it instead of a copy.
    fn fetch(&mut self, m: OfferIn, same_node: bool, ctx: &mut Context<Self>) {
        let (key, owner) = (m.key, m.owner);
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
                act.refuse(key, owner, same_node);
                return;
            }
            match res.map_err(|e| e.to_string()).and_then(|got| fetched(got, &m, same_node)) {
                Ok((bytes, mapped)) => act.keep(key, owner, bytes, mapped, m.wants_ack),
                Err(e) => {
                    tracing::warn!(rank = act.rank, %owner, error = %e, "could not copy an original");
                    act.refuse(key, owner, same_node);
                }
            }
        }));
    }
}

/// The fetched original `got`, checked against the offer `m`: the bytes to
/// keep, and whether they are a view of the owner's memory.
fn fetched(got: Received, m: &OfferIn, same_node: bool) -> Result<(Bytes, bool), String> {
    if !is_offered(&got, m.len, m.crc, replica::held_len) {
        return Err("the copy is not the one offered".into());
    }
    match got {
        // The owner's own bytes, lent (kept unchanged while the view
        // lives; if it dies, the view keeps its pages): nothing was moved
        // that could have been damaged, and the checksum is verified
        // whenever recovery reads them.
        Received::Shared(view) => {
            metrics::counter!(crate::metrics::REPLICAS_MAPPED).increment(1);
            Ok((Bytes::from_owner(view), same_node))
        }
        // A copy: checked against its checksum (an original sealed to be
        // viewed carries a tag instead; its bytes came over a checksummed
        // stream).
        Received::Owned(buf) => {
            replica::verify_held(&buf).map_err(|e| e.to_string())?;
            Ok((taskfold_core::pool::bytes(buf), false))
        }
    }
}

impl ReplicaStore {
    /// Keeps `bytes` as the copy of `owner`'s original of `key`: exposed for
    /// recovery, counted, and announced to the master and the owner (with
    /// `mapped`: this rank maps the owner's heap, so the owner's later
    /// originals there are standing copies).
    fn keep(&mut self, key: u64, owner: Rank, bytes: Bytes, mapped: bool, ack: bool) {
        let len = bytes.len() as u64;
        if replica::is_viewed(&bytes) {
            self.viewed.insert((key, owner.0), bytes.clone());
            if self.dead_owners.contains(&owner.0) {
                // Read after its owner was declared failed: checksummed
                // now, as the views made before were then.
                if let Some(me) = &self.me {
                    me.do_send(OwnerDied { owner });
                }
            }
        } else {
            self.viewed.remove(&(key, owner.0));
        }
        self.out
            .transport()
            .expose(BufferKey(replica_key(key, owner.0)), bytes);
        if self.held.insert((key, owner.0), len).is_none() {
            self.bytes += len;
        }
        self.gauge();
        let _ = self.out.to_master(&Msg::Replicated {
            key,
            owner: owner.0,
            ok: true,
        });
        if ack {
            if mapped {
                self.standing_owners.insert(owner.0);
            }
            self.ack(key, owner, true, mapped);
        }
    }

    /// Refuses a copy of `owner`'s original of `key`: tells the owner, and
    /// the master (which may hold the reduction until this buddy answers,
    /// see `Joining::standing`).
    fn refuse(&self, key: u64, owner: Rank, same_node: bool) {
        let _ = self.out.to_master(&Msg::Replicated {
            key,
            owner: owner.0,
            ok: false,
        });
        self.ack(key, owner, false, same_node);
    }

    /// Tells `owner` whether its original of `key` is stored here, and
    /// whether this rank maps its heap (`same_node`).
    fn ack(&self, key: u64, owner: Rank, ok: bool, same_node: bool) {
        let msg = Msg::ReplicaAck {
            key,
            owner: owner.0,
            ok,
            same_node,
        };
        let _ = self.out.send(owner, &msg);
    }
}

/// Whether `got` is the replica buffer offered: `len` bytes in all, as its
/// header says (read by `len_of`: a file's header must be checksummed, a
/// buffer in memory may carry a tag instead), and the checksum (or tag)
/// `crc` in that header.
fn is_offered(got: &[u8], len: u64, crc: u32, len_of: fn(&[u8]) -> Option<u64>) -> bool {
    got.len() as u64 == len
        && len_of(got).map(|l| l + HEADER_LEN as u64) == Some(len)
        && replica::stored_crc(got) == Some(crc)
}

/// Maps the owner's disk copy at `path` if it is the offered one (its
/// header names `len` bytes in all and the checksum `crc`). The payload's
/// checksum is verified when the copy is read for recovery.
fn map_copy(path: &str, len: u64, crc: u32) -> Result<Bytes, String> {
    let bytes = shared_file::map(std::path::Path::new(path), len).map_err(|e| e.to_string())?;
    if !is_offered(&bytes, len, crc, replica::announced_len) {
        return Err(format!("{path} is not the copy offered"));
    }
    Ok(bytes)
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

/// Reduction `key` ended: drop every copy of it, in memory and on disk.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct DropKey {
    pub(crate) key: u64,
    /// This rank may have written a disk copy of its original of `key`
    /// (else there is no file to remove, and no blocking task is spent
    /// looking).
    pub(crate) disk: bool,
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
            self.ack(m.key, Rank(owner), false, false);
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
            self.viewed.remove(&(m.key, o));
            self.out
                .transport()
                .withdraw(BufferKey(replica_key(m.key, o)));
        }
        self.gauge();
        if m.disk {
            let disk = self.disk.clone();
            actix_rt::task::spawn_blocking(move || disk.remove_key(m.key));
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
            <Self as Handler<DropKey>>::handle(self, DropKey { key, disk: false }, ctx);
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
