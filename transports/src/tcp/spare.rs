//! Spare processes (`TASKFOLD_SPARES`, after Fenix): a process started
//! with the job but kept out of it until a rank dies, then let in as that
//! rank's replacement (see the book's chapter Surviving failures of the
//! application).
//!
//! A spare connects to the master as a `HELLO` of role `Spare` (its
//! launcher rank in the rank field), proves the job key as any caller,
//! and is *parked*: the master answers `PARKED` with every rank's entry
//! (so that the spare can find a standby if the master dies) and keeps
//! the connection open. When the master's runtime needs a replacement it
//! sends one parked spare `ASSIGN` (the rank and the incarnation to
//! take); the spare closes, starts its transport as that rank and
//! registers as a replacement (`respawn`). At the job's end the master
//! sends every parked spare `DISMISS`. A parked spare whose master dies
//! looks for the new one — the rendezvous file, which a standby rewrites,
//! else every rank of the table in turn — and parks there. The master's
//! frames to a spare are always sealed with a MAC (as the launcher's
//! reports are), whatever `TASKFOLD_INTEGRITY` says: a party on the path
//! cannot send a spare to take a rank.

mod orphan;
pub(crate) use orphan::grace as start_grace;

use super::conn::{bad_connection, refuse};
use super::frame::{self, kind, Entry, Header, Hello, Role};
use super::handshake::{self, Failed};
use super::peer::Shared;
use super::rendezvous::{self, Found};
use super::MasterAddr;
use crate::version::VERSION;
use crate::TransportError;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};
use taskfold_core::auth::{FrameMac, JobAuth, NONCE_LEN, TAG_LEN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;

/// Spares a master keeps parked, at most (more are refused).
pub(crate) const MAX_PARKED: usize = 4096;

/// A parked spare at the master: its connection's writing half, and the
/// MAC that seals what is written on it.
pub(crate) struct Parked {
    /// Which parked spare (to take it out when its connection closes).
    id: u64,
    /// Its launcher rank.
    slot: u32,
    wr: OwnedWriteHalf,
    mac: FrameMac,
}

impl Parked {
    /// `hdr` and `payload`, sealed, as one write.
    fn sealed(&mut self, hdr: Header, payload: &[u8]) -> Vec<u8> {
        let head = hdr.encode();
        let tag = self.mac.seal(&[&head, payload]);
        let mut out = head.to_vec();
        out.extend_from_slice(payload);
        out.extend_from_slice(&tag);
        out
    }
}

/// A spare's `HELLO` reached the master's listener (after the proof):
/// checked, answered with the table and parked.
pub(crate) async fn on_spare(
    shared: Arc<Shared>,
    mut rd: tokio::net::tcp::OwnedReadHalf,
    wr: OwnedWriteHalf,
    hello: Hello,
    from: SocketAddr,
    mac: Option<FrameMac>,
) {
    let refusal = if !shared.hosts_master() {
        Some(format!("rank {} is not the master", shared.rank))
    } else if hello.job != shared.job || hello.size != shared.size {
        Some("a spare of another job, or of another size".to_string())
    } else if shared.parked().len() >= MAX_PARKED {
        Some("too many spares are parked".to_string())
    } else if mac.is_none() {
        Some("a spare's connection must be sealed".to_string())
    } else {
        None
    };
    let (Some(mac), None) = (mac, refusal.clone()) else {
        let reason = refusal.unwrap_or_default();
        bad_connection(shared.rank, from, &reason);
        return refuse(rd, wr, reason).await;
    };
    let table = frame::encode_table(&shared.table());
    let hdr = Header {
        a: u64::from(shared.size),
        b: u64::from(VERSION),
        c: u64::from(shared.rank),
        ..Header::new(kind::PARKED, table.len() as u32)
    };
    let id = shared.next_spare_id();
    let slot = hello.rank;
    let mut parked = Parked { id, slot, wr, mac };
    let msg = parked.sealed(hdr, &table);
    if parked.wr.write_all(&msg).await.is_err() {
        return;
    }
    shared.parked().push_back(parked);
    tracing::info!(
        rank = shared.rank,
        spare = slot,
        parked = shared.parked().len(),
        "a spare is parked"
    );
    // Its connection closing (the spare died, or took a rank) takes it
    // out; nothing else is read from it.
    let mut sink = [0u8; 64];
    while matches!(rd.read(&mut sink).await, Ok(n) if n > 0) {}
    shared.parked().retain(|p| p.id != id);
}

/// Sends one parked spare the rank `peer` and `incarnation` to take; false
/// if none is parked.
pub(crate) fn assign(shared: &Arc<Shared>, peer: u32, incarnation: u32) -> bool {
    let Some(mut p) = shared.parked().pop_front() else {
        return false;
    };
    tracing::warn!(
        rank = shared.rank,
        spare = p.slot,
        peer,
        incarnation,
        "a spare takes a dead rank's place"
    );
    let hdr = Header {
        a: u64::from(peer),
        b: u64::from(incarnation),
        ..Header::new(kind::ASSIGN, 0)
    };
    let msg = p.sealed(hdr, &[]);
    shared.handle.spawn(async move {
        let _ = p.wr.write_all(&msg).await;
        let _ = p.wr.shutdown().await;
    });
    true
}

/// Tells every parked spare the job is over.
pub(crate) fn dismiss_all(shared: &Arc<Shared>) {
    let parked: Vec<Parked> = shared.parked().drain(..).collect();
    for mut p in parked {
        shared.handle.spawn(async move {
            let _ =
                p.wr.write_all(&Header::new(kind::DISMISS, 0).encode())
                    .await;
            let _ = p.wr.shutdown().await;
        });
    }
}

/// Where a spare parks, and as whom.
#[derive(Clone, Debug)]
pub struct SpareConfig {
    /// The job's id.
    pub job: u64,
    /// The ranks the application works with (the job's size without its
    /// spares).
    pub size: u32,
    /// This spare's rank among every process the launcher started.
    pub slot: u32,
    /// Where the master is.
    pub master: MasterAddr,
    /// The job's key.
    pub auth: JobAuth,
    /// How long the search for a master may take (at the start, and after
    /// the master died).
    pub connect_timeout: Duration,
}

/// What a parked spare was told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parking {
    /// Take rank `rank` as its incarnation `incarnation`.
    Assigned {
        /// The rank to take.
        rank: u32,
        /// The incarnation to take it as.
        incarnation: u32,
    },
    /// The job ended without needing this spare.
    Dismissed,
}

