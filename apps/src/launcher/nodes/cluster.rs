//! The guard of a job's simulated nodes: makes them, starts ranks in
//! them, and removes them when dropped.

use super::ip::{self, Names};
use super::keeper::Keeper;
use super::signals::{self, Interrupts};
use super::{node_address, tool, NodeSpec, NodesError};
use std::ffi::{OsStr, OsString};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// A job's simulated nodes, removed when dropped (see the [module
/// documentation](super)).
#[derive(Debug)]
pub struct Cluster {
    spec: NodeSpec,
    ranks: u32,
    names: Names,
    /// The namespaces made so far, the switch's first; removed in reverse.
    made: Vec<String>,
    /// Node `k`'s keeper at `k`.
    keepers: Vec<Keeper>,
    job_dir: PathBuf,
    interrupts: Option<Interrupts>,
}

impl Cluster {
    /// Makes the nodes of a job of `ranks` ranks whose directory is
    /// `job_dir` (first removing the leftovers of dead launchers). On an
    /// error, whatever was made is removed again.
    pub fn create(spec: &NodeSpec, ranks: u32, job_dir: &Path) -> Result<Cluster, NodesError> {
        spec.check(ranks)?;
        let started = Instant::now();
        for name in ip::remove_stale() {
            eprintln!("taskfold run: removed {name}, left by a launcher that died");
        }
        let mut cluster = Cluster {
            spec: spec.clone(),
            ranks,
            names: Names::fresh(),
            made: Vec::new(),
            keepers: Vec::new(),
            job_dir: job_dir.to_path_buf(),
            interrupts: None,
        };
        cluster.build()?;
        let interrupts = Interrupts::start(cluster.made.clone()).map_err(|e| NodesError::Tool {
            command: "waiting for SIGINT and SIGTERM".into(),
            detail: e.to_string(),
        })?;
        cluster.interrupts = Some(interrupts);
        tracing::info!(nodes = spec.nodes, elapsed = ?started.elapsed(), "nodes made");
        Ok(cluster)
    }

    /// The switch, then each node: its namespace, link, keeper and replica
    /// directory.
    fn build(&mut self) -> Result<(), NodesError> {
        let switch = self.names.switch();
        ip::add_namespace(&switch)?;
        self.made.push(switch.clone());
        ip::add_bridge(&switch)?;
        for k in 0..self.spec.nodes {
            let node = self.names.node(k);
            ip::add_namespace(&node)?;
            self.made.push(node.clone());
            ip::add_link(&switch, &node, k, node_address(k), self.spec.link_rate)?;
            self.keepers.push(Keeper::start(&node)?);
            let dir = self.replica_dir(k);
            taskfold_transports::private::create_dir_all(&dir).map_err(|e| NodesError::Tool {
                command: format!("mkdir -p {}", dir.display()),
                detail: e.to_string(),
            })?;
        }
        Ok(())
    }

    /// The node `rank` runs on.
    pub fn node_of(&self, rank: u32) -> u32 {
        self.spec.node_of(rank, self.ranks)
    }

    /// Node `k`'s replica directory, in the job's directory.
    pub fn replica_dir(&self, k: u32) -> PathBuf {
        self.job_dir.join(format!("node-{k}")).join("replicas")
    }

    /// A command that runs `program` as `rank`, in its node's network
    /// and mount namespaces, in this process's working directory, with
    /// `TASKFOLD_BIND_HOST` set to its node's address.
    pub fn command(&self, rank: u32, program: &OsStr) -> std::io::Result<Command> {
        let k = self.node_of(rank);
        let mut wd = OsString::from("--wd=");
        wd.push(std::env::current_dir()?);
        let mut cmd = Command::new(tool("nsenter"));
        cmd.arg(format!("--target={}", self.keepers[k as usize].pid()))
            .args(["--net", "--mount"])
            .arg(wd)
            .arg("--")
            .arg(program)
            .env("TASKFOLD_BIND_HOST", node_address(k).to_string());
        Ok(cmd)
    }

    /// Runs `f` on a thread in node `k`'s network namespace (to reach an
    /// address that exists only there, as the master's).
    pub fn in_node<T: Send>(&self, k: u32, f: impl FnOnce() -> T + Send) -> std::io::Result<T> {
        let ns = std::fs::File::open(Path::new(ip::NETNS_DIR).join(self.names.node(k)))?;
        std::thread::scope(|s| {
            let t = s.spawn(|| {
                let net = Some(rustix::thread::LinkNameSpaceType::Network);
                rustix::thread::move_into_link_name_space(ns.as_fd(), net)?;
                Ok(f())
            });
            t.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }

    /// The signal (`SIGINT`, `SIGTERM`) that stopped the job, if one did.
    pub fn interrupted(&self) -> Option<&'static str> {
        self.interrupts.as_ref().and_then(Interrupts::caught)
    }
}

impl Drop for Cluster {
    /// Kills whatever still runs in the nodes, stops the keepers and
    /// removes the namespaces.
    fn drop(&mut self) {
        let started = Instant::now();
        drop(self.interrupts.take());
        signals::signal_all(&self.made, rustix::process::Signal::KILL);
        for k in &mut self.keepers {
            k.stop();
        }
        for ns in self.made.iter().rev() {
            if let Err(e) = ip::delete_namespace(ns) {
                eprintln!("taskfold run: cannot remove namespace {ns}: {e}");
            }
        }
        tracing::info!(elapsed = ?started.elapsed(), "nodes removed");
    }
}
