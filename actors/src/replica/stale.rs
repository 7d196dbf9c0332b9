//! Whether a replica file found on disk may be stale: the record of when
//! each reduction key last ended, and the judgement of a file against it.
//!
//! A rank's disk copy of its original is named by key and owner
//! (`rank-<r>/<key>-<r>.replica`), so a file left by an earlier reduction
//! with the same key, or an earlier job, lies where the current one would.
//! Whoever takes a dead rank's file it was not told about — the master
//! (`master::infer`) or a rank of the dead master's node (`adopt`) — takes
//! it only if it was written after every reduction with that key that
//! could have left it ended here, and before the rank was declared failed
//! ([`judge`]). [`KeyEnds`] gives that bound.

use super::disk::FileFacts;
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::SystemTime;
use taskfold_core::replica::{announced_len, HEADER_LEN};

/// Entries kept in the record of ended reductions.
pub(crate) const ENDS_LIMIT: usize = 4096;

/// How one reduction ended, as far as stale files go.
#[derive(Clone, Debug)]
struct KeyEnd {
    at: SystemTime,
    /// Members whose own announcement had not arrived when it ended: `None`
    /// while it still has not (its write may land at any time), `Some(t)`
    /// once it arrived late at `t` (its writes all happened before `t`).
    late: HashMap<u32, Option<SystemTime>>,
}

/// The bounded record of the last end of each reduction key.
#[derive(Debug)]
pub(crate) struct KeyEnds {
    map: HashMap<u64, KeyEnd>,
    order: VecDeque<u64>,
    limit: usize,
    /// The latest end (or late announcement) of an evicted entry.
    floor: SystemTime,
    /// Ranks that had a write in flight in an evicted entry.
    unsure: HashSet<u32>,
}

impl KeyEnds {
    pub(crate) fn new(limit: usize, floor: SystemTime) -> Self {
        KeyEnds {
            map: HashMap::new(),
            order: VecDeque::new(),
            limit: limit.max(1),
            floor,
            unsure: HashSet::new(),
        }
    }

    /// Reduction `key` ended at `at`; `unannounced` are the members whose
    /// own announcement had not arrived. Replaces the record of the
    /// previous reduction with that key: a member that announced this one
    /// had ended (and sealed) the previous one before it started this one.
    pub(crate) fn ended(
        &mut self,
        key: u64,
        at: SystemTime,
        unannounced: impl IntoIterator<Item = u32>,
    ) {
        let end = KeyEnd {
            at,
            late: unannounced.into_iter().map(|r| (r, None)).collect(),
        };
        if self.map.insert(key, end).is_some() {
            self.order.retain(|&k| k != key);
        }
        self.order.push_back(key);
        while self.map.len() > self.limit {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(e) = self.map.remove(&old) {
                self.floor = self.floor.max(e.at);
                for (rank, late) in e.late {
                    match late {
                        Some(t) => self.floor = self.floor.max(t),
                        None => {
                            self.unsure.insert(rank);
                        }
                    }
                }
            }
        }
    }

    /// Whether an end of `key` is on record (not evicted).
    pub(crate) fn seen(&self, key: u64) -> bool {
        self.map.contains_key(&key)
    }

    /// `rank`'s announcement for the ended reduction `key` arrived at `at`:
    /// every write it made for that key happened before.
    pub(crate) fn late_announcement(&mut self, key: u64, rank: u32, at: SystemTime) {
        if let Some(slot) = self.map.get_mut(&key).and_then(|e| e.late.get_mut(&rank)) {
            *slot = Some(at);
        }
    }

    /// The moment after which a file of `rank` for `key` cannot be stale;
    /// `None` if none is known (a write of an earlier reduction may land
    /// at any time).
    pub(crate) fn not_before(&self, key: u64, rank: u32) -> Option<SystemTime> {
        if self.unsure.contains(&rank) {
            return None;
        }
        match self.map.get(&key) {
            None => Some(self.floor),
            Some(e) => match e.late.get(&rank) {
                Some(None) => None,
                Some(Some(t)) => Some(self.floor.max(e.at).max(*t)),
                None => Some(self.floor.max(e.at)),
            },
        }
    }
}

