//! Every rank in one process, for tests and single-node runs of the engine.
//!
//! Unlike "local" backends that pass pointers around, the loopback copies
//! every control frame and every fetched buffer, so that the layer above
//! always encodes, decodes and validates exactly what it would over a
//! network. A rank can be [`LoopbackHub::kill`]ed to test failure handling:
//! its peers see [`Event::LinkDown`] and its exposed buffers vanish;
//! [`Transport::shutdown`] is the graceful exit, which tells nobody.
//!
//! Cost: one memcpy per frame and per fetched byte.

use crate::{BufferKey, Event, Exposed, GetFuture, Rank, Transport, TransportError};
use bytes::Bytes;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

struct Endpoint {
    tx: flume::Sender<Event>,
    rx: flume::Receiver<Event>,
    exposed: Exposed,
    dead: AtomicBool,
}

/// The shared switchboard of a loopback job.
pub struct LoopbackHub {
    endpoints: Vec<Endpoint>,
    /// Serialises deaths so each survivor sees exactly one LinkDown per peer.
    kill_lock: Mutex<()>,
    /// The simulated node of each rank ([`Transport::nodes`]), if given.
    nodes: Option<Vec<u64>>,
    /// Replacements whose registration is gone (`(rank, incarnation)`):
    /// admitting one fails, as over TCP once a newer replacement of the
    /// rank asked, or the replacement's own wait ran out.
    gone: Mutex<std::collections::HashSet<(u32, u32)>>,
}

impl LoopbackHub {
    /// A job of `size` ranks; returns one transport per rank. Their nodes
    /// are unknown ([`Transport::nodes`] is `None`).
    pub fn new(size: u32) -> (Arc<LoopbackHub>, Vec<Arc<LoopbackTransport>>) {
        Self::build(size, None)
    }

    /// A job of `nodes.len()` ranks where rank `r` is said to run on node
    /// `nodes[r]` ([`Transport::nodes`]), to test node-aware placement in
    /// one process.
    pub fn with_nodes(nodes: Vec<u64>) -> (Arc<LoopbackHub>, Vec<Arc<LoopbackTransport>>) {
        Self::build(nodes.len() as u32, Some(nodes))
    }

    fn build(
        size: u32,
        nodes: Option<Vec<u64>>,
    ) -> (Arc<LoopbackHub>, Vec<Arc<LoopbackTransport>>) {
        let endpoints = (0..size)
            .map(|_| {
                let (tx, rx) = flume::unbounded();
                Endpoint {
                    tx,
                    rx,
                    exposed: Exposed::default(),
                    dead: AtomicBool::new(false),
                }
            })
            .collect();
        let hub = Arc::new(LoopbackHub {
            endpoints,
            kill_lock: Mutex::new(()),
            nodes,
            gone: Mutex::new(Default::default()),
        });
        let ts = (0..size)
            .map(|r| {
                Arc::new(LoopbackTransport {
                    hub: hub.clone(),
                    rank: Rank(r),
                })
            })
            .collect();
        (hub, ts)
    }

    /// Replacement `incarnation` of `rank` is no longer waiting to be
    /// admitted (it died while it was let in, and a newer one asked):
    /// [`Transport::admit`] of it fails from now on.
    pub fn registration_gone(&self, rank: Rank, incarnation: u32) {
        let mut gone = self.gone.lock().unwrap_or_else(|e| e.into_inner());
        gone.insert((rank.0, incarnation));
    }

    /// Simulates the death of `rank`: its buffers vanish, its frames stop,
    /// and every live peer gets one [`Event::LinkDown`].
    pub fn kill(&self, rank: Rank) {
        let _g = self.kill_lock.lock().unwrap_or_else(|e| e.into_inner());
        let Some(ep) = self.endpoints.get(rank.0 as usize) else {
            return;
        };
        if ep.dead.swap(true, Ordering::SeqCst) {
            return;
        }
        ep.exposed.clear();
        for (i, other) in self.endpoints.iter().enumerate() {
            if i as u32 != rank.0 && !other.dead.load(Ordering::SeqCst) {
                let _ = other.tx.send(Event::LinkDown {
                    peer: rank,
                    reason: "loopback peer killed".into(),
                });
            }
        }
    }

