//! Bootstrap: ranks register with the master (rank 0), which answers with
//! everyone's listen address once all have arrived; and the launcher's
//! reports of ranks that exited, over a connection that proved the job key
//! as the launcher's.
//!
//! A rank binds its listener first, then connects to the master (retrying
//! with backoff; with a rendezvous file, re-reading the file each time;
//! with the launcher's store, after its fence, [`crate::pmi`]) and
//! sends `HELLO{version, role: Register, job, rank, size, listen address,
//! nonce}`; the two prove the job key to each other (the `handshake`
//! module). The master refuses (a `REFUSE` frame with the reason, then it
//! closes) a wrong protocol version (naming both, see [`crate::version`]),
//! a caller without the key (naming neither job id nor size), and then a
//! wrong job id, a wrong size, a rank out of range and a rank already
//! registered.
//! When all ranks are in, each receives a `TABLE` frame, which carries the
//! master's version too, checked by the rank. If they are not all in within
//! the connect timeout, the master refuses those that came, naming the
//! missing ranks, and fails itself. A rendezvous file names the version of
//! the master that wrote it: a rank of another version fails at once.

use super::conn::{self, bad_connection};
use super::frame::{self, kind, Entry, Header, Hello, Role};
use super::handshake::{self, Failed};
use super::peer::Shared;
use super::rendezvous::{describe, resolve, Found, Unresolved};
use super::{MasterAddr, TcpConfig};
use crate::version::{self, VERSION};
use crate::TransportError;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};
use taskfold_core::auth::NONCE_LEN;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// A registration received by the accept loop, for the master's coordinator.
pub(crate) struct Registration {
    pub(super) hello: Hello,
    pub(super) from: SocketAddr,
    pub(super) rd: OwnedReadHalf,
    pub(super) wr: OwnedWriteHalf,
}

/// The address other nodes can use for `addr`: `addr` itself, unless it is
/// a wildcard (0.0.0.0 or ::), which is replaced by the first address this
/// host's name resolves to that is not a loopback one (the loopback address
/// if there is none: then the job must stay on this node).
pub(crate) fn reachable(addr: SocketAddr) -> SocketAddr {
    use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs};
    if !addr.ip().is_unspecified() {
        return addr;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let found = (!host.is_empty())
        .then(|| (host.as_str(), addr.port()).to_socket_addrs().ok())
        .flatten()
        .and_then(|mut all| all.find(|a| !a.ip().is_loopback() && !a.ip().is_unspecified()));
    found.unwrap_or_else(|| SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), addr.port()))
}

/// Registrations the master holds unanswered, at most (more connections
/// are refused): every rank's, and as many again for refused duplicates.
pub(crate) fn max_registrations(size: u32) -> usize {
    (size as usize).saturating_mul(2).saturating_add(16)
}

/// Connects to the master, retrying with backoff until `deadline`;
/// returns the stream, its address and the master's rank.
pub(super) fn connect_master(
    master: &MasterAddr,
    job: u64,
    deadline: Instant,
) -> Result<(TcpStream, SocketAddr, u32), TransportError> {
    connect_round(master, job, deadline, deadline)?.ok_or_else(|| {
        TransportError::MasterUnreachable(format!("no master at {}", describe(master)))
    })
}

/// [`connect_master`] until `round` (at most `deadline`): `None` if the
/// round ended before the deadline with nobody reached.
fn connect_round(
    master: &MasterAddr,
    job: u64,
    round: Instant,
    deadline: Instant,
) -> Result<Option<(TcpStream, SocketAddr, u32)>, TransportError> {
    let mut backoff = Duration::from_millis(10);
    loop {
        let last = match resolve(master, job) {
            Err(Unresolved::Fatal(e)) => return Err(e),
            Err(Unresolved::Retry(why)) => why,
            Ok((addr, rank)) => {
                let left = deadline.saturating_duration_since(Instant::now());
                match TcpStream::connect_timeout(
                    &addr,
                    left.clamp(Duration::from_millis(1), Duration::from_secs(2)),
                ) {
                    Ok(s) => return Ok(Some((s, addr, rank))),
                    Err(e) => format!("connecting to {addr}: {e}"),
                }
            }
        };
        let left = round.saturating_duration_since(Instant::now());
        if left.is_zero() && round < deadline {
            return Ok(None);
        }
        if left.is_zero() {
            return Err(TransportError::MasterUnreachable(format!(
                "no master at {}: {last}",
                describe(master)
            )));
        }
        std::thread::sleep(backoff.min(left));
        backoff = (backoff * 2).min(Duration::from_millis(500));
    }
}

