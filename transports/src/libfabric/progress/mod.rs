//! The progress thread: the only thread that posts fabric operations and
//! reads the completion queue.
//!
//! The application's calls become [`Cmd`]s on a channel. The thread loops:
//! take commands, post what waits (sends into free send slots, RMA reads in
//! chunks), read completions, check timers; when nothing happened it
//! sleeps, in `fi_cq_sread` if the queue has a wait object (woken by
//! `fi_cq_signal` after each command), otherwise on the command channel with
//! a backoff that stays short while operations or remote reads are in
//! flight (manual-progress providers need the polling) and grows to
//! [`IDLE_NAP`] when the transport is idle: no busy polling.
//!
//! The engine's state is in four parts, each with its module:
//! - [`ops`]: the endpoint, the operations posted on it, their contexts and
//!   buffers, and their completions;
//! - [`flow`]: per-peer send queues, credits, and the reorder buffer;
//! - [`serve`]: answering peers' gets and lending large frames (leases);
//! - [`fetch`]: this rank's gets and RMA reads;
//!
//! and [`recv`] takes each received message to its part.
//!
//! # Memory
//!
//! Every buffer an operation uses lives in the engine until the
//! operation's completion is read or the endpoint is closed: on exit the
//! endpoint is closed first, then the buffers are freed. Memory peers read
//! is held by a lease per read ([`serve`]).

mod fetch;
mod flow;
mod ops;
mod recv;
mod serve;

use super::fi::{Completion, CqRead, Endpoint, FabricError, FiAddr};
use super::seal::{PairKeys, Seals, Tamper};
use super::shared::{Registrar, Shared};
use crate::{BufferKey, RecvBuf, TransportError};
use bytes::Bytes;
use fetch::Fetching;
use flow::{Flow, Out};
use ops::{new_ctx, Ops, EMPTY};
use serve::Serving;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest sleep of an idle progress thread.
pub(crate) const IDLE_NAP: Duration = Duration::from_millis(1);
/// Longest wait in `fi_cq_sread` (completions and commands wake it sooner;
/// timers need a turn now and then).
const SREAD_WAIT: Duration = Duration::from_millis(50);
/// How long a peer whose operations fail may stay unexplained (no goodbye,
/// no TCP failure) before it is reported down.
const SUSPECT_GRACE: Duration = Duration::from_secs(1);
/// How long a graceful shutdown waits for its goodbyes to be sent.
const BYE_WAIT: Duration = Duration::from_secs(1);
/// How often the timers are checked.
const TICK: Duration = Duration::from_millis(50);

/// How long the polling progress thread sleeps after `idle` without
/// completions or commands: short while operations (or peers' reads of our
/// memory) are in flight, since manual-progress providers move their data
/// only when polled, longer as the quiet lasts.
fn nap(idle: Duration, active: bool) -> Duration {
    let us = Duration::from_micros;
    if idle < us(50) {
        Duration::ZERO
    } else if active {
        if idle < us(1000) {
            us(20)
        } else {
            us(100)
        }
    } else if idle < us(2000) {
        us(50)
    } else if idle < us(50_000) {
        us(200)
    } else {
        IDLE_NAP
    }
}

/// Completes a get.
pub(crate) type Reply = futures::channel::oneshot::Sender<Result<RecvBuf, TransportError>>;

/// What the application asks of the progress thread.
pub(crate) enum Cmd {
    /// An ordered control frame to a peer.
    Send { to: u32, frame: Bytes },
    /// A one-sided get.
    Get {
        from: u32,
        key: BufferKey,
        /// The most bytes the caller accepts (`None`: the transport's
        /// maximum).
        max: Option<u64>,
        reply: Reply,
    },
    /// The peer's link went down or the peer left (link state already
    /// set): fail and drop what concerns it.
    Forget { peer: u32, reason: String },
    /// Stop: after goodbyes if graceful, at once otherwise.
    Shutdown { graceful: bool },
    /// `peer` was replaced: fail and drop everything of the older process,
    /// refuse its endpoint from now on (no address until the
    /// replacement's is known), start its sequences anew, bring the link
    /// up again, then answer `done`.
    Readmit { peer: u32, done: flume::Sender<()> },
    /// The replacement of `peer` is at `addr` in the address vector; its
    /// messages are sealed with `keys` if this rank seals.
    Connect {
        peer: u32,
        addr: FiAddr,
        keys: Option<PairKeys>,
        done: flume::Sender<()>,
    },
    /// A test plays the path: what it does to the next message to, or
    /// read from, `peer`.
    #[cfg_attr(not(feature = "conformance"), allow(dead_code))]
    Tamper { peer: u32, how: Tamper },
    /// The replacement of `peer` inserted this rank's name: frames to it
    /// may go.
    Ready { peer: u32 },
}

