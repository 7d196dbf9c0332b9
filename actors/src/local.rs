//! Many ranks in one process over the serialising loopback, for tests and
//! for trying taskfold without a launcher.

use crate::{Config, Runtime, StartError};
use std::sync::Arc;
use taskfold_core::Rank;
use taskfold_transports::loopback::LoopbackHub;
use taskfold_transports::Transport;

/// `n` runtimes wired together in this process. Every message is still
/// encoded, copied and validated as over a network.
pub struct LocalCluster {
    hub: Arc<LoopbackHub>,
    ranks: Vec<Runtime>,
}

impl LocalCluster {
    /// Starts `n` ranks with the default configuration.
    pub fn new(n: u32) -> Result<Self, StartError> {
        Self::with_config(n, Config::default())
    }

    /// Starts `n` ranks with `config`.
    pub fn with_config(n: u32, config: Config) -> Result<Self, StartError> {
        let (hub, ts) = LoopbackHub::new(n);
        let ranks = ts
            .into_iter()
            .map(|t| Runtime::start(t as Arc<dyn Transport>, config.clone()))
            .collect::<Result<_, _>>()?;
        Ok(LocalCluster { hub, ranks })
    }

    /// Starts `nodes.len()` ranks with `config`, rank `r` said to run on
    /// node `nodes[r]` (as the transport would learn it), to try
    /// node-aware placement (checkpoint partners and groups) and node
    /// failures in one process. Each node has a disk of its own: with a
    /// `replica_dir`, node `n`'s ranks keep their replica files under
    /// `replica_dir/node-<n>`, where no rank of another node looks.
    pub fn with_nodes(nodes: Vec<u64>, config: Config) -> Result<Self, StartError> {
        let (hub, ts) = LoopbackHub::with_nodes(nodes.clone());
        let ranks = ts
            .into_iter()
            .zip(nodes)
            .map(|(t, node)| {
                let mut c = config.clone();
                c.replica_dir = c.replica_dir.map(|d| d.join(format!("node-{node}")));
                Runtime::start(t as Arc<dyn Transport>, c)
            })
            .collect::<Result<_, _>>()?;
        Ok(LocalCluster { hub, ranks })
    }

    /// The runtime of `rank`.
    pub fn rank(&self, rank: u32) -> &Runtime {
        &self.ranks[rank as usize]
    }

    /// Every runtime, by rank.
    pub fn ranks(&self) -> &[Runtime] {
        &self.ranks
    }

    /// Simulates the crash of `rank`: its links drop and its data vanishes.
    pub fn kill(&self, rank: u32) {
        self.hub.kill(Rank(rank));
    }

    /// Finalizes every rank together (one by one would wait on each other).
    pub fn shutdown(mut self) -> Result<(), taskfold_core::ReduceError> {
        self.shutdown_all()
    }

    fn shutdown_all(&mut self) -> Result<(), taskfold_core::ReduceError> {
        let pending: Vec<_> = self.ranks.iter().map(|r| r.begin_shutdown()).collect();
        let mut result = Ok(());
        for (r, rx) in self.ranks.iter_mut().zip(pending).rev() {
            let res = r.finish_shutdown(rx);
            if result.is_ok() {
                result = res;
            }
        }
        result
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        let _ = self.shutdown_all();
    }
}
