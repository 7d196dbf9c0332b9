//! Start-up over the TCP transport: the exchange of endpoint names (with
//! the protocol version and the provider), the readiness barrier, then
//! the forwarding of the TCP transport's events, which make it this
//! transport's failure detector and carry a replacement's name.
//!
//! Why a barrier: a message is taken only from the address-vector entry
//! of the rank it claims ([`super::source`]), so no rank may send a peer
//! a fabric message before that peer inserted its name. Each rank sends
//! every peer [`wire::READY_FRAME`] once it inserted every name, and
//! starts only when every live peer said the same. A replacement
//! (incarnation > 0, see [`crate::Transport::readmit`]) runs the same
//! start-up: every live rank sends it its name when it lets it in, and
//! readiness once the replacement's name is in its vector; until then
//! its frames to the replacement wait.

use super::fi::{AddressVector, FiAddr};
use super::progress::Cmd;
use super::seal::{KeyMaker, PairKeys};
use super::shared::Shared;
use super::wire;
use crate::tcp::TcpTransport;
use crate::{Event, Rank, Transport, TransportError};
use bytes::Bytes;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Every rank's endpoint name (`None`: the peer failed meanwhile).
pub(super) type Names = Vec<Option<Vec<u8>>>;

/// Every rank's message keys (`None`: not sealed, or no name).
pub(super) type Keys = Vec<Option<PairKeys>>;

/// What the start-up saw of each peer.
struct Startup<'a> {
    names: Names,
    keys: Keys,
    /// This rank's key maker, if it seals its fabric messages.
    maker: Option<&'a KeyMaker>,
    ready: Vec<bool>,
    dead: Vec<bool>,
    replay: Vec<Event>,
}

