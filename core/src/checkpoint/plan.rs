//! Retrieval planning: from which level a restarted rank reads its state.
//!
//! A piece on a local disk (L1, L2, L3) survives when its holder's node
//! survived; another rank's piece reaches the restarted rank only through
//! that rank's process, so it also needs the holder alive. The restarted
//! rank's own disk needs only its node (it restarts in place). L4 lives on
//! the shared directory, which survives the ranks and nodes.
//!
//! - L1 survives when the rank's node did.
//! - L2 survives when its partner serves it.
//! - L3 survives when at most `m` of its group's `k + m` shards are lost.
//! - L4 survives when the job has a shared directory.
//!
//! Knowing the failure ([`Failure`]), a rank goes straight to the cheapest
//! level that survived ([`Placement::cheapest`]). FTI-style retrieval
//! instead probes L1, L2, L3, L4 in turn, and every level probed in vain
//! costs a detection timeout ([`Placement::probe`] says which).

use super::{Level, Placement};
use std::collections::BTreeSet;

/// What a failure destroyed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Failure {
    /// Ranks whose process died (a rank on a dead node is dead too).
    pub ranks: BTreeSet<u32>,
    /// Nodes lost with their local disks.
    pub nodes: BTreeSet<u64>,
}

/// How FTI-style retrieval fares: the levels it probes in vain, in order,
/// before it finds one (each costs a detection timeout).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Levels probed that are gone.
    pub in_vain: Vec<Level>,
    /// The level it reads from, if any survived.
    pub found: Option<Level>,
}

impl Failure {
    /// A failure of these ranks and nodes.
    pub fn new(ranks: impl IntoIterator<Item = u32>, nodes: impl IntoIterator<Item = u64>) -> Self {
        Failure {
            ranks: ranks.into_iter().collect(),
            nodes: nodes.into_iter().collect(),
        }
    }
}

impl Placement {
    /// Whether `holder`'s local disk can give `rank` its piece after
    /// `failure`: its node survived, and it is `rank` itself or alive.
    pub fn serves(&self, holder: u32, rank: u32, failure: &Failure) -> bool {
        let Some(node) = self.node(holder) else {
            return false;
        };
        !failure.nodes.contains(&node) && (holder == rank || !failure.ranks.contains(&holder))
    }

    /// Shards of `rank`'s L3 group that `rank` cannot get.
    fn l3_lost(&self, rank: u32, failure: &Failure) -> Option<(usize, usize)> {
        let g = self.group_of(rank)?;
        let lost = g
            .members
            .iter()
            .chain(&g.parity)
            .filter(|&&h| !self.serves(h, rank, failure))
            .count();
        Some((lost, g.parity.len()))
    }

    /// Whether `rank`'s piece at `level` survived `failure`.
    pub fn survives(&self, rank: u32, level: Level, failure: &Failure) -> bool {
        if rank as usize >= self.ranks() {
            return false;
        }
        match level {
            Level::L1 => self.serves(rank, rank, failure),
            Level::L2 => self
                .partner(rank)
                .is_some_and(|p| self.serves(p, rank, failure)),
            Level::L3 => self
                .l3_lost(rank, failure)
                .is_some_and(|(lost, m)| lost <= m),
            Level::L4 => self.shared(),
        }
    }

    /// The levels of `rank`'s pieces that survived `failure`, cheapest
    /// first.
    pub fn surviving(&self, rank: u32, failure: &Failure) -> Vec<Level> {
        Level::ALL
            .into_iter()
            .filter(|&l| self.survives(rank, l, failure))
            .collect()
    }

    /// The cheapest level of `rank`'s pieces that survived `failure`:
    /// where a restarted `rank` reads, with no probe of a level that is
    /// gone. `None` if none did.
    pub fn cheapest(&self, rank: u32, failure: &Failure) -> Option<Level> {
        Level::ALL
            .into_iter()
            .find(|&l| self.survives(rank, l, failure))
    }

    /// FTI-style retrieval of `rank`'s state: the levels it would probe
    /// in vain (L1, L2, L3, L4 in turn) and the one it would find.
    pub fn probe(&self, rank: u32, failure: &Failure) -> Probe {
        let found = self.cheapest(rank, failure);
        let in_vain = Level::ALL
            .into_iter()
            .take_while(|&l| Some(l) != found)
            .collect();
        Probe { in_vain, found }
    }
}

#[cfg(test)]
mod tests;
