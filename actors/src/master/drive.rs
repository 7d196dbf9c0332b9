//! Handing out a reduction's tasks as its scheduler decides them, and its
//! completion.

use super::{gather, Master, TaskRecord};
use taskfold_core::roster::CopyAt;
use taskfold_core::schedule::{Assignment, Source, Step, GATHER_CAP};
use taskfold_core::wire::{DataSource, Msg, Task};
use taskfold_core::{Rank, ReduceError};

/// What became of a task the scheduler decided.
enum Handed {
    /// Sent to its receiver.
    Sent,
    /// The reduction ended instead (the provider's original is lost).
    Ended,
    /// Its receiver could not be reached.
    Unreachable(Rank),
}

impl Master {
    /// Hands out every task the queue of `key` allows, and completes it when
    /// the root holds every original.
    pub(super) fn drive(&mut self, key: u64) {
        if self
            .reductions
            .live
            .get(&key)
            .is_some_and(|r| r.roster.is_held())
        {
            // Held: a dead member's buddy has yet to say whether it keeps
            // that member's original (see `taskfold_core::roster`).
            return;
        }
        let mut unreachable_receiver = None;
        loop {
            let Some(r) = self.reductions.live.get_mut(&key) else {
                return;
            };
            let perf = &self.perf;
            let group = &r.group;
            let prefers = |a, b| perf.prefers(group.rank_at(a), group.rank_at(b));
            let step = match gather::nodes(&self.out, self.gather_max, group, r.root, &r.roster) {
                Some((home, node)) => r.schedule.next_gathering(prefers, home, node, GATHER_CAP),
                None => r.schedule.next(prefers),
            };
            match step {
                None => break,
                Some(Step::Complete) => {
                    self.complete(key);
                    break;
                }
                Some(Step::Task(a)) => match self.hand_out(key, a) {
                    Handed::Sent => {}
                    Handed::Ended => break,
                    Handed::Unreachable(receiver) => {
                        // Failure place 1: the receiver is dead when its
                        // task is sent.
                        unreachable_receiver = Some(receiver);
                        break;
                    }
                },
            }
        }
        if let Some(rank) = unreachable_receiver {
            self.rank_down(rank, "a task could not be sent to it".into(), None);
        }
        self.update_queue_gauge();
    }

    /// The number of the next completion: increasing over this master's
    /// life, and above every number of an earlier master's, as the
    /// master's term (its takeovers so far) leads (see
    /// `Msg::Complete::number`).
    fn completion_number(&mut self) -> u64 {
        self.completions += 1;
        self.completion_mark()
    }

    /// The last completion number given (or, before any, the floor of this
    /// master's): a copy offered now on behalf of a dead owner belongs to
    /// a use of its key later than any completion numbered so far.
    pub(super) fn completion_mark(&self) -> u64 {
        (u64::from(self.out.view().read().term()) << 40) | self.completions
    }

    /// Ends reduction `key`, complete, and tells its members.
    pub(super) fn complete(&mut self, key: u64) {
        let Some(r) = self.reductions.live.remove(&key) else {
            return;
        };
        self.note_end(key, &r);
        self.note_completed(key);
        self.result_completed(key, r.root);
        self.stats.reductions_completed += 1;
        metrics::counter!(crate::metrics::REDUCTIONS_COMPLETED).increment(1);
        metrics::histogram!(crate::metrics::REDUCTION_SECONDS)
            .record(r.started.elapsed().as_secs_f64());
        // The board first: the members on this node waiting for it wake at
        // once (their futures take it there), before the notices below wake
        // the rest.
        if let Some(b) = &self.board {
            b.post_complete(key);
        }
        let msg = Msg::Complete {
            key,
            error: None,
            number: Some(self.completion_number()),
        };
        let own = self.out.transport().rank();
        for rank in completion_order(r.group.members(), r.root, own) {
            self.send(rank, &msg);
        }
    }

