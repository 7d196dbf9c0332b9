//! `taskfold run --sim-nodes N`: a job's ranks spread over `N` nodes simulated
//! on this machine, for tests and benchmarks of what crosses nodes.
//!
//! Node `k` is a network namespace whose only link (`eth0`, address
//! `198.18.0.<k+1>/24`, from the block set aside for benchmarking) goes
//! to a bridge in a namespace of its own, the switch, connected to
//! nothing else: the nodes reach each other and nothing outside. Each
//! node also has a mount namespace of its own with a private tmpfs on
//! `/dev/shm` (see [`keeper`]), and its own replica directory, so that
//! what works only within a node (shared memory, cross-memory reads, the
//! master's notice board) works only within a simulated node. The job's
//! directory, where the rendezvous file lies, is on the real file system
//! that every node sees.
//!
//! Ranks are placed in blocks: rank `r` of `R` runs on node `r * N / R`.
//! A rank listens on its node's address (`TASKFOLD_BIND_HOST`).
//! `--link-rate` limits each link, both ways, with a token bucket.
//!
//! Everything is made by `ip` and `tc` (iproute2) and `nsenter`
//! (util-linux), which need root. The [`Cluster`] removes it when
//! dropped: after the job, on an error, and after SIGINT or SIGTERM
//! ([`signals`]). A launcher killed outright leaves its namespaces'
//! names; the next `taskfold run --sim-nodes` removes them.

mod ip;
mod keeper;
mod signals;
#[cfg(test)]
mod tests;

use std::ffi::{OsStr, OsString};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The most nodes a job can have (node `k`'s address ends in `k + 1`).
pub const MAX_NODES: u32 = 250;

/// Why the nodes could not be made.
#[derive(Debug, thiserror::Error)]
pub enum NodesError {
    /// Not enough privilege to make namespaces.
    #[error(
        "--sim-nodes needs root: making network and mount namespaces needs \
         CAP_NET_ADMIN and CAP_SYS_ADMIN, and this process lacks {0}"
    )]
    NotRoot(&'static str),
    /// A placement that cannot be made.
    #[error("{0}")]
    Placement(String),
    /// A tool is missing, or one of its commands failed.
    #[error("`{command}` failed: {detail}")]
    Tool {
        /// The command line.
        command: String,
        /// What it printed, or why it could not run.
        detail: String,
    },
    /// The program to launch cannot be found.
    #[error("cannot start {0:?}: no such program")]
    NoProgram(OsString),
}

impl From<NodesError> for std::io::Error {
    fn from(e: NodesError) -> std::io::Error {
        let kind = match e {
            NodesError::Placement(_) => std::io::ErrorKind::InvalidInput,
            NodesError::NotRoot(_) => std::io::ErrorKind::PermissionDenied,
            _ => std::io::ErrorKind::Other,
        };
        std::io::Error::new(kind, e)
    }
}

/// A link's rate, in bits per second (`--link-rate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkRate(u64);

impl LinkRate {
    /// Bits per second.
    pub fn bits_per_sec(self) -> u64 {
        self.0
    }

    /// The token bucket's depth: 10 ms at this rate, and at least 64 KiB
    /// so that one segmentation-offloaded packet always fits.
    pub fn burst_bytes(self) -> u64 {
        (self.0 / 8 / 100).max(64 << 10)
    }
}

impl FromStr for LinkRate {
    type Err = String;

    /// `<integer><unit>`, units as `tc` reads them: `bit`, `kbit`,
    /// `mbit`, `gbit`, `tbit` (powers of 1000), and `bps`, `kbps`, `mbps`,
    /// `gbps` in bytes per second.
    fn from_str(s: &str) -> Result<LinkRate, String> {
        let bad = || format!("{s:?}: expected a rate such as 100mbit, 1gbit or 125mbps");
        let lower = s.trim().to_ascii_lowercase();
        let digits = lower.bytes().take_while(u8::is_ascii_digit).count();
        let (n, unit) = lower.split_at(digits);
        let n: u64 = n.parse().map_err(|_| bad())?;
        let scale: u64 = match unit {
            "bit" => 1,
            "kbit" => 1_000,
            "mbit" => 1_000_000,
            "gbit" => 1_000_000_000,
            "tbit" => 1_000_000_000_000,
            "bps" => 8,
            "kbps" => 8_000,
            "mbps" => 8_000_000,
            "gbps" => 8_000_000_000,
            _ => return Err(bad()),
        };
        match n.checked_mul(scale) {
            Some(bits) if bits >= 8_000 => Ok(LinkRate(bits)),
            _ => Err(format!("{s:?}: expected a rate from 1kbps to 10^19 bits/s")),
        }
    }
}

