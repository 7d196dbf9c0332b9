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
        let (a, b) = self.take_pair(|_| true)?;
        let (receiver, provider) = if choose_b(&a, &b, self.root, &self.dead, &prefers) {
            (b, a)
        } else {
            (a, b)
        };
        Some(self.assign(receiver, provider, Vec::new()))
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
    /// place), with where the provider's data is.
    pub(super) fn assign(&mut self, receiver: Entry, provider: Entry, more: Vec<Entry>) -> Step {
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
        Step::Task(task)
    }

    /// The first two queued messages whose queue positions `eligible`
    /// admits, except that two dead ranks' messages are never paired
    /// (neither could fetch): a dead one waits for a live partner further
    /// back in the queue.
    fn take_pair(&mut self, eligible: impl Fn(usize) -> bool) -> Option<(Entry, Entry)> {
        let (i, j) = self.pair_at(eligible)?;
        let b = self.queue.remove(j).expect("valid index");
        let a = self.queue.remove(i).expect("valid index");
        Some((a, b))
    }

    /// The queue positions `i < j` [`Schedule::take_pair`] would take.
    pub(super) fn pair_at(&self, eligible: impl Fn(usize) -> bool) -> Option<(usize, usize)> {
        let dead = |i: usize| self.dead.contains(self.queue[i].index);
        let mut at = (0..self.queue.len()).filter(|&i| eligible(i));
        let i = at.next()?;
        let j = if dead(i) {
            at.find(|&j| !dead(j))?
        } else {
            at.next()?
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
