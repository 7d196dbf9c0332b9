//! A master that dies: which rank takes over, and how the new master
//! rebuilds every live reduction from what the workers hold.
//!
//! The standby keeps no copy of the master's state while the master
//! lives: it costs nothing until it is needed. When the master dies, every
//! rank — the standby included — declares it lost ([`crate::watch`]), and
//! turns to the standby ([`standby_of`]: every rank computes the same rank
//! from the same dead set and node table). Each rank first lets every task
//! the dead master gave it end, then reports to the new master what it
//! holds ([`crate::wire::Rejoin`]): per live reduction its join and the
//! path its data now holds. The new master waits for every live rank's
//! report ([`Takeover`]; a rank that does not report is declared failed by
//! the failure detector, as any silent rank is), then rebuilds each
//! reduction's queue with [`reconcile`] and goes on, the dead master's
//! own contributions recovered from their buddies' copies as any dead
//! rank's are (see the book's Fault tolerance chapter, A master that
//! dies).

use crate::rankset::RankSet;
use crate::schedule::Entry;
use crate::settings::Standby;

/// The rank that takes over if `master` dies: among the live ranks (not
/// in `dead`, not `master`) on another node than `master`'s, the one of
/// the oldest incarnation (`incarnations[r]`, 0 where the slice is short),
/// the lowest rank among equals; with [`Standby::On`], if there is none,
/// the same choice among every live rank. `nodes` holds each rank's node
/// (`None`: unknown, as on one node). `None` if no rank qualifies or the
/// policy is [`Standby::Off`].
///
/// Why the oldest incarnation first: a replacement let in just before the
/// master died is known as live to the ranks the master told, and as dead
/// to the others; were it the lowest rank, the two sides would turn to
/// different standbys. Ranking it after every older incarnation makes
/// both sides choose the same rank whenever some live rank is older than
/// it, and a replacement that is still restoring never becomes the master
/// while an older rank could.
pub fn standby_of(
    master: u32,
    size: u32,
    dead: &RankSet,
    incarnations: &[u32],
    nodes: Option<&[u64]>,
    policy: Standby,
) -> Option<u32> {
    if policy == Standby::Off {
        return None;
    }
    let live = (0..size).filter(|&r| r != master && !dead.contains(r as usize));
    let oldest = |ranks: &mut dyn Iterator<Item = u32>| {
        ranks.min_by_key(|&r| (incarnations.get(r as usize).copied().unwrap_or(0), r))
    };
    let node = |r: u32| nodes.and_then(|t| t.get(r as usize).copied());
    let elsewhere = match node(master) {
        Some(own) => oldest(&mut live.clone().filter(|&r| node(r).is_some_and(|n| n != own))),
        None => None,
    };
    match (elsewhere, policy) {
        (Some(r), _) => Some(r),
        (None, Standby::On) => oldest(&mut live.clone()),
        (None, _) => None,
    }
}

/// What one member reports of one live reduction to a new master.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    /// The member's group position.
    pub index: usize,
    /// The group positions folded into its data.
    pub path: RankSet,
    /// Whether it still holds that data (a released provider does not).
    pub has_value: bool,
}

/// A reduction's queue, rebuilt from its members' reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rebuilt {
    /// The positions whose originals are in (reported, or folded into a
    /// reported path): the others have not joined yet, or died.
    pub joined: RankSet,
    /// The ready messages: each maximal path with its holder, and a
    /// recovering single for every member that joined but whose data was
    /// lost with a rank that died (it reads its original again).
    pub entries: Vec<Entry>,
    /// Holders of data (several originals) already folded into another's:
    /// they are released.
    pub stale: Vec<usize>,
    /// Positions whose originals are folded into a reported path but
    /// that did not report: a dead rank's, or one whose rank died and
    /// was replaced after its original was folded in (the replacement
    /// has not joined since). Such a replacement's join stands in only
    /// ([`crate::schedule::Schedule::stand_in`]).
    pub unreported: RankSet,
}

