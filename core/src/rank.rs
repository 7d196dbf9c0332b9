//! Ranks and groups.

use std::fmt;

/// A process of the job, numbered `0..size`. Rank 0 hosts the master.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rank(pub u32);

impl fmt::Display for Rank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {}", self.0)
    }
}

/// The ranks taking part in a reduction: any non-empty subset of the job,
/// kept sorted and without duplicates. Paths ([`crate::RankSet`]) index the
/// group's members by position, so a 2-rank group of a 65,536-rank job costs
/// 8 bytes per path, not 8 KiB.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Group {
    members: Vec<Rank>,
}

/// Why a list of ranks is not a valid group.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    /// A group needs at least one rank.
    #[error("a group needs at least one rank")]
    Empty,
    /// A member is not a rank of the job.
    #[error("rank {rank} is not part of the job (size {size})")]
    OutOfRange {
        /// The offending rank.
        rank: u32,
        /// The job's size.
        size: u32,
    },
    /// A rank appears twice.
    #[error("rank {0} appears twice in the group")]
    Duplicate(u32),
}

impl Group {
    /// The whole job, ranks `0..size`.
    pub fn world(size: u32) -> Self {
        Group {
            members: (0..size).map(Rank).collect(),
        }
    }

    /// A group of the given ranks of a job of `size` ranks.
    pub fn new(ranks: impl IntoIterator<Item = u32>, size: u32) -> Result<Self, GroupError> {
        let mut members: Vec<Rank> = ranks.into_iter().map(Rank).collect();
        members.sort_unstable();
        if members.is_empty() {
            return Err(GroupError::Empty);
        }
        for w in members.windows(2) {
            if w[0] == w[1] {
                return Err(GroupError::Duplicate(w[0].0));
            }
        }
        if let Some(r) = members.iter().find(|r| r.0 >= size) {
            return Err(GroupError::OutOfRange { rank: r.0, size });
        }
        Ok(Group { members })
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Always false: a group is never empty.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Members in increasing order.
    pub fn members(&self) -> &[Rank] {
        &self.members
    }

    /// Position of `rank` in the group, if it is a member.
    pub fn index_of(&self, rank: Rank) -> Option<usize> {
        self.members.binary_search(&rank).ok()
    }

    /// True if `rank` is a member.
    pub fn contains(&self, rank: Rank) -> bool {
        self.index_of(rank).is_some()
    }

    /// The member at position `index`.
    pub fn rank_at(&self, index: usize) -> Rank {
        self.members[index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_validation() {
        assert_eq!(Group::new([], 4), Err(GroupError::Empty));
        assert_eq!(Group::new([1, 1], 4), Err(GroupError::Duplicate(1)));
        assert_eq!(
            Group::new([5], 4),
            Err(GroupError::OutOfRange { rank: 5, size: 4 })
        );
        let g = Group::new([3, 1], 4).unwrap();
        assert_eq!(g.members(), &[Rank(1), Rank(3)]);
        assert_eq!(g.index_of(Rank(3)), Some(1));
        assert_eq!(g.index_of(Rank(2)), None);
    }
}