/// Tuning of the engine.
#[derive(Debug, Clone)]
pub(crate) struct Tuning {
    pub read_chunk: usize,
    pub op_timeout: Duration,
    pub max_get: u64,
    /// Largest control frame received (a larger `LARGE` announcement is
    /// refused before anything is allocated).
    pub max_frame: u64,
    pub mr_local: bool,
    /// Sleep in `fi_cq_sread` rather than on the command channel.
    pub sread: bool,
    pub tx_size: usize,
    pub rx_size: usize,
    /// Messages a receiver may have pending from all its senders together
    /// (the flow-control window per peer is this over `size - 1`).
    pub flow_budget: u64,
}

/// The progress thread's state. See the [module documentation](self).
pub(crate) struct Engine {
    sh: Arc<Shared>,
    tuning: Tuning,
    addrs: Vec<FiAddr>,
    cmd_rx: flume::Receiver<Cmd>,
    peer_left: Box<dyn Fn(u32) -> bool + Send>,
    ops: Ops,
    flow: Flow,
    serving: Serving,
    fetching: Fetching,
    /// Peers whose operations failed, since when, and why.
    suspects: HashMap<u32, (Instant, String)>,
    next_id: u64,
    stopping: Option<Instant>,
    /// Every peer's message keys and numbers, if this rank seals its
    /// messages (`TASKFOLD_INTEGRITY=mac`, [`super::seal`]).
    seals: Option<Seals>,
    /// What a test makes the path do next, by peer.
    tamper: Vec<(u32, Tamper)>,
}

/// What one turn of the loop saw.
enum Turn {
    /// Something happened: go on at once.
    Busy,
    /// Nothing happened.
    Idle,
    /// Stop.
    Exit,
}

impl Engine {
    /// Allocates the buffers and posts the receives (before the endpoint's
    /// name is published, so peers' first messages find them).
    pub fn new(
        ep: Endpoint,
        sh: Arc<Shared>,
        reg: Arc<Registrar>,
        tuning: Tuning,
        cmd_rx: flume::Receiver<Cmd>,
    ) -> Result<Engine, FabricError> {
        let ops = Ops::new(ep, &reg, tuning.rx_size, tuning.tx_size, tuning.mr_local)?;
        let flow = Flow::new(sh.size as usize, tuning.flow_budget);
        let mut e = Engine {
            sh,
            tuning,
            addrs: Vec::new(),
            cmd_rx,
            peer_left: Box::new(|_| false),
            ops,
            flow,
            serving: Serving {
                reg,
                leases: Default::default(),
            },
            fetching: Fetching::default(),
            suspects: HashMap::new(),
            next_id: 1,
            stopping: None,
            seals: None,
            tamper: Vec::new(),
        };
        for slot in 0..e.ops.rx_slots() {
            e.post_recv(slot, new_ctx())?;
        }
        Ok(e)
    }

    /// Sets the peers' fabric addresses (indexed by rank), how to ask
    /// the TCP transport whether a peer left gracefully, and the peers'
    /// message keys if this rank seals its messages.
    pub fn connect(
        &mut self,
        addrs: Vec<FiAddr>,
        peer_left: Box<dyn Fn(u32) -> bool + Send>,
        seals: Option<Seals>,
    ) {
        self.addrs = addrs;
        self.peer_left = peer_left;
        self.seals = seals;
    }

