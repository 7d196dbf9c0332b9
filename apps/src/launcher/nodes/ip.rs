//! The `ip` and `tc` commands that make and remove a job's namespaces, and
//! the names those namespaces get.
//!
//! Every name is `tf-<launcher pid>-<nonce>-<role>`: unique per job (the
//! nonce tells apart the jobs of one launcher process, and a launcher that
//! reuses a dead one's pid), and it says which process made it, so that a
//! later launcher removes the leftovers of a dead one ([`remove_stale`])
//! and never those of a live one.

use super::{LinkRate, NodesError};
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// What every namespace name this module makes starts with.
pub(super) const PREFIX: &str = "tf-";

/// Where `ip netns` keeps its namespaces' names.
pub(super) const NETNS_DIR: &str = "/run/netns";

/// The bridge in the switch's namespace.
const BRIDGE: &str = "br0";

/// A node's end of its link, in the node's namespace.
pub(super) const NODE_IF: &str = "eth0";

/// The names of one job's namespaces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Names {
    /// `tf-<pid>-<nonce>`.
    stem: String,
}

impl Names {
    /// Fresh names for a job of this process.
    pub(super) fn fresh() -> Names {
        static JOBS: AtomicU32 = AtomicU32::new(0);
        let micros = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u32)
            .unwrap_or(0);
        let seq = JOBS.fetch_add(1, Ordering::Relaxed);
        Names {
            stem: format!("{PREFIX}{}-{micros:08x}{seq:x}", std::process::id()),
        }
    }

    /// The switch's namespace (its bridge, and one port per node).
    pub(super) fn switch(&self) -> String {
        format!("{}-s", self.stem)
    }

    /// Node `k`'s namespace.
    pub(super) fn node(&self, k: u32) -> String {
        format!("{}-n{k}", self.stem)
    }
}

/// The pid a namespace name says made it (`tf-<pid>-...`), if it is one of
/// ours.
pub(super) fn creator(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let (pid, tail) = rest.split_once('-')?;
    if tail.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// Runs `program args`; its standard output, or an error with the command
/// and what it printed.
fn run(program: &str, args: &[&str]) -> Result<String, NodesError> {
    let out = Command::new(super::tool(program))
        .args(args)
        .output()
        .map_err(|e| NodesError::Tool {
            command: format!("{program} {}", args.join(" ")),
            detail: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(NodesError::Tool {
            command: format!("{program} {}", args.join(" ")),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip ARGS`.
fn ip(args: &[&str]) -> Result<String, NodesError> {
    run("ip", args)
}

/// Makes the namespace `name`.
pub(super) fn add_namespace(name: &str) -> Result<(), NodesError> {
    ip(&["netns", "add", name]).map(drop)
}

/// Removes the name `name` (the namespace itself ends with its last
/// process).
pub(super) fn delete_namespace(name: &str) -> Result<(), NodesError> {
    ip(&["netns", "delete", name]).map(drop)
}

/// Makes the switch's bridge in the namespace `switch`, and brings it up.
pub(super) fn add_bridge(switch: &str) -> Result<(), NodesError> {
    ip(&["-n", switch, "link", "add", BRIDGE, "type", "bridge"])?;
    ip(&["-n", switch, "link", "set", BRIDGE, "up"]).map(drop)
}

/// Node `k`'s link: a veth pair from port `p<k>` of the switch's bridge to
/// [`NODE_IF`] in the node's namespace, with `addr/24` on the node's end;
/// both ends and the node's `lo` up. Both ends' egress is limited to
/// `rate`, if given, with a token bucket (`tbf`).
pub(super) fn add_link(
    switch: &str,
    node: &str,
    k: u32,
    addr: Ipv4Addr,
    rate: Option<LinkRate>,
) -> Result<(), NodesError> {
    let port = format!("p{k}");
    let cidr = format!("{addr}/24");
    ip(&[
        "-n", switch, "link", "add", &port, "type", "veth", "peer", "name", NODE_IF, "netns", node,
    ])?;
    ip(&["-n", switch, "link", "set", &port, "master", BRIDGE, "up"])?;
    ip(&["-n", node, "addr", "add", &cidr, "dev", NODE_IF])?;
    ip(&["-n", node, "link", "set", NODE_IF, "up"])?;
    ip(&["-n", node, "link", "set", "lo", "up"])?;
    if let Some(rate) = rate {
        limit(node, NODE_IF, rate)?;
        limit(switch, &port, rate)?;
    }
    Ok(())
}

/// `tc qdisc add dev DEV root tbf ...` in namespace `ns`.
fn limit(ns: &str, dev: &str, rate: LinkRate) -> Result<(), NodesError> {
    let bits = format!("{}bit", rate.bits_per_sec());
    let burst = rate.burst_bytes().to_string();
    let args = [
        "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", &bits, "burst", &burst,
        "latency", "100ms",
    ];
    run("tc", &args).map(drop)
}

/// The pids of the processes in the namespace `name`.
pub(super) fn pids_in(name: &str) -> Result<Vec<i32>, NodesError> {
    Ok(ip(&["netns", "pids", name])?
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect())
}

/// The names of the namespaces `ip netns` knows.
pub(super) fn namespaces() -> Vec<String> {
    std::fs::read_dir(NETNS_DIR)
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Removes the names of the namespaces that a launcher made and left
/// behind when it died (`tf-<pid>-...` whose pid is gone); returns them.
/// Processes still in them are left alone: their namespaces end with them.
pub(super) fn remove_stale() -> Vec<String> {
    let mut removed = Vec::new();
    for name in namespaces() {
        let Some(pid) = creator(&name) else { continue };
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        match delete_namespace(&name) {
            Ok(()) => removed.push(name),
            Err(e) => tracing::warn!(%name, error = %e, "cannot remove a stale namespace"),
        }
    }
    removed
}
