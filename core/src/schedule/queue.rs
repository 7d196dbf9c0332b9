//! The master's queue of ready messages, in the order they became ready,
//! with the index a gathering decision reads instead of scanning the whole
//! queue (see [`Schedule::next_gathering`](super::Schedule::next_gathering)).
//!
//! Why an index: a flat master of `p` ranks takes about `p` decisions per
//! reduction, and while a node's receiver is busy its node's other
//! messages wait in the queue. A decision that scans the queue and the
//! tasks in flight costs O(p) each, O(p²) per reduction: seconds at a few
//! thousand ranks. With the index a decision costs a few word reads (the
//! open messages are bits, `seqset`), plus a node's messages when it is
//! held or released, and the providers it hands out.
//!
//! Each message has a sequence number, its place in the order; the
//! messages lie in slots by sequence number, so that appending, taking one
//! out and finding one by its number cost O(1), as the plain pairing of
//! [`Schedule::next`](super::Schedule::next) needs. For
//! gathering, each is classified once, at the first gathering decision
//! that sees it: *admitted* on a node (small, read in place, a live
//! member's own data) or *plain*. A node is *held* while a member
//! admitted there receives a task, and while the root waits for its
//! node's data; [`Queue::open`] lists every classified message that may
//! pair now: the plain ones and those of nodes not held.
//!
//! A message's class is decided again when its holder dies or lives again
//! ([`Queue::reclassify`]); whether it recovers is fixed, and where its
//! data lies changes only with a new message. So a class read from the
//! index is the class the rule would read now.

use super::seqset::SeqSet;
use super::Entry;
use crate::intmap::IntMap;
use std::collections::{BTreeSet, VecDeque};

/// What gathering knows of a queued message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Not classified yet.
    Fresh,
    /// Not admitted: pairs as any message.
    Plain,
    /// Admitted on this node.
    On(u64),
}

/// Ready messages by sequence number, and the gathering index.
#[derive(Debug, Clone)]
pub(super) struct Queue {
    /// Messages by sequence number from `base`: a message taken out
    /// leaves `None` until every one before it is taken too (the front
    /// slot is never `None`).
    slots: VecDeque<Option<(Entry, Class)>>,
    base: u64,
    live: usize,
    /// The group position whose messages are indexed (the root's: every
    /// gathering decision looks for it), and its queued messages.
    watched: usize,
    watched_seqs: BTreeSet<u64>,
    /// Whether a gathering decision was taken: until then nothing is
    /// classified, and the plain pairing keeps no list of new messages.
    indexed: bool,
    /// Queued messages no gathering decision has classified yet (once
    /// `indexed`).
    fresh: Vec<u64>,
    /// Admitted messages per node, in order. A node's list stays when it
    /// empties: the nodes are the job's, few, and a list made anew each
    /// time a node's first message comes would cost an allocation.
    by_node: IntMap<u64, NodeSeqs>,
    /// Classified messages that may pair now.
    open: SeqSet,
    /// Why each held node is held: its busy receivers, and the root.
    holds: IntMap<u64, usize>,
    /// The node a task's admitted receiver holds, by task id.
    busy: IntMap<u64, u64>,
    /// The root's node while the root waits for it.
    home: Option<u64>,
}

impl Queue {
    /// An empty queue whose messages of group position `watched` are
    /// found at once ([`Queue::first_of`]); others' by a scan.
    pub(super) fn new(watched: usize) -> Self {
        Queue {
            slots: VecDeque::new(),
            base: 0,
            live: 0,
            watched,
            watched_seqs: BTreeSet::new(),
            indexed: false,
            fresh: Vec::new(),
            by_node: IntMap::default(),
            open: SeqSet::default(),
            holds: IntMap::default(),
            busy: IntMap::default(),
            home: None,
        }
    }

    /// Appends a ready message; returns its sequence number.
    pub(super) fn push(&mut self, e: Entry) -> u64 {
        let seq = self.base + self.slots.len() as u64;
        if e.index == self.watched {
            self.watched_seqs.insert(seq);
        }
        self.slots.push_back(Some((e, Class::Fresh)));
        self.live += 1;
        if self.indexed {
            self.fresh.push(seq);
        }
        seq
    }

