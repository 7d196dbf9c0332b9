//! Flow control and ordering: per-peer send queues, credits, sequence
//! numbers, and the reorder buffer that delivers each peer's frames in the
//! order it sent them.
//!
//! A rank sends a peer at most a window of messages beyond those the peer
//! has reported consumed (`CREDIT` messages themselves are not counted),
//! so a slow receiver never has more than a window of unexpected messages
//! per sender queued in the provider.

use super::super::fi::Posted;
use super::super::seal::{Digest, Tamper, DIGEST_LEN};
use super::super::wire::{self, Msg, Remote};
use super::Engine;
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};

/// Control frames waiting in the event channel, at most, before a peer's
/// next frame waits in the reorder buffer for room (the consumer's pace,
/// not a peer's, decides how many frames this rank holds; as TCP's).
pub(crate) const MAX_EVENTS: usize = 4096;

/// Messages waiting to be sent to a peer, at most, before its next get
/// request waits (unanswered, its credit not returned): a peer that asks
/// without taking the answers is no longer served (as TCP's writer bound).
const OUTQ_MAX: usize = 1024;

/// The largest flow-control window (messages a sender has outstanding at
/// a receiver).
const WINDOW_MAX: u64 = 64;

/// Ordered items of one peer not yet delivered, at most: a peer within its
/// credits has at most a window of them (twice the largest window leaves
/// room for a peer whose window was computed otherwise).
const PENDING_MAX: usize = 2 * WINDOW_MAX as usize;

/// A message waiting for a send slot.
pub(super) enum Out {
    Control {
        seq: u64,
        frame: Bytes,
    },
    Large {
        seq: u64,
        at: Remote,
        digest: Digest,
    },
    Bye {
        seq: u64,
    },
    GetReq {
        req: u64,
        key: u64,
    },
    GetOk {
        req: u64,
        at: Remote,
        digest: Digest,
    },
    GetErr {
        req: u64,
        key: u64,
    },
    Release {
        token: u64,
    },
    Credit {
        n: u64,
    },
}

impl Out {
    /// The message to encode.
    pub fn msg(&self) -> Msg<'_> {
        match self {
            Out::Control { seq, frame } => Msg::Control { seq: *seq, frame },
            Out::Large { seq, at, .. } => Msg::Large { seq: *seq, at: *at },
            Out::Bye { seq } => Msg::Bye { seq: *seq },
            Out::GetReq { req, key } => Msg::GetReq {
                req: *req,
                key: *key,
            },
            Out::GetOk { req, at, .. } => Msg::GetOk { req: *req, at: *at },
            Out::GetErr { req, key } => Msg::GetErr {
                req: *req,
                key: *key,
            },
            Out::Release { token } => Msg::Release { token: *token },
            Out::Credit { n } => Msg::Credit { n: *n },
        }
    }

    /// The digest of the bulk bytes the message points to (zeros: none).
    pub fn digest(&self) -> Digest {
        match self {
            Out::Large { digest, .. } | Out::GetOk { digest, .. } => *digest,
            _ => [0; DIGEST_LEN],
        }
    }
}

/// A frame in the reorder buffer.
pub(super) enum InItem {
    Frame(Bytes),
    Fetching,
    Bye,
}

/// The ordering and flow-control state of one peer.
#[derive(Default)]
pub(super) struct Peer {
    out_seq: u64,
    in_next: u64,
    pub pending: BTreeMap<u64, InItem>,
    /// Messages waiting to be sent to this peer, in order.
    pub outq: VecDeque<Out>,
    /// True while this peer is in the ready list.
    queued: bool,
    /// Messages we may still send before the peer returns credits.
    credits: u64,
    /// Messages consumed from this peer since we last returned credits.
    consumed: u64,
    /// Its next frame waits for room in the event channel.
    pub held: bool,
    /// Its get requests not served yet, while [`OUTQ_MAX`] messages wait to
    /// be sent to it: (request, key).
    deferred: VecDeque<(u64, u64)>,
    /// A replacement that has not inserted this rank's name yet: what is
    /// queued to it waits ([`Engine::flow_ready`]).
    unready: bool,
}

