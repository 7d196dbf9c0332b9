//! The master's per-reduction queue and pairing rules (see the book's
//! Architecture chapter).
//!
//! [`Schedule`] is a pure state machine: ready messages go in, tasks and the
//! completion come out. It never blocks and does no I/O, so every rule is
//! unit- and property-tested here.
//!
//! Cost of one reduction of `p` ranks: `p - 1` tasks, each one control
//! message to the receiver, one `get` of the provider's data (the data's
//! bytes on the wire) and one ready message back; the tree's depth depends
//! on arrival order (`⌈log2 p⌉` when everybody is ready at once, and a rank
//! that is ready last is folded last, in one step). A small reduction is
//! gathered by node instead ([`Schedule::next_gathering`]): a node's ready
//! data in one task.
//!
//! # Layout
//!
//! - this file: the queue, joins, reports and failures;
//! - `pair`: the pairing decision ([`Schedule::next`], [`choose_b`]);
//! - `gather`: gathering small data by node;
//! - `queue`: the ready messages in order, and gathering's index;
//! - `replace`: replacements of dead ranks.

use crate::intmap::IntMap;
use crate::rankset::RankSet;
use queue::Queue;

/// A ready message in the queue: group position and path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Group position of the rank holding the data.
    pub index: usize,
    /// Group positions folded into that data.
    pub path: RankSet,
    /// A single original re-entering after a failure: its data must be
    /// read from the replica store, not from memory.
    pub recovering: bool,
}

impl Entry {
    fn single(index: usize, recovering: bool) -> Self {
        Entry {
            index,
            path: RankSet::single(index),
            recovering,
        }
    }
}

/// Where the receiver of a task finds the provider's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The provider's intermediate data `D_j`, in its memory.
    Data,
    /// The provider's own original `O_j`, from its replica store (the
    /// provider is alive but its data was lost with another rank).
    Original,
    /// The provider is dead: its original, from the replica its buddy holds.
    Replica,
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
    /// The receiver must first reload its own original (it re-enters after
    /// a failure and holds no data).
    pub restore: bool,
    /// Where to fetch the provider's data from.
    pub source: Source,
    /// Further providers whose data the receiver reads in place on its
    /// node, all in this one task (a small reduction's root gathering its
    /// node's data, [`Schedule::next_gathering`]); empty otherwise. Their
    /// source is [`Source::Data`].
    pub more: Vec<Entry>,
}

impl Assignment {
    /// The provider, then every further one.
    pub fn providers(&self) -> impl Iterator<Item = &Entry> {
        std::iter::once(&self.provider).chain(&self.more)
    }
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

/// How a replacement's join was taken ([`Schedule::join_replacement`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replacement {
    /// Its original is in, as any member's join.
    Joined,
    /// The dead rank's original is in the reduction already; the
    /// replacement's is held in case that one is lost.
    Held,
}

/// A failure the reduction cannot survive: the originals of these group
/// positions are gone (both copies lost, never contributed, or the root).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("originals lost for group positions {lost:?} (root lost: {root})")]
pub struct Unrecoverable {
    /// Positions whose original is lost.
    pub lost: Vec<usize>,
    /// True if the root died (nobody can hold the result).
    pub root: bool,
}

