//! The pairing decision: the first two ready messages, the receiver by the
//! faster-rank rule (see the book's Architecture chapter).

use super::{Assignment, Entry, Schedule, Source, Step};
use crate::rankset::RankSet;

impl Schedule {
    /// Takes the next decision, if any. `prefers(a, b)` says whether position
    /// `b` should receive rather than `a` (the faster-rank rule); `a` became
    /// ready first.
    pub fn next(&mut self, prefers: impl Fn(usize, usize) -> bool) -> Option<Step> {
        if self.complete {
            return None;
        }
        if let Some(done) = self.completion() {
            return Some(done);
        }
        let (i, j) = self.pair_at(self.queue.seqs())?;
        let (a, a_at) = self.queue.remove(i);
        let (b, b_at) = self.queue.remove(j);
        let (receiver, provider, at) = if choose_b(&a, &b, self.root, &self.dead, &prefers) {
            (b, a, b_at)
        } else {
            (a, b, a_at)
        };
        Some(self.assign(receiver, provider, Vec::new(), at))
    }

    /// [`Step::Complete`] if the message at the queue's front holds every
    /// original (only the root's can).
    pub(super) fn completion(&mut self) -> Option<Step> {
        let front = self.queue.front()?;
        if !front.path.is_full(self.n) {
            return None;
        }
        debug_assert_eq!(
            front.index, self.root,
            "only the root can hold every original"
        );
        self.queue.clear();
        self.complete = true;
        Some(Step::Complete)
    }

    /// Hands out the task `receiver` ← `provider` (and `more`, read in
    /// place), with where the provider's data is. A receiver admitted on
    /// node `at` for gathering holds that node's messages until the task
    /// ends.
    pub(super) fn assign(
        &mut self,
        receiver: Entry,
        provider: Entry,
        more: Vec<Entry>,
        at: Option<u64>,
    ) -> Step {
        let source = if self.dead.contains(provider.index) {
            Source::Replica
        } else if provider.recovering {
            Source::Original
        } else {
            Source::Data
        };
        let restore = receiver.recovering;
        let task_id = self.next_task;
        self.next_task += 1;
        let task = Assignment {
            task_id,
            receiver,
            provider,
            restore,
            source,
            more,
        };
        self.in_flight.insert(task_id, task.clone());
        if let Some(n) = at {
            self.queue.task_started(task_id, n);
        }
        Step::Task(task)
    }

    /// The first two messages of `candidates` (sequence numbers, in
    /// order), except that two dead ranks' messages are never paired
    /// (neither could fetch): a dead one waits for a live partner further
    /// back in the queue.
    pub(super) fn pair_at(&self, mut candidates: impl Iterator<Item = u64>) -> Option<(u64, u64)> {
        let dead = |s: u64| self.dead.contains(self.queue.get(s).index);
        let i = candidates.next()?;
        let j = if dead(i) {
            candidates.find(|&j| !dead(j))?
        } else {
            candidates.next()?
        };
        Some((i, j))
    }
}

/// The pairing rule: the root always receives (so the root's data is never
/// fetched away and it ends up holding the result); otherwise the rank whose
/// last task was faster receives.
///
/// After a failure: if one side is dead, the live side receives (it fetches
/// the dead rank's original from its replica); else if one side is
/// recovering, that side receives (it reloads its original locally, then
/// fetches).
pub fn choose_b(
    a: &Entry,
    b: &Entry,
    root: usize,
    dead: &RankSet,
    prefers: impl Fn(usize, usize) -> bool,
) -> bool {
    if a.index == root {
        false
    } else if b.index == root {
        true
    } else if dead.contains(a.index) != dead.contains(b.index) {
        dead.contains(a.index)
    } else if a.recovering != b.recovering {
        b.recovering
    } else {
        prefers(a.index, b.index)
    }
}
