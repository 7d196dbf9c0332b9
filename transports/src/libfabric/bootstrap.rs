//! Start-up over the TCP transport: the exchange of endpoint names (with
//! the protocol version and the provider), then the forwarding of the TCP
//! transport's events, which make it this transport's failure detector.

use super::progress::Cmd;
use super::shared::Shared;
use super::wire;
use crate::tcp::TcpTransport;
use crate::{Event, Rank, Transport, TransportError};
use bytes::Bytes;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Every rank's endpoint name (`None`: the peer failed meanwhile).
pub(super) type Names = Vec<Option<Vec<u8>>>;

/// Sends this rank's endpoint name to every peer over TCP and collects
/// theirs. Other events that arrive meanwhile are returned for replay; a
/// peer whose link fails meanwhile has no name (its link is reported down).
pub(super) fn exchange_names(
    tcp: &TcpTransport,
    provider: &str,
    name: &[u8],
    deadline: Instant,
) -> Result<(Names, Vec<Event>), TransportError> {
    let (rank, size) = (tcp.rank().0, tcp.size());
    let mut names: Vec<Option<Vec<u8>>> = vec![None; size as usize];
    names[rank as usize] = Some(name.to_vec());
    let mut dead = vec![false; size as usize];
    let mut replay = Vec::new();
    let frame = Bytes::from(wire::name_frame(provider, name));
    for peer in (0..size).filter(|&p| p != rank) {
        if let Err(e) = tcp.send(Rank(peer), frame.clone()) {
            tracing::warn!(rank, peer, error = %e, "sending the endpoint name");
        }
    }
    let events = tcp.events();
    let missing = |names: &[Option<Vec<u8>>], dead: &[bool]| {
        (0..size as usize)
            .filter(|&p| names[p].is_none() && !dead[p])
            .collect::<Vec<_>>()
    };
    while !missing(&names, &dead).is_empty() {
        let ev = match events.recv_timeout(Duration::from_millis(50)) {
            Ok(ev) => ev,
            Err(_) => {
                // A peer that gave up starting (and said goodbye) will
                // never send its name.
                if let Some(&p) = missing(&names, &dead)
                    .iter()
                    .find(|&&p| tcp.peer_left(Rank(p as u32)))
                {
                    return Err(TransportError::LinkDown {
                        peer: p as u32,
                        reason: format!("rank {p} left during start-up"),
                    });
                }
                if Instant::now() >= deadline {
                    return Err(TransportError::Io(format!(
                        "no fabric endpoint name from ranks {:?} in time",
                        missing(&names, &dead)
                    )));
                }
                continue;
            }
        };
        match &ev {
            Event::Message { from, frame } if from.0 < size => {
                match wire::parse_name_frame(frame) {
                    None => replay.push(ev),
                    Some(Err(e)) => {
                        return Err(TransportError::Protocol {
                            peer: from.0,
                            detail: e,
                        })
                    }
                    Some(Ok(theirs)) => {
                        crate::version::check(&format!("rank {}", from.0), theirs.version)?;
                        if theirs.provider != provider {
                            return Err(TransportError::Refused(format!(
                                "rank {} uses libfabric provider `{}`, this rank `{provider}`",
                                from.0, theirs.provider
                            )));
                        }
                        names[from.0 as usize] = Some(theirs.name);
                    }
                }
            }
            Event::LinkDown { peer, .. } if peer.0 < size => {
                dead[peer.0 as usize] = true;
                replay.push(ev);
            }
            _ => replay.push(ev),
        }
    }
    Ok((names, replay))
}

/// Forwards the TCP transport's events until the transport closes.
pub(super) fn forward(sh: Arc<Shared>, events: flume::Receiver<Event>, replay: Vec<Event>) {
    let handle = |ev: Event| match ev {
        Event::LinkDown { peer, reason } => {
            if sh.link_down(peer.0, &reason) {
                let _ = sh.command(Cmd::Forget {
                    peer: peer.0,
                    reason,
                });
            }
        }
        Event::Message { from, frame } => {
            if wire::parse_name_frame(&frame).is_none() && !sh.is_closed() {
                let _ = sh.events_tx.send(Event::Message { from, frame });
            }
        }
        // The fabric's addresses cannot be replaced: the runtime refuses
        // the replacement (the transport says it is unsupported).
        ev @ Event::Replacement { .. } => {
            let _ = sh.events_tx.send(ev);
        }
    };
    for ev in replay {
        handle(ev);
    }
    while !sh.is_closed() {
        match events.recv_timeout(Duration::from_millis(100)) {
            Ok(ev) => handle(ev),
            Err(flume::RecvTimeoutError::Timeout) => {}
            Err(flume::RecvTimeoutError::Disconnected) => break,
        }
    }
}