/// Reports that cannot come from the protocol (untrusted input: the
/// reduction ends with an error naming it).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RebuildError {
    /// A position or path outside the group.
    #[error("group position {0} is outside the group")]
    OutOfGroup(usize),
    /// Two reports from one position.
    #[error("group position {0} reported twice")]
    Duplicate(usize),
    /// A member's data does not hold its own original.
    #[error("the data of group position {0} does not hold its own original")]
    NotOwn(usize),
    /// Two paths share some originals without one holding the other: some
    /// original would be folded twice.
    #[error("the paths of group positions {0} and {1} overlap")]
    Overlap(usize, usize),
}

/// Rebuilds a reduction's queue over `n` positions from its members'
/// reports. Every fold joins two disjoint paths, and a provider's path
/// stays a part of its receiver's, so the paths reported form a laminar
/// family: the maximal ones are the data to fold on, the others were
/// folded into them already. A member that joined and whose position is
/// in no maximal path lost its data with a dead rank: it re-enters as a
/// recovering single. Positions of members that did not report (not
/// joined yet, or dead) are left to the scheduler: a dead one is recovered
/// from its copies as usual ([`crate::schedule::Schedule::fail`]).
pub fn reconcile(n: usize, holdings: &[Holding]) -> Result<Rebuilt, RebuildError> {
    let mut seen = RankSet::new();
    for h in holdings {
        if h.index >= n || h.path.iter().any(|k| k >= n) {
            return Err(RebuildError::OutOfGroup(h.index));
        }
        if !seen.insert(h.index) {
            return Err(RebuildError::Duplicate(h.index));
        }
        if !h.path.contains(h.index) {
            return Err(RebuildError::NotOwn(h.index));
        }
    }
    let mut with_data: Vec<&Holding> = holdings.iter().filter(|h| h.has_value).collect();
    // Largest first: a path is maximal iff no accepted path holds it.
    with_data.sort_by_key(|h| (std::cmp::Reverse(h.path.len()), h.index));
    let mut accepted: Vec<&Holding> = Vec::new();
    let mut stale = Vec::new();
    for h in with_data {
        match accepted.iter().find(|a| !a.path.is_disjoint(&h.path)) {
            None => accepted.push(h),
            Some(a) if h.path.is_subset(&a.path) => {
                if h.path.len() > 1 {
                    stale.push(h.index);
                }
            }
            Some(a) => return Err(RebuildError::Overlap(a.index, h.index)),
        }
    }
    let covered = accepted
        .iter()
        .fold(RankSet::new(), |acc, a| acc.union(&a.path));
    let mut entries: Vec<Entry> = accepted
        .iter()
        .map(|a| Entry {
            index: a.index,
            path: a.path.clone(),
            recovering: false,
        })
        .collect();
    for h in holdings {
        if !covered.contains(h.index) {
            entries.push(Entry {
                index: h.index,
                path: RankSet::single(h.index),
                recovering: true,
            });
        }
    }
    stale.sort_unstable();
    let unreported = covered.iter().filter(|&i| !seen.contains(i)).collect();
    Ok(Rebuilt {
        joined: covered.union(&seen),
        entries,
        stale,
        unreported,
    })
}

/// A new master's wait for every live rank's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Takeover {
    /// Reports still to come from these ranks (global ranks).
    Awaiting {
        /// The live ranks that have not reported yet.
        waiting: RankSet,
    },
    /// Every live rank reported (or died): the reductions are rebuilt and
    /// the master runs.
    Running,
}

impl Takeover {
    /// A takeover of a job of `size` ranks: every rank not in `dead`
    /// reports, the new master's own included.
    pub fn new(size: u32, dead: &RankSet) -> Self {
        let waiting: RankSet = (0..size as usize).filter(|&r| !dead.contains(r)).collect();
        if waiting.is_empty() {
            return Takeover::Running;
        }
        Takeover::Awaiting { waiting }
    }

    /// Whether the master still waits for reports.
    pub fn is_awaiting(&self) -> bool {
        matches!(self, Takeover::Awaiting { .. })
    }

    /// `rank` reported, or (`died`) was declared failed: true if that ends
    /// the wait (the reductions are to be rebuilt now, once).
    pub fn heard(&mut self, rank: u32) -> bool {
        let Takeover::Awaiting { waiting } = self else {
            return false;
        };
        let rest: RankSet = waiting.iter().filter(|&r| r != rank as usize).collect();
        if !rest.is_empty() {
            *waiting = rest;
            return false;
        }
        *self = Takeover::Running;
        true
    }
}

#[cfg(test)]
mod tests;
