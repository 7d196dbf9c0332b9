//! Whose memory a loan names: the pid of a `GET_LEND` checked against the
//! process that holds the other end of the connection.
//!
//! A loan names the owner's pid, and the requester reads that process's
//! memory (`process_vm_readv`, or a mapping of its heap found through
//! `/proc/<pid>/fd`). The pid is the peer's word: a peer that holds the job
//! key could name any process of the user, and the requester would read
//! that process's memory as if it were the peer's. The kernel does not give
//! a TCP socket's peer process (`SO_PEERCRED` answers only for Unix
//! sockets), so the connection's first loan is checked against the kernel's
//! tables: the named process must hold the socket whose local address is
//! this connection's remote address and whose remote address is this
//! connection's local one (the socket's inode from a `sock_diag` lookup
//! by those addresses, see `diag`, or else from `/proc/<pid>/net/tcp`, a
//! walk of every connection of the machine; `/proc/<pid>/fd` the
//! process's sockets). Once checked, a connection's loans must all name
//! that pid.
//!
//! What a failure does: a loan naming a process that does not hold the
//! connection is a protocol error (the link is dropped and counted as a
//! bad connection, its gets fail with the link); if the kernel's tables
//! cannot be read at all, the check cannot be made and no loan is read:
//! the get is streamed instead and loans are no longer asked for.

use super::conn::ReadError;
use std::io;
use std::net::{IpAddr, SocketAddr};

/// What the check of a loan's pid found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The pid holds the connection: the loan may be read.
    Holder,
    /// The kernel's tables could not be read (why): do not read the loan.
    Unknown(String),
}

/// The lender on one connection: the pid its loans name, once checked.
pub(crate) struct Lender {
    /// This connection's local and remote addresses.
    ours: SocketAddr,
    theirs: SocketAddr,
    checked: Option<u32>,
}

impl Lender {
    /// The lender on the connection from `ours` to `theirs`.
    pub(crate) fn new(ours: SocketAddr, theirs: SocketAddr) -> Lender {
        Lender {
            ours,
            theirs,
            checked: None,
        }
    }

    /// Checks that a loan naming `pid` comes from the process that holds
    /// the connection: at once if the connection's first loan named it
    /// already, else from the kernel's tables (off the reader's task).
    /// `Err` (a protocol error) if it names another process.
    pub(crate) async fn check(&mut self, pid: u64) -> Result<Verdict, ReadError> {
        let Ok(pid) = u32::try_from(pid) else {
            return Err(ReadError::Protocol(format!("a loan names pid {pid}")));
        };
        match self.checked {
            Some(p) if p == pid => return Ok(Verdict::Holder),
            Some(p) => {
                return Err(ReadError::Protocol(format!(
                    "a loan names pid {pid}; the connection's loans came from pid {p}"
                )))
            }
            None => {}
        }
        let (ours, theirs) = (self.ours, self.theirs);
        let found = tokio::task::spawn_blocking(move || holds(pid, theirs, ours))
            .await
            .map_err(|e| io::Error::other(e.to_string()))
            .and_then(|r| r);
        match found {
            Ok(true) => {
                self.checked = Some(pid);
                Ok(Verdict::Holder)
            }
            Ok(false) => Err(ReadError::Protocol(format!(
                "a loan names pid {pid}, which does not hold the connection"
            ))),
            // No such process: it cannot hold the connection.
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(ReadError::Protocol(format!(
                "a loan names pid {pid}, which does not exist"
            ))),
            Err(e) => Ok(Verdict::Unknown(e.to_string())),
        }
    }
}

/// Whether process `pid` holds a TCP socket bound to `local` and connected
/// to `remote` (addresses as that process sees them).
pub(crate) fn holds(pid: u32, local: SocketAddr, remote: SocketAddr) -> io::Result<bool> {
    // Looked up by its addresses in this namespace first (no table walk);
    // the named process's tables if that does not prove it (its namespace
    // may be another).
    if let Ok(Some(inode)) = diag::connection(local, remote) {
        if holds_inode(pid, inode)? {
            return Ok(true);
        }
    }
    let (ours, theirs) = (table_addr(local), table_addr(remote));
    // Each table read is a walk of the kernel's TCP hash: the IPv6 table
    // only if the IPv4 one has not the socket.
    for table in tables(pid) {
        let (v6, text) = table?;
        let (l, r) = if v6 {
            (&ours.1, &theirs.1)
        } else {
            (&ours.0, &theirs.0)
        };
        let inode = lines(&text)
            .find(|f| f[1].eq_ignore_ascii_case(l) && f[2].eq_ignore_ascii_case(r))
            .and_then(|f| f[9].parse().ok());
        if let Some(i) = inode {
            return holds_inode(pid, i);
        }
    }
    Ok(false)
}

/// A listening TCP socket as the kernel's tables show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Listening {
    /// From the IPv6 table.
    v6: bool,
    /// Its local address, as the table writes it.
    local: String,
    inode: u64,
}