    /// A replacement takes `rank`'s place: the same endpoint stands for
    /// it, live again (a killed one's buffers are gone already).
    fn revive(&self, rank: Rank) -> Result<(), TransportError> {
        let _g = self.kill_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.endpoint(rank)?.dead.store(false, Ordering::SeqCst);
        Ok(())
    }

    fn endpoint(&self, rank: Rank) -> Result<&Endpoint, TransportError> {
        self.endpoints
            .get(rank.0 as usize)
            .ok_or(TransportError::NoSuchRank(rank.0))
    }

    fn live(&self, rank: Rank) -> Result<&Endpoint, TransportError> {
        let ep = self.endpoint(rank)?;
        if ep.dead.load(Ordering::SeqCst) {
            return Err(TransportError::LinkDown {
                peer: rank.0,
                reason: "peer is dead".into(),
            });
        }
        Ok(ep)
    }
}

/// One rank's endpoint on a [`LoopbackHub`].
pub struct LoopbackTransport {
    hub: Arc<LoopbackHub>,
    rank: Rank,
}

impl LoopbackTransport {
    fn me(&self) -> &Endpoint {
        &self.hub.endpoints[self.rank.0 as usize]
    }

    fn check_alive(&self) -> Result<(), TransportError> {
        if self.me().dead.load(Ordering::SeqCst) {
            Err(TransportError::Closed)
        } else {
            Ok(())
        }
    }
}

impl Transport for LoopbackTransport {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn size(&self) -> u32 {
        self.hub.endpoints.len() as u32
    }

    fn send(&self, to: Rank, frame: Bytes) -> Result<(), TransportError> {
        self.check_alive()?;
        let ep = self.hub.live(to)?;
        // Copy, as a wire would: the receiver must not share our memory.
        let frame = Bytes::copy_from_slice(&frame);
        ep.tx
            .send(Event::Message {
                from: self.rank,
                frame,
            })
            .map_err(|_| TransportError::Closed)
    }

    fn expose(&self, key: BufferKey, data: Bytes) {
        if self.check_alive().is_ok() {
            self.me().exposed.insert(key, data);
        }
    }

    fn withdraw(&self, key: BufferKey) -> Option<Bytes> {
        self.me().exposed.remove(key)
    }

    fn get(&self, from: Rank, key: BufferKey) -> GetFuture {
        let result = self.check_alive().and_then(|_| {
            let ep = self.hub.live(from)?;
            crate::link::copy_exposed(&ep.exposed, from, key)
        });
        Box::pin(async move { result })
    }

    fn events(&self) -> flume::Receiver<Event> {
        self.me().rx.clone()
    }

    fn nodes(&self) -> Option<&[u64]> {
        self.hub.nodes.as_deref()
    }

    fn shutdown(&self) {
        // Graceful: peers are not told of a failure, later sends to us fail.
        let ep = self.me();
        ep.dead.store(true, Ordering::SeqCst);
        ep.exposed.clear();
    }

    fn name(&self) -> &'static str {
        "loopback"
    }

    fn admit(&self, peer: Rank, incarnation: u32, _dead: &[u32]) -> Result<(), TransportError> {
        let gone = self.hub.gone.lock().unwrap_or_else(|e| e.into_inner());
        if gone.contains(&(peer.0, incarnation)) {
            return Err(TransportError::Protocol {
                peer: peer.0,
                detail: format!(
                    "no replacement of rank {peer} (incarnation {incarnation}) is waiting"
                ),
            });
        }
        drop(gone);
        self.hub.revive(peer)
    }

    fn readmit(&self, peer: Rank, _incarnation: u32, _addr: &[u8]) -> Result<(), TransportError> {
        self.hub.revive(peer)
    }

    fn address_of(&self, _peer: Rank) -> Option<Vec<u8>> {
        // One process: a peer has no address beyond its rank.
        Some(Vec::new())
    }
}
