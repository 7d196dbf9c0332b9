//! Who is in the job, as one rank knows it: every rank's current
//! incarnation and node, which ranks are dead, and which rank runs the
//! master. One [`Membership`] per rank, which every part of the runtime
//! reads (the master, the failure detector, the worker, the standby, the
//! checkpoint engine); see the book's Architecture chapter, Membership.
//!
//! It changes only by [`Change`]s, each about one incarnation of one rank:
//!
//! ```text
//!                 Failed(r, i)                      Replaced(r, j > i, node)
//! Live(i, node) ──────────────► Dead(i, node) ──────────────────────────► Live(j, node')
//!      │  └─ Unreachable(r, i): Live, but this rank's link to it broke ──┘
//!      └──────────────── Replaced(r, j > i, node) ───────────────────────► Live(j, node')
//! ```
//!
//! A change about an older incarnation than the one known is stale and
//! changes nothing, so notices that cross (a death reported after its
//! replacement was let in) never undo a newer fact, and every rank that
//! hears the master's notices, in any order that keeps each rank's own
//! notices in order, from a snapshot the master took at any point (a
//! replacement's start-up table), ends with the master's view.

use crate::rankset::RankSet;

/// One rank, as a member of the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its current process: 0 for the one started with the job, `k` for
    /// its `k`-th replacement.
    pub incarnation: u32,
    /// The node that process runs on (an opaque token; 0: unknown).
    pub node: u64,
    /// Where it stands.
    pub status: Status,
}

/// Where a member stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Its process runs, as far as this rank knows.
    Live,
    /// Alive as far as the master knows, but this rank's link to it
    /// broke: this rank asks it for nothing until the master decides.
    Unreachable,
    /// Declared failed by the master: fenced, never trusted again. Its
    /// rank comes back only as a newer incarnation.
    Dead,
}

/// A fact about one incarnation of one rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The master declared incarnation `incarnation` of `rank` failed.
    Failed {
        /// The rank.
        rank: u32,
        /// The incarnation that died.
        incarnation: u32,
    },
    /// This rank's link to incarnation `incarnation` of `rank` broke.
    Unreachable {
        /// The rank.
        rank: u32,
        /// The incarnation whose link broke.
        incarnation: u32,
    },
    /// Incarnation `incarnation` of `rank`, on `node`, was let in: it
    /// replaces every older one.
    Replaced {
        /// The rank.
        rank: u32,
        /// The replacement's incarnation.
        incarnation: u32,
        /// Its node.
        node: u64,
    },
    /// The master moved to `to` for the `term`-th time (a standby took
    /// over from a dead master; the dead master's death is its own
    /// [`Change::Failed`]). A move of an older term is stale.
    MasterMoved {
        /// The rank that runs the master now.
        to: u32,
        /// Takeovers so far, this one included (the job starts in term 0).
        term: u32,
    },
}

/// Every rank's membership, as one rank knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Membership {
    members: Vec<Member>,
    master: u32,
    /// Takeovers of the master so far.
    term: u32,
    /// Changes that changed something, counted: a reader that cached what
    /// it derived from the view knows when to derive again.
    version: u64,
}

impl Membership {
    /// A job of `nodes.len()` ranks, all live, rank `r` on `nodes[r]` as
    /// incarnation `incarnations[r]` (0 where the slice is short), the
    /// master on `master`.
    pub fn new(nodes: &[u64], incarnations: &[u32], master: u32) -> Self {
        let members = nodes
            .iter()
            .enumerate()
            .map(|(r, &node)| Member {
                incarnation: incarnations.get(r).copied().unwrap_or(0),
                node,
                status: Status::Live,
            })
            .collect();
        Membership {
            members,
            master,
            term: 0,
            version: 0,
        }
    }

    /// A job of `size` ranks on unknown nodes, all incarnation 0, the
    /// master on rank 0.
    pub fn fresh(size: u32) -> Self {
        Membership::new(&vec![0; size as usize], &[], 0)
    }

    /// Applies `c`; true if it changed something (a stale or repeated
    /// change, or one about a rank outside the job, does not).
    pub fn apply(&mut self, c: Change) -> bool {
        let changed = match c {
            Change::MasterMoved { to, term } => {
                let moved = term > self.term && (to as usize) < self.members.len();
                if moved {
                    (self.master, self.term) = (to, term);
                }
                moved
            }
            Change::Failed { rank, incarnation } => {
                self.set_status(rank, incarnation, Status::Dead)
            }
            Change::Unreachable { rank, incarnation } => match self.members.get(rank as usize) {
                Some(m) if m.status == Status::Live => {
                    self.set_status(rank, incarnation, Status::Unreachable)
                }
                _ => false,
            },
            Change::Replaced {
                rank,
                incarnation,
                node,
            } => match self.members.get_mut(rank as usize) {
                Some(m) if incarnation > m.incarnation => {
                    *m = Member {
                        incarnation,
                        node,
                        status: Status::Live,
                    };
                    true
                }
                _ => false,
            },
        };
        if changed {
            self.version += 1;
        }
        changed
    }