impl Peer {
    /// The next sequence number of an ordered message to this peer.
    pub fn next_seq(&mut self) -> u64 {
        let seq = self.out_seq;
        self.out_seq += 1;
        seq
    }
}

/// Every peer's queues, and the peers with something to send.
pub(super) struct Flow {
    pub peers: Vec<Peer>,
    /// Peers with messages to send and credits (round robin).
    ready: VecDeque<u32>,
    /// Flow-control window per peer (messages).
    window: u64,
    /// Some peer's frames wait for room in the event channel.
    any_held: bool,
    /// Get requests deferred, over all peers.
    deferred: usize,
}

impl Flow {
    /// The state of `size` peers, sharing `budget` pending messages at a
    /// receiver among the senders.
    pub fn new(size: usize, budget: u64) -> Flow {
        let window = (budget / (size as u64).saturating_sub(1).max(1)).clamp(4, WINDOW_MAX);
        Flow {
            peers: (0..size)
                .map(|_| Peer {
                    credits: window,
                    ..Peer::default()
                })
                .collect(),
            ready: VecDeque::new(),
            window,
            any_held: false,
            deferred: 0,
        }
    }

    /// `peer` is a new process: its sequences start anew, with a full
    /// window, and nothing is sent to it until it is ready.
    pub fn restart(&mut self, peer: u32) {
        let Some(p) = self.peers.get_mut(peer as usize) else {
            return;
        };
        self.deferred -= p.deferred.len();
        *p = Peer {
            credits: self.window,
            unready: true,
            ..Peer::default()
        };
        self.ready.retain(|&r| r != peer);
    }

    /// Queues a message to `to`.
    pub fn enqueue(&mut self, to: u32, out: Out) {
        let p = &mut self.peers[to as usize];
        p.outq.push_back(out);
        self.wake(to);
    }

    /// Puts `to` in the ready list if it has something to send.
    fn wake(&mut self, to: u32) {
        let p = &mut self.peers[to as usize];
        if !p.outq.is_empty() && !p.queued {
            p.queued = true;
            self.ready.push_back(to);
        }
    }

    /// A message other than a credit from `from` was consumed (an ordered
    /// one once delivered, so that a peer whose frames wait for room in
    /// the event channel runs out of credits and stops sending): counted,
    /// and credits returned (ahead of everything queued) every half window.
    pub fn consumed(&mut self, from: u32) {
        let window = self.window;
        let p = &mut self.peers[from as usize];
        p.consumed += 1;
        if p.consumed >= window / 2 {
            let n = std::mem::take(&mut p.consumed);
            p.outq.push_front(Out::Credit { n });
            self.wake(from);
        }
    }

    /// `from` returned `n` credits.
    pub fn credited(&mut self, from: u32, n: u64) {
        let window = self.window;
        let p = &mut self.peers[from as usize];
        p.credits = p.credits.saturating_add(n).min(window);
        self.wake(from);
    }

    /// Something is waiting to be sent.
    pub fn has_queued(&self) -> bool {
        self.peers.iter().any(|p| !p.outq.is_empty())
    }

    /// For the engine's state log: per peer, the next expected sequence
    /// number and the frames waiting for it; and the ready peers.
    pub fn describe(&self) -> (Vec<(u64, usize)>, usize) {
        let pending = self
            .peers
            .iter()
            .map(|p| (p.in_next, p.pending.len()))
            .collect();
        (pending, self.ready.len())
    }
}

impl Engine {
    /// Queues a control frame to `to`, inline or, if larger, registered
    /// for the peer to read ([`Engine::lend_frame`]).
    pub(super) fn send(&mut self, to: u32, frame: Bytes) {
        if !self.sh.is_up(to) || self.stopping.is_some() {
            return;
        }
        let seq = self.flow.peers[to as usize].next_seq();
        if frame.len() <= wire::INLINE_MAX {
            self.flow.enqueue(to, Out::Control { seq, frame });
        } else {
            self.lend_frame(to, seq, frame);
        }
    }

