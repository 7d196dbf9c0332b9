//! Per-rank task timings behind the "faster rank" rule: of two ranks ready
//! to fold, the one whose last task was faster receives.

use crate::intmap::IntMap;
use crate::rank::Rank;

/// The master's view of how fast each rank's last task was, as nanoseconds
/// per fetched byte (tasks differ in size, so raw durations do not compare).
#[derive(Debug, Default, Clone)]
pub struct PerfTable {
    /// By rank, read at every decision (so hashed cheaply, see
    /// `crate::intmap`). A map, not a list by rank: a node's scheduler
    /// knows only its node's ranks, numbered as the job's.
    last: IntMap<Rank, f64>,
}

impl PerfTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a finished task of `rank`.
    pub fn record(&mut self, rank: Rank, nanos: u64, bytes: u64) {
        let per_byte = nanos as f64 / bytes.max(1) as f64;
        self.last.insert(rank, per_byte);
    }

    /// Cost per byte of `rank`'s last task, if it ran one.
    pub fn last(&self, rank: Rank) -> Option<f64> {
        self.last.get(&rank).copied()
    }

    /// True if `b` should get a task rather than `a`: `b`'s last task was
    /// strictly faster. A rank that never ran a task counts as fast (so it
    /// gets measured); ties go to `a`, the one that became ready first.
    pub fn prefers(&self, a: Rank, b: Rank) -> bool {
        match (self.last(a), self.last(b)) {
            (Some(x), Some(y)) => y < x,
            (Some(_), None) => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faster_rank_rule() {
        let mut p = PerfTable::new();
        assert!(!p.prefers(Rank(1), Rank(2)), "ties go to the first");
        p.record(Rank(1), 1000, 100);
        assert!(p.prefers(Rank(1), Rank(2)), "unmeasured counts as fast");
        p.record(Rank(2), 500, 100);
        assert!(p.prefers(Rank(1), Rank(2)));
        assert!(!p.prefers(Rank(2), Rank(1)));
        p.record(Rank(2), 5000, 100);
        assert!(!p.prefers(Rank(1), Rank(2)), "only the last task counts");
        assert_eq!(p.last(Rank(2)), Some(50.0));
        assert_eq!(p.last(Rank(0)), None, "never measured");
        p.record(Rank(3), 0, 0);
        assert_eq!(p.last(Rank(3)), Some(0.0), "a free task is measured");
    }
}