    /// Sets `rank`'s status if `incarnation` is the one known (a change
    /// about an older one is stale; one about a newer one not let in yet
    /// is early, and the replacement's admission decides).
    fn set_status(&mut self, rank: u32, incarnation: u32, status: Status) -> bool {
        match self.members.get_mut(rank as usize) {
            Some(m) if m.incarnation == incarnation && m.status != status => {
                if m.status == Status::Dead {
                    return false; // dead is final for an incarnation
                }
                m.status = status;
                true
            }
            _ => false,
        }
    }

    /// Ranks in the job.
    pub fn size(&self) -> u32 {
        self.members.len() as u32
    }

    /// Changes applied so far.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// `rank` as a member (`None` outside the job).
    pub fn member(&self, rank: u32) -> Option<&Member> {
        self.members.get(rank as usize)
    }

    /// The rank that runs the master.
    pub fn master(&self) -> u32 {
        self.master
    }

    /// Takeovers of the master so far (the term of the current master).
    pub fn term(&self) -> u32 {
        self.term
    }

    /// Whether the master declared `rank` failed (and no replacement was
    /// let in since). A rank outside the job counts as dead.
    pub fn is_dead(&self, rank: u32) -> bool {
        self.member(rank).is_none_or(|m| m.status == Status::Dead)
    }

    /// Whether this rank should ask `rank` for nothing: dead, or its link
    /// from this rank broke.
    pub fn is_unreachable(&self, rank: u32) -> bool {
        self.member(rank).is_none_or(|m| m.status != Status::Live)
    }

    /// `rank`'s current incarnation (0 outside the job).
    pub fn incarnation(&self, rank: u32) -> u32 {
        self.member(rank).map_or(0, |m| m.incarnation)
    }

    /// The ranks declared failed.
    pub fn dead(&self) -> RankSet {
        self.select(|m| m.status == Status::Dead)
    }

    /// The ranks dead or unreachable from this rank.
    pub fn unreachable(&self) -> RankSet {
        self.select(|m| m.status != Status::Live)
    }

    /// The ranks not declared failed, in order.
    pub fn live(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.size()).filter(|&r| !self.is_dead(r))
    }

    fn select(&self, f: impl Fn(&Member) -> bool) -> RankSet {
        let mut s = RankSet::new();
        for (r, m) in self.members.iter().enumerate() {
            if f(m) {
                s.insert(r);
            }
        }
        s
    }

    /// `rank`'s node token (0: unknown, or outside the job).
    pub fn node(&self, rank: u32) -> u64 {
        self.member(rank).map_or(0, |m| m.node)
    }

    /// Every rank's node, by rank.
    pub fn nodes(&self) -> Vec<u64> {
        self.members.iter().map(|m| m.node).collect()
    }

    /// Every rank's incarnation, by rank.
    pub fn incarnations(&self) -> Vec<u32> {
        self.members.iter().map(|m| m.incarnation).collect()
    }

    /// The rank that takes over if the current master dies, as this rank
    /// sees it ([`crate::failover::standby_of`]): a rank this rank cannot
    /// reach is passed over as a dead one is. A rank whose link to a dead
    /// rank broke before any master declared it dead (the master died
    /// too) would otherwise turn to it, wait for its pings in vain, and
    /// meanwhile follow another master than the ranks that knew.
    ///
    /// "On another node" means another node than rank 0's — the job's
    /// first master, whatever master runs now — and the current master
    /// is passed over as a dead rank. A choice relative to the current
    /// master would depend on the way each rank came to it: a rank that
    /// turned to a standby which was dead already (it had not heard of
    /// that death) would then choose from that rank's node, and the ranks
    /// would follow different masters. Relative to one fixed node, the
    /// choice depends only on the ranks each knows dead, and a rank that
    /// knows fewer comes to the same choice once the ranks it tried first
    /// refuse it.
    pub fn standby(&self, nodes: Option<&[u64]>, policy: crate::settings::Standby) -> Option<u32> {
        let incarnations = self.incarnations();
        let mut gone = self.unreachable();
        gone.insert(self.master() as usize);
        crate::failover::standby_of(0, self.size(), &gone, &incarnations, nodes, policy)
    }

    /// Replacements let in so far: the sum of every rank's incarnation
    /// (each replacement is one incarnation more of one rank).
    pub fn replacements(&self) -> u64 {
        self.members.iter().map(|m| u64::from(m.incarnation)).sum()
    }
}

#[cfg(test)]
mod tests;