    /// Takes what a test wants done to the next message or read of
    /// `peer`, if it is one of `kinds`.
    fn tampered(&mut self, peer: u32, kinds: &[Tamper]) -> Option<Tamper> {
        let i = self
            .tamper
            .iter()
            .position(|(p, t)| *p == peer && kinds.contains(t))?;
        Some(self.tamper.remove(i).1)
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Runs until shut down. Consumes the engine; the endpoint is closed
    /// before any buffer is freed.
    pub fn run(mut self) {
        // Short naps must be short: the default timer slack (50 us) would
        // stretch a 20 us nap to about 70.
        // SAFETY: PR_SET_TIMERSLACK changes only the calling thread's timer
        // slack; the argument is a plain integer (nanoseconds).
        let _ = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
        let mut comps = [EMPTY; 32];
        let mut idle_since: Option<Instant> = None;
        let mut next_tick = Instant::now();
        let mut sread_strikes = 0u32;
        loop {
            let now = match self.turn(&mut comps, &mut next_tick) {
                Turn::Exit => return self.exit(),
                Turn::Busy => {
                    idle_since = None;
                    continue;
                }
                Turn::Idle => Instant::now(),
            };
            let idle = now - *idle_since.get_or_insert(now);
            let active =
                self.ops.tx_busy > 0 || !self.serving.leases.is_empty() || self.fetching.waiting();
            let go_on = if self.tuning.sread {
                self.sleep_in_cq(&mut comps, idle, active, &mut sread_strikes);
                true
            } else {
                self.sleep_on_commands(idle, active, &mut idle_since)
            };
            if !go_on {
                return self.exit();
            }
        }
    }

    /// Takes the commands, posts what waits, reads completions and checks
    /// the timers once.
    fn turn(&mut self, comps: &mut [Completion], next_tick: &mut Instant) -> Turn {
        let mut busy = false;
        loop {
            match self.cmd_rx.try_recv() {
                Ok(cmd) => {
                    busy = true;
                    if !self.command(cmd) {
                        return Turn::Exit;
                    }
                }
                Err(flume::TryRecvError::Empty) => break,
                Err(flume::TryRecvError::Disconnected) => return Turn::Exit,
            }
        }
        self.drain_held();
        self.serve_deferred();
        busy |= self.post_sends();
        busy |= self.post_reads();
        busy |= self.poll_completions(comps);
        let now = Instant::now();
        if now >= *next_tick {
            self.tick(now);
            *next_tick = now + TICK;
        }
        if let Some(deadline) = self.stopping {
            let sends = self
                .ops
                .table
                .values()
                .any(|o| matches!(o.kind, ops::OpKind::Send { .. }));
            // Peers still reading our memory (large frames, gets) get to
            // finish, within the deadline.
            let done = !sends && !self.flow.has_queued() && self.serving.leases.is_empty();
            if done || now >= deadline {
                return Turn::Exit;
            }
        }
        if busy {
            Turn::Busy
        } else {
            Turn::Idle
        }
    }

    /// Sleeps in `fi_cq_sread` (woken by completions and commands), or
    /// only yields while operations are in flight; falls back to polling
    /// if the provider's wait does not block.
    fn sleep_in_cq(
        &mut self,
        comps: &mut [Completion],
        idle: Duration,
        active: bool,
        strikes: &mut u32,
    ) {
        if active || idle < Duration::from_millis(2) {
            std::thread::yield_now();
            if active {
                std::thread::sleep(Duration::from_micros(20));
            }
            return;
        }
        let t0 = Instant::now();
        match self.ops.cq.sread(comps, SREAD_WAIT.as_millis() as i32) {
            Ok(CqRead::Entries(0)) if t0.elapsed() < IDLE_NAP / 4 => {
                // The provider's wait does not block (shm): poll.
                *strikes += 1;
                if *strikes >= 3 {
                    tracing::debug!(rank = self.sh.rank, "fi_cq_sread does not block: polling");
                    self.tuning.sread = false;
                }
                std::thread::sleep(IDLE_NAP);
            }
            Ok(CqRead::Entries(n)) => {
                *strikes = 0;
                for c in &comps[..n] {
                    self.complete(*c);
                }
            }
            Ok(CqRead::Failed(e)) => self.failed(e),
            Err(e) => {
                tracing::debug!(rank = self.sh.rank, error = %e, "fi_cq_sread failed: polling");
                self.tuning.sread = false;
            }
        }
    }

    /// Naps on the command channel (see [`nap`]); false to stop.
    fn sleep_on_commands(
        &mut self,
        idle: Duration,
        active: bool,
        idle_since: &mut Option<Instant>,
    ) -> bool {
        let nap = nap(idle, active);
        if nap.is_zero() {
            std::thread::yield_now();
            return true;
        }
        match self.cmd_rx.recv_timeout(nap) {
            Ok(cmd) => {
                *idle_since = None;
                self.command(cmd)
            }
            Err(flume::RecvTimeoutError::Timeout) => true,
            Err(flume::RecvTimeoutError::Disconnected) => false,
        }
    }

    /// Fails what is pending, closes the endpoint, then frees the buffers.
    fn exit(mut self) {
        self.fetching.close();
        self.sh.exposed.clear();
        drop(self.ops.ep.take());
        tracing::debug!(rank = self.sh.rank, "fabric endpoint closed");
    }

    /// Handles one command; false to stop at once.
    fn command(&mut self, cmd: Cmd) -> bool {
        match cmd {
            Cmd::Send { to, frame } => self.send(to, frame),
            Cmd::Get {
                from,
                key,
                max,
                reply,
            } => self.request(from, key, max, reply),
            Cmd::Forget { peer, reason } => {
                let graceful = !self.sh.is_down(peer);
                self.forget_peer(peer, &reason, graceful)
            }
            Cmd::Shutdown { graceful: false } => return false,
            Cmd::Shutdown { graceful: true } => self.say_goodbye(),
            Cmd::Readmit { peer, done } => {
                self.readmit(peer);
                let _ = done.send(());
            }
            Cmd::Connect {
                peer,
                addr,
                keys,
                done,
            } => {
                if let Some(a) = self.addrs.get_mut(peer as usize) {
                    *a = addr;
                }
                if let Some(s) = self.seals.as_mut() {
                    s.set_keys(peer, keys);
                }
                let _ = done.send(());
            }
            Cmd::Tamper { peer, how } => self.tamper.push((peer, how)),
            Cmd::Ready { peer } => self.flow_ready(peer),
        }
        true
    }

    /// See [`Cmd::Readmit`].
    fn readmit(&mut self, peer: u32) {
        let reason = format!("rank {peer} was replaced");
        self.forget_peer(peer, &reason, false);
        if let Some(a) = self.addrs.get_mut(peer as usize) {
            *a = libfabric_sys::FI_ADDR_UNSPEC;
        }
        if let Some(s) = self.seals.as_mut() {
            s.set_keys(peer, None);
        }
        self.flow.restart(peer);
        self.sh.up_again(peer);
    }

    /// Starts a graceful shutdown: withdraws everything, fails the gets
    /// waiting for an answer and queues a goodbye to every live peer.
    fn say_goodbye(&mut self) {
        if self.stopping.is_some() {
            return;
        }
        self.stopping = Some(Instant::now() + BYE_WAIT);
        self.sh.exposed.clear();
        for peer in 0..self.sh.size {
            self.fetching.fail_requests(peer, || TransportError::Closed);
        }
        for peer in 0..self.sh.size {
            if peer != self.sh.rank && self.sh.is_up(peer) {
                let seq = self.flow.peers[peer as usize].next_seq();
                self.flow.enqueue(peer, Out::Bye { seq });
            }
        }
    }

    /// Operations to `peer` fail for no known reason: unless it turns out
    /// to have left (goodbye) or to be down (TCP), report it down after
    /// [`SUSPECT_GRACE`].
    fn suspect(&mut self, peer: u32, reason: String) {
        if self.sh.is_up(peer) && self.stopping.is_none() {
            tracing::debug!(rank = self.sh.rank, peer, %reason, "fabric operation failed");
            self.suspects
                .entry(peer)
                .or_insert_with(|| (Instant::now(), reason));
        }
    }

    /// The link to `peer` is gone: fail and drop everything that concerns
    /// it. If it left `graceful`ly, what it sent before leaving (frames
    /// waiting for an earlier one, reads in progress) is kept.
    fn forget_peer(&mut self, peer: u32, reason: &str, graceful: bool) {
        self.suspects.remove(&peer);
        self.fetching
            .fail_requests(peer, || TransportError::LinkDown {
                peer,
                reason: reason.to_string(),
            });
        self.flow.peers[peer as usize].outq.clear();
        drop(self.serving.leases.take_peer(peer));
        if graceful {
            return;
        }
        self.fail_fetches(peer, reason);
        self.flow.peers[peer as usize].pending.clear();
    }

    /// The timers: late gets and reads, suspects whose grace ran out.
    fn tick(&mut self, now: Instant) {
        if tracing::enabled!(tracing::Level::TRACE) {
            let (pending, ready) = self.flow.describe();
            let (requests, fetches, readq) = self.fetching.describe();
            tracing::trace!(
                rank = self.sh.rank,
                ready,
                readq,
                tx_busy = self.ops.tx_busy,
                ops = self.ops.table.len(),
                requests,
                fetches,
                leases = self.serving.leases.len(),
                ?pending,
                "engine state"
            );
        }
        self.time_out(now);
        let due: Vec<(u32, String)> = self
            .suspects
            .iter()
            .filter(|(_, (since, _))| now - *since >= SUSPECT_GRACE)
            .map(|(&p, (_, r))| (p, r.clone()))
            .collect();
        for (peer, reason) in due {
            self.suspects.remove(&peer);
            if !self.sh.is_up(peer) {
                continue;
            }
            if (self.peer_left)(peer) {
                if self.sh.peer_gone(peer) {
                    self.forget_peer(peer, &format!("rank {peer} shut down"), true);
                }
            } else {
                let reason = format!("fabric operations to rank {peer} fail: {reason}");
                if self.sh.link_down(peer, &reason) {
                    self.forget_peer(peer, &reason, false);
                }
            }
        }
    }
}
