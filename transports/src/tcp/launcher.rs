//! The launcher's report to the master that a rank exited: the one
//! connection of a process that is not a rank — its sending side
//! ([`report_rank_exit`]) and the master's side (`on_launcher`).

use super::bootstrap::connect_master;
use super::conn::{self, bad_connection, read_control, read_header, ReadError};
use super::frame::{self, kind, Header, Hello, Role};
use super::handshake::{self, Failed};
use super::integrity::MacRead;
use super::peer::Shared;
use super::MasterAddr;
use crate::version::VERSION;
use crate::{Event, TransportError, LAUNCHER};
use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use taskfold_core::auth::{JobAuth, NONCE_LEN};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// Tells the master that `rank` exited (for the `taskfold run` launcher,
/// which is not a rank): connects to the master's listener as the launcher
/// of `job`, proves the job key of `auth` (and checks the master's proof),
/// sends one control frame
/// `taskfold_core::wire::encode(&Msg::RankExited { rank, code, signal, incarnation })`
/// and closes gracefully. The master delivers it as
/// `Event::Message { from: LAUNCHER, .. }`. Blocking; retries the
/// connection until `timeout`.
pub fn report_rank_exit(
    master: &MasterAddr,
    job: u64,
    auth: &JobAuth,
    (rank, incarnation): (u32, u32),
    code: i32,
    signal: i32,
    timeout: Duration,
) -> Result<(), TransportError> {
    use taskfold_core::wire::{encode, Msg};
    let deadline = Instant::now() + timeout;
    let (mut s, addr, master_rank) = connect_master(master, job, deadline)?;
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(100));
    let io = |e: io::Error| TransportError::Io(format!("reporting to the master at {addr}: {e}"));
    s.set_nodelay(true).map_err(io)?;
    s.set_write_timeout(Some(left)).map_err(io)?;
    s.set_read_timeout(Some(left)).map_err(io)?;
    let hello = Hello {
        version: VERSION,
        role: Role::Launcher,
        job,
        rank: LAUNCHER.0,
        size: 0,
        addr: None,
        node: 0,
        nonce: [0; NONCE_LEN],
        incarnation: 0,
        // The report is always sealed, whatever the job's setting.
        mac: true,
    };
    let mut mac = match handshake::call_sync(&mut s, auth, hello, master_rank) {
        Ok(keys) => keys.from_caller(),
        Err(Failed::Refused(r)) => return Err(TransportError::Refused(r)),
        Err(f @ Failed::Auth(_)) => {
            let who = format!("the master at {addr}");
            return Err(TransportError::Auth(f.describe(&who)));
        }
        Err(f @ Failed::Broken(_)) => {
            return Err(TransportError::Io(f.describe(&addr.to_string())))
        }
    };
    let body = encode(&Msg::RankExited {
        rank,
        code,
        signal,
        incarnation,
    });
    // Both frames sealed (the hello said so).
    let head = Header::new(kind::CONTROL, body.len() as u32).encode();
    let mut out = head.to_vec();
    out.extend_from_slice(&body);
    out.extend_from_slice(&mac.seal(&[&head, &body]));
    let bye = Header::new(kind::GOODBYE, 0).encode();
    out.extend_from_slice(&bye);
    out.extend_from_slice(&mac.seal(&[&bye]));
    s.write_all(&out).map_err(io)?;
    s.shutdown(Shutdown::Write).map_err(io)?;
    // The master closes its side once it has the report, or refuses.
    match frame::read_frame_sync(&mut s, u64::from(frame::HANDSHAKE_MAX)) {
        Ok(None) => Ok(()),
        Ok(Some((h, p))) if h.kind == kind::REFUSE => Err(TransportError::Refused(
            String::from_utf8_lossy(&p).into_owned(),
        )),
        Ok(Some((h, _))) => Err(TransportError::Protocol {
            peer: 0,
            detail: format!("unexpected frame kind {} in answer to a report", h.kind),
        }),
        Err(e) => Err(io(e)),
    }
}

/// How long the master waits for a frame from the launcher.
const LAUNCHER_IDLE: Duration = Duration::from_secs(30);

/// The launcher's connection: control frames delivered from [`LAUNCHER`].
pub(crate) async fn on_launcher(
    shared: Arc<Shared>,
    mut rd: MacRead<OwnedReadHalf>,
    mut wr: OwnedWriteHalf,
    hello: Hello,
    from: SocketAddr,
) {
    let refusal = if !shared.hosts_master() {
        Some(format!("rank {} is not the master", shared.rank))
    } else if hello.job != shared.job {
        Some(format!(
            "wrong job id: the master runs job {:#x}, the launcher reports for job {:#x}",
            shared.job, hello.job
        ))
    } else {
        None
    };
    if let Some(reason) = refusal {
        bad_connection(shared.rank, from, &reason);
        return conn::refuse(rd.into_inner(), wr, reason).await;
    }
    loop {
        let hdr = match tokio::time::timeout(LAUNCHER_IDLE, read_header(&mut rd)).await {
            Ok(Ok(h)) => h,
            Ok(Err(ReadError::Eof)) => break,
            Ok(Err(ReadError::Protocol(d))) => return bad_connection(shared.rank, from, &d),
            Ok(Err(ReadError::Io(e))) => return bad_connection(shared.rank, from, &e.to_string()),
            Err(_) => return bad_connection(shared.rank, from, "launcher idle"),
        };
        if hdr.kind == kind::CONTROL {
            // As a peer's: the launcher waits for room in the channel.
            shared.event_room(None, u64::from(hdr.len)).await;
        }
        match hdr.kind {
            kind::CONTROL => match read_control(&mut rd, &hdr, shared.max_frame).await {
                Ok(frame) => {
                    if let Err(e) = rd.end_frame().await {
                        let d = e.describe(LAUNCHER.0);
                        return bad_connection(shared.rank, from, &d);
                    }
                    if !shared.is_closed() {
                        let _ = shared.events_tx.send(Event::Message {
                            from: LAUNCHER,
                            frame: shared.event_bytes.track(frame),
                        });
                    }
                }
                Err(ReadError::Protocol(d)) => return bad_connection(shared.rank, from, &d),
                Err(_) => return bad_connection(shared.rank, from, "launcher frame cut short"),
            },
            kind::GOODBYE => {
                if let Err(e) = rd.end_frame().await {
                    return bad_connection(shared.rank, from, &e.describe(LAUNCHER.0));
                }
                break;
            }
            k => {
                return bad_connection(
                    shared.rank,
                    from,
                    &format!("unexpected frame kind {k} from the launcher"),
                )
            }
        }
    }
    let _ = wr.shutdown().await;
}