/// Queue + scheduler of one reduction.
#[derive(Debug, Clone)]
pub struct Schedule {
    n: usize,
    root: usize,
    joined: RankSet,
    dead: RankSet,
    /// Dead positions whose replacement is expected
    /// ([`Schedule::await_replacement`]): their lost originals are
    /// awaited, not lost.
    awaiting: RankSet,
    /// Replaced positions still dead here: their original was in the
    /// reduction when their replacement came (a copy of it, or its data
    /// in flight to a receiver), so it is read as the dead rank's.
    replaced: RankSet,
    /// Replaced positions whose replacement joined while the dead rank's
    /// original was still in: the replacement keeps its data until the
    /// reduction ends, and it stands in if the dead rank's is lost.
    held: RankSet,
    /// Replaced positions whose original was taken out and whose
    /// replacement has not joined yet: waited for only until
    /// [`Schedule::give_up`].
    rejoin_due: RankSet,
    queue: Queue,
    /// By task id: looked up at every report.
    in_flight: IntMap<u64, Assignment>,
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
            dead: RankSet::new(),
            awaiting: RankSet::new(),
            replaced: RankSet::new(),
            held: RankSet::new(),
            rejoin_due: RankSet::new(),
            queue: Queue::new(root),
            in_flight: IntMap::default(),
            next_task: 0,
            complete: false,
        }
    }

    /// A reduction a new master rebuilt from its members' reports
    /// ([`crate::failover::reconcile`]): the originals of `joined` are in,
    /// and `entries` are its ready messages. Dead members are told next
    /// ([`Schedule::fail`]), as at any reduction's start.
    pub fn resume(n: usize, root: usize, joined: RankSet, entries: Vec<Entry>) -> Self {
        let mut s = Schedule::new(n, root);
        s.joined = joined;
        for e in entries {
            s.queue.push(e);
        }
        s
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
        self.rejoin_due.remove(index);
        self.queue.push(Entry::single(index, false));
        Ok(())
    }

    /// The receiver of `task_id` finished it and reports `path`; its data is
    /// ready again. Returns the ready messages of the providers it folded,
    /// the task's provider first (their data may now be released).
    ///
    /// `path` holds the receiver's and the provider's, and of the further
    /// providers of a gathering task each one's whole path or none of it:
    /// one the receiver could not read goes back into the queue.
    pub fn task_done(
        &mut self,
        task_id: u64,
        index: usize,
        path: &RankSet,
    ) -> Result<Vec<Entry>, ScheduleError> {
        self.task_done_with(task_id, index, path, |_| false)
    }

    /// [`Schedule::task_done`], where `has_replica(k)` says whether a live
    /// rank holds a copy of `k`'s original: a further provider left out
    /// that died meanwhile is recovered from it, as after a failed fetch
    /// ([`Schedule::fetch_failed`]).
    pub fn task_done_with(
        &mut self,
        task_id: u64,
        index: usize,
        path: &RankSet,
        has_replica: impl Fn(usize) -> bool,
    ) -> Result<Vec<Entry>, ScheduleError> {
        let task = match self.in_flight.get(&task_id) {
            Some(t) if t.receiver.index == index => self.end_task(task_id).expect("in flight"),
            _ => return Err(ScheduleError::UnknownTask(task_id, index)),
        };
        let (path, folded, left) =
            gather::folded(task, path).map_err(|expected| ScheduleError::BadPath {
                task_id,
                got: path.iter().collect(),
                expected: expected.iter().collect(),
            })?;
        self.queue.push(Entry {
            index,
            path,
            recovering: false,
        });
        let mut split = Vec::new();
        for e in left {
            self.requeue(e, &mut split);
        }
        self.push_singles(split, &has_replica);
        Ok(folded)
    }

    /// Position `index` died. What it held is recovered:
    ///
    /// - a queued ready message of it: its path is split into single
    ///   recovering messages;
    /// - a task it was receiving (failure places 1 and 2): the provider's
    ///   message goes back into the queue and the receiver's path is split;
    /// - a task it was providing (place 3) is left to its receiver, which
    ///   either finished the fetch (nothing was lost) or reports
    ///   [`Schedule::fetch_failed`].
    ///
    /// `has_replica(k)` says whether a live rank holds a copy of `k`'s
    /// original. Errors when some original can no longer be had.
    pub fn fail(
        &mut self,
        index: usize,
        has_replica: impl Fn(usize) -> bool,
    ) -> Result<(), Unrecoverable> {
        if index >= self.n || self.complete {
            return Ok(());
        }
        self.dead.insert(index);
        self.queue.reclassify(index);
        let awaited = self.awaiting.contains(index);
        if index == self.root && !awaited {
            return Err(Unrecoverable {
                lost: vec![index],
                root: true,
            });
        }
        let mut split = Vec::new();
        // Awaited or not (an awaited member's replacement's join is then
        // held, [`Schedule::join_replacement`]); not the root, which only
        // reaches here awaited: its data only its replacement may hold.
        if !self.joined.contains(index) && index != self.root && has_replica(index) {
            // Its ready message was lost with it, but its buddy holds a copy
            // of its original: the original is in, from the replica.
            self.joined.insert(index);
            split.push(RankSet::single(index));
        }
        if let Some(seq) = self.queue.first_of(index) {
            split.push(self.queue.remove(seq).0.path);
        }
        let mut mine: Vec<u64> = self
            .in_flight
            .iter()
            .filter(|(_, t)| t.receiver.index == index)
            .map(|(id, _)| *id)
            .collect();
        // In the order they were handed out, whatever the map's order.
        mine.sort_unstable();
        for id in mine {
            let t = self.end_task(id).expect("listed above");
            split.push(t.receiver.path);
            self.requeue(t.provider, &mut split);
            for e in t.more {
                self.requeue(e, &mut split);
            }
        }
        self.push_singles(split, &has_replica);
        self.copies_lost(has_replica)
    }

    /// Copies of originals may be gone (their holder died, or a disk copy
    /// proved unreadable): the originals queued to be read from them are
    /// queued again (see `orphaned`), then, as
    /// [`Schedule::check_recoverable`], errors when some original can no
    /// longer be had.
    pub fn copies_lost(
        &mut self,
        has_replica: impl Fn(usize) -> bool,
    ) -> Result<(), Unrecoverable> {
        self.orphaned(&has_replica);
        self.check_recoverable(has_replica)
    }

    /// The originals of other dead positions queued to be read from a copy
    /// that is gone now (it died with the rank that held it): each is
    /// queued again as [`Schedule::push_singles`] would, so that a
    /// replacement's held join stands in for it, and the original of a
    /// position whose replacement is expected is taken out, to be joined
    /// again; any other stays, to be found lost.
    fn orphaned(&mut self, has_replica: &impl Fn(usize) -> bool) {
        let expected = |k: usize| {
            self.held.contains(k) || self.awaiting.contains(k) || self.replaced.contains(k)
        };
        let ks: Vec<usize> = self
            .queue
            .iter()
            .filter(|e| e.path.len() == 1 && self.dead.contains(e.index))
            .map(|e| e.index)
            .filter(|&k| !has_replica(k) && expected(k))
            .collect();
        if ks.is_empty() {
            return;
        }
        self.queue
            .retain(|e| !(e.path.len() == 1 && ks.contains(&e.index)));
        let lost = ks.into_iter().map(RankSet::single).collect();
        self.push_singles(lost, has_replica);
    }

    /// Queues every original of `split` as a recovering single, except:
    /// a replaced position's original that its replacement's held join
    /// supplies (queued as that join); and the originals of awaited or
    /// replaced positions that no copy holds (and an awaited root's, whose
    /// data only its replacement may hold), which are taken out of the
    /// reduction, to be joined again by the replacement.
    fn push_singles(&mut self, split: Vec<RankSet>, has_replica: &impl Fn(usize) -> bool) {
        for path in split {
            for k in path.iter() {
                let dead = self.dead.contains(k);
                let expected = self.awaiting.contains(k) || self.replaced.contains(k);
                if dead && self.held.remove(k) {
                    self.revived(k);
                    self.queue.push(Entry::single(k, false));
                } else if dead && expected && (k == self.root || !has_replica(k)) {
                    self.joined.remove(k);
                    if self.replaced.contains(k) {
                        self.revived(k);
                    }
                } else {
                    self.queue.push(Entry::single(k, true));
                }
            }
        }
    }

    /// Position `k`'s replacement now stands for it here.
    fn revived(&mut self, k: usize) {
        self.replaced.remove(k);
        self.dead.remove(k);
        self.queue.reclassify(k);
    }

    /// Position `index` left the job (its rank finalized) without
    /// joining: its original will never come, and no copy of it exists.
    /// Errors unless it joined (a member that joined keeps serving its
    /// data until the job ends) or the reduction is complete.
    pub fn left(&self, index: usize) -> Result<(), Unrecoverable> {
        if index >= self.n || self.complete || self.joined.contains(index) {
            return Ok(());
        }
        Err(Unrecoverable {
            lost: vec![index],
            root: index == self.root,
        })
    }

    /// The receiver of `task_id` could not fetch the provider's data (place
    /// 3): the receiver's message goes back; the provider's path is split
    /// if the provider is dead, else its message goes back too.
    pub fn fetch_failed(
        &mut self,
        task_id: u64,
        index: usize,
        has_replica: impl Fn(usize) -> bool,
    ) -> Result<(), ScheduleError> {
        let task = match self.in_flight.get(&task_id) {
            Some(t) if t.receiver.index == index => self.end_task(task_id).expect("in flight"),
            _ => return Err(ScheduleError::UnknownTask(task_id, index)),
        };
        let mut split = Vec::new();
        self.queue.push(task.receiver);
        self.requeue(task.provider, &mut split);
        for e in task.more {
            self.requeue(e, &mut split);
        }
        self.push_singles(split, &has_replica);
        Ok(())
    }

    /// Puts a provider's message back, or splits it if its holder is dead
    /// (a dead rank's data exists only as replicas of its originals).
    fn requeue(&mut self, provider: Entry, split: &mut Vec<RankSet>) {
        let i = provider.index;
        // A replaced rank's single original goes through the split too: its
        // replacement's held join may stand in for it.
        let expected = self.awaiting.contains(i) || self.replaced.contains(i);
        let single = provider.recovering && provider.path.len() == 1;
        if self.dead.contains(i) && (!single || expected) {
            split.push(provider.path);
        } else {
            self.queue.push(provider);
        }
    }

    /// Every queued message of a dead rank must have a live replica.
    pub fn check_recoverable(
        &self,
        has_replica: impl Fn(usize) -> bool,
    ) -> Result<(), Unrecoverable> {
        let mut lost: Vec<usize> = self
            .queue
            .iter()
            .filter(|e| self.dead.contains(e.index) && !has_replica(e.index))
            .map(|e| e.index)
            .collect();
        lost.extend(
            self.missing()
                .filter(|&i| self.dead.contains(i) && !self.awaiting.contains(i)),
        );
        if lost.is_empty() {
            Ok(())
        } else {
            lost.sort_unstable();
            lost.dedup();
            Err(Unrecoverable { lost, root: false })
        }
    }

    /// Takes task `task_id` out of the tasks in flight: it ended.
    fn end_task(&mut self, task_id: u64) -> Option<Assignment> {
        let t = self.in_flight.remove(&task_id)?;
        self.queue.task_ended(task_id);
        Some(t)
    }

    /// The in-flight task `task_id`, if any.
    pub fn task(&self, task_id: u64) -> Option<&Assignment> {
        self.in_flight.get(&task_id)
    }

    /// True if position `index` was declared dead.
    pub fn is_dead(&self, index: usize) -> bool {
        self.dead.contains(index)
    }

    /// Positions whose data the reduction still needs: queued, busy in a
    /// task, or not yet joined. If one of them dies (and nothing can recover
    /// it), the reduction cannot complete.
    pub fn needs(&self, index: usize) -> bool {
        !self.complete
            && (!self.joined.contains(index)
                || self.queue.first_of(index).is_some()
                || self
                    .in_flight
                    .values()
                    .any(|t| t.receiver.index == index || t.providers().any(|e| e.index == index)))
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

mod gather;
pub use gather::GATHER_CAP;
mod pair;
mod queue;
mod seqset;
pub use pair::choose_b;
#[cfg(test)]
mod gather_tests;
mod replace;
#[cfg(test)]
mod respawn_tests;
#[cfg(test)]
mod scanned;
#[cfg(test)]
mod tests;