    /// Takes message `seq` out; returns it and the node it was admitted
    /// on, if it was.
    pub(super) fn remove(&mut self, seq: u64) -> (Entry, Option<u64>) {
        let (e, class) = self.slot_mut(seq).take().expect("a queued message");
        self.live -= 1;
        while self.slots.front().is_some_and(Option::is_none) {
            self.slots.pop_front();
            self.base += 1;
        }
        if e.index == self.watched {
            self.watched_seqs.remove(&seq);
        }
        let node = self.unclass(seq, class);
        // Every message before `base` is out now, `seq` too.
        self.open.forget_below(self.base);
        (e, node)
    }

    /// Takes `seq` out of the index of its class; returns its node.
    fn unclass(&mut self, seq: u64, class: Class) -> Option<u64> {
        match class {
            Class::Fresh => None,
            Class::Plain => {
                self.open.remove(seq);
                None
            }
            Class::On(n) => {
                self.open.remove(seq);
                if let Some(set) = self.by_node.get_mut(&n) {
                    set.remove(seq);
                }
                Some(n)
            }
        }
    }

    /// Takes every message out (the reduction is complete).
    pub(super) fn clear(&mut self) {
        let seqs: Vec<u64> = self.seqs().collect();
        for s in seqs {
            self.remove(s);
        }
        self.fresh.clear();
    }

    /// Keeps only the messages `keep` admits.
    pub(super) fn retain(&mut self, keep: impl Fn(&Entry) -> bool) {
        let out: Vec<u64> = (self.seqs()).filter(|&s| !keep(self.get(s))).collect();
        for s in out {
            self.remove(s);
        }
    }

    /// Message `seq`, queued.
    pub(super) fn get(&self, seq: u64) -> &Entry {
        self.entry(seq).expect("a queued message")
    }

    fn slot_mut(&mut self, seq: u64) -> &mut Option<(Entry, Class)> {
        let i = usize::try_from(seq - self.base).expect("a slot");
        &mut self.slots[i]
    }

    /// Message `seq`, if queued.
    pub(super) fn entry(&self, seq: u64) -> Option<&Entry> {
        let i = usize::try_from(seq.checked_sub(self.base)?).ok()?;
        self.slots.get(i)?.as_ref().map(|(e, _)| e)
    }

    /// The first message in order.
    pub(super) fn front(&self) -> Option<&Entry> {
        self.slots.front()?.as_ref().map(|(e, _)| e)
    }

