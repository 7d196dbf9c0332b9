//! The launcher's report to the master that a rank exited: the one
//! connection of a process that is not a rank.

use super::bootstrap::connect_master;
use super::frame::{self, kind, Header, Hello, Role};
use super::handshake::{self, Failed};
use super::MasterAddr;
use crate::version::VERSION;
use crate::{TransportError, LAUNCHER};
use std::io::{self, Write};
use std::net::Shutdown;
use std::time::{Duration, Instant};
use taskfold_core::auth::{JobAuth, NONCE_LEN};

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
