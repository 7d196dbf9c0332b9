//! Gathering: a small reduction's root takes every ready datum of its node
//! in one task (see the book's Architecture chapter, "Small
//! contributions").
//!
//! Why: with small data a task costs its messages, not its bytes. Paired
//! two by two, `p` ranks of one node need `p - 1` tasks, each a round trip
//! through the master, `⌈log2 p⌉` of them one after the other. The root
//! reads its node's data in place (no message: the master names where it
//! lies), so one task can carry all of it: `p` joins, one task, one task
//! done, whatever `p`, when everybody is ready at once.
//!
//! The rule, for the messages the master's `near` admits (data on the
//! root's node, small, read in place: the master knows; here only live
//! ranks' own data, not a recovering original, is ever admitted), once
//! the root has joined and while it lives (before, and after its death,
//! every message is paired as [`Schedule::next`] pairs them: an original
//! folded into another live rank's data survives its owner and its
//! buddy dying together, one left waiting for an absent root does not):
//!
//! - such a message waits for the root: nobody else receives it;
//! - the root, when ready, receives the queue's first other message (any
//!   kind, as in [`Schedule::next`]) and, in the same task, every admitted
//!   one behind it, up to `cap` providers in all;
//! - messages not admitted (another node's, large, recovering, a dead
//!   rank's) are paired among themselves as in [`Schedule::next`], the
//!   root being busy or absent.
//!
//! A slow member costs what it costs ready-first: it is folded in the one
//! task after its join. A slow root: the members fold two by two
//! meanwhile, as they would anyway, and its first task takes what is
//! left of its node.
//!
//! Failures: a further provider the receiver could not read is left out
//! of its report and goes back into the queue ([`folded`]); the task's
//! receiver dying requeues every provider ([`Schedule::fail`]).

use super::{Assignment, Entry, Schedule, Step};
use crate::rankset::RankSet;

impl Schedule {
    /// Takes the next decision of a small reduction: as [`Schedule::next`],
    /// except that the messages `near` admits are gathered by the root (see
    /// the module's rule), at most `cap` providers per task (at least 1).
    pub fn next_gathering(
        &mut self,
        prefers: impl Fn(usize, usize) -> bool,
        near: impl Fn(&Entry) -> bool,
        cap: usize,
    ) -> Option<Step> {
        if !self.joined.contains(self.root) || self.dead.contains(self.root) {
            // No root to wait for (not joined yet, or dead): ready-first
            // pairing, so that no original waits unfolded, with its copies
            // alone, on a root that may be long in coming.
            return self.next(prefers);
        }
        if self.complete {
            return None;
        }
        if let Some(done) = self.completion() {
            return Some(done);
        }
        let near = |e: &Entry| {
            e.index != self.root && !e.recovering && !self.dead.contains(e.index) && near(e)
        };
        let admitted: Vec<bool> = self.queue.iter().map(near).collect();
        if let Some(step) = self.gather(&admitted, cap.max(1)) {
            return Some(step);
        }
        // Neither the root nor an admitted message is paired here.
        let root = self.queue.iter().position(|e| e.index == self.root);
        let (a, b) = self.take_pair(|i| Some(i) != root && !admitted[i])?;
        let (receiver, provider) = if super::choose_b(&a, &b, self.root, &self.dead, &prefers) {
            (b, a)
        } else {
            (a, b)
        };
        Some(self.assign(receiver, provider, Vec::new()))
    }

    /// The root's task, if its message is queued and another is: the first
    /// other message, then every admitted one behind it, up to `cap`.
    fn gather(&mut self, admitted: &[bool], cap: usize) -> Option<Step> {
        let at_root = self.queue.iter().position(|e| e.index == self.root)?;
        let first = (0..self.queue.len()).find(|&i| i != at_root)?;
        let mut take: Vec<usize> = vec![first];
        take.extend(
            (first + 1..self.queue.len())
                .filter(|&i| i != at_root && admitted[i])
                .take(cap - 1),
        );
        let mut all = take.clone();
        all.push(at_root);
        all.sort_unstable();
        // Removed back to front, so the positions stay valid.
        let mut removed: Vec<(usize, Entry)> = all
            .iter()
            .rev()
            .map(|&i| (i, self.queue.remove(i).expect("valid index")))
            .collect();
        let mut of = |i: usize| {
            let at = removed.iter().position(|(j, _)| *j == i).expect("removed");
            removed.swap_remove(at).1
        };
        let receiver = of(at_root);
        let provider = of(first);
        let more = take[1..].iter().map(|&i| of(i)).collect();
        Some(self.assign(receiver, provider, more))
    }
}

/// Which providers of `task` a receiver's report of `path` folded, the
/// task's provider first, and which it left out: `None` unless `path`
/// holds the receiver's and the provider's, and of every further
/// provider's path all or nothing, and nothing else.
pub(super) fn folded(task: &Assignment, path: &RankSet) -> Option<(Vec<Entry>, Vec<Entry>)> {
    let mut expected = task.receiver.path.union(&task.provider.path);
    let mut folded = vec![task.provider.clone()];
    let mut left = Vec::new();
    for e in &task.more {
        if e.path.is_subset(path) {
            expected = expected.union(&e.path);
            folded.push(e.clone());
        } else if e.path.is_disjoint(path) {
            left.push(e.clone());
        } else {
            return None;
        }
    }
    (*path == expected).then_some((folded, left))
}