    /// Every message, in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.slots.iter().flatten().map(|(e, _)| e)
    }

    /// Every message's sequence number, in order.
    pub(super) fn seqs(&self) -> impl Iterator<Item = u64> + '_ {
        let base = self.base;
        (self.slots.iter().enumerate())
            .filter(|(_, s)| s.is_some())
            .map(move |(i, _)| base + i as u64)
    }

    /// The number of queued messages.
    pub(super) fn len(&self) -> usize {
        self.live
    }

    /// The first queued message of group position `index` (a scan of the
    /// queue, unless `index` is the one watched).
    pub(super) fn first_of(&self, index: usize) -> Option<u64> {
        if index == self.watched {
            return self.watched_seqs.first().copied();
        }
        self.seqs().find(|&s| self.get(s).index == index)
    }

    /// Classifies every message no gathering decision has classified
    /// yet: admitted on `node(e)`, or plain where it is `None`.
    pub(super) fn classify_fresh(&mut self, node: impl Fn(&Entry) -> Option<u64>) {
        if !self.indexed {
            self.indexed = true;
            self.fresh = self.seqs().collect();
        }
        // Taken and given back emptied: its allocation serves every
        // decision (classifying pushes nothing to it).
        let mut fresh = std::mem::take(&mut self.fresh);
        for &seq in &fresh {
            if let Some(e) = self.entry(seq) {
                let at = node(e);
                self.classify(seq, at);
            }
        }
        fresh.clear();
        self.fresh = fresh;
    }

    /// Classifies message `seq` (if still queued and not yet classified):
    /// admitted on `node`, or plain.
    fn classify(&mut self, seq: u64, node: Option<u64>) {
        if self.entry(seq).is_none() {
            return;
        }
        let Some((_, class)) = self.slot_mut(seq) else {
            return;
        };
        if *class != Class::Fresh {
            return;
        }
        match node {
            Some(n) => {
                *class = Class::On(n);
                self.by_node.entry(n).or_default().insert(seq);
                if !self.holds.contains_key(&n) {
                    self.open.insert(seq);
                }
            }
            None => {
                *class = Class::Plain;
                self.open.insert(seq);
            }
        }
    }

    /// Group position `index` died or lives again: its queued messages
    /// are classified anew at the next gathering decision.
    pub(super) fn reclassify(&mut self, index: usize) {
        let seqs: Vec<u64> = self
            .seqs()
            .filter(|&s| self.get(s).index == index)
            .collect();
        for seq in seqs {
            let (_, slot) = self.slot_mut(seq).as_mut().expect("queued");
            let class = std::mem::replace(slot, Class::Fresh);
            if class != Class::Fresh {
                self.unclass(seq, class);
                self.fresh.push(seq);
            }
        }
    }

    /// Classified messages that may pair now, in order.
    pub(super) fn open(&self) -> impl Iterator<Item = u64> + '_ {
        self.open.iter()
    }

    /// The node message `seq` was admitted on, if it was.
    pub(super) fn node_of(&self, seq: u64) -> Option<u64> {
        let i = usize::try_from(seq.checked_sub(self.base)?).ok()?;
        match self.slots.get(i)?.as_ref()?.1 {
            Class::On(n) => Some(n),
            _ => None,
        }
    }

    /// The messages admitted on node `n`, in order, after `after`.
    pub(super) fn on_node(&self, n: u64, after: Option<u64>) -> impl Iterator<Item = u64> + '_ {
        let from = after.map_or(0, |s| s + 1);
        (self.by_node.get(&n))
            .into_iter()
            .flat_map(move |set| set.from(from))
    }

    /// Task `task_id`'s receiver was admitted on node `n`: the node is
    /// held until the task ends.
    pub(super) fn task_started(&mut self, task_id: u64, n: u64) {
        self.busy.insert(task_id, n);
        self.hold(n);
    }

    /// Task `task_id` ended (done, failed, or its receiver died).
    pub(super) fn task_ended(&mut self, task_id: u64) {
        // Most tasks hold nothing (large data, or no gathering): no lookup.
        if self.busy.is_empty() {
            return;
        }
        if let Some(n) = self.busy.remove(&task_id) {
            self.release(n);
        }
    }

    /// The root waits for node `home`'s data (`None`: for nobody's).
    pub(super) fn root_waits_at(&mut self, home: Option<u64>) {
        if self.home == home {
            return;
        }
        if let Some(h) = self.home.take() {
            self.release(h);
        }
        if let Some(h) = home {
            self.hold(h);
        }
        self.home = home;
    }

    fn hold(&mut self, n: u64) {
        let c = self.holds.entry(n).or_insert(0);
        *c += 1;
        if *c == 1 {
            for &s in self.by_node.get(&n).into_iter().flatten() {
                self.open.remove(s);
            }
        }
    }

    fn release(&mut self, n: u64) {
        let Some(c) = self.holds.get_mut(&n) else {
            return;
        };
        *c -= 1;
        if *c == 0 {
            self.holds.remove(&n);
            for &s in self.by_node.get(&n).into_iter().flatten() {
                self.open.insert(s);
            }
        }
    }
}

/// A node's admitted messages, in order.
///
/// Why a sorted deque, not a tree: a node's messages are few (its ranks'),
/// come at the back (a new message has the largest number) and leave at
/// the front (its first ones are handed out first), each at O(1); only a
/// message reclassified after a death, or taken from the middle, costs a
/// shift of the node's list.
#[derive(Debug, Clone, Default)]
struct NodeSeqs(VecDeque<u64>);

impl NodeSeqs {
    fn insert(&mut self, seq: u64) {
        if self.0.back().is_none_or(|&b| b < seq) {
            self.0.push_back(seq);
        } else if let Err(i) = self.0.binary_search(&seq) {
            self.0.insert(i, seq);
        }
    }

    fn remove(&mut self, seq: u64) {
        if self.0.front() == Some(&seq) {
            self.0.pop_front();
        } else if let Ok(i) = self.0.binary_search(&seq) {
            self.0.remove(i);
        }
    }

    /// The messages from `from` on, in order.
    fn from(&self, from: u64) -> impl Iterator<Item = u64> + '_ {
        let i = self.0.partition_point(|&s| s < from);
        self.0.range(i..).copied()
    }
}

impl<'a> IntoIterator for &'a NodeSeqs {
    type Item = &'a u64;
    type IntoIter = std::collections::vec_deque::Iter<'a, u64>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rankset::RankSet;

