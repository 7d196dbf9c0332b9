//! The libfabric transport (cargo feature `libfabric`): reliable-datagram
//! endpoints (`FI_EP_RDM`), tagged messages for control frames, and
//! one-sided RMA reads (`fi_read`) for [`Transport::get`].
//!
//! # Start-up and failure detection
//!
//! [`LibfabricTransport::start`] opens the fabric objects of the provider
//! asked for ([`fi`]: fabric, domain, completion queue, address vector,
//! endpoint), posts its receives, then starts a [`TcpTransport`] with the
//! same configuration: the TCP bootstrap checks the job, rank, size and
//! protocol version, and ranks then send each other their protocol version
//! and endpoint names (`fi_getname`) over TCP, refuse a peer of another
//! version ([`crate::version`]) and insert the names into their address
//! vectors. The TCP connections stay
//! open, idle, as the failure detector: a peer process that dies closes
//! them, and the TCP transport's [`Event::LinkDown`] is forwarded as this
//! transport's (nothing from that peer is delivered after it, its pending
//! gets fail with [`TransportError::LinkDown`]). Fabric operations that
//! fail or stall (no completion within [`LibfabricConfig::op_timeout`]) for
//! a peer that neither said goodbye nor lost its TCP link report that peer
//! down too, after a grace second (unless the TCP transport saw it leave
//! gracefully): a dead peer never leaves a get hanging in a completion
//! queue. Launcher reports (`taskfold run` telling the
//! master that a rank exited) arrive over TCP and are forwarded as they are.
//!
//! # Who sent a message
//!
//! The endpoint is opened with `FI_SOURCE`: a message is taken only if the
//! provider reports it as coming from the address-vector entry of the rank
//! its tag claims ([`source`]); a readiness barrier over TCP keeps every
//! rank from sending before its peers inserted its name. Exposed memory is
//! registered under random 64-bit keys where the provider does not choose
//! them. A dead rank's replacement registers through the TCP bootstrap and
//! is let in on the fabric too ([`Transport::readmit`], `admit`): its name
//! and readiness are exchanged over TCP, and the older endpoint is no
//! rank's entry from then on. See the book's Security chapter.
//!
//! # Control frames
//!
//! Each frame travels as one tagged message (see [`wire`]): a 48-byte
//! header with a per-destination sequence number, then the frame, if it has
//! at most 16 KiB; a larger frame is registered by the sender and the
//! receiver fetches it with RMA reads (then releases it). Receivers
//! reorder by sequence number, so frames from one rank are delivered in the
//! order it sent them whatever the provider's completion order. Frames to
//! oneself go straight to one's own event channel. Credit-based flow control
//! bounds the messages a sender has outstanding at each peer (see [`wire`]).
//!
//! # Cost of a get
//!
//! A `GET_REQ` message (48 bytes) to the owner, whose progress thread (not
//! its application) registers the exposed bytes on the first request
//! (`fi_mr_reg`, cached until withdrawn) and answers `GET_OK` with the RMA
//! address, key and length; then `ceil(len / read_chunk)` `fi_read`s into
//! a 16-byte-aligned receive buffer (registered too if the provider wants
//! `FI_MR_LOCAL`), then a `RELEASE` message: two round trips of small
//! messages plus the data, which moves without any copy at the owner. The
//! exposed bytes stay registered and alive while any peer's read is in
//! flight, even if they are withdrawn meanwhile.
//!
//! # Graceful shutdown
//!
//! [`Transport::shutdown`] queues a `BYE` to every peer after its last
//! frame, waits (at most a second) for the goodbyes to be sent and for
//! peers' reads of its memory to finish, says goodbye over TCP too, then
//! closes the endpoint. Peers report no failure; their later calls to the
//! departed rank fail with [`TransportError::LinkDown`] at once.
//!
//! # Same-node reads
//!
//! Ranks on one node also read each other's shared-heap buffers in place
//! ([`Transport::same_node`], the same [`crate::same_node`] module as TCP's:
//! it needs only shared memory and this transport's link states), so a
//! fold on one node reads its peer's data where it lies whatever the
//! fabric.
//!
//! # Integrity
//!
//! With `TASKFOLD_INTEGRITY=mac` ([`TcpConfig::integrity`]) every fabric
//! message is sealed with a MAC under a key of its pair of processes and
//! direction, and carries its number and the digest of the bulk bytes it
//! points to; the receiver refuses a changed, injected or replayed message
//! before decoding it, and bulk bytes read by RMA that do not match their
//! digest are never handed over ([`seal`]). Ranks that disagree on the
//! setting refuse each other at start.
//!
//! # Providers and memory registration
//!
//! The provider is chosen by name ([`LibfabricConfig::provider`], e.g.
//! `tcp;ofi_rxm`, `sockets`, `shm`, `verbs;ofi_rxm`). The transport
//! supports the `mr_mode` bits `FI_MR_LOCAL`, `FI_MR_VIRT_ADDR`,
//! `FI_MR_ALLOCATED` and `FI_MR_PROV_KEY` and the modes `FI_CONTEXT` and
//! `FI_CONTEXT2`; providers needing more (e.g. `FI_MR_ENDPOINT`) are not
//! offered by `fi_getinfo`. It asks for manual progress where the provider
//! allows it (`sockets` otherwise runs a progress thread of its own, which
//! sleeps for milliseconds). IP-addressed providers bind the TCP
//! configuration's `bind_host` (127.0.0.1 by default). The book's
//! Transports chapter gives measurements (`taskfold bench transports`).
//!
//! # Threads
//!
//! One progress thread per transport posts every fabric operation and reads
//! the completion queue; it sleeps when idle (in `fi_cq_sread` with
//! [`WaitMode::Auto`] and an rxm-based provider, otherwise on its command
//! channel with a backoff from 20 us to 1 ms) and never spins on a core.
//! One more thread forwards the TCP transport's events; the TCP transport
//! keeps its own.

