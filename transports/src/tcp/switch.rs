//! A peer connection's first frames after its handshake: the caller
//! offers rings (a peer of its node, rings on) or none, and the peer takes
//! them or not (the `ring` module). Both then go on with the same
//! readers and writers, over the rings or over the socket.
//!
//! The caller sends nothing else until the peer answered an offer, and the
//! peer answers before it writes anything else, so each direction's bytes
//! are all on the socket up to the switch and all in the ring after it.
//! An offer costs one round trip, once per connection; a caller that
//! offers nothing does not wait.
//!
//! What the peer checks before it opens anything: the offering process is
//! the one holding this connection's socket (the kernel's tables, as for
//! a loan), the caller is on its node by the job's table, and the file is
//! sealed rings of a sane size (`ring::take`). Anything short of that is
//! declined: the connection stays on TCP and works as before.

use super::conn::{read_header, read_payload, Rd, ReadError};
use super::frame::{kind, Header};
use super::integrity::MacRead;
use super::peer::Shared;
use super::ring::{self, Made, Offer, Refused, RING_CAP};
use super::wire::{WireRead, WireWrite};
use super::{lender, metrics};
use std::time::Duration;
use taskfold_core::auth::FrameMac;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;

/// How long a peer waits for the caller's first frame after the handshake
/// (the caller sends it at once).
const CHOICE_TIMEOUT: Duration = Duration::from_secs(10);

/// `hdr` and `payload` as they go on the socket, sealed with `mac` if the
/// connection is checked (the writer seals every later frame the same way).
fn sealed(hdr: Header, payload: &[u8], mac: &mut Option<FrameMac>) -> Vec<u8> {
    let head = hdr.encode();
    let mut v = head.to_vec();
    v.extend_from_slice(payload);
    if let Some(m) = mac.as_mut() {
        v.extend_from_slice(&m.seal(&[&head, payload]));
    }
    v
}

/// The caller's side: offers rings if `peer` is on this node, then, if it
/// offered, reads the answer. Returns the connection's read and write
/// sides, and a frame read in place of the answer (a refusal or a
/// goodbye), which the connection's reader then handles.
pub(super) async fn offer(
    shared: &Shared,
    peer: u32,
    mut rd: Rd,
    mut wr: OwnedWriteHalf,
    send: &mut Option<FrameMac>,
) -> Result<(Rd, WireWrite, Option<Header>), ReadError> {
    let made = match shared.rings && shared.on_my_node(peer) {
        true => Made::new(RING_CAP)
            .map_err(|e| tracing::debug!(rank = shared.rank, peer, error = %e, "no rings"))
            .ok(),
        false => None,
    };
    let body = made
        .as_ref()
        .map(|m| m.offer().encode())
        .unwrap_or_default();
    let frame = sealed(Header::new(kind::RINGS, body.len() as u32), &body, send);
    wr.write_all(&frame).await.map_err(ReadError::Io)?;
    metrics::sent(frame.len() as u64, 1);
    let Some(made) = made else {
        return Ok((rd, WireWrite::Tcp(wr), None));
    };
    let hdr = tokio::time::timeout(shared.connect_timeout, read_header(&mut rd))
        .await
        .map_err(|_| ReadError::Protocol("no answer to our offer of rings in time".into()))??;
    if hdr.kind != kind::RINGS_TAKEN {
        return Ok((rd, WireWrite::Tcp(wr), Some(hdr)));
    }
    rd.end_frame().await?;
    metrics::received(frame_len(&hdr), 1);
    if hdr.a != 1 {
        metrics::rings("declined");
        return Ok((rd, WireWrite::Tcp(wr), None));
    }
    let (inner, checks) = rd.into_parts();
    let WireRead::Tcp(tcp) = inner else {
        unreachable!("a connection is on its socket until it switches")
    };
    let ends = made.ends(tcp, wr).map_err(ReadError::Io)?;
    metrics::rings("caller");
    tracing::debug!(rank = shared.rank, peer, "connection on rings");
    Ok((
        MacRead::from_parts(WireRead::Ring(Box::new(ends.rx)), checks),
        WireWrite::Ring(Box::new(ends.tx)),
        None,
    ))
}