    fn e(index: usize) -> Entry {
        Entry {
            index,
            path: RankSet::single(index),
            recovering: false,
        }
    }

    fn open(q: &Queue) -> Vec<usize> {
        q.open().map(|s| q.get(s).index).collect()
    }

    #[test]
    fn a_held_nodes_messages_leave_open_and_come_back_in_order() {
        let mut q = Queue::new(0);
        let s: Vec<u64> = (0..5).map(|i| q.push(e(i))).collect();
        for (k, &seq) in s.iter().enumerate() {
            q.classify(seq, (k % 2 == 0).then_some(7));
        }
        assert_eq!(open(&q), vec![0, 1, 2, 3, 4]);
        q.task_started(10, 7);
        assert_eq!(open(&q), vec![1, 3]);
        // Held twice (a task and the root): open again only after both.
        q.root_waits_at(Some(7));
        q.task_ended(10);
        assert_eq!(open(&q), vec![1, 3]);
        q.root_waits_at(None);
        assert_eq!(open(&q), vec![0, 1, 2, 3, 4]);
        assert_eq!(
            q.on_node(7, Some(s[0])).collect::<Vec<_>>(),
            vec![s[2], s[4]]
        );
    }

    #[test]
    fn a_nodes_list_stays_sorted_wherever_its_messages_come_and_go() {
        let mut l = NodeSeqs::default();
        for s in [5, 9, 7, 1, 9, 12] {
            l.insert(s);
        }
        assert_eq!(l.from(0).collect::<Vec<_>>(), vec![1, 5, 7, 9, 12]);
        l.remove(1);
        l.remove(9);
        l.remove(4);
        assert_eq!(l.from(6).collect::<Vec<_>>(), vec![7, 12]);
        assert_eq!(l.from(0).collect::<Vec<_>>(), vec![5, 7, 12]);
        assert_eq!(l.from(13).count(), 0);
    }

    #[test]
    fn messages_taken_out_past_many_groups_of_numbers_leave_the_rest_open() {
        let mut q = Queue::new(0);
        let s: Vec<u64> = (0..10_000).map(|i| q.push(e(i % 50 + 1))).collect();
        q.classify_fresh(|m| (m.index % 2 == 0).then_some(m.index as u64));
        q.task_started(1, 2);
        for &seq in &s[..9_000] {
            q.remove(seq);
        }
        let open: Vec<u64> = q.open().collect();
        let want: Vec<u64> = (s[9_000..].iter().copied())
            .filter(|&x| q.get(x).index != 2)
            .collect();
        assert_eq!(open, want);
        q.task_ended(1);
        assert_eq!(q.open().collect::<Vec<_>>(), s[9_000..].to_vec());
    }

    #[test]
    fn new_messages_are_listed_only_once_gathering_began() {
        let mut q = Queue::new(0);
        let a = q.push(e(0));
        let b = q.push(e(1));
        q.remove(a);
        let seen = |q: &mut Queue| {
            let seen = std::cell::RefCell::new(Vec::new());
            q.classify_fresh(|m| {
                seen.borrow_mut().push(m.index);
                None
            });
            seen.into_inner()
        };
        // The first gathering decision classifies whatever is queued.
        assert_eq!(seen(&mut q), vec![1]);
        assert_eq!(q.first_of(1), Some(b));
        let c = q.push(e(2));
        assert_eq!(seen(&mut q), vec![2]);
        assert_eq!(seen(&mut q), Vec::<usize>::new());
        assert_eq!(q.open().collect::<Vec<_>>(), vec![b, c]);
    }

    #[test]
    fn a_message_classified_on_a_held_node_waits_and_removal_forgets_it() {
        let mut q = Queue::new(0);
        q.task_started(1, 3);
        let a = q.push(e(0));
        let b = q.push(e(1));
        q.classify_fresh(|_| Some(3));
        assert_eq!(open(&q), Vec::<usize>::new());
        assert_eq!(q.remove(a), (e(0), Some(3)));
        q.task_ended(1);
        assert_eq!(open(&q), vec![1]);
        assert_eq!(q.first_of(1), Some(b));
        assert_eq!(q.first_of(0), None);
        q.clear();
        assert_eq!(q.len(), 0);
        assert_eq!(open(&q), Vec::<usize>::new());
    }
}