mod bootstrap;
pub mod fi;
#[doc(hidden)]
pub mod intruder;
mod open;
mod progress;
pub mod seal;
mod shared;
pub mod source;
mod stale;
pub mod wire;

pub use open::{available_providers, provider_available};

use crate::tcp::{TcpConfig, TcpTransport};
use crate::{
    link, BufferKey, Event, GetFuture, Rank, Received, SameNode, Transport, TransportError,
};
use bootstrap::{start_up, Forwarder};
use bytes::Bytes;
use open::Opened;
use progress::Cmd;

/// Counts a bound on what a peer can make this rank hold reached (the
/// TCP transport's counter, [`crate::tcp::metrics::BOUNDS_HIT`], with
/// `transport="libfabric"`; label `bound`: `events`, `reorder`,
/// `get_total`).
pub(crate) fn bound_hit(bound: &'static str) {
    metrics::counter!(crate::tcp::metrics::BOUNDS_HIT, "transport" => "libfabric", "bound" => bound)
        .increment(1);
}
use shared::Shared;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Environment variable naming the libfabric provider.
pub const PROVIDER_ENV: &str = "TASKFOLD_FI_PROVIDER";

/// How the progress thread sleeps when it has nothing to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitMode {
    /// Block in `fi_cq_sread` (file-descriptor wait object, woken by
    /// completions and by `fi_cq_signal` after each command) with
    /// rxm-based providers, whose wait set includes their connections;
    /// poll with a backoff with the others. Less idle CPU, same latency.
    Auto,
    /// Always poll the completion queue, sleeping with a backoff.
    Poll,
}

/// Configuration of [`LibfabricTransport::start`].
#[derive(Clone, Debug)]
pub struct LibfabricConfig {
    /// The TCP transport used for the bootstrap and as failure detector
    /// (rank, size, job, master, bind address, timeouts).
    pub tcp: TcpConfig,
    /// The libfabric provider (`"tcp;ofi_rxm"`, `"sockets"`, `"shm"`, ...);
    /// `None` lets libfabric choose (it honours `FI_PROVIDER`).
    pub provider: Option<String>,
    /// Bytes per `fi_read` (at most the provider's `max_msg_size`).
    /// Default 4 MiB.
    pub read_chunk: usize,
    /// How long a get may wait for the owner's answer or its reads' data
    /// before the peer is considered broken. Default 60 s.
    pub op_timeout: Duration,
    /// Largest buffer a get accepts. Default 64 GiB.
    pub max_get: u64,
    /// How the progress thread sleeps. Default [`WaitMode::Poll`].
    pub wait: WaitMode,
}

impl LibfabricConfig {
    /// The defaults over `tcp` with `provider`.
    pub fn new(tcp: TcpConfig, provider: Option<String>) -> Self {
        LibfabricConfig {
            tcp,
            provider,
            read_chunk: 4 << 20,
            op_timeout: Duration::from_secs(60),
            max_get: 64 << 30,
            wait: WaitMode::Poll,
        }
    }
}