/// For a replacement of rank 0: whether the master it would join is its
/// own dead predecessor, with no standby after it — the rendezvous file
/// (or the fixed address) still names rank 0 and nobody answers there for
/// a while. That happens when rank 0 died while the job started; a
/// standby that took over a running job rewrites the file first.
pub(crate) fn orphaned(cfg: &TcpConfig) -> bool {
    let wait = super::spare::start_grace(cfg.connect_timeout);
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        if started::job_started(&cfg.master, cfg.job, cfg.size) {
            return false; // the job runs: its standby rewrites the file
        }
        match resolve(&cfg.master, cfg.job) {
            Ok((_, master)) if master != 0 => return false,
            Ok((addr, _)) => {
                if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                    return false; // someone answers there: join it
                }
            }
            Err(Unresolved::Fatal(_)) => return false,
            Err(Unresolved::Retry(_)) => {}
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    tracing::warn!(
        rank = cfg.rank,
        "the master died while the job started: this replacement hosts it"
    );
    true
}

/// How long a rank tries to reach its master before it looks for the
/// table file again.
const TABLE_LOOK: Duration = Duration::from_millis(500);

enum Attempt {
    /// Try again; at the deadline, fail with the error given, if any, else
    /// as unreachable.
    Retry(String, Option<TransportError>),
    Fatal(TransportError),
}

/// What a rank learns when it joins: the master's address and rank, and
/// every rank's entry.
pub(crate) struct Joined {
    pub(crate) master_addr: SocketAddr,
    pub(crate) master: u32,
    pub(crate) table: Vec<Entry>,
}