    /// Sends task `a` of reduction `key` to its receiver, with where the
    /// provider's data is read.
    fn hand_out(&mut self, key: u64, a: Assignment) -> Handed {
        let Some(r) = self.reductions.live.get(&key) else {
            return Handed::Ended;
        };
        let receiver = r.group.rank_at(a.receiver.index);
        let provider = r.group.rank_at(a.provider.index);
        let source = match a.source {
            Source::Data => DataSource::Data,
            Source::Original => DataSource::Original,
            Source::Replica => match r.roster.copy_at(a.provider.index, &self.out.view().dead()) {
                Some(CopyAt::Replica { holder }) => DataSource::Replica { holder },
                Some(CopyAt::Disk { dir }) => DataSource::Disk {
                    dir: dir.to_owned(),
                },
                None => {
                    let error = ReduceError::RanksLost {
                        id: r.id.clone(),
                        ranks: vec![provider.0],
                    };
                    self.fail(key, error);
                    return Handed::Ended;
                }
            },
        };
        let direct = match source {
            DataSource::Data => r.roster.direct(a.provider.index).cloned(),
            _ => None,
        };
        let read_from = match &source {
            DataSource::Data | DataSource::Original => Some(provider.0),
            DataSource::Replica { holder } => Some(*holder),
            DataSource::Disk { .. } => None,
        };
        let record = TaskRecord::new(&r.id, &a, &r.group);
        let task_id = a.task_id;
        let more = gather::gathered(&a, &r.group, &r.roster);
        let msg = Msg::Task(Task {
            key,
            task_id: a.task_id,
            provider: provider.0,
            provider_path: a.provider.path,
            receiver_path: a.receiver.path,
            restore: a.restore,
            source,
            direct,
            more,
        });
        tracing::debug!(key, task_id, %receiver, provider = provider.0, source = ?a.source, restore = a.restore, gathered = a.more.len(), "task");
        self.stats.record_task(record, self.task_log_limit);
        if let (Some(from), Some(r)) = (read_from, self.reductions.live.get_mut(&key)) {
            let incarnation = self.out.view().read().incarnation(from);
            r.sources.insert(task_id, (from, incarnation));
        }
        if self.send(receiver, &msg) {
            Handed::Sent
        } else {
            Handed::Unreachable(receiver)
        }
    }
}

/// The order in which the master tells a reduction's members that it is
/// complete: the root first, then the other ranks, and the master's own
/// rank last.
///
/// Why: each send to another rank is a system call that also runs the
/// loopback's delivery, and the members' futures resolve in the order the
/// messages go out. The master's own rank hears at once, through its own
/// mailbox; told first, it started its next operation (a barrier's next
/// timed reduction, say) while the others still waited, which is the
/// spread a barrier exists to remove.
pub(super) fn completion_order(
    members: &[Rank],
    root: Rank,
    own: Rank,
) -> impl Iterator<Item = Rank> + '_ {
    let root_first = members
        .iter()
        .copied()
        .filter(move |&r| r == root && r != own);
    let others = members
        .iter()
        .copied()
        .filter(move |&r| r != root && r != own);
    let own_last = members.iter().copied().filter(move |&r| r == own);
    root_first.chain(others).chain(own_last)
}

#[cfg(test)]
mod completion_tests {
    use super::*;

    #[test]
    fn the_root_hears_first_and_the_masters_own_rank_last() {
        let m: Vec<Rank> = (0..5).map(Rank).collect();
        let order: Vec<u32> = completion_order(&m, Rank(3), Rank(0))
            .map(|r| r.0)
            .collect();
        assert_eq!(order, vec![3, 1, 2, 4, 0]);
        // The master's rank is the root: still last (it hears at once).
        let order: Vec<u32> = completion_order(&m, Rank(0), Rank(0))
            .map(|r| r.0)
            .collect();
        assert_eq!(order, vec![1, 2, 3, 4, 0]);
        // A group without the master's rank.
        let m: Vec<Rank> = vec![Rank(2), Rank(5), Rank(7)];
        let order: Vec<u32> = completion_order(&m, Rank(7), Rank(0))
            .map(|r| r.0)
            .collect();
        assert_eq!(order, vec![7, 2, 5]);
    }
}