/// One rank's libfabric endpoint. See the [module documentation](self).
pub struct LibfabricTransport {
    sh: Arc<Shared>,
    tcp: Arc<TcpTransport>,
    /// This endpoint's name, sent to a replacement this rank lets in.
    name: Vec<u8>,
    /// This process's nonce, if it seals its fabric messages ([`seal`]).
    nonce: Option<[u8; seal::NONCE_LEN]>,
    provider: String,
    fabric: String,
    max_frame: u64,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for LibfabricTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LibfabricTransport")
            .field("rank", &self.sh.rank)
            .field("size", &self.sh.size)
            .field("provider", &self.provider)
            .field("fabric", &self.fabric)
            .finish()
    }
}

impl LibfabricTransport {
    /// A get, refused if the owner announces more than `max` bytes (or
    /// [`LibfabricConfig::max_get`]) before the buffer is allocated.
    fn get_bounded(&self, from: Rank, key: BufferKey, max: Option<u64>) -> GetFuture {
        if let Err(e) = self.check_peer(from) {
            return Box::pin(async move { Err(e) });
        }
        if from.0 == self.sh.rank {
            let r = link::copy_exposed(&self.sh.exposed, from, key);
            let f: GetFuture = Box::pin(async move { r });
            return match max {
                Some(m) => crate::checked_within(f, from, m),
                None => f,
            };
        }
        let (reply, rx) = futures::channel::oneshot::channel();
        if let Err(e) = self.sh.command(Cmd::Get {
            from: from.0,
            key,
            max,
            reply,
        }) {
            return Box::pin(async move { Err(e) });
        }
        Box::pin(async move {
            rx.await
                .unwrap_or(Err(TransportError::Closed))
                .map(Received::Owned)
        })
    }

