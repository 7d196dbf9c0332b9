//! The rendezvous file: where the master of a job is, for the ranks that
//! register with it, replacements and spares (a standby rewrites it when
//! it takes over; it says "over" once the job ended). Its text is
//! `taskfold-rendezvous VERSION job=0x.. addr=HOST:PORT master=R`.

use super::MasterAddr;
use crate::version::{self, VERSION};
use crate::TransportError;
use std::io;
use std::net::SocketAddr;
use std::path::Path;

/// First word of a rendezvous file.
const RENDEZVOUS_TAG: &str = "taskfold-rendezvous";

/// Writes the rendezvous file atomically and privately (a new temporary
/// file mode 0600, then a rename: [`crate::private::write_atomic`]).
pub(crate) fn write_rendezvous(
    path: &Path,
    job: u64,
    addr: SocketAddr,
    master: u32,
) -> io::Result<()> {
    crate::private::write_atomic(path, rendezvous_text(job, addr, master).as_bytes())
}

/// The text of the rendezvous file of `job`'s master, rank `master`, at
/// `addr` (a standby that took over writes its own).
pub(crate) fn rendezvous_text(job: u64, addr: SocketAddr, master: u32) -> String {
    format!("{RENDEZVOUS_TAG} {VERSION} job={job:#x} addr={addr} master={master}\n")
}

/// Where the master is: its address and its rank (which a caller's proof
/// of the job key names).
pub(crate) type Found = (SocketAddr, u32);

/// The word a rendezvous file holds instead of an address once its job is
/// over.
const OVER: &str = "over";

/// Rewrites the rendezvous file of `job` to say the job is over.
pub(crate) fn write_over(path: &Path, job: u64) -> io::Result<()> {
    let text = format!("{RENDEZVOUS_TAG} {VERSION} job={job:#x} {OVER}\n");
    crate::private::write_atomic(path, text.as_bytes())
}

/// Longest rendezvous file read.
const RENDEZVOUS_MAX: u64 = 4096;

/// Why the master's address is not known (yet).
pub(crate) enum Unresolved {
    /// Not yet (no file, a file of another job): ask again.
    Retry(String),
    /// Never: the file's master speaks another protocol version.
    Fatal(TransportError),
}

/// The master's address and rank for `job`, reading the rendezvous file
/// if needed (a fixed address, or one from the launcher's store, is rank
/// 0's). A file of this job written by
/// a master of another protocol version is fatal, as is one that says the
/// job is over; one of another job (an earlier job's, say) is waited out.
pub(crate) fn resolve(master: &MasterAddr, job: u64) -> Result<Found, Unresolved> {
    let path = match master {
        MasterAddr::Addr(a) => return Ok((*a, 0)),
        MasterAddr::Rendezvous(p) => p,
        MasterAddr::Store(s) => return s.lookup().map(|a| (a, 0)).map_err(Unresolved::Fatal),
    };
    let retry = |why: String| Unresolved::Retry(why);
    // Believed only if this user wrote it privately: a file another user
    // planted (or one others may rewrite) is refused at once.
    let text = match crate::private::read_owned(path, RENDEZVOUS_MAX) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            return Err(Unresolved::Fatal(TransportError::MasterUnreachable(
                format!("rendezvous file {e}"),
            )))
        }
        Err(e) => return Err(retry(format!("rendezvous file {e}"))),
    };
    parse_rendezvous(&text, job, path)
}

/// The master's address and rank in the text of rendezvous file `path`
/// (see [`write_rendezvous`]), if it is for `job`. A file of another
/// protocol version is fatal; anything else wrong is worth waiting out.
pub(crate) fn parse_rendezvous(text: &str, job: u64, path: &Path) -> Result<Found, Unresolved> {
    let retry = |why: String| Unresolved::Retry(why);
    let mut words = text.split_whitespace();
    let (Some(RENDEZVOUS_TAG), Some(v), Some(j), Some(a)) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err(retry(format!(
            "rendezvous file {} is malformed",
            path.display()
        )));
    };
    let file_job = j
        .strip_prefix("job=0x")
        .and_then(|h| u64::from_str_radix(h, 16).ok());
    if file_job != Some(job) {
        return Err(retry(format!(
            "rendezvous file {} is for another job ({j}, expected {job:#x})",
            path.display()
        )));
    }
    let theirs = v.parse::<u16>().map_err(|_| {
        retry(format!(
            "rendezvous file {} has a bad version {v:?}",
            path.display()
        ))
    })?;
    version::check(
        &format!("the master of rendezvous file {}", path.display()),
        theirs,
    )
    .map_err(Unresolved::Fatal)?;
    if a == OVER {
        let why = format!("the job is over: {}", crate::RANK_FINISHED);
        return Err(Unresolved::Fatal(TransportError::Refused(why)));
    }
    let addr = a.strip_prefix("addr=").and_then(|a| a.parse().ok());
    let rank = words
        .next()
        .and_then(|m| m.strip_prefix("master="))
        .and_then(|m| m.parse().ok());
    match (addr, rank) {
        (Some(a), Some(r)) => Ok((a, r)),
        _ => Err(retry(format!(
            "rendezvous file {} has a bad address or master rank",
            path.display()
        ))),
    }
}

pub(super) fn describe(master: &MasterAddr) -> String {
    match master {
        MasterAddr::Addr(a) => a.to_string(),
        MasterAddr::Rendezvous(p) => format!("rendezvous file {}", p.display()),
        MasterAddr::Store(s) => s.describe(),
    }
}
