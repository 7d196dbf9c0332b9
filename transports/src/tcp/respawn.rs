//! Replacements: a new process of a dead rank registers with the master
//! (a `Register` hello with incarnation > 0), which hands the request to
//! its runtime ([`Event::Replacement`]) and answers once the runtime
//! admits it (the address table, as at the bootstrap) or refuses it (a
//! `REFUSE` frame with the reason). Every other rank lets it in on its
//! own transport ([`Shared::readmit`]) before the master admits it, so no
//! rank meets a replacement it does not know; from then on each rank
//! refuses the connections of the older incarnation.

use super::bootstrap::{check_registration, send_table, Registration};
use super::conn::{bad_connection, refuse};
use super::frame::Entry;
use super::peer::Shared;
use crate::{Event, Rank, TransportError};
use std::sync::Arc;

/// A replacement's registration reached the master after the bootstrap:
/// checked as any registration (job, size, rank, address), then held for
/// the runtime's answer, at most the connect timeout.
pub(super) async fn asks(shared: Arc<Shared>, mut reg: Registration) {
    let checked = check_registration(&shared, &reg.hello, |_| false);
    let mut addr = match checked {
        Ok(a) => a,
        Err(reason) => {
            bad_connection(shared.rank, reg.from, &reason);
            return refuse(reg.rd, reg.wr, reason).await;
        }
    };
    if addr.ip().is_unspecified() {
        addr.set_ip(reg.from.ip());
        reg.hello.addr = Some(addr);
    }
    let (peer, incarnation) = (reg.hello.rank, reg.hello.incarnation);
    let node = reg.hello.node;
    let older = shared
        .replacements
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(peer, reg);
    if let Some(old) = older {
        let reason = format!("a newer replacement of rank {peer} asked");
        tokio::spawn(refuse(old.rd, old.wr, reason));
    }
    tracing::info!(rank = shared.rank, peer, incarnation, %addr, "a replacement asks to join");
    let entry = Entry {
        addr,
        node,
        incarnation,
        dead: false,
    };
    let _ = shared.events_tx.send(Event::Replacement {
        peer: Rank(peer),
        incarnation,
        node,
        addr: entry.encode().to_vec(),
    });
    // Unanswered within the connect timeout: refused.
    tokio::time::sleep(shared.connect_timeout).await;
    let reason = "the master did not answer in time".to_string();
    refuse_held(&shared, peer, incarnation, reason).await;
}

/// Takes the held registration of `peer`'s `incarnation`, if any.
fn take(shared: &Shared, peer: u32, incarnation: u32) -> Option<Registration> {
    let mut held = shared
        .replacements
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    match held.get(&peer) {
        Some(r) if r.hello.incarnation == incarnation => held.remove(&peer),
        _ => None,
    }
}

/// Refuses the held registration of `peer`'s `incarnation`, if any.
pub(super) async fn refuse_held(shared: &Shared, peer: u32, incarnation: u32, reason: String) {
    if let Some(reg) = take(shared, peer, incarnation) {
        bad_connection(shared.rank, reg.from, &reason);
        refuse(reg.rd, reg.wr, reason).await;
    }
}

/// Admits the held registration of `peer`'s `incarnation`: this rank
/// serves it from now on, and it receives every rank's address, with the
/// ranks in `dead` (declared failed) marked so.
pub(super) fn admit(
    shared: &Arc<Shared>,
    peer: u32,
    incarnation: u32,
    dead: &[u32],
) -> Result<(), TransportError> {
    let reg = take(shared, peer, incarnation).ok_or_else(|| TransportError::Protocol {
        peer,
        detail: format!("no replacement of rank {peer} (incarnation {incarnation}) is waiting"),
    })?;
    let addr = reg.hello.addr.ok_or_else(|| TransportError::Protocol {
        peer,
        detail: "a registration without an address".into(),
    })?;
    shared.readmit(peer, incarnation, addr, reg.hello.node);
    let mut table = shared.table();
    for &r in dead {
        if let Some(e) = table.get_mut(r as usize) {
            e.dead = true;
        }
    }
    let master = shared.rank;
    shared.handle.spawn(async move {
        send_table(&table, master, vec![(reg.rd, reg.wr)]).await;
    });
    Ok(())
}

/// Decodes where a replacement listens and runs, from
/// [`Event::Replacement`], for [`Shared::readmit`].
pub(super) fn decode(addr: &[u8], peer: u32) -> Result<Entry, TransportError> {
    Entry::decode(addr).map_err(|detail| TransportError::Protocol { peer, detail })
}

/// How long a connection from a newer incarnation of a peer than this
/// rank serves waits for the notice that it was let in.
const ADMISSION_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Waits, within [`ADMISSION_WAIT`], until this rank serves `peer`'s
/// `incarnation` (or a newer one), or it closes. The master lets a
/// replacement in and tells every rank, and may send the replacement to
/// one of them at once (its kept result, a copy to read): the
/// replacement's connection can arrive before the master's notice, on
/// another link. The caller proved the job's key already.
pub(super) async fn await_admission(shared: &Shared, peer: u32, incarnation: u32) {
    let deadline = tokio::time::Instant::now() + ADMISSION_WAIT;
    while shared.slot(peer).incarnation < incarnation
        && !shared.is_closed()
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}