    /// Opens the fabric endpoint, joins the job through the TCP bootstrap,
    /// exchanges endpoint names and starts the progress thread. Blocking,
    /// at most about `cfg.tcp.connect_timeout` (twice: bootstrap, names).
    ///
    /// Errors: the provider is not available (the message lists those that
    /// are), a fabric call failed ([`TransportError::Io`] with libfabric's
    /// message), or the TCP bootstrap's errors; ranks using different
    /// providers refuse each other.
    pub fn start(cfg: LibfabricConfig) -> Result<Arc<LibfabricTransport>, TransportError> {
        if cfg.tcp.rank >= cfg.tcp.size {
            return Err(TransportError::NoSuchRank(cfg.tcp.rank));
        }
        let Opened {
            mut engine,
            sh,
            av,
            name,
            provider,
            fabric,
        } = open::open(&cfg)?;
        let tcp = TcpTransport::start(cfg.tcp.clone())?;
        let weak = Arc::downgrade(&tcp);
        sh.same.set_listeners(Box::new(move |peer| {
            weak.upgrade().and_then(|t| t.peer_listen_addr(peer))
        }));
        let deadline = Instant::now() + cfg.tcp.connect_timeout;
        let started = seal_maker(&cfg, tcp.job()).and_then(|maker| {
            let m = maker.as_ref();
            start_up(&tcp, &av, &provider, &name, m, deadline).map(|s| (s, maker))
        });
        let ((addrs, keys, replay), maker) = match started {
            Ok(x) => x,
            Err(e) => {
                tcp.shutdown();
                return Err(e);
            }
        };
        let left = tcp.clone();
        let seals = maker.as_ref().map(|_| seal::Seals::new(keys));
        engine.connect(addrs, Box::new(move |p| left.peer_left(Rank(p))), seals);
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name)
                .spawn(f)
                .map_err(|e| TransportError::Io(format!("starting a thread: {e}")))
        };
        let rank = cfg.tcp.rank;
        let progress = spawn(
            format!("taskfold-fi-r{rank}"),
            Box::new(move || engine.run()),
        )?;
        let fwd = Forwarder {
            sh: sh.clone(),
            tcp: tcp.clone(),
            av,
            provider: provider.clone(),
            maker: maker.clone(),
        };
        let events = tcp.events();
        let forwarder = spawn(
            format!("taskfold-fi-fwd-r{rank}"),
            Box::new(move || fwd.run(events, replay)),
        )?;
        tracing::info!(rank, size = cfg.tcp.size, %provider, %fabric, "libfabric transport up");
        Ok(Arc::new(LibfabricTransport {
            sh,
            tcp,
            name,
            nonce: maker.map(|m| *m.nonce()),
            provider,
            fabric,
            max_frame: cfg.tcp.max_frame,
            threads: Mutex::new(vec![progress, forwarder]),
        }))
    }

    /// This rank's endpoint name (`fi_getname`): no secret — any process
    /// on the fabric may learn it; a message is believed by where the
    /// provider says it came from, not by who knows a name.
    pub fn endpoint_name(&self) -> &[u8] {
        &self.name
    }

    /// The provider in use (`"tcp;ofi_rxm"`).
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// The fabric and domain in use (`"127.0.0.1/32/lo"`).
    pub fn fabric(&self) -> &str {
        &self.fabric
    }

    /// The TCP transport used for the bootstrap and failure detection.
    pub fn tcp(&self) -> &Arc<TcpTransport> {
        &self.tcp
    }

    /// Simulates a crash, for tests: closes the TCP links without goodbye
    /// (peers see [`Event::LinkDown`]) and the fabric endpoint at once.
    pub fn abort(&self) {
        self.sh.close();
        self.tcp.abort();
        let _ = self.sh.command(Cmd::Shutdown { graceful: false });
        self.join();
    }

    /// The error a call to `peer` fails with now, if any; notices a peer
    /// that left gracefully if the TCP transport saw its goodbye first.
    fn check_peer(&self, peer: Rank) -> Result<(), TransportError> {
        self.sh.check_peer(peer)?;
        if peer.0 != self.sh.rank && self.tcp.peer_left(peer) && self.sh.peer_gone(peer.0) {
            let reason = format!("rank {} shut down", peer.0);
            let _ = self.sh.command(Cmd::Forget {
                peer: peer.0,
                reason,
            });
            return self.sh.check_peer(peer);
        }
        Ok(())
    }

    /// A replacement of `peer` may be let in: a rank of the job, and the
    /// transport open.
    fn check_replaced(&self, peer: Rank) -> Result<(), TransportError> {
        crate::link::check_peer(self.sh.is_closed(), self.sh.size, peer)
    }

    /// The fabric side of letting in `peer`'s replacement `incarnation`:
    /// false if that incarnation (or a newer one) is served already.
    fn let_in(&self, peer: u32, incarnation: u32) -> Result<bool, TransportError> {
        if peer == self.sh.rank || !self.sh.let_in(peer, incarnation) {
            return Ok(false);
        }
        let (done, rx) = flume::bounded(1);
        self.sh.command(Cmd::Readmit { peer, done })?;
        rx.recv_timeout(Duration::from_secs(10))
            .map_err(|_| TransportError::Closed)?;
        Ok(true)
    }

    /// Plays an on-path attacker without a key, for tests (hidden, not
    /// API): changes or replays the next message this rank sends `peer`,
    /// or changes the next bulk bytes it reads from `peer`
    /// ([`seal::Tamper`]).
    #[cfg(feature = "conformance")]
    #[doc(hidden)]
    pub fn tamper(&self, peer: Rank, how: seal::Tamper) -> Result<(), TransportError> {
        self.sh.command(Cmd::Tamper { peer: peer.0, how })
    }

    /// Sends this rank's endpoint name to `peer`'s replacement over TCP.
    fn send_name(&self, peer: Rank) {
        let frame = Bytes::from(wire::name_frame(
            &self.provider,
            &self.name,
            self.nonce.as_ref(),
        ));
        if let Err(e) = self.tcp.send(peer, frame) {
            tracing::warn!(rank = self.sh.rank, peer = peer.0, error = %e, "sending the endpoint name to a replacement");
        }
    }

    fn join(&self) {
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        let me = std::thread::current().id();
        for t in threads {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

impl Transport for LibfabricTransport {
    fn rank(&self) -> Rank {
        Rank(self.sh.rank)
    }

    fn size(&self) -> u32 {
        self.sh.size
    }

    fn name(&self) -> &'static str {
        "libfabric"
    }

    /// Every rank's node, as the TCP bootstrap learnt them (buddies and
    /// the standby are then on other nodes, as over TCP).
    fn incarnation(&self) -> u32 {
        self.tcp.incarnation()
    }

    /// Replacements register through the TCP bootstrap, as over TCP, and
    /// are let in on the fabric too ([`Transport::readmit`]).
    fn replaces(&self) -> bool {
        self.tcp.replaces()
    }

    /// Lets the replacement in on the fabric (as [`Transport::readmit`]),
    /// then answers it through the TCP bootstrap.
    fn admit(&self, peer: Rank, incarnation: u32, dead: &[u32]) -> Result<(), TransportError> {
        self.check_replaced(peer)?;
        let fresh = self.let_in(peer.0, incarnation)?;
        self.tcp.admit(peer, incarnation, dead)?;
        if fresh {
            self.send_name(peer);
        }
        Ok(())
    }

    fn refuse_replacement(&self, peer: Rank, incarnation: u32, reason: &str) {
        self.tcp.refuse_replacement(peer, incarnation, reason);
    }

    /// The older process's TCP connections closed and its gets failed (the
    /// TCP transport's readmit); on the fabric, everything pending with it
    /// failed, its endpoint refused from now on (no rank's address vector
    /// entry is its), its sequences started anew; this rank's name sent to
    /// the replacement, whose name is inserted when it comes, and frames
    /// to it wait until it inserted this rank's.
    fn readmit(&self, peer: Rank, incarnation: u32, addr: &[u8]) -> Result<(), TransportError> {
        self.check_replaced(peer)?;
        if peer.0 == self.sh.rank {
            return Ok(());
        }
        let fresh = self.let_in(peer.0, incarnation)?;
        self.tcp.readmit(peer, incarnation, addr)?;
        if fresh {
            self.send_name(peer);
        }
        Ok(())
    }

    fn nodes(&self) -> Option<&[u64]> {
        self.tcp.nodes()
    }

    fn address_of(&self, peer: Rank) -> Option<Vec<u8>> {
        self.tcp.address_of(peer)
    }

    fn incarnations(&self) -> Vec<u32> {
        self.tcp.incarnations()
    }

    fn dead_at_join(&self) -> Vec<u32> {
        self.tcp.dead_at_join()
    }

    fn master_rank(&self) -> Rank {
        self.tcp.master_rank()
    }

    fn become_master(&self) -> Result<(), TransportError> {
        self.tcp.become_master()
    }

    fn job_over(&self) -> Result<(), TransportError> {
        self.tcp.job_over()
    }

    fn assign_spare(&self, peer: Rank, incarnation: u32) -> bool {
        self.tcp.assign_spare(peer, incarnation)
    }

    fn spares_parked(&self) -> usize {
        self.tcp.spares_parked()
    }

    fn send(&self, to: Rank, frame: Bytes) -> Result<(), TransportError> {
        self.check_peer(to)?;
        link::check_frame(frame.len(), self.max_frame)?;
        if to.0 == self.sh.rank {
            link::send_to_self(&self.sh.events_tx, to, &frame);
            return Ok(());
        }
        self.sh.command(Cmd::Send { to: to.0, frame })
    }

    fn expose(&self, key: BufferKey, data: Bytes) {
        if !self.sh.is_closed() {
            self.sh.exposed.insert(key, data);
        }
    }

    fn withdraw(&self, key: BufferKey) -> Option<Bytes> {
        self.sh.exposed.remove(key)
    }

    fn get(&self, from: Rank, key: BufferKey) -> GetFuture {
        self.get_bounded(from, key, None)
    }

    /// The owner's answer announces the length before anything is
    /// allocated: a longer one is refused then.
    fn get_within(&self, from: Rank, key: BufferKey, max: u64) -> GetFuture {
        self.get_bounded(from, key, Some(max))
    }

    fn get_segments_within(
        &self,
        from: Rank,
        key: BufferKey,
        max: u64,
        sink: crate::SegmentSink,
    ) -> crate::SegmentsFuture {
        crate::one_segment(self.get_bounded(from, key, Some(max)), sink)
    }

    fn events(&self) -> flume::Receiver<Event> {
        self.sh.events_rx.clone()
    }

    /// Graceful: says goodbye over the fabric (after every frame already
    /// sent) and over TCP, so that peers report no failure, then closes the
    /// endpoint. Blocking, a few seconds at most.
    fn shutdown(&self) {
        if !self.sh.close() {
            return;
        }
        let _ = self.sh.command(Cmd::Shutdown { graceful: true });
        self.tcp.shutdown();
        self.join();
        tracing::debug!(rank = self.sh.rank, "libfabric transport shut down");
    }

    /// Reads in place from same-node peers: plain shared memory, which
    /// needs no fabric (none when `loans` is off in the TCP configuration).
    fn same_node(&self) -> Option<&SameNode> {
        Some(&self.sh.same)
    }
}

impl Drop for LibfabricTransport {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// This rank's key maker if it seals its fabric messages
/// (`TASKFOLD_INTEGRITY=mac`, [`seal`]); an error if its random source
/// fails.
fn seal_maker(cfg: &LibfabricConfig, job: u64) -> Result<Option<seal::KeyMaker>, TransportError> {
    if !cfg.tcp.integrity {
        return Ok(None);
    }
    seal::KeyMaker::new(cfg.tcp.auth.key(), job, cfg.tcp.rank)
        .map(Some)
        .map_err(|e| {
            TransportError::Io(format!(
                "drawing a nonce for the fabric's message keys: {e}"
            ))
        })
}