/// How to spread a job over simulated nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    /// Number of nodes.
    pub nodes: u32,
    /// Each link's rate (both ways), if limited.
    pub link_rate: Option<LinkRate>,
}

impl NodeSpec {
    /// Refuses a spread that leaves a node empty or has too many nodes.
    pub fn check(&self, ranks: u32) -> Result<(), NodesError> {
        if self.nodes == 0 || self.nodes > MAX_NODES {
            return Err(NodesError::Placement(format!(
                "--sim-nodes {}: expected 1 to {MAX_NODES} nodes",
                self.nodes
            )));
        }
        if ranks < self.nodes {
            return Err(NodesError::Placement(format!(
                "--sim-nodes {} needs at least one rank per node: -n {ranks} is fewer",
                self.nodes
            )));
        }
        Ok(())
    }

    /// The node of `rank` in a job of `ranks` (blocks: rank `r` on node
    /// `r * nodes / ranks`, so that the nodes' counts differ by at most 1).
    pub fn node_of(&self, rank: u32, ranks: u32) -> u32 {
        (u64::from(rank) * u64::from(self.nodes) / u64::from(ranks.max(1))) as u32
    }
}

/// Node `k`'s address.
pub fn node_address(k: u32) -> Ipv4Addr {
    let last = u8::try_from(k + 1).expect("at most MAX_NODES nodes");
    Ipv4Addr::new(198, 18, 0, last)
}

/// Fails with a clear error unless this process can make namespaces and
/// the tools are there, and unless `program` can be found (a rank started
/// through `nsenter` could not say so as clearly).
pub fn preflight(program: &OsStr) -> Result<(), NodesError> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let caps = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        .unwrap_or(0);
    const NET_ADMIN: u64 = 1 << 12;
    const SYS_ADMIN: u64 = 1 << 21;
    match (caps & NET_ADMIN != 0, caps & SYS_ADMIN != 0) {
        (false, false) => return Err(NodesError::NotRoot("both")),
        (false, true) => return Err(NodesError::NotRoot("CAP_NET_ADMIN")),
        (true, false) => return Err(NodesError::NotRoot("CAP_SYS_ADMIN")),
        (true, true) => {}
    }
    for (tool, package) in [
        ("ip", "iproute2"),
        ("tc", "iproute2"),
        ("nsenter", "util-linux"),
    ] {
        if find_program(OsStr::new(tool)).is_none() {
            return Err(NodesError::Tool {
                command: tool.into(),
                detail: format!("not found in PATH (install {package})"),
            });
        }
    }
    match find_program(program) {
        Some(_) => Ok(()),
        None => Err(NodesError::NoProgram(program.to_os_string())),
    }
}

/// Where `program` is, as `execvp` would find it: a path if it has a
/// slash, else the first executable file of that name in `PATH` (or in
/// the system directories, for the tools, which may live in `sbin`).
fn find_program(program: &OsStr) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let path = Path::new(program);
    if program.as_encoded_bytes().contains(&b'/') {
        return runnable(path).then(|| path.to_path_buf());
    }
    let dirs = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&dirs)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(path))
        .find(|p| runnable(p))
}

/// The path of a tool (`ip`, `tc`, `nsenter`), found as by
/// [`find_program`]; its bare name if it is nowhere.
fn tool(name: &str) -> PathBuf {
    find_program(OsStr::new(name)).unwrap_or_else(|| name.into())
}

mod cluster;
pub use cluster::Cluster;