    /// Posts queued sends, round robin over peers with credits, while
    /// slots and the provider's queue allow; true if any was posted.
    pub(super) fn post_sends(&mut self) -> bool {
        let mut any = false;
        // Peers whose send was refused in a row: a provider may refuse one
        // peer for long (rxm while its connection to a stopped process is
        // being set up), and that peer must not hold up messages to the
        // others (a pong to the master stuck behind it would get this rank
        // declared failed). The pass ends when every waiting peer refused.
        let mut refused = 0;
        while self.ops.room() {
            let Some(to) = self.flow.ready.pop_front() else {
                break;
            };
            let up = self.sh.is_up(to);
            let p = &mut self.flow.peers[to as usize];
            if !up {
                p.outq.clear();
            }
            let Some(front) = p.outq.front() else {
                p.queued = false;
                continue;
            };
            let free = matches!(front, Out::Credit { .. });
            if p.unready || (!free && p.credits == 0) {
                // Back in the ready list when credits arrive.
                p.queued = false;
                continue;
            }
            let Some(out) = p.outq.pop_front() else {
                continue;
            };
            let dest = self.addrs[to as usize];
            let tamper = self.tampered(to, &[Tamper::Message, Tamper::Replay]);
            let change = tamper == Some(Tamper::Message);
            let seals = self.seals.as_mut();
            match self
                .ops
                .post_send((self.sh.rank, to), dest, &out, seals, change)
            {
                Ok(Posted::Yes) => {
                    if tamper == Some(Tamper::Replay) {
                        let _ = self.ops.post_scratch(self.sh.rank, to, dest);
                    }
                    any = true;
                    refused = 0;
                    if !free {
                        self.flow.peers[to as usize].credits -= 1;
                    }
                    self.requeue(to);
                }
                Ok(Posted::Again) => {
                    if let Some(t) = tamper {
                        self.tamper.push((to, t));
                    }
                    self.flow.peers[to as usize].outq.push_front(out);
                    self.flow.ready.push_back(to);
                    refused += 1;
                    if refused >= self.flow.ready.len() {
                        break;
                    }
                }
                Err(e) => {
                    self.suspect(to, format!("{e}"));
                    self.requeue(to);
                }
            }
        }
        any
    }

    /// `peer`'s replacement is ready: what waits for it goes.
    pub(super) fn flow_ready(&mut self, peer: u32) {
        let Some(p) = self.flow.peers.get_mut(peer as usize) else {
            return;
        };
        p.unready = false;
        self.flow.wake(peer);
    }

    /// After a send to `to`: back in the ready list if more is queued.
    fn requeue(&mut self, to: u32) {
        let p = &mut self.flow.peers[to as usize];
        if p.outq.is_empty() {
            p.queued = false;
        } else {
            self.flow.ready.push_back(to);
        }
    }

    /// Records an ordered item from `from`; false if it is a duplicate (then
    /// dropped). A peer with more items undelivered than its credits allow
    /// ([`PENDING_MAX`]; a peer whose frames wait for room is sent no
    /// credits) broke the flow control: it is suspected, its item dropped.
    pub(super) fn arrived(&mut self, from: u32, seq: u64, item: InItem) -> bool {
        let p = &mut self.flow.peers[from as usize];
        if seq < p.in_next || p.pending.contains_key(&seq) {
            tracing::warn!(rank = self.sh.rank, from, seq, "duplicate frame dropped");
            return false;
        }
        if p.pending.len() >= PENDING_MAX {
            crate::libfabric::bound_hit("reorder");
            self.suspect(from, format!("rank {from} sent beyond its credits"));
            return false;
        }
        p.pending.insert(seq, item);
        self.drain(from);
        true
    }

