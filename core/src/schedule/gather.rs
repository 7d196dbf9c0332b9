//! Gathering: a small reduction's messages are folded where they lie, a
//! node's ready data in one task (see the book's Architecture chapter,
//! "Small contributions").
//!
//! Why: with small data a task costs its messages, not its bytes. Paired
//! two by two, `p` ranks of one node need `p - 1` tasks, each a round trip
//! through the master, `⌈log2 p⌉` of them one after the other. A rank
//! reads its node's data in place (no message: the master names where it
//! lies), so one task can carry all of it: `p` joins, one task, one task
//! done, whatever `p`, when everybody is ready at once.
//!
//! `node` names, for a message the master admits (small, read in place),
//! the node its data lies on; here only live ranks' own data, never a
//! recovering original or a dead rank's, is ever admitted. The rule:
//!
//! - **At the root's node**, once the root has joined and while it lives,
//!   an admitted message waits for the root: nobody else receives it. The
//!   root, when ready, receives the queue's first other message (any
//!   kind, as in [`Schedule::next`]) and, in the same task, every such
//!   one behind it, up to `cap` providers in all. Before the root joins,
//!   and after its death, nothing waits: an original folded into another
//!   live rank's data survives its owner and its buddy dying together,
//!   one left waiting for an absent root does not.
//! - **On every other node** (and on the root's before it joins, or after
//!   its death), a node is gathered by its members: while a member holding
//!   admitted data there receives a task, the node's admitted messages
//!   wait for it; otherwise messages pair ready-first as
//!   [`Schedule::next`] pairs them, and when the pair's receiver is
//!   admitted on a node it also takes every other ready admitted message
//!   of that node, up to `cap` providers in all. So a node's first two
//!   ready members pair, and what arrives meanwhile is folded in the next
//!   task, all at once: a node costs two or three tasks, not one per
//!   member, and the master's messages for them grow with the nodes. The
//!   wait is a task's time at a live member (its death requeues its
//!   providers, and nothing waits for it any more), as a pair's own
//!   members wait for their task.
//!
//! A slow member costs what it costs ready-first: it is folded in the one
//! task after its join. A slow root: the members fold by node meanwhile,
//! as they would anyway, and its first task takes what is left of its
//! node.
//!
//! Failures: a further provider the receiver could not read is left out
//! of its report and goes back into the queue ([`folded`]); the task's
//! receiver dying requeues every provider ([`Schedule::fail`]).

use super::{choose_b, Assignment, Entry, Schedule, Step};
use crate::rankset::RankSet;

/// Providers per gathering task at most: a node with more ready members
/// is gathered in several tasks, so that no task message grows with the
/// node.
pub const GATHER_CAP: usize = 64;

impl Schedule {
    /// Takes the next decision of a small reduction: as [`Schedule::next`],
    /// except that messages are gathered by node (see the module's rule):
    /// `home` is the root's node, `node` the node an admitted message's
    /// data lies on (`None`: not admitted), at most `cap` providers per
    /// task (at least 1).
    pub fn next_gathering(
        &mut self,
        prefers: impl Fn(usize, usize) -> bool,
        home: u64,
        node: impl Fn(&Entry) -> Option<u64>,
        cap: usize,
    ) -> Option<Step> {
        if self.complete {
            return None;
        }
        if let Some(done) = self.completion() {
            return Some(done);
        }
        let cap = cap.max(1);
        // Each message is classified once, when first seen here (the
        // queue's invariant: its class holds while it is queued).
        let (root, dead) = (self.root, &self.dead);
        (self.queue).classify_fresh(|e| admitted(root, dead, e, &node));
        let root_waits = self.joined.contains(self.root) && !self.dead.contains(self.root);
        // While the root waits, its node's admitted messages wait for it
        // (out of the open ones, as a busy receiver's node's are).
        self.queue.root_waits_at(root_waits.then_some(home));
        let root_at = self.queue.first_of(self.root).filter(|_| root_waits);
        if let Some(at_root) = root_at {
            if let Some(step) = self.gather(at_root, home, cap) {
                return Some(step);
            }
        }
        // Neither the root nor a message waiting for it or for a busy
        // member of its node is paired here.
        let open = self.queue.open().filter(|&s| Some(s) != root_at);
        let (i, j) = self.pair_at(open)?;
        let (r, p) = if choose_b(
            self.queue.get(i),
            self.queue.get(j),
            self.root,
            &self.dead,
            &prefers,
        ) {
            (j, i)
        } else {
            (i, j)
        };
        // The receiver's node is not held (the receiver is open): every
        // message admitted there may join its task.
        let more: Vec<u64> = match self.queue.node_of(r) {
            Some(n) => (self.queue.on_node(n, None))
                .filter(|&k| k != i && k != j)
                .take(cap - 1)
                .collect(),
            None => Vec::new(),
        };
        Some(self.assign_at(r, p, &more))
    }

