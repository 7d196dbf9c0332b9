//! The TCP transport (socket2 + tokio), the default between processes.
//!
//! # Connections
//!
//! Every rank listens. On its first frame or get to a peer, a rank opens its
//! own connection to that peer, sends a `HELLO` (job id, its rank, protocol
//! version, a fresh nonce), and the two prove the job key to each other
//! ([`TcpConfig::auth`], the `handshake` module: the caller checks the
//! peer's proof before it sends anything, the peer reads nothing but the
//! caller's proof before it matched). The rank then uses that connection
//! for all its control frames and get requests to the peer, in order; the peer answers the gets on the same
//! connection. Big responses therefore never sit in front of the peer's own
//! control frames, which travel on the peer's connection. Each connection
//! has a single writer task fed by an unbounded channel: [`Transport::send`]
//! never blocks and per-peer order is kept. A frame to oneself goes straight
//! to one's own event channel (copied). Sockets use `TCP_NODELAY` and 4 MiB
//! kernel buffers. The transport runs its own two-thread tokio runtime, so
//! the caller needs none, and its get futures complete on any executor;
//! or, with [`TcpConfig::threads`] 0, a single-threaded one that the
//! caller takes ([`crate::Driven::take_driver`]) and runs on a thread of
//! its own, beside its own tasks (the runtime's actors do).
//!
//! Before its proof, a connection waits at the listener's gate ([`gate`]:
//! at most 256 unproven connections, 64 per address, 3 s each, the oldest
//! closed to make room); a refusal received before the other side's proof
//! is quoted and only makes the caller try again within its connect
//! timeout.
//!
//! # Frame format
//!
//! A fixed 32-byte header (`b"tf"`, kind, reserved byte, payload length as
//! u32 LE, three u64 LE fields) then the payload; see [`frame`] for the
//! table of kinds. A control frame is `CONTROL` with the opaque bytes as
//! payload (at most [`TcpConfig::max_frame`]; larger ones are refused by the
//! sender with [`TransportError::FrameTooLarge`] and by the receiver, which
//! drops the connection). With [`TcpConfig::integrity`]
//! (`TASKFOLD_INTEGRITY=mac`) every frame after the handshake is followed
//! by a 16-byte tag under its connection's and direction's key, checked
//! before the frame is acted on (the `integrity` module and the writer).
//!
//! # Cost of a get
//!
//! One `GET_REQ` frame (32 bytes) from the requester, then
//! `max(1, ceil(len / chunk))` `GET_CHUNK` frames from the owner: in all
//! `32 + len + 32 * max(1, ceil(len / chunk))` bytes on the wire, one
//! allocation of `len` bytes at the requester (zeroed, then read into from
//! the socket), no copy at the owner: slices of the exposed `Bytes` go to
//! the socket in vectored writes (only payloads of 16 KiB or less are
//! gathered with their header into the writer's batch buffer). A key that is
//! not exposed costs one `GET_ERR` frame.
//!
//! Between processes of one node (same kernel, PID and mount namespaces), a get of
//! 64 KiB or more is a loan instead: `GET_REQ`, one `GET_LEND` frame (40
//! bytes) naming the owner's buffer, one copy by `process_vm_readv`, one
//! `GET_RETURN` (32 bytes). See the `cma` module. If the buffer lies in
//! the owner's shared heap (a program that installs
//! [`crate::shm::SharedHeap`]), the loan frame also names its place there
//! (72 bytes) and the requester reads the owner's pages in place, through a
//! mapping of that heap made once per peer ([`crate::same_node`]): no copy
//! at all for [`Transport::get`] (a view), one `memcpy` for a segmented
//! get. The same mappings serve [`Transport::same_node`]'s reads in place,
//! which need no request at all.
//!
//! # Failures
//!
//! Network errors are values. A connection sending garbage, a bad hello or
//! an oversized frame is dropped (logged, counted in
//! `taskfold_transport_bad_connections_total`) and everyone else is served
//! as before. When a connection to or from a peer breaks without a goodbye
//! (end of stream or reset: the peer process died), the transport emits
//! exactly one [`Event::LinkDown`] for that peer, fails the pending gets to
//! it with [`TransportError::LinkDown`], closes its other connection with it
//! and fails later sends and gets to it. Nothing from that peer is delivered
//! after its `LinkDown`. A peer that is only discovered dead when we first
//! connect to it (connection refused) is reported the same way.
//! [`Transport::shutdown`] is graceful: goodbyes on every connection, so peers
//! report no failure; [`TcpTransport::abort`] simulates a crash.
//!
//! # Bootstrap
//!
//! See [`TcpTransport::start`] and the `bootstrap` module: rank 0 hosts the
//! master, which other ranks find at a fixed address, through a rendezvous
//! file or in the launcher's key-value store ([`crate::pmi`]), and which
//! hands out every rank's listen address.