/// Whether this process, the first of rank 0 in a job with spares,
/// hosts the job's start: false if a spare took rank 0 before it came,
/// having found no rendezvous file of the job for a while (rank 0 had
/// seemingly died first: see `orphan`). It then parks as a spare.
pub fn hosts_start(master: &MasterAddr, job: u64) -> bool {
    match master {
        MasterAddr::Rendezvous(path) => orphan::first_claim(path, job),
        _ => true,
    }
}

/// Parks this spare with the job's master and waits — as long as the job
/// runs — until it is given a rank or dismissed. Blocking. A master that
/// dies is looked for again; if none answers within the connect timeout,
/// [`TransportError::MasterUnreachable`].
pub fn park(cfg: &SpareConfig) -> Result<Parking, TransportError> {
    let mut table: Vec<Entry> = Vec::new();
    let mut lost: Option<u32> = None;
    let mut watch = orphan::Watch::new(cfg);
    loop {
        let deadline = Instant::now() + cfg.connect_timeout;
        let (mut s, found, mut mac) = match find_master(cfg, &table, lost, deadline, &mut watch)? {
            Search::Parked(s, found, mac) => (s, found, mac),
            Search::Orphaned { incarnation } => {
                tracing::warn!(
                    slot = cfg.slot,
                    incarnation,
                    "the master died while the job started: this spare takes rank 0"
                );
                return Ok(Parking::Assigned {
                    rank: 0,
                    incarnation,
                });
            }
        };
        tracing::info!(slot = cfg.slot, master = found.1, "this spare is parked");
        match wait_parked(&mut s, &mut mac, cfg) {
            Ok(Some(p)) => return Ok(p),
            Ok(None) => {
                tracing::warn!(
                    slot = cfg.slot,
                    master = found.1,
                    "the master is gone; looking for the next"
                );
                lost = Some(found.1);
            }
            Err(t) => {
                if !t.is_empty() {
                    table = t;
                }
                lost = Some(found.1);
            }
        }
    }
}

