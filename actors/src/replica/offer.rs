//! An owner's offer of its original, and the ways this store keeps a copy
//! of it: a mapping of the owner's disk copy or a view of its heap (on its
//! node), the bytes carried with the offer (small originals), else a get.

use super::{OwnerDied, ReplicaStore};
use actix::prelude::*;
use bytes::Bytes;
use taskfold_core::replica::{self, original_key, replica_key, HEADER_LEN};
use taskfold_core::wire::Msg;
use taskfold_core::Rank;
use taskfold_transports::{shared_file, BufferKey, Received, TransportError};

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
    /// The replica buffer, carried with the offer (small originals).
    pub(crate) data: Option<Vec<u8>>,
    /// The last completion number of `key` the offerer saw: the copy
    /// outlives a `DropKey` up to that number (see `Msg::ReplicaOffer`).
    pub(crate) after: u64,
}

impl Handler<OfferIn> for ReplicaStore {
    type Result = ();

    /// Keeps a copy of the offered original by the cheapest way that
    /// works: a mapping of the owner's disk copy, a view of its buffer in
    /// place (both on the owner's node), the bytes the offer carries, else
    /// a fetch.
    fn handle(&mut self, mut m: OfferIn, ctx: &mut Context<Self>) {
        let (key, owner) = (m.key, m.owner);
        tracing::debug!(rank = self.rank, %owner, key, heap = m.heap.is_some(), bytes = m.data.is_some(), "replica offer");
        if self.bytes + m.len > self.limit {
            tracing::warn!(rank = self.rank, %owner, "replica store full; offer refused");
            self.refuse(key, owner, false);
            return;
        }
        let same_node = m.node != 0 && m.node == shared_file::node_token();
        if same_node && (self.map_disk_copy(&m) || self.view_in_place(&m)) {
            return;
        }
        if self.carried(&mut m) {
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
                self.keep(m, bytes, mapped);
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
                self.keep(m, view.into_bytes(), true);
                true
            }
            Some(_) => {
                tracing::debug!(rank = self.rank, owner = %m.owner, "the owner's buffer is not the original offered");
                false
            }
            None => false,
        }
    }

    /// Keeps the bytes the offer carries, if they are the original offered
    /// (its length, and its checksum, verified here as a fetched copy's
    /// is); false, and the carried bytes dropped, if there are none or
    /// they are not, so that the original is fetched instead.
    fn carried(&mut self, m: &mut OfferIn) -> bool {
        let Some(data) = m.data.take() else {
            return false;
        };
        // Aligned for the reducer that reads it in recovery, as a fetched
        // copy is.
        let got = Received::Owned(taskfold_transports::recv_buf_from(&data));
        match fetched(got, m, false) {
            Ok((bytes, mapped)) => {
                metrics::counter!(crate::metrics::REPLICAS_CARRIED).increment(1);
                tracing::debug!(rank = self.rank, owner = %m.owner, key = m.key, "replica carried by its offer");
                self.pending.remove(&(m.key, m.owner.0));
                self.keep(m, bytes, mapped);
                true
            }
            Err(e) => {
                tracing::warn!(rank = self.rank, owner = %m.owner, error = %e, "the bytes carried with an offer are not the original offered; fetching it");
                false
            }
        }
    }

    /// Fetches the offered original from its owner. On the owner's node
    /// with no disk copy named, the owner's buffer itself is asked for: a
    /// transport that can lends a read-only view of it instead of a copy.
    fn fetch(&mut self, m: OfferIn, same_node: bool, ctx: &mut Context<Self>) {
        let (key, owner) = (m.key, m.owner);
        self.next_offer += 1;
        let offer = self.next_offer;
        self.pending.insert((key, owner.0), (offer, m.after));
        let fetch = self
            .out
            .transport()
            .get(owner, BufferKey(original_key(key)));
        ctx.spawn(fetch.into_actor(self).map(move |res, act, _| {
            if act.pending.get(&(key, owner.0)).map(|p| p.0) != Some(offer) {
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
            if let Err(e @ (TransportError::Closed | TransportError::LinkDown { .. })) = &res {
                // The owner's link or this rank's transport went away: at
                // a job's end, no fault; an owner's death is the master's
                // to handle and tell (it knows whether a copy stands).
                tracing::debug!(rank = act.rank, %owner, key, error = %e, "an original was not copied: its owner or this rank is gone");
                act.refuse(key, owner, same_node);
                return;
            }
            match res.map_err(|e| e.to_string()).and_then(|got| fetched(got, &m, same_node)) {
                Ok((bytes, mapped)) => act.keep(&m, bytes, mapped),
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
    /// Keeps `bytes` as the copy of the original offered by `m`: exposed
    /// for recovery, counted, and announced to the master and the owner
    /// (with `mapped`: this rank maps the owner's heap, so the owner's
    /// later originals there are standing copies).
    fn keep(&mut self, m: &OfferIn, bytes: Bytes, mapped: bool) {
        let (key, owner, ack) = (m.key, m.owner, m.wants_ack);
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
        let h = super::Held {
            len,
            after: m.after,
        };
        if let Some(old) = self.held.insert((key, owner.0), h) {
            self.bytes -= old.len;
        }
        self.bytes += len;
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
    pub(super) fn refuse(&self, key: u64, owner: Rank, same_node: bool) {
        let _ = self.out.to_master(&Msg::Replicated {
            key,
            owner: owner.0,
            ok: false,
        });
        self.ack(key, owner, false, same_node);
    }

    /// Tells `owner` whether its original of `key` is stored here, and
    /// whether this rank maps its heap (`same_node`).
    pub(super) fn ack(&self, key: u64, owner: Rank, ok: bool, same_node: bool) {
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