mod bootstrap;
pub(crate) mod cma;
mod config;
mod conn;
mod dial;
pub mod frame;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod gate;
mod get;
mod handshake;
mod integrity;
mod launcher;
pub(crate) mod lender;
pub mod metrics;
mod outgoing;
mod peer;
mod rendezvous;
mod respawn;
mod ring;
mod sock;
pub mod spare;
mod switch;
mod transport;
mod wire;
mod writer;

pub use config::{MasterAddr, TableHold, TcpConfig};
pub use launcher::report_rank_exit;

use crate::{link, BufferKey, Driven, Event, GetFuture, Rank, SameNode, Transport, TransportError};
use bytes::Bytes;
use peer::Shared;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use taskfold_core::auth::JobAuth;
use tokio::runtime::Runtime;

/// How long a graceful shutdown waits for its peers to close their side.
const GOODBYE_WAIT: Duration = Duration::from_secs(2);

/// One rank's TCP endpoint. See the [module documentation](self).
pub struct TcpTransport {
    shared: Arc<Shared>,
    /// `threads == 0`: the runtime is a single-threaded one that the
    /// caller takes ([`Driven::take_driver`]) and runs.
    driven: bool,
    runtime: Mutex<Option<Runtime>>,
    master_addr: SocketAddr,
    listen_addr: SocketAddr,
    /// Every rank's node token, from the master's table; `None` if some
    /// rank could not know its own.
    nodes: Option<Vec<u64>>,
    /// The ranks the master's table marked failed when this process was
    /// let in.
    dead_at_join: Vec<u32>,
    /// Every rank's incarnation, from the master's table.
    incarnations: Vec<u32>,
    /// The rank that ran the master when this process joined.
    master: u32,
    /// How ranks find the master: a rendezvous file is rewritten by a
    /// standby that takes over ([`Transport::become_master`]).
    rendezvous: MasterAddr,
}

impl std::fmt::Debug for TcpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpTransport")
            .field("rank", &self.shared.rank)
            .field("size", &self.shared.size)
            .field("listen_addr", &self.listen_addr)
            .field("master_addr", &self.master_addr)
            .finish()
    }
}