impl Startup<'_> {
    fn missing(&self, ready: bool) -> Vec<usize> {
        (0..self.names.len())
            .filter(|&p| {
                !self.dead[p]
                    && if ready {
                        !self.ready[p]
                    } else {
                        self.names[p].is_none()
                    }
            })
            .collect()
    }

    /// Takes one TCP event: a name, a readiness, a failure, or something
    /// to replay once started.
    fn take(&mut self, ev: Event, provider: &str) -> Result<(), TransportError> {
        let size = self.names.len() as u32;
        match &ev {
            Event::Message { from, frame } if from.0 < size && wire::is_ready_frame(frame) => {
                self.ready[from.0 as usize] = true;
            }
            Event::Message { from, frame } if from.0 < size => {
                match wire::parse_name_frame(frame) {
                    None => self.replay.push(ev),
                    Some(theirs) => {
                        let (name, keys) = check_name(from.0, theirs, provider, self.maker)?;
                        self.names[from.0 as usize] = Some(name);
                        self.keys[from.0 as usize] = keys;
                    }
                }
            }
            Event::LinkDown { peer, .. } if peer.0 < size => {
                self.dead[peer.0 as usize] = true;
                self.replay.push(ev);
            }
            _ => self.replay.push(ev),
        }
        Ok(())
    }

    /// Takes TCP events until nothing is `missing` (names, or readiness).
    fn pump(
        &mut self,
        tcp: &TcpTransport,
        provider: &str,
        ready: bool,
        deadline: Instant,
    ) -> Result<(), TransportError> {
        let events = tcp.events();
        while !self.missing(ready).is_empty() {
            match events.recv_timeout(Duration::from_millis(50)) {
                Ok(ev) => self.take(ev, provider)?,
                Err(_) => {
                    // A peer that gave up starting (and said goodbye) will
                    // never send its name.
                    if let Some(&p) = self
                        .missing(ready)
                        .iter()
                        .find(|&&p| tcp.peer_left(Rank(p as u32)))
                    {
                        return Err(TransportError::LinkDown {
                            peer: p as u32,
                            reason: format!("rank {p} left during start-up"),
                        });
                    }
                    if Instant::now() >= deadline {
                        let what = if ready {
                            "readiness"
                        } else {
                            "fabric endpoint name"
                        };
                        return Err(TransportError::Io(format!(
                            "no {what} from ranks {:?} in time",
                            self.missing(ready)
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

/// A peer's decoded name frame, checked: this protocol version, this
/// provider, sealed as this rank seals (then the pair's keys, from its
/// nonce and `maker`).
fn check_name(
    peer: u32,
    theirs: Result<wire::NameFrame, String>,
    provider: &str,
    maker: Option<&KeyMaker>,
) -> Result<(Vec<u8>, Option<PairKeys>), TransportError> {
    let theirs = theirs.map_err(|detail| TransportError::Protocol { peer, detail })?;
    crate::version::check(&format!("rank {peer}"), theirs.version)?;
    if theirs.provider != provider {
        return Err(TransportError::Refused(format!(
            "rank {peer} uses libfabric provider `{}`, this rank `{provider}`",
            theirs.provider
        )));
    }
    let keys = match (maker, &theirs.nonce) {
        (Some(m), Some(n)) => Some(m.pair(peer, n)),
        (None, None) => None,
        (mine, _) => {
            let (we, they) = match mine {
                Some(_) => ("this rank seals", "rank {peer} does not"),
                None => ("this rank does not", "rank {peer} does"),
            };
            return Err(TransportError::Refused(format!(
                "TASKFOLD_INTEGRITY must agree: {we} its fabric messages, {}",
                they.replace("{peer}", &peer.to_string())
            )));
        }
    };
    Ok((theirs.name, keys))
}

/// Sends this rank's endpoint name to every peer over TCP, collects
/// theirs and inserts them into `av` (returns every rank's fabric
/// address, `FI_ADDR_UNSPEC` for a peer that failed meanwhile), then
/// runs the readiness barrier. Other events that arrive meanwhile are
/// returned for replay.
pub(super) fn start_up(
    tcp: &TcpTransport,
    av: &AddressVector,
    provider: &str,
    name: &[u8],
    maker: Option<&KeyMaker>,
    deadline: Instant,
) -> Result<(Vec<FiAddr>, Keys, Vec<Event>), TransportError> {
    let (rank, size) = (tcp.rank().0, tcp.size() as usize);
    let mut st = Startup {
        names: vec![None; size],
        keys: vec![None; size],
        maker,
        ready: vec![false; size],
        dead: vec![false; size],
        replay: Vec::new(),
    };
    st.names[rank as usize] = Some(name.to_vec());
    st.ready[rank as usize] = true;
    let frame = Bytes::from(wire::name_frame(provider, name, maker.map(|m| m.nonce())));
    for peer in (0..size as u32).filter(|&p| p != rank) {
        if let Err(e) = tcp.send(Rank(peer), frame.clone()) {
            tracing::warn!(rank, peer, error = %e, "sending the endpoint name");
        }
    }
    st.pump(tcp, provider, false, deadline)?;
    let mut addrs = Vec::with_capacity(size);
    for (peer, n) in st.names.iter().enumerate() {
        let a = match n {
            Some(n) => av.insert(n)?,
            None => libfabric_sys::FI_ADDR_UNSPEC,
        };
        tracing::trace!(rank, peer, addr = a, "address inserted");
        addrs.push(a);
    }
    let ready = Bytes::from_static(wire::READY_FRAME);
    for peer in (0..size as u32).filter(|&p| p != rank && !st.dead[p as usize]) {
        let _ = tcp.send(Rank(peer), ready.clone());
    }
    st.pump(tcp, provider, true, deadline)?;
    Ok((addrs, st.keys, st.replay))
}

/// What the forwarder needs besides the shared state: the TCP transport
/// (to answer a replacement), the address vector and this rank's
/// provider.
pub(super) struct Forwarder {
    pub sh: Arc<Shared>,
    pub tcp: Arc<TcpTransport>,
    pub av: Arc<AddressVector>,
    pub provider: String,
    /// This rank's key maker, if it seals its fabric messages.
    pub maker: Option<KeyMaker>,
}

impl Forwarder {
    /// A start-up frame from `peer` after this rank started: the name of
    /// a replacement this rank let in (inserted, then readiness sent), or
    /// its readiness (this rank's frames to it may go). Anything else is
    /// dropped.
    fn startup_frame(&self, peer: u32, frame: &[u8]) {
        if wire::is_ready_frame(frame) {
            if self.sh.take_awaited(peer, false) {
                let _ = self.sh.command(Cmd::Ready { peer });
            }
            return;
        }
        let Some(theirs) = wire::parse_name_frame(frame) else {
            return;
        };
        if !self.sh.take_awaited(peer, true) {
            tracing::warn!(
                rank = self.sh.rank,
                peer,
                "an endpoint name nobody awaits dropped"
            );
            return;
        }
        let connected = check_name(peer, theirs, &self.provider, self.maker.as_ref())
            .and_then(|(name, keys)| Ok((self.av.insert(&name)?, keys)))
            .and_then(|(addr, keys)| {
                let (done, rx) = flume::bounded(1);
                self.sh.command(Cmd::Connect {
                    peer,
                    addr,
                    keys,
                    done,
                })?;
                rx.recv_timeout(Duration::from_secs(5))
                    .map_err(|_| TransportError::Closed)
            });
        match connected {
            Ok(()) => {
                let _ = self
                    .tcp
                    .send(Rank(peer), Bytes::from_static(wire::READY_FRAME));
            }
            Err(e) => {
                let reason = format!("the replacement of rank {peer} cannot be reached: {e}");
                if self.sh.link_down(peer, &reason) {
                    let _ = self.sh.command(Cmd::Forget { peer, reason });
                }
            }
        }
    }

    fn handle(&self, ev: Event) {
        match ev {
            Event::LinkDown { peer, reason } => {
                if self.sh.link_down(peer.0, &reason) {
                    let _ = self.sh.command(Cmd::Forget {
                        peer: peer.0,
                        reason,
                    });
                }
            }
            Event::Message { from, frame } if wire::is_startup_frame(&frame) => {
                self.startup_frame(from.0, &frame)
            }
            Event::Message { from, frame } => {
                if !self.sh.is_closed() {
                    let _ = self.sh.events_tx.send(Event::Message { from, frame });
                }
            }
            // The runtime decides; `admit` / `readmit` let it in.
            ev @ Event::Replacement { .. } => {
                let _ = self.sh.events_tx.send(ev);
            }
        }
    }

    /// Forwards the TCP transport's events until the transport closes.
    pub fn run(self, events: flume::Receiver<Event>, replay: Vec<Event>) {
        for ev in replay {
            self.handle(ev);
        }
        while !self.sh.is_closed() {
            match events.recv_timeout(Duration::from_millis(100)) {
                Ok(ev) => self.handle(ev),
                Err(flume::RecvTimeoutError::Timeout) => {}
                Err(flume::RecvTimeoutError::Disconnected) => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskfold_core::auth::JobKey;

    fn frame(nonce: Option<[u8; 32]>) -> Result<wire::NameFrame, String> {
        Ok(wire::NameFrame {
            version: crate::version::VERSION,
            provider: "shm".into(),
            name: vec![1, 2, 3],
            nonce,
        })
    }

    /// A peer's name frame must be sealed as this rank seals: a nonce
    /// exactly when this rank has a key maker; the refusal names the
    /// variable.
    #[test]
    fn a_name_frame_must_agree_on_integrity() {
        let maker = KeyMaker::new(&JobKey::from_bytes([5; 32]), 9, 0).expect("a nonce");
        let (name, keys) = check_name(1, frame(Some([7; 32])), "shm", Some(&maker)).unwrap();
        assert_eq!((name, keys.is_some()), (vec![1, 2, 3], true));
        let (_, keys) = check_name(1, frame(None), "shm", None).unwrap();
        assert!(keys.is_none());
        for (theirs, mine) in [(None, Some(&maker)), (Some([7; 32]), None)] {
            match check_name(1, frame(theirs), "shm", mine) {
                Err(TransportError::Refused(why)) => {
                    assert!(why.contains("TASKFOLD_INTEGRITY"), "{why}");
                    assert!(why.contains("rank 1"), "{why}");
                }
                other => panic!("expected a refusal, got {other:?}"),
            }
        }
    }
}