/// Registers a rank with the master (a rank other than the master's, or a
/// replacement); returns what it joined. Blocking.
///
/// Once a master took its registration, between attempts it looks for
/// the table the master writes before it hands it out ([`started`]): a
/// master that died while it sent the table to the others left this rank
/// a member of the job all the same. (Only then: a table file is always
/// this start's once a master of it took a registration, as each master
/// removes an earlier one before it lets anyone register.)
pub(crate) fn register(cfg: &TcpConfig, listen: SocketAddr) -> Result<Joined, TransportError> {
    let deadline = Instant::now() + cfg.connect_timeout;
    let mut registered = false;
    loop {
        if let Some(joined) = registered.then(|| started::adopt(cfg, listen)).flatten() {
            return Ok(joined);
        }
        // In rounds, so that the table is looked for while nobody answers.
        let round = deadline.min(Instant::now() + TABLE_LOOK);
        let Some((stream, addr, rank)) = connect_round(&cfg.master, cfg.job, round, deadline)?
        else {
            continue;
        };
        match try_register(cfg, listen, stream, (addr, rank), &mut registered) {
            Ok((master, table)) => {
                return Ok(Joined {
                    master_addr: addr,
                    master,
                    table,
                })
            }
            Err(Attempt::Fatal(e)) => return Err(e),
            Err(Attempt::Retry(why, last)) => {
                if Instant::now() >= deadline {
                    return Err(last.unwrap_or(TransportError::MasterUnreachable(why)));
                }
                tracing::debug!(rank = cfg.rank, %why, "registration failed, retrying");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// One registration on `s`; `registered` is set once the master took it
/// (both proved the key).
fn try_register(
    cfg: &TcpConfig,
    listen: SocketAddr,
    mut s: TcpStream,
    (master, master_rank): Found,
    registered: &mut bool,
) -> Result<(u32, Vec<Entry>), Attempt> {
    let _ = s.set_nodelay(true);
    let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
    let _ = s.set_read_timeout(Some(cfg.connect_timeout.max(Duration::from_secs(1))));
    register_hello(cfg, listen, &mut s, (master, master_rank))?;
    *registered = true;
    // The master answers once every rank is in, or refuses at its deadline.
    let _ = s.set_read_timeout(Some(cfg.connect_timeout + Duration::from_secs(5)));
    read_table(cfg, &mut s, master)
}

/// Proves the key to the master (and checks its proof) on `s`, saying
/// who this rank is. A failure here is retried: before the master proved
/// the key, nothing it says ends the registration.
fn register_hello(
    cfg: &TcpConfig,
    listen: SocketAddr,
    s: &mut TcpStream,
    (master, master_rank): Found,
) -> Result<(), Attempt> {
    let hello = Hello {
        version: VERSION,
        role: Role::Register,
        job: cfg.job,
        rank: cfg.rank,
        size: cfg.size,
        addr: Some(listen),
        node: crate::same_node::node_token(),
        nonce: [0; NONCE_LEN],
        incarnation: cfg.incarnation,
        mac: cfg.integrity,
    };
    // Whoever holds the master's address could refuse every starting
    // rank: the rank tries again until its connect timeout, and fails
    // then with what it was last told.
    let who = format!("the master at {master}");
    match handshake::call_sync(s, &cfg.auth, hello, master_rank) {
        Ok(_) => Ok(()),
        Err(Failed::Broken(d)) => Err(Attempt::Retry(
            format!("registering with {master}: {d}"),
            None,
        )),
        Err(f @ Failed::Refused(_)) => {
            let why = f.describe(&who);
            Err(Attempt::Retry(
                why.clone(),
                Some(TransportError::Refused(why)),
            ))
        }
        Err(f @ Failed::Auth(_)) => {
            let why = f.describe(&who);
            Err(Attempt::Retry(why.clone(), Some(TransportError::Auth(why))))
        }
    }
}

/// The master's answer to a registration on `s`: the rank it runs on and
/// every rank's entry, or why not.
fn read_table(
    cfg: &TcpConfig,
    s: &mut TcpStream,
    master: SocketAddr,
) -> Result<(u32, Vec<Entry>), Attempt> {
    let max = (u64::from(cfg.size) * frame::ENTRY_LEN as u64).max(u64::from(frame::HANDSHAKE_MAX));
    match frame::read_frame_sync(s, max) {
        Ok(Some((h, p))) if h.kind == kind::TABLE => {
            let theirs = u16::try_from(h.b).unwrap_or(u16::MAX);
            version::check("the master", theirs).map_err(Attempt::Fatal)?;
            let mut table = frame::decode_table(&p, cfg.size)
                .map_err(|d| Attempt::Fatal(TransportError::Protocol { peer: 0, detail: d }))?;
            let at = u32::try_from(h.c)
                .ok()
                .filter(|&m| m < cfg.size && m != cfg.rank);
            let Some(at) = at else {
                let detail = format!("the table names rank {} as the master", h.c);
                return Err(Attempt::Fatal(TransportError::Protocol { peer: 0, detail }));
            };
            if table[at as usize].addr.ip().is_unspecified() {
                table[at as usize].addr = master;
            }
            let _ = s.shutdown(Shutdown::Both);
            Ok((at, table))
        }
        Ok(Some((h, p))) if h.kind == kind::REFUSE => Err(Attempt::Fatal(TransportError::Refused(
            String::from_utf8_lossy(&p).into_owned(),
        ))),
        Ok(Some((h, _))) => Err(Attempt::Fatal(TransportError::Protocol {
            peer: 0,
            detail: format!("unexpected frame kind {} during the bootstrap", h.kind),
        })),
        Ok(None) => Err(Attempt::Retry(
            format!("master {master} closed the connection"),
            None,
        )),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Err(Attempt::Fatal(TransportError::MasterUnreachable(format!(
                "master {master} sent no address table in time"
            ))))
        }
        Err(e) if e.kind() == io::ErrorKind::InvalidData => {
            Err(Attempt::Fatal(TransportError::Protocol {
                peer: 0,
                detail: e.to_string(),
            }))
        }
        Err(e) => Err(Attempt::Retry(
            format!("registering with {master}: {e}"),
            None,
        )),
    }
}

/// Why the master refuses a registration, if it does.
pub(super) fn check_registration(
    shared: &Shared,
    h: &Hello,
    registered: impl Fn(u32) -> bool,
) -> Result<SocketAddr, String> {
    if h.job != shared.job {
        return Err(format!(
            "wrong job id: the master runs job {:#x}, the caller belongs to job {:#x}",
            shared.job, h.job
        ));
    }
    if h.size != shared.size {
        return Err(format!(
            "wrong rank counts: the job has {} ranks, the caller was started with {}",
            shared.size, h.size
        ));
    }
    if h.rank >= shared.size {
        return Err(format!(
            "rank {} is out of range for a job of {} ranks",
            h.rank, shared.size
        ));
    }
    if h.rank == shared.rank || registered(h.rank) {
        return Err(format!("rank {} is already registered", h.rank));
    }
    h.addr
        .ok_or_else(|| "registration without a listen address".to_string())
}

/// A `Register` hello reached our listener.
pub(crate) async fn on_register(
    shared: Arc<Shared>,
    rd: OwnedReadHalf,
    wr: OwnedWriteHalf,
    hello: Hello,
    from: SocketAddr,
) {
    if !shared.hosts_master() {
        let reason = format!("rank {} is not the master", shared.rank);
        bad_connection(shared.rank, from, &reason);
        return conn::refuse(rd, wr, reason).await;
    }
    let registrar = shared
        .registrar
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let reg = Registration {
        hello,
        from,
        rd,
        wr,
    };
    let reg = match registrar {
        Some(tx) => match tx.try_send(reg) {
            Ok(()) => return,
            Err(flume::TrySendError::Full(reg)) => {
                super::metrics::bound_hit("registrations");
                let reason = "too many registrations are waiting".to_string();
                bad_connection(shared.rank, from, &reason);
                return conn::refuse(reg.rd, reg.wr, reason).await;
            }
            Err(flume::TrySendError::Disconnected(reg)) => reg,
        },
        None => reg,
    };
    // The bootstrap is over: every rank is registered. A replacement of a
    // dead rank asks the runtime.
    if reg.hello.incarnation > 0 {
        return super::respawn::asks(shared, reg).await;
    }
    let reason = check_registration(&shared, &reg.hello, |_| true)
        .err()
        .unwrap_or_else(|| "the job has already started".into());
    bad_connection(shared.rank, from, &reason);
    conn::refuse(reg.rd, reg.wr, reason).await;
}

/// The master's side of the bootstrap: collects registrations until every
/// rank is in or `deadline`, then sends the table (or refuses everyone).
pub(crate) async fn coordinate(
    shared: Arc<Shared>,
    rx: flume::Receiver<Registration>,
    own: SocketAddr,
    cfg: &TcpConfig,
    deadline: tokio::time::Instant,
) -> Result<Vec<Entry>, TransportError> {
    let n = shared.size as usize;
    let mut table: Vec<Option<Entry>> = vec![None; n];
    table[shared.rank as usize] = Some(Entry {
        addr: own,
        node: crate::same_node::node_token(),
        incarnation: shared.incarnation,
        dead: false,
    });
    let mut conns = Vec::new();
    let mut refusals = Vec::new();
    // Replacements of ranks that registered and died while the job
    // started: they ask once it runs, as after the bootstrap.
    let mut asking = Vec::new();
    let mut missing = n - 1;
    let mut deadline = deadline;
    let mut spared = false;
    while missing > 0 {
        let reg = match tokio::time::timeout_at(deadline, rx.recv_async()).await {
            Ok(Ok(r)) => r,
            Err(_) if !spared && spares_take(&shared, &table) => {
                // The ranks that never came (dead before they registered)
                // are taken by parked spares, which register in turn.
                spared = true;
                deadline = tokio::time::Instant::now() + shared.connect_timeout;
                continue;
            }
            _ => break,
        };
        if replaces_registered(shared.rank, &reg.hello, &table) {
            asking.push(reg);
            continue;
        }
        match check_registration(&shared, &reg.hello, |r| table[r as usize].is_some()) {
            Err(reason) => {
                bad_connection(shared.rank, reg.from, &reason);
                refusals.push(tokio::spawn(conn::refuse(reg.rd, reg.wr, reason)));
            }
            Ok(mut addr) => {
                if addr.ip().is_unspecified() {
                    addr.set_ip(reg.from.ip());
                }
                tracing::debug!(rank = reg.hello.rank, %addr, "rank registered");
                table[reg.hello.rank as usize] = Some(Entry {
                    addr,
                    node: reg.hello.node,
                    incarnation: reg.hello.incarnation,
                    dead: false,
                });
                conns.push((reg.rd, reg.wr));
                missing -= 1;
            }
        }
    }
    // Close the door; whatever raced in is refused.
    *shared.registrar.lock().unwrap_or_else(|e| e.into_inner()) = None;
    while let Ok(reg) = rx.try_recv() {
        if replaces_registered(shared.rank, &reg.hello, &table) {
            asking.push(reg);
            continue;
        }
        let reason = check_registration(&shared, &reg.hello, |r| table[r as usize].is_some())
            .err()
            .unwrap_or_else(|| "the bootstrap is over".into());
        refusals.push(tokio::spawn(conn::refuse(reg.rd, reg.wr, reason)));
    }
    if missing > 0 {
        let absent: Vec<usize> = (0..n).filter(|&r| table[r].is_none()).collect();
        let reason = format!(
            "bootstrap timed out after {:?}: ranks {absent:?} never registered",
            shared.connect_timeout
        );
        let asked = asking.into_iter().map(|r| (r.rd, r.wr));
        for (rd, wr) in conns.into_iter().chain(asked) {
            refusals.push(tokio::spawn(conn::refuse(rd, wr, reason.clone())));
        }
        // Let the refusals go out before the runtime is dropped.
        for r in refusals {
            let _ = r.await;
        }
        return Err(TransportError::Io(reason));
    }
    let table: Vec<Entry> = table.into_iter().flatten().collect();
    if let Err(e) = started::write(&cfg.master, shared.job, shared.rank, &table) {
        // The start goes on; only a death while the table is sent is
        // no longer covered.
        tracing::warn!(error = %e, "could not keep the job's table beside the rendezvous file");
    }
    let conns = match &cfg.table_hold {
        Some(hold) => hold::table_then_hold(hold, &table, shared.rank, conns).await,
        None => conns,
    };
    send_table(&table, shared.rank, conns).await;
    tracing::info!(size = n, "all ranks registered");
    for reg in asking {
        tokio::spawn(super::respawn::asks(shared.clone(), reg));
    }
    Ok(table)
}

/// Whether `h` is a replacement (incarnation above 0) of a rank already
/// in `table`: that rank died while the job started, and its replacement
/// came before the bootstrap ended.
fn replaces_registered(own: u32, h: &Hello, table: &[Option<Entry>]) -> bool {
    h.incarnation > 0
        && h.rank != own
        && table
            .get(h.rank as usize)
            .and_then(Option::as_ref)
            .is_some_and(|e| e.incarnation < h.incarnation)
}

/// Sends a parked spare to take each rank missing from `table`, as its
/// first replacement; false (nothing sent) if too few are parked.
fn spares_take(shared: &Arc<Shared>, table: &[Option<Entry>]) -> bool {
    let absent: Vec<u32> = (0..table.len() as u32)
        .filter(|&r| table[r as usize].is_none())
        .collect();
    if absent.is_empty() || shared.parked().len() < absent.len() {
        return false;
    }
    tracing::warn!(ranks = ?absent, "ranks never registered: spares take their places");
    absent
        .into_iter()
        .all(|r| super::spare::assign(shared, r, 1))
}

/// Sends the address table (and this build's protocol version, and the
/// rank of the master, `master`) to every registered rank, then closes;
/// returns once every send is done or timed out.
pub(super) async fn send_table(
    table: &[Entry],
    master: u32,
    conns: Vec<(OwnedReadHalf, OwnedWriteHalf)>,
) {
    let payload = frame::encode_table(table);
    let mut msg = Header {
        a: table.len() as u64,
        b: u64::from(VERSION),
        c: u64::from(master),
        ..Header::new(kind::TABLE, payload.len() as u32)
    }
    .encode()
    .to_vec();
    msg.extend_from_slice(&payload);
    let sends: Vec<_> = conns
        .into_iter()
        .map(|(rd, mut wr)| {
            let msg = msg.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(5), async {
                    let _ = wr.write_all(&msg).await;
                    let _ = wr.shutdown().await;
                })
                .await;
                drop(rd);
            })
        })
        .collect();
    // Sent before returning: a transport with no threads of its own
    // (`TcpConfig::threads` 0) runs nothing more until its caller drives
    // it, which may wait for the other ranks to start.
    for s in sends {
        let _ = s.await;
    }
}

mod hold;
pub(crate) mod started;
#[cfg(test)]
mod tests;