/// Whether the file described by `facts` may be taken as the dead rank's
/// original of the current reduction (see the module's documentation).
/// `Err` says why not.
pub(crate) fn judge(
    facts: &FileFacts,
    not_before: Option<SystemTime>,
    dead_at: SystemTime,
) -> Result<(), String> {
    let Some(not_before) = not_before else {
        return Err(
            "an earlier reduction with this key ended before the rank's \
                    announcement of it arrived: the file may be from that reduction"
                .into(),
        );
    };
    if facts.modified <= not_before {
        return Err(format!(
            "written at {}, not after {} (the job's start or the end of an earlier \
             reduction with this key): it may be stale",
            unix(facts.modified),
            unix(not_before)
        ));
    }
    if facts.modified > dead_at {
        return Err(format!(
            "written at {}, after the rank was declared failed at {}",
            unix(facts.modified),
            unix(dead_at)
        ));
    }
    match announced_len(&facts.header) {
        None => Err("not a replica file (bad header)".into()),
        Some(len) if len.checked_add(HEADER_LEN as u64) != Some(facts.len) => Err(format!(
            "its header announces {len} bytes but the file holds {}",
            facts.len.saturating_sub(HEADER_LEN as u64)
        )),
        Some(_) => Ok(()),
    }
}

fn unix(t: SystemTime) -> String {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => format!("{:.6}", d.as_secs_f64()),
        Err(_) => "before 1970".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + s)
    }

    fn facts(modified: SystemTime, payload: u64) -> FileFacts {
        let mut header = vec![0u8; HEADER_LEN];
        let body = vec![1u8; payload as usize];
        taskfold_core::replica::write_header(&mut header, &body);
        FileFacts {
            modified,
            len: HEADER_LEN as u64 + payload,
            header,
        }
    }

    #[test]
    fn a_file_written_between_the_bound_and_the_death_is_used() {
        assert_eq!(judge(&facts(t(10), 64), Some(t(5)), t(11)), Ok(()));
        // Written in the very instant of the declaration: still before it.
        assert_eq!(judge(&facts(t(11), 64), Some(t(5)), t(11)), Ok(()));
    }

    #[test]
    fn stale_files_are_refused() {
        // Older than the job or the previous reduction with the key, or
        // exactly as old: a coarse timestamp cannot tell them apart.
        assert!(judge(&facts(t(4), 64), Some(t(5)), t(11)).is_err());
        assert!(judge(&facts(t(5), 64), Some(t(5)), t(11)).is_err());
        // An earlier reduction's write may still have been in flight.
        assert!(judge(&facts(t(10), 64), None, t(11)).is_err());
    }

    #[test]
    fn files_written_after_the_death_are_refused() {
        assert!(judge(&facts(t(12), 64), Some(t(5)), t(11)).is_err());
    }

    #[test]
    fn bad_headers_and_lengths_are_refused() {
        let mut f = facts(t(10), 64);
        f.len -= 1; // truncated
        assert!(judge(&f, Some(t(5)), t(11))
            .unwrap_err()
            .contains("announces"));
        let mut f = facts(t(10), 64);
        f.header[0] = b'X';
        assert!(judge(&f, Some(t(5)), t(11)).unwrap_err().contains("header"));
        let mut f = facts(t(10), 0);
        f.header.truncate(3);
        assert!(judge(&f, Some(t(5)), t(11)).is_err());
    }

    #[test]
    fn the_bound_follows_the_ends_of_each_key() {
        let mut e = KeyEnds::new(8, t(1));
        // Never ended: the job's start.
        assert_eq!(e.not_before(7, 2), Some(t(1)));
        // Ended with rank 2 announced and rank 3 not.
        e.ended(7, t(20), [3]);
        assert_eq!(e.not_before(7, 2), Some(t(20)));
        assert_eq!(e.not_before(7, 3), None);
        assert_eq!(e.not_before(8, 3), Some(t(1)), "other keys unaffected");
        // Rank 3's announcement arrives late: its writes precede it.
        e.late_announcement(7, 3, t(25));
        assert_eq!(e.not_before(7, 3), Some(t(25)));
        assert_eq!(e.not_before(7, 2), Some(t(20)));
        // The next reduction with the key replaces the record.
        e.ended(7, t(30), []);
        assert_eq!(e.not_before(7, 3), Some(t(30)));
    }

    #[test]
    fn eviction_raises_the_floor_and_forgets_no_doubt() {
        let mut e = KeyEnds::new(2, t(1));
        e.ended(1, t(10), [4]);
        e.ended(2, t(11), []);
        e.ended(3, t(12), []); // evicts key 1
        assert_eq!(e.map.len(), 2);
        assert_eq!(
            e.not_before(1, 2),
            Some(t(10)),
            "the evicted end is a floor"
        );
        assert_eq!(e.not_before(99, 2), Some(t(10)));
        assert_eq!(e.not_before(3, 2), Some(t(12)));
        // Rank 4 may still have a write of key 1 in flight: never again.
        assert_eq!(e.not_before(1, 4), None);
        assert_eq!(e.not_before(3, 4), None);
        // Re-ending a key does not grow the record.
        e.ended(3, t(13), []);
        e.ended(3, t(14), []);
        assert_eq!(e.map.len(), 2);
        assert_eq!(e.order.len(), 2);
    }
}