/// Waits on a parked connection: `Ok(Some)` the master's word, `Ok(None)`
/// the connection ended, `Err(table)` the master's table arrived and then
/// the connection ended.
fn wait_parked(
    s: &mut TcpStream,
    mac: &mut FrameMac,
    cfg: &SpareConfig,
) -> Result<Option<Parking>, Vec<Entry>> {
    let mut table = Vec::new();
    let _ = s.set_read_timeout(None);
    let max = u64::from(cfg.size) * frame::ENTRY_LEN as u64 + u64::from(frame::HANDSHAKE_MAX);
    loop {
        match read_sealed(s, mac, max) {
            Ok(Some((h, p))) if h.kind == kind::PARKED => {
                if let Ok(t) = frame::decode_table(&p, cfg.size) {
                    table = t;
                }
            }
            Ok(Some((h, _))) if h.kind == kind::ASSIGN => {
                let rank = u32::try_from(h.a).ok().filter(|&r| r < cfg.size);
                let incarnation = u32::try_from(h.b).ok().filter(|&i| i > 0);
                if let (Some(rank), Some(incarnation)) = (rank, incarnation) {
                    return Ok(Some(Parking::Assigned { rank, incarnation }));
                }
                return Err(table);
            }
            Ok(Some((h, _))) if h.kind == kind::DISMISS => return Ok(Some(Parking::Dismissed)),
            other => {
                let what = match other {
                    Ok(Some((h, _))) => format!("frame kind {}", h.kind),
                    Ok(None) => "the connection closed".into(),
                    Err(e) => e.to_string(),
                };
                tracing::debug!(slot = cfg.slot, %what, "parked with the master no more");
                return Err(table);
            }
        }
    }
}

/// Reads one frame and its tag; a frame whose tag does not match ends
/// the connection (an error).
fn read_sealed(
    s: &mut TcpStream,
    mac: &mut FrameMac,
    max: u64,
) -> std::io::Result<Option<(Header, Vec<u8>)>> {
    use std::io::Read;
    let Some((h, p)) = frame::read_frame_sync(s, max)? else {
        return Ok(None);
    };
    let mut tag = [0u8; TAG_LEN];
    s.read_exact(&mut tag)?;
    let mut hasher = mac.begin();
    hasher.update(&h.encode());
    hasher.update(&p);
    mac.check(&hasher, &tag)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
    Ok(Some((h, p)))
}

/// Where the search for a master ended.
enum Search {
    /// Parked with the master found.
    Parked(TcpStream, Found, FrameMac),
    /// The master died while the job started: this spare takes rank 0,
    /// as that incarnation (see `orphan`).
    Orphaned { incarnation: u32 },
}

/// Connects and parks with the master: the rendezvous file's, or the
/// fixed address's, and once `lost` died, any rank of `table` that runs
/// the master now. Retries until `deadline`. With no table seen (the job
/// has not started) and nobody answering, `watch` may make this spare
/// rank 0.
fn find_master(
    cfg: &SpareConfig,
    table: &[Entry],
    lost: Option<u32>,
    deadline: Instant,
    watch: &mut orphan::Watch,
) -> Result<Search, TransportError> {
    let mut last = String::from("no master answered");
    loop {
        let mut candidates: Vec<Found> = Vec::new();
        match rendezvous::resolve(&cfg.master, cfg.job) {
            Ok(f) if Some(f.1) != lost || matches!(cfg.master, MasterAddr::Rendezvous(_)) => {
                candidates.push(f)
            }
            Err(rendezvous::Unresolved::Fatal(TransportError::Refused(r)))
                if r.contains(crate::RANK_FINISHED) =>
            {
                return Err(TransportError::Refused(r));
            }
            _ => {}
        }
        if lost.is_some() {
            let others = table.iter().enumerate().map(|(r, e)| (e.addr, r as u32));
            candidates.extend(others.filter(|&(_, r)| Some(r) != lost));
        }
        for found in candidates {
            match try_park(cfg, found) {
                Ok((s, mac)) => return Ok(Search::Parked(s, found, mac)),
                Err(why) => last = why,
            }
        }
        if table.is_empty() {
            if let Some(incarnation) = watch.unanswered(cfg) {
                return Ok(Search::Orphaned { incarnation });
            }
        }
        if Instant::now() >= deadline {
            return Err(TransportError::MasterUnreachable(format!(
                "a spare found no master: {last}"
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One attempt to park with the master at `found`.
fn try_park(cfg: &SpareConfig, (addr, rank): Found) -> Result<(TcpStream, FrameMac), String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    let _ = s.set_nodelay(true);
    let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
    let _ = s.set_read_timeout(Some(cfg.connect_timeout.max(Duration::from_secs(1))));
    let _ = socket2::SockRef::from(&s).set_keepalive(true);
    let hello = Hello {
        version: VERSION,
        role: Role::Spare,
        job: cfg.job,
        rank: cfg.slot,
        size: cfg.size,
        addr: None,
        node: crate::same_node::node_token(),
        nonce: [0; NONCE_LEN],
        incarnation: 0,
        mac: true,
    };
    match handshake::call_sync(&mut s, &cfg.auth, hello, rank) {
        Ok(keys) => Ok((s, keys.from_listener())),
        Err(Failed::Refused(r)) if r.contains(crate::RANK_FINISHED) => {
            Err(format!("{addr}: the job is over"))
        }
        Err(f) => Err(f.describe(&format!("rank {rank} at {addr}"))),
    }
}