    /// A get request `req` for `key` from `from`: served, unless
    /// [`OUTQ_MAX`] messages wait to be sent to it; then it waits (and its
    /// credit with it, so an honest peer has at most a window waiting).
    /// More waiting than any window allows is a broken flow control: the
    /// peer is suspected, the request dropped.
    pub(super) fn get_request(&mut self, from: u32, req: u64, key: u64) {
        let p = &mut self.flow.peers[from as usize];
        if p.outq.len() < OUTQ_MAX && p.deferred.is_empty() {
            self.flow.consumed(from);
            self.serve(from, req, key);
            return;
        }
        if p.deferred.len() >= PENDING_MAX {
            crate::libfabric::bound_hit("requests");
            self.suspect(from, format!("rank {from} asked beyond its credits"));
            return;
        }
        if p.deferred.is_empty() {
            crate::libfabric::bound_hit("writer");
        }
        p.deferred.push_back((req, key));
        self.flow.deferred += 1;
    }

    /// Serves the get requests that waited, as far as the queues of their
    /// peers allow.
    pub(super) fn serve_deferred(&mut self) {
        if self.flow.deferred == 0 {
            return;
        }
        for peer in 0..self.flow.peers.len() as u32 {
            // Bounded by the peer's deferred requests.
            loop {
                let p = &mut self.flow.peers[peer as usize];
                if p.outq.len() >= OUTQ_MAX {
                    break;
                }
                let Some((req, key)) = p.deferred.pop_front() else {
                    break;
                };
                self.flow.deferred -= 1;
                self.flow.consumed(peer);
                self.serve(peer, req, key);
            }
        }
    }

    /// Delivers again the frames of peers that waited for room in the event
    /// channel, if there is room now.
    pub(super) fn drain_held(&mut self) {
        if !self.flow.any_held
            || self.sh.events_tx.len() >= MAX_EVENTS
            || self.sh.event_bytes.held() >= crate::link::MAX_EVENT_BYTES
        {
            return;
        }
        self.flow.any_held = false;
        let held: Vec<u32> = (0..self.flow.peers.len() as u32)
            .filter(|&p| self.flow.peers[p as usize].held)
            .collect();
        for peer in held {
            self.flow.peers[peer as usize].held = false;
            self.drain(peer);
        }
    }

    /// True if the event channel has room for `from`'s next frame: fewer
    /// than [`MAX_EVENTS`] frames, and its bytes within what the runtime
    /// may hold ([`crate::link::MAX_EVENT_BYTES`]).
    fn room_for_next(&self, from: u32) -> bool {
        let p = &self.flow.peers[from as usize];
        let len = match p.pending.get(&p.in_next) {
            Some(InItem::Frame(f)) => f.len() as u64,
            _ => 0,
        };
        self.sh.events_tx.len() < MAX_EVENTS && self.sh.event_bytes.room(len)
    }

    /// Delivers the frames of `from` that are next in order, while the
    /// event channel has room ([`Engine::room_for_next`]); the rest waits
    /// ([`Engine::drain_held`]).
    pub(super) fn drain(&mut self, from: u32) {
        loop {
            if !self.room_for_next(from) {
                let p = &mut self.flow.peers[from as usize];
                if !p.held && p.pending.contains_key(&p.in_next) {
                    p.held = true;
                    self.flow.any_held = true;
                    crate::libfabric::bound_hit("events");
                }
                return;
            }
            let p = &mut self.flow.peers[from as usize];
            let next = p.in_next;
            match p.pending.remove(&next) {
                Some(InItem::Frame(frame)) => {
                    p.in_next += 1;
                    self.flow.consumed(from);
                    self.sh.deliver(from, frame);
                }
                Some(InItem::Bye) => {
                    p.in_next += 1;
                    self.flow.consumed(from);
                    if self.sh.peer_gone(from) {
                        self.forget_peer(from, &format!("rank {from} shut down"), true);
                    }
                    return;
                }
                Some(InItem::Fetching) => {
                    p.pending.insert(next, InItem::Fetching);
                    return;
                }
                None => return,
            }
        }
    }
}
