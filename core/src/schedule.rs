//! The master's per-reduction queue and pairing rules (DESIGN.md §1).
//!
//! [`Schedule`] is a pure state machine: ready messages go in, tasks and the
//! completion come out. It never blocks and does no I/O, so every rule is
//! unit- and property-tested here.
//!
//! Cost of one reduction of `p` ranks: `p - 1` tasks, each one control
//! message to the receiver, one `get` of the provider's data (the data's
//! bytes on the wire) and one ready message back; the tree's depth depends
//! on arrival order (`⌈log2 p⌉` when everybody is ready at once, and a rank
//! that is ready last is folded last, in one step).

use crate::rankset::RankSet;
use std::collections::{HashMap, VecDeque};

/// A ready message in the queue: group position and path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Group position of the rank holding the data.
    pub index: usize,
    /// Group positions folded into that data.
    pub path: RankSet,
}

/// A task handed out by the scheduler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// Unique within the reduction.
    pub task_id: u64,
    /// Fetches and folds.
    pub receiver: Entry,
    /// Exposes its data.
    pub provider: Entry,
}

/// What the scheduler decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Hand this task to its receiver.
    Task(Assignment),
    /// The root holds every original: the reduction is complete.
    Complete,
}

/// A ready message that breaks the protocol (never trusted: it comes from
/// the network). The reduction must end with an error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// Position outside the group.
    #[error("group position {0} is outside the group")]
    OutOfGroup(usize),
    /// A rank joined twice.
    #[error("group position {0} joined twice")]
    DuplicateJoin(usize),
    /// A task id the scheduler did not hand out (or to someone else).
    #[error("unknown task {0} for group position {1}")]
    UnknownTask(u64, usize),
    /// The path after a task is not the union of the two paths: some
    /// original would be lost or folded twice.
    #[error("path after task {task_id} is {got:?}, expected {expected:?}")]
    BadPath {
        /// The task.
        task_id: u64,
        /// Reported path.
        got: Vec<usize>,
        /// The union of the task's paths.
        expected: Vec<usize>,
    },
}

/// Queue + scheduler of one reduction.
#[derive(Debug, Clone)]
pub struct Schedule {
    n: usize,
    root: usize,
    joined: RankSet,
    queue: VecDeque<Entry>,
    in_flight: HashMap<u64, Assignment>,
    next_task: u64,
    complete: bool,
}

impl Schedule {
    /// A reduction over `n` group positions whose root is at position `root`.
    pub fn new(n: usize, root: usize) -> Self {
        assert!(root < n, "root position {root} outside group of {n}");
        Schedule {
            n,
            root,
            joined: RankSet::new(),
            queue: VecDeque::new(),
            in_flight: HashMap::new(),
            next_task: 0,
            complete: false,
        }
    }

    /// Group size.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Always false (a reduction has at least one rank).
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// True once [`Step::Complete`] was returned.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// Position `index` contributed its original: ready message `(i, {i})`.
    pub fn join(&mut self, index: usize) -> Result<(), ScheduleError> {
        if index >= self.n {
            return Err(ScheduleError::OutOfGroup(index));
        }
        if !self.joined.insert(index) {
            return Err(ScheduleError::DuplicateJoin(index));
        }
        self.queue.push_back(Entry {
            index,
            path: RankSet::single(index),
        });
        Ok(())
    }

    /// The receiver of `task_id` finished it and reports `path`; its data is
    /// ready again. Returns the provider's position (whose data may now be
    /// released).
    pub fn task_done(
        &mut self,
        task_id: u64,
        index: usize,
        path: &RankSet,
    ) -> Result<usize, ScheduleError> {
        let task = match self.in_flight.get(&task_id) {
            Some(t) if t.receiver.index == index => self.in_flight.remove(&task_id).unwrap(),
            _ => return Err(ScheduleError::UnknownTask(task_id, index)),
        };
        let expected = task.receiver.path.union(&task.provider.path);
        if *path != expected {
            return Err(ScheduleError::BadPath {
                task_id,
                got: path.iter().collect(),
                expected: expected.iter().collect(),
            });
        }
        self.queue.push_back(Entry {
            index,
            path: expected,
        });
        Ok(task.provider.index)
    }

    /// Takes the next decision, if any. `prefers(a, b)` says whether position
    /// `b` should receive rather than `a` (the faster-rank rule); `a` became
    /// ready first.
    pub fn next(&mut self, prefers: impl Fn(usize, usize) -> bool) -> Option<Step> {
        if self.complete {
            return None;
        }
        if let Some(front) = self.queue.front() {
            if front.path.is_full(self.n) {
                debug_assert_eq!(
                    front.index, self.root,
                    "only the root can hold every original"
                );
                self.queue.clear();
                self.complete = true;
                return Some(Step::Complete);
            }
        }
        if self.queue.len() < 2 {
            return None;
        }
        let a = self.queue.pop_front().unwrap();
        let b = self.queue.pop_front().unwrap();
        let (receiver, provider) = if choose_b(&a, &b, self.root, &prefers) {
            (b, a)
        } else {
            (a, b)
        };
        let task_id = self.next_task;
        self.next_task += 1;
        let task = Assignment {
            task_id,
            receiver,
            provider,
        };
        self.in_flight.insert(task_id, task.clone());
        Some(Step::Task(task))
    }

    /// Positions whose data the reduction still needs: queued, busy in a
    /// task, or not yet joined. If one of them dies (and nothing can recover
    /// it), the reduction cannot complete.
    pub fn needs(&self, index: usize) -> bool {
        !self.complete
            && (!self.joined.contains(index)
                || self.queue.iter().any(|e| e.index == index)
                || self
                    .in_flight
                    .values()
                    .any(|t| t.receiver.index == index || t.provider.index == index))
    }

    /// Positions that have not joined yet.
    pub fn missing(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.n).filter(|i| !self.joined.contains(*i))
    }

    /// Number of queued ready messages (a gauge of master load).
    pub fn queue_len(&self) -> usize {
        self.queue.len()
    }
}

/// The pairing rule of DESIGN.md §1 step 4: the root always receives
/// (so the root's data is never fetched away and it ends up holding the
/// result); otherwise the rank whose last task was faster receives.
pub fn choose_b(a: &Entry, b: &Entry, root: usize, prefers: impl Fn(usize, usize) -> bool) -> bool {
    if a.index == root {
        false
    } else if b.index == root {
        true
    } else {
        prefers(a.index, b.index)
    }
}

#[cfg(test)]
mod tests;