impl TcpTransport {
    /// Joins the job: binds this rank's listener, registers with the master
    /// (or, on rank 0, hosts it) and returns once every rank has registered.
    /// Blocking, at most about `connect_timeout`.
    ///
    /// Errors: [`TransportError::Refused`] if the master refuses this process
    /// (no proof of the job key, wrong job id, wrong size, rank out of
    /// range or already registered, other protocol version);
    /// [`TransportError::Auth`] if the master does not prove the job key;
    /// [`TransportError::MasterUnreachable`] if no
    /// master answers in time; on rank 0, [`TransportError::Io`] naming the
    /// ranks that never registered.
    pub fn start(cfg: TcpConfig) -> Result<Arc<TcpTransport>, TransportError> {
        if cfg.rank >= cfg.size {
            return Err(TransportError::NoSuchRank(cfg.rank));
        }
        if cfg.auth == JobAuth::Insecure {
            tracing::warn!(
                rank = cfg.rank,
                "this job runs without a key (insecure mode): any process that reaches its \
                 ports can take part in it"
            );
        }
        let started = Instant::now();
        let driven = cfg.threads == 0;
        let runtime = build_runtime(&cfg)?;
        let shared = Arc::new(Shared::new(&cfg, runtime.handle().clone()));
        let weak = Arc::downgrade(&shared);
        shared.same.set_listeners(Box::new(move |peer| {
            weak.upgrade().and_then(|s| s.addr_of(peer))
        }));
        // Rank 0's first process hosts the master; a replacement of rank 0
        // joins whichever rank runs the master then, as any rank does,
        // unless the master it would replace died with no one after it
        // (while the job started): then it hosts the master itself.
        let hosts = cfg.rank == 0 && (cfg.incarnation == 0 || bootstrap::orphaned(&cfg));
        let bind = match (&cfg.master, hosts) {
            (MasterAddr::Addr(a), true) => *a,
            _ => SocketAddr::new(cfg.bind_host, 0),
        };
        let listener = {
            let _guard = runtime.enter();
            sock::listen(bind)
        };
        let fail = |e: TransportError, runtime: Runtime| {
            shared.close();
            runtime.shutdown_background();
            Err(e)
        };
        let (listener, listen_addr) = match listener.and_then(|l| {
            let a = l.local_addr()?;
            Ok((l, a))
        }) {
            Ok(x) => x,
            Err(e) => return fail(TransportError::Io(format!("binding {bind}: {e}")), runtime),
        };
        let registrations = hosts.then(|| {
            shared.set_hosts_master();
            // Bounded: connections beyond are refused, not queued.
            let (tx, rx) = flume::bounded(bootstrap::max_registrations(cfg.size));
            *shared.registrar.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
            rx
        });
        runtime.spawn(conn::accept_loop(shared.clone(), listener));
        tracing::debug!(rank = cfg.rank, %listen_addr, "listening");
        let joined = match registrations {
            Some(rx) => {
                let deadline = started + cfg.connect_timeout;
                host_master(&cfg, &shared, &runtime, rx, listen_addr, deadline)
            }
            None => bootstrap::register(&cfg, listen_addr),
        };
        let joined = match joined {
            Ok(x) => x,
            Err(e) => return fail(e, runtime),
        };
        let table = &joined.table;
        let nodes: Option<Vec<u64>> = table
            .iter()
            .map(|e| (e.node != 0).then_some(e.node))
            .collect();
        shared.adopt_table(table);
        tracing::info!(rank = cfg.rank, size = cfg.size, %listen_addr, "tcp transport up");
        Ok(Arc::new(TcpTransport {
            rendezvous: cfg.master.clone(),
            incarnations: table.iter().map(|e| e.incarnation).collect(),
            dead_at_join: (0..)
                .zip(table.iter())
                .filter_map(|(r, e)| e.dead.then_some(r))
                .collect(),
            master: joined.master,
            shared,
            driven,
            runtime: Mutex::new(Some(runtime)),
            master_addr: joined.master_addr,
            listen_addr,
            nodes,
        }))
    }

    /// The master's address (rank 0's listener).
    pub fn master_addr(&self) -> SocketAddr {
        self.master_addr
    }

    /// The job id.
    pub fn job(&self) -> u64 {
        self.shared.job
    }

    /// This rank's listen address.
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen_addr
    }

    /// Where `peer`'s current process listens, as the job's table says.
    #[cfg(feature = "libfabric")]
    pub(crate) fn peer_listen_addr(&self, peer: u32) -> Option<SocketAddr> {
        self.shared.addr_of(peer)
    }

    /// Simulates a crash, for tests: closes every socket without a goodbye
    /// (peers see [`Event::LinkDown`]) and stops the runtime. Later calls
    /// fail with [`TransportError::Closed`].
    pub fn abort(&self) {
        self.shared.close();
        drop(self.shared.drain_for_close());
        for t in self.shared.all_tasks() {
            t.abort();
        }
        if let Some(rt) = self.take_runtime() {
            rt.shutdown_background();
        }
    }

    /// Buffers lent to same-node peers and not yet returned.
    pub fn loans_out(&self) -> usize {
        self.shared.loans_out()
    }

    /// True once `peer` has left gracefully (its goodbye arrived). Used by
    /// transports that bootstrap over TCP to tell a departed peer from a
    /// failed one.
    pub fn peer_left(&self, peer: Rank) -> bool {
        peer.0 < self.shared.size && self.shared.slot(peer.0).link == crate::link::Link::Gone
    }

    fn take_runtime(&self) -> Option<Runtime> {
        self.runtime
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// A get sent to another rank (`view`: a same-node loan may come back
    /// as a view); with a sink, a segmented one.
    fn requested(
        &self,
        from: Rank,
        key: BufferKey,
        view: bool,
        max: u64,
        sink: Option<crate::SegmentSink>,
    ) -> GetFuture {
        match get::request(&self.shared, from.0, key, view, max, sink) {
            Err(e) => Box::pin(async move { Err(e) }),
            Ok(rx) => {
                let shared = self.shared.clone();
                Box::pin(async move {
                    match rx.await {
                        Ok(r) => r,
                        Err(_) if shared.is_closed() => Err(TransportError::Closed),
                        Err(_) => Err(TransportError::LinkDown {
                            peer: from.0,
                            reason: "connection closed during the get".into(),
                        }),
                    }
                })
            }
        }
    }

    fn check_peer(&self, peer: Rank) -> Result<(), TransportError> {
        link::check_peer(self.shared.is_closed(), self.shared.size, peer)
    }
}

