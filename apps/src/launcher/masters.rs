//! Which rank runs the master as the job goes: the launcher follows the
//! ranks' own rule for who takes over.

use super::nodes;

/// Which rank runs the master: rank 0, then each standby that took over
/// from a dead one, as the ranks choose it
/// ([`taskfold_core::failover::standby_of`]).
pub(super) struct Masters {
    pub(super) current: u32,
    size: u32,
    dead: taskfold_core::RankSet,
    /// Replacements started per rank: the ranks' incarnations.
    incarnations: Vec<u32>,
    nodes: Option<Vec<u64>>,
    policy: taskfold::Standby,
}

impl Masters {
    pub(super) fn new(
        size: u32,
        cluster: Option<&nodes::Cluster>,
        policy: taskfold::Standby,
    ) -> Self {
        let nodes = cluster.map(|c| (0..size).map(|r| c.node_of(r) as u64).collect());
        Masters {
            current: 0,
            size,
            dead: taskfold_core::RankSet::new(),
            incarnations: vec![0; size as usize],
            nodes,
            policy,
        }
    }

    /// A replacement of `rank` was started: it may take over again.
    pub(super) fn revived(&mut self, rank: u32) {
        self.dead.remove(rank as usize);
        if let Some(i) = self.incarnations.get_mut(rank as usize) {
            *i += 1;
        }
    }

    /// `rank` died: the standby that takes over, if it was the master and
    /// there is one (`Err(())` if it was the master and there is none).
    pub(super) fn died(&mut self, rank: u32) -> Result<Option<u32>, ()> {
        self.dead.insert(rank as usize);
        if rank != self.current {
            return Ok(None);
        }
        let nodes = self.nodes.as_deref();
        let next = taskfold_core::failover::standby_of(
            rank,
            self.size,
            &self.dead,
            &self.incarnations,
            nodes,
            self.policy,
        );
        let next = next.ok_or(())?;
        self.current = next;
        Ok(Some(next))
    }
}
