//! Which rank runs the master as the job goes: the launcher follows the
//! ranks' own rule for who takes over.

use super::nodes;
use std::os::unix::process::ExitStatusExt;
use std::process::Child;

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

/// Whether the job still has a master that a replacement would register
/// with: the current master's process (`current`, among `children`) runs,
/// or was killed by a signal, so that a standby takes over (its death may
/// not have been seen yet, when two ranks die at once). Not once the
/// master exited by itself: the job is over (it finalized), and a
/// replacement would find none.
pub(super) fn leads(children: &mut [(u32, u32, Child)], current: u32) -> bool {
    children.iter_mut().any(|c| {
        c.0 == current
            && match c.2.try_wait() {
                Ok(None) => true,
                Ok(Some(status)) => status.signal().is_some(),
                Err(_) => false,
            }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A child that ran `script` to its end.
    fn ended(script: &str) -> Child {
        let mut c = Command::new("sh").args(["-c", script]).spawn().unwrap();
        let _ = c.wait();
        c
    }

    #[test]
    fn a_master_killed_as_a_rank_dies_still_leads_one_that_exited_does_not() {
        let running = Command::new("sleep").arg("30").spawn().unwrap();
        let mut children = vec![(0, 0, running), (1, 0, ended("exit 3"))];
        assert!(leads(&mut children, 0), "a running master");
        assert!(!leads(&mut children, 1), "a master that exited by itself");
        children.push((2, 0, ended("kill -9 $$")));
        assert!(
            leads(&mut children, 2),
            "a master killed: its standby takes over"
        );
        children.push((3, 0, ended("exit 0")));
        assert!(!leads(&mut children, 3), "the job is over");
        assert!(!leads(&mut children, 4), "no such rank");
        for c in &mut children {
            let _ = c.2.kill();
            let _ = c.2.wait();
        }
    }
}