/// The transport's runtime: `cfg.threads` worker threads, or, with none,
/// a single-threaded runtime for the caller to drive.
fn build_runtime(cfg: &TcpConfig) -> Result<Runtime, TransportError> {
    if cfg.threads == 0 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cfg.threads)
            .thread_name(format!("taskfold-tcp-r{}", cfg.rank))
            .enable_all()
            .build()
    }
    .map_err(|e| TransportError::Io(format!("starting the runtime: {e}")))
}

/// Rank 0's bootstrap: writes the rendezvous file, or puts its address in
/// the launcher's store (if that is how ranks find it), and collects the registrations until `deadline`; returns its
/// own address and the table. The rendezvous file is removed on failure.
fn host_master(
    cfg: &TcpConfig,
    shared: &Arc<Shared>,
    runtime: &Runtime,
    rx: flume::Receiver<bootstrap::Registration>,
    listen_addr: SocketAddr,
    deadline: Instant,
) -> Result<bootstrap::Joined, TransportError> {
    if let MasterAddr::Rendezvous(path) = &cfg.master {
        // An earlier start's table goes before anyone registers here.
        bootstrap::started::remove(&cfg.master);
        let public = bootstrap::reachable(listen_addr);
        rendezvous::write_rendezvous(path, cfg.job, public, cfg.rank).map_err(|e| {
            TransportError::Io(format!(
                "writing the rendezvous file {}: {e}",
                path.display()
            ))
        })?;
    }
    if let MasterAddr::Store(store) = &cfg.master {
        store.publish(bootstrap::reachable(listen_addr))?;
    }
    let deadline = {
        let _guard = runtime.enter();
        tokio::time::Instant::from_std(deadline)
    };
    // Run by a thread of its own, which also drives a runtime with no
    // threads (the caller may itself be on a runtime, where it could not).
    let r = std::thread::scope(|s| {
        let coordinate = bootstrap::coordinate(shared.clone(), rx, listen_addr, cfg, deadline);
        s.spawn(|| runtime.block_on(coordinate))
            .join()
            .unwrap_or(Err(TransportError::Closed))
    });
    if r.is_err() {
        if let MasterAddr::Rendezvous(path) = &cfg.master {
            let _ = std::fs::remove_file(path);
        }
        bootstrap::started::remove(&cfg.master);
    }
    r.map(|table| bootstrap::Joined {
        master_addr: listen_addr,
        master: cfg.rank,
        table,
    })
}

impl Driven for TcpTransport {
    fn take_driver(&self) -> Option<Runtime> {
        if self.driven {
            self.take_runtime()
        } else {
            None
        }
    }

    fn close_on_driver(&self) -> crate::DriverClose {
        let shared = self.shared.clone();
        Box::pin(async move {
            // As `shutdown`, with the waiting done on the driver, which
            // runs the writers that say goodbye.
            if !say_goodbye(&shared) {
                return;
            }
            let deadline = Instant::now() + GOODBYE_WAIT;
            while shared.live_tasks() > 0 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            tracing::debug!(rank = shared.rank, "tcp transport shut down on its driver");
        })
    }
}

/// Closes the transport and queues a goodbye on every connection; false if
/// it was closed already.
fn say_goodbye(shared: &Shared) -> bool {
    if !shared.close() {
        return false;
    }
    shared.exposed.clear();
    for w in shared.drain_for_close() {
        let _ = w.send(conn::OutFrame::Goodbye);
    }
    true
}

impl Drop for TcpTransport {
    fn drop(&mut self) {
        self.shutdown();
        if let Some(rt) = self.take_runtime() {
            rt.shutdown_background();
        }
    }
}
