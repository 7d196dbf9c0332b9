//! The job's table, kept beside the rendezvous file once every rank
//! registered: what a rank reads when its master died before the table
//! reached it.
//!
//! Why: the master hands the table to every rank over each one's
//! registration, one connection after another. Should it die between two
//! of them, the ranks that got the table run the job (their standby takes
//! over, see the book's Fault tolerance chapter, A master that dies),
//! while the others would still be registering — with rank 0's
//! replacement, which would host a start of its own: two halves of one
//! job that never meet. So the master writes the table to
//! `<rendezvous>.table` before it sends it. A rank whose registration
//! broke reads it there and joins the same job as the others, and a
//! replacement of rank 0 that finds it knows the job started: it waits
//! for the standby rather than hosting the start again.
//!
//! The file is believed only if this user wrote it privately
//! ([`crate::private::read_owned`]), for this job and this protocol
//! version, and, for a rank that adopts it, only once a master took this
//! process's registration and only if it names this very process (its
//! listen address, node and incarnation). Only a job that finds its
//! master through a rendezvous file has one. A master removes an earlier
//! start's table before it writes the rendezvous file, and the master
//! whose job ended removes its own: a later job at the same path (of the
//! same job id, even) never reads a stale one.

use super::super::frame::{self, Entry};
use super::super::{MasterAddr, TcpConfig};
use super::Joined;
use crate::version::{self, VERSION};
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// First word of a table file.
const TAG: &str = "taskfold-table";

/// Longest header line read.
const HEADER_MAX: usize = 128;

/// The table file beside rendezvous file `rendezvous`.
fn path_of(rendezvous: &Path) -> PathBuf {
    let name = rendezvous
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "rendezvous".into());
    rendezvous.with_file_name(format!("{name}.table"))
}

/// Writes `table` (the master is rank `master`) beside the rendezvous
/// file of `job`, atomically and privately; nothing without one.
pub(crate) fn write(at: &MasterAddr, job: u64, master: u32, table: &[Entry]) -> io::Result<()> {
    let MasterAddr::Rendezvous(rendezvous) = at else {
        return Ok(());
    };
    crate::private::write_atomic(&path_of(rendezvous), &bytes(job, master, table))
}

/// A table file's bytes: a line `taskfold-table VERSION job=0x.. master=R`,
/// then the table as the `TABLE` frame carries it.
pub(crate) fn bytes(job: u64, master: u32, table: &[Entry]) -> Vec<u8> {
    let mut bytes = format!("{TAG} {VERSION} job={job:#x} master={master}\n").into_bytes();
    bytes.extend_from_slice(&frame::encode_table(table));
    bytes
}

/// Removes the table file of a start that failed.
pub(crate) fn remove(at: &MasterAddr) {
    if let MasterAddr::Rendezvous(rendezvous) = at {
        let _ = std::fs::remove_file(path_of(rendezvous));
    }
}

/// The master's rank and every rank's entry, if a table file of `job`
/// for `size` ranks lies beside the rendezvous file.
fn read(at: &MasterAddr, job: u64, size: u32) -> Option<(u32, Vec<Entry>)> {
    let MasterAddr::Rendezvous(rendezvous) = at else {
        return None;
    };
    let max = HEADER_MAX as u64 + u64::from(size) * frame::ENTRY_LEN as u64;
    let bytes = crate::private::read_owned(&path_of(rendezvous), max).ok()?;
    parse(&bytes, job, size)
}

/// The master's rank and the entries in a table file's `bytes`, if they
/// are of `job`, of this protocol version and of `size` ranks.
pub(crate) fn parse(bytes: &[u8], job: u64, size: u32) -> Option<(u32, Vec<Entry>)> {
    let end = bytes.iter().take(HEADER_MAX).position(|&b| b == b'\n')?;
    let header = std::str::from_utf8(&bytes[..end]).ok()?;
    let mut words = header.split(' ');
    let (Some(TAG), Some(v), Some(j), Some(m), None) = (
        words.next(),
        words.next(),
        words.next(),
        words.next(),
        words.next(),
    ) else {
        return None;
    };
    let theirs = v.parse::<u16>().ok()?;
    version::check("the table file", theirs).ok()?;
    let file_job = j
        .strip_prefix("job=0x")
        .and_then(|h| u64::from_str_radix(h, 16).ok())?;
    let master = m.strip_prefix("master=")?.parse::<u32>().ok()?;
    if file_job != job || master >= size {
        return None;
    }
    let table = frame::decode_table(&bytes[end + 1..], size).ok()?;
    Some((master, table))
}

/// Whether `job` (of `size` ranks, whose master is found at `at`) has
/// started: its master wrote the table.
pub(crate) fn job_started(at: &MasterAddr, job: u64, size: u32) -> bool {
    read(at, job, size).is_some()
}

/// The job this rank joined, if its master wrote a table that names this
/// process (`listen`, this node, `cfg.incarnation`) and died before the
/// table reached it.
pub(crate) fn adopt(cfg: &TcpConfig, listen: SocketAddr) -> Option<Joined> {
    let (master, table) = read(&cfg.master, cfg.job, cfg.size)?;
    let own = table.get(cfg.rank as usize)?;
    names(own, listen, crate::same_node::node_token(), cfg.incarnation).then_some(())?;
    if master == cfg.rank {
        return None;
    }
    tracing::warn!(
        rank = cfg.rank,
        master,
        "the master died before its table reached this rank: joining by the table it wrote"
    );
    Some(Joined {
        master_addr: table[master as usize].addr,
        master,
        table,
    })
}

/// Whether `entry` is the registration of the process listening at
/// `listen` on node `node` as incarnation `incarnation` (the master keeps
/// the address a rank gave, with the connection's IP for a wildcard).
pub(super) fn names(entry: &Entry, listen: SocketAddr, node: u64, incarnation: u32) -> bool {
    entry.addr.port() == listen.port()
        && (listen.ip().is_unspecified() || entry.addr.ip() == listen.ip())
        && entry.node == node
        && entry.incarnation == incarnation
        && !entry.dead
}