    /// The node `e`'s data is gathered on, in this schedule: see
    /// [`admitted`].
    #[cfg(test)]
    pub(super) fn admitted(&self, e: &Entry, node: impl Fn(&Entry) -> Option<u64>) -> Option<u64> {
        admitted(self.root, &self.dead, e, node)
    }

    /// The root's task, if another message is queued: the first other
    /// message, then every one admitted on `home` behind it, up to `cap`.
    fn gather(&mut self, at_root: u64, home: u64, cap: usize) -> Option<Step> {
        let first = self.queue.seqs().find(|&s| s != at_root)?;
        let more: Vec<u64> = self
            .queue
            .on_node(home, Some(first))
            .take(cap - 1)
            .collect();
        Some(self.assign_at(at_root, first, &more))
    }

    /// Hands out the task whose receiver, provider and further providers
    /// are these queued messages (all distinct), taking them out.
    fn assign_at(&mut self, receiver: u64, provider: u64, more: &[u64]) -> Step {
        let (receiver, at) = self.queue.remove(receiver);
        let (provider, _) = self.queue.remove(provider);
        let more = more.iter().map(|&s| self.queue.remove(s).0).collect();
        self.assign(receiver, provider, more, at)
    }
}

/// The node `e`'s data is gathered on, in a schedule whose root is
/// `root` and whose dead positions are `dead`: only a live member's own
/// data, never the root's (nobody else receives it), a recovering
/// original or a dead rank's, and only where `node` admits it.
fn admitted(
    root: usize,
    dead: &RankSet,
    e: &Entry,
    node: impl Fn(&Entry) -> Option<u64>,
) -> Option<u64> {
    let own = e.index != root && !e.recovering && !dead.contains(e.index);
    own.then(|| node(e)).flatten()
}

/// The receiver's path after a report of `path` on the ended `task`
/// (equal to `path`), which providers it folded, the task's provider
/// first, and which it left out. Errs with the union of every path of the
/// task unless `path` holds the receiver's and the provider's, and of
/// every further provider's path all or nothing, and nothing else.
///
/// The task's entries are moved, not cloned, and the expected path is
/// the receiver's own, grown in place: a root's path spans the group.
pub(super) fn folded(
    task: Assignment,
    path: &RankSet,
) -> Result<(RankSet, Vec<Entry>, Vec<Entry>), RankSet> {
    let whole = |e: &Entry| e.path.is_subset(path);
    if !(task.more.iter()).all(|e| whole(e) || e.path.is_disjoint(path)) {
        let mut all = task.receiver.path;
        for e in std::iter::once(&task.provider).chain(&task.more) {
            all.union_with(&e.path);
        }
        return Err(all);
    }
    let mut expected = task.receiver.path;
    expected.union_with(&task.provider.path);
    let mut folded = Vec::with_capacity(1 + task.more.len());
    folded.push(task.provider);
    let mut left = Vec::new();
    for e in task.more {
        if whole(&e) {
            expected.union_with(&e.path);
            folded.push(e);
        } else {
            left.push(e);
        }
    }
    if expected == *path {
        return Ok((expected, folded, left));
    }
    for e in &left {
        expected.union_with(&e.path);
    }
    Err(expected)
}