fn frame_len(hdr: &Header) -> u64 {
    (super::frame::HEADER_LEN as u64) + u64::from(hdr.len)
}

/// The peer's side: reads the caller's first frame and, if it offers
/// rings, takes them or declines (see the [module documentation](self)).
pub(super) async fn answer(
    shared: &Shared,
    peer: u32,
    mut rd: Rd,
    wr: OwnedWriteHalf,
    send: &mut Option<FrameMac>,
) -> Result<(Rd, WireWrite), ReadError> {
    let hdr = tokio::time::timeout(CHOICE_TIMEOUT, read_header(&mut rd))
        .await
        .map_err(|_| ReadError::Protocol("no choice of wire in time".into()))??;
    if hdr.kind != kind::RINGS {
        return Err(ReadError::Protocol(format!(
            "frame kind {} before the caller's choice of wire",
            hdr.kind
        )));
    }
    let body = read_payload(&mut rd, hdr.len).await?;
    rd.end_frame().await?;
    if body.is_empty() {
        return Ok((rd, WireWrite::Tcp(wr)));
    }
    let offer = Offer::decode(&body).map_err(ReadError::Protocol)?;
    let (inner, checks) = rd.into_parts();
    let WireRead::Tcp(tcp) = inner else {
        unreachable!("a connection is on its socket until it switches")
    };
    let why_not = match shared.rings && shared.on_my_node(peer) {
        true => proven(&tcp, offer.pid).await,
        false => Some("rings are off here, or the caller is on another node".into()),
    };
    let refused = match why_not {
        Some(why) => Refused(std::io::Error::other(why), Some((tcp, wr))),
        None => match ring::take(&offer, tcp, wr) {
            Ok(mut ends) => {
                let yes = Header {
                    a: 1,
                    ..Header::new(kind::RINGS_TAKEN, 0)
                };
                let frame = sealed(yes, &[], send);
                let s = ends.tx.socket_mut();
                s.write_all(&frame).await.map_err(ReadError::Io)?;
                metrics::sent(frame.len() as u64, 1);
                metrics::rings("peer");
                tracing::debug!(rank = shared.rank, peer, "connection on rings");
                return Ok((
                    MacRead::from_parts(WireRead::Ring(Box::new(ends.rx)), checks),
                    WireWrite::Ring(Box::new(ends.tx)),
                ));
            }
            Err(r) => r,
        },
    };
    let Refused(why, Some((tcp, mut wr))) = refused else {
        return Err(ReadError::Io(refused.0));
    };
    tracing::debug!(rank = shared.rank, peer, reason = %why, "rings declined");
    metrics::rings("declined");
    let frame = sealed(Header::new(kind::RINGS_TAKEN, 0), &[], send);
    wr.write_all(&frame).await.map_err(ReadError::Io)?;
    metrics::sent(frame.len() as u64, 1);
    Ok((
        MacRead::from_parts(WireRead::Tcp(tcp), checks),
        WireWrite::Tcp(wr),
    ))
}

/// Why process `pid` is not proven to hold the connection `tcp` is half
/// of, or `None` if it is.
async fn proven(tcp: &tokio::net::tcp::OwnedReadHalf, pid: u32) -> Option<String> {
    let (ours, theirs) = match (tcp.local_addr(), tcp.peer_addr()) {
        (Ok(o), Ok(t)) => (o, t),
        _ => return Some("the connection has no addresses".into()),
    };
    // The caller's socket is bound to its end: ours seen from the other
    // side.
    let found = tokio::task::spawn_blocking(move || lender::holds(pid, theirs, ours)).await;
    match found {
        Ok(Ok(true)) => None,
        Ok(Ok(false)) => Some(format!("process {pid} does not hold the connection")),
        Ok(Err(e)) => Some(format!("process {pid}'s sockets: {e}")),
        Err(e) => Some(e.to_string()),
    }
}
