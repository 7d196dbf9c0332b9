//! Version selection: which checkpoint version to restore.
//!
//! A rank restores the newest version it has *complete* at some level
//! (for L3: its group has enough shards of that version), from the
//! cheapest level holding it. A global restart restores the newest
//! version that every rank completed, so that all ranks resume from one
//! consistent cut; an older version some rank lacks is no cut at all.

use super::{Intervals, Level};
use std::collections::{BTreeMap, BTreeSet};

/// A piece found (or inferred) for a rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    /// The rank whose state it is.
    pub owner: u32,
    /// Its version.
    pub version: u64,
    /// The level holding it.
    pub level: Level,
    /// Whether it can be restored (written to the end and verified, or,
    /// for L3, enough of its group's shards present).
    pub complete: bool,
}

/// The newest version complete for `rank`, and the cheapest level holding
/// it complete.
pub fn newest_for(rank: u32, found: &[Found]) -> Option<(u64, Level)> {
    found
        .iter()
        .filter(|f| f.owner == rank && f.complete)
        .map(|f| (f.version, std::cmp::Reverse(f.level)))
        .max()
        .map(|(v, std::cmp::Reverse(l))| (v, l))
}

/// The newest version that every rank `0..ranks` has complete: the cut a
/// global restart resumes from. `None` if there is none (a rank has no
/// complete piece of any version every other rank also has).
pub fn newest_common(ranks: u32, found: &[Found]) -> Option<u64> {
    let mut owners: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
    for f in found.iter().filter(|f| f.complete && f.owner < ranks) {
        owners.entry(f.version).or_default().insert(f.owner);
    }
    owners
        .iter()
        .rev()
        .find(|(_, o)| o.len() == ranks as usize)
        .map(|(&v, _)| v)
}

/// The newest version at most `last` that one of the `surviving` levels
/// holds under `intervals`, and the cheapest of those levels holding it:
/// what a restarted rank reads, without listing any directory. Every
/// version up to `last` is taken as written completely.
pub fn newest_restorable(
    intervals: &Intervals,
    surviving: &[Level],
    last: u64,
) -> Option<(u64, Level)> {
    surviving
        .iter()
        .filter_map(|&l| intervals.newest(l, last).map(|v| (v, std::cmp::Reverse(l))))
        .max()
        .map(|(v, std::cmp::Reverse(l))| (v, l))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(owner: u32, version: u64, level: Level, complete: bool) -> Found {
        Found {
            owner,
            version,
            level,
            complete,
        }
    }

    #[test]
    fn the_newest_complete_version_from_the_cheapest_level() {
        let found = [
            f(0, 3, Level::L4, true),
            f(0, 3, Level::L2, true),
            f(0, 4, Level::L1, false),
            f(0, 2, Level::L1, true),
            f(1, 9, Level::L1, true),
        ];
        assert_eq!(newest_for(0, &found), Some((3, Level::L2)));
        assert_eq!(newest_for(1, &found), Some((9, Level::L1)));
        assert_eq!(newest_for(2, &found), None);
    }

    #[test]
    fn a_global_restart_takes_the_newest_version_every_rank_has() {
        let found = [
            f(0, 5, Level::L1, true),
            f(1, 5, Level::L1, false),
            f(0, 4, Level::L3, true),
            f(1, 4, Level::L4, true),
            f(2, 4, Level::L1, true),
            f(2, 5, Level::L1, true),
            f(7, 6, Level::L1, true),
        ];
        assert_eq!(newest_common(3, &found), Some(4));
        assert_eq!(newest_common(4, &found), None);
        assert_eq!(newest_common(2, &found[..2]), None);
    }

    #[test]
    fn restorable_versions_follow_the_intervals() {
        let iv = Intervals([1, 2, 5, 10]);
        let all = Level::ALL;
        assert_eq!(newest_restorable(&iv, &all, 17), Some((17, Level::L1)));
        assert_eq!(
            newest_restorable(&iv, &[Level::L3, Level::L4], 17),
            Some((15, Level::L3))
        );
        assert_eq!(
            newest_restorable(&iv, &[Level::L2, Level::L4], 20),
            Some((20, Level::L2))
        );
        assert_eq!(newest_restorable(&iv, &[], 20), None);
    }

    proptest::proptest! {
        #[test]
        fn the_common_version_is_complete_everywhere_and_newest(
            pieces in proptest::collection::vec((0u32..4, 0u64..6, 1u8..5, proptest::bool::ANY), 0..40),
        ) {
            let found: Vec<Found> = pieces
                .iter()
                .map(|&(o, v, l, c)| f(o, v, Level::from_number(l).unwrap(), c))
                .collect();
            let has = |r: u32, v: u64| found.iter().any(|x| x.owner == r && x.version == v && x.complete);
            let brute = (0..6u64).rev().find(|&v| (0..4).all(|r| has(r, v)));
            proptest::prop_assert_eq!(newest_common(4, &found), brute);
            for r in 0..4 {
                let got = newest_for(r, &found);
                let newest = (0..6u64).rev().find(|&v| has(r, v));
                proptest::prop_assert_eq!(got.map(|g| g.0), newest);
                if let Some((v, l)) = got {
                    let cheapest = found.iter().filter(|x| x.owner == r && x.version == v && x.complete).map(|x| x.level).min();
                    proptest::prop_assert_eq!(Some(l), cheapest);
                }
            }
        }
    }
}