/// The TCP sockets listening in the network namespace of process `pid`.
///
/// Reading the tables costs the kernel a walk of its whole hash of TCP
/// connections, however few there are (milliseconds on a machine with
/// much memory, every read), so a caller that proves several peers reads
/// them once and looks each peer up in what it read ([`listener_at`]).
pub(crate) fn listening(pid: u32) -> io::Result<Vec<Listening>> {
    let mut out = Vec::new();
    for table in tables(pid) {
        let (v6, text) = table?;
        // State 0A: listening.
        out.extend(lines(&text).filter(|f| f[3] == "0A").filter_map(|f| {
            Some(Listening {
                v6,
                local: f[1].to_ascii_uppercase(),
                inode: f[9].parse().ok()?,
            })
        }));
    }
    Ok(out)
}

/// The TCP sockets listening in this process's network namespace, asked
/// of the kernel for its listening sockets alone (see `diag`): a walk of
/// those, where [`listening`] walks every connection of the machine. A
/// peer in another namespace is not among them.
pub(crate) fn listening_here() -> io::Result<Vec<Listening>> {
    Ok(diag::listeners()?
        .into_iter()
        .map(|l| {
            let (v4, v6) = table_addr(l.addr);
            let v6_table = l.addr.is_ipv6();
            Listening {
                v6: v6_table,
                local: if v6_table { v6 } else { v4 },
                inode: l.inode,
            }
        })
        .collect())
}

/// The inode of the socket of `table` that listens at `addr` (as the
/// job's table names a rank's listener: its own address, or, for a
/// listener bound to the wildcard, the address others reach it at).
pub(crate) fn listener_at(table: &[Listening], addr: SocketAddr) -> Option<u64> {
    let exact = table_addr(addr);
    let port = format!(":{:04X}", addr.port());
    table
        .iter()
        .find(|l| {
            // Both forms are written in upper case, as `listening` keeps them.
            let named = l.local == *if l.v6 { &exact.1 } else { &exact.0 };
            let wildcard = l
                .local
                .split(':')
                .next()
                .is_some_and(|ip| ip.bytes().all(|b| b == b'0'));
            l.local.ends_with(&port) && (named || wildcard)
        })
        .map(|l| l.inode)
}

/// Whether process `pid` holds the TCP socket that listens at `addr` (as
/// the job's table names a rank's listener: its own address, or, for a
/// listener bound to the wildcard, the address others reach it at). A
/// listening port is one socket's on a node (taskfold's listeners do not
/// share ports), so this names the rank's process, whose listener it is.
#[cfg(test)]
pub(crate) fn listens(pid: u32, addr: SocketAddr) -> io::Result<bool> {
    listener_at(&listening(pid)?, addr).map_or(Ok(false), |i| holds_inode(pid, i))
}

/// Whether process `pid` has the socket of `inode` among its descriptors.
pub(crate) fn holds_inode(pid: u32, inode: u64) -> io::Result<bool> {
    let wanted = format!("socket:[{inode}]");
    // Bounded by the process's open files.
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        let Ok(entry) = entry else { continue };
        if std::fs::read_link(entry.path()).is_ok_and(|l| l.as_os_str() == wanted.as_str()) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The TCP tables of the network namespace of process `pid`
/// (`/proc/<pid>/net/tcp{,6}`), each read when the iterator reaches it:
/// (whether the IPv6 table, its text).
fn tables(pid: u32) -> impl Iterator<Item = io::Result<(bool, String)>> {
    ["tcp", "tcp6"].into_iter().filter_map(move |table| {
        match std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) {
            Ok(t) => Some(Ok((table == "tcp6", t))),
            // A kernel without IPv6 has no `tcp6`.
            Err(e) if table == "tcp6" && e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => Some(Err(e)),
        }
    })
}

/// The fields of each socket's line of a table (bounded by its lines).
fn lines(text: &str) -> impl Iterator<Item = Vec<&str>> {
    text.lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() >= 10)
}

/// How `/proc/net/tcp` and `/proc/net/tcp6` write `a`: (the IPv4 table's
/// form, the IPv6 table's form; an IPv4 address in the IPv6 table is
/// v4-mapped). Each 32-bit word of the address is printed in the host's
/// byte order, the port in hexadecimal.
fn table_addr(a: SocketAddr) -> (String, String) {
    let words = |octets: &[u8]| -> String {
        octets
            .chunks(4)
            .map(|w| format!("{:08X}", u32::from_ne_bytes([w[0], w[1], w[2], w[3]])))
            .collect()
    };
    let port = a.port();
    match a.ip() {
        IpAddr::V4(ip) => (
            format!("{}:{port:04X}", words(&ip.octets())),
            format!("{}:{port:04X}", words(&ip.to_ipv6_mapped().octets())),
        ),
        IpAddr::V6(ip) => {
            let v6 = format!("{}:{port:04X}", words(&ip.octets()));
            let v4 = ip
                .to_ipv4_mapped()
                .map(|v4| format!("{}:{port:04X}", words(&v4.octets())))
                .unwrap_or_default();
            (v4, v6)
        }
    }
}

mod diag;

#[cfg(test)]
mod tests;
