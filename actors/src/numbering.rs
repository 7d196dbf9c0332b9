//! Numbers in call order: unnamed reductions (`auto-N`) and the spreads of
//! an allreduce or broadcast are named by how many calls of their kind this
//! rank made before. Every member makes the same calls in the same order,
//! so the count names the same thing on every rank — as long as a call
//! refused at once (an id already live, one reduction too many, a value
//! that cannot be encoded) takes no number: the other members never saw
//! it. A number is therefore taken, and given back if its call is refused.

use std::collections::HashMap;
use std::sync::Mutex;

/// Per-key counters of calls, each from zero.
#[derive(Default)]
pub(crate) struct Counters(Mutex<HashMap<u64, u64>>);

/// A number taken from [`Counters`] for one call, under one key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Taken {
    /// The counter's key.
    base: u64,
    /// The number.
    pub(crate) n: u64,
}

impl Counters {
    /// The next number of `base`'s calls.
    pub(crate) fn take(&self, base: u64) -> Taken {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let next = m.entry(base).or_insert(0);
        *next += 1;
        Taken { base, n: *next - 1 }
    }

    /// Returns `taken`, whose call was refused, if no later number of its
    /// key was taken since (a refused call on one thread must not renumber
    /// a call another thread made meanwhile).
    pub(crate) fn give_back(&self, taken: Taken) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(next) = m.get_mut(&taken.base) {
            if *next == taken.n + 1 {
                *next = taken.n;
            }
        }
    }

    /// Numbers every key from zero again (a rollback: every rank redoes
    /// its calls from its entry point, as a replacement does).
    pub(crate) fn clear(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_call_takes_no_number() {
        let c = Counters::default();
        assert_eq!(c.take(7).n, 0);
        let refused = c.take(7);
        c.give_back(refused);
        assert_eq!(c.take(7).n, 1);
        assert_eq!(c.take(8).n, 0, "keys count apart");
    }

    #[test]
    fn a_number_taken_later_is_kept() {
        let c = Counters::default();
        let refused = c.take(1);
        let accepted = c.take(1);
        c.give_back(refused);
        assert_eq!(accepted.n, 1);
        assert_eq!(c.take(1).n, 2, "the later call keeps its number");
        c.clear();
        assert_eq!(c.take(1).n, 0);
    }
}
