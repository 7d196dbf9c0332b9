//! A set of queued messages' sequence numbers as bits: the gathering
//! index's list of the messages that may pair now ([`super::queue`]).
//!
//! Why bits: a message enters and leaves that list at each task of its
//! node (the node is held while a member receives one, and every message
//! of a held node waits), so each decision changes it by a node's
//! messages. As bits, a change costs a word's update, not a tree's
//! rebalancing, and the sequence numbers of a queue's messages lie in a
//! window as wide as the queue, so the bits stay few.
//!
//! Two levels: a word per 64 sequence numbers, and a summary bit per word
//! that is not zero, so that the first member at or after a number is
//! found by skipping 4,096 absent numbers per summary word read.

/// Sequence numbers per word, and words per summary word.
const W: u64 = 64;

/// A set of sequence numbers, in order.
#[derive(Debug, Clone, Default)]
pub(super) struct SeqSet {
    /// The first group held: group `g` is the sequence numbers
    /// `W·W·g .. W·W·(g + 1)`, its words `words[W·(g - first) ..][..W]`.
    first: u64,
    /// `W` words per group held; bit `b` of word `w` is the number
    /// `W·(W·first + w) + b`.
    words: Vec<u64>,
    /// Bit `j` of `summary[k]` is set iff `words[W·k + j]` is not zero.
    /// Empty groups are dropped only below the queue's first message
    /// ([`SeqSet::forget_below`]): no number there comes back, so a
    /// group is never dropped and made again as its node's messages
    /// leave and come back.
    summary: Vec<u64>,
    /// Every summary word before `summary[lead]` is zero: a search for
    /// the first member starts there, not at the first group held
    /// (the queue's front waits, held, more often than not).
    lead: usize,
}

impl SeqSet {
    /// Adds `seq`.
    pub(super) fn insert(&mut self, seq: u64) {
        let g = seq / (W * W);
        if self.summary.is_empty() {
            self.first = g;
        }
        if g < self.first {
            let more = usize::try_from(self.first - g).expect("a window of groups");
            self.summary.splice(0..0, std::iter::repeat_n(0, more));
            (self.words).splice(0..0, std::iter::repeat_n(0, more * W as usize));
            self.first = g;
            self.lead += more;
        }
        let end = usize::try_from(g - self.first + 1).expect("a window of groups");
        if end > self.summary.len() {
            self.summary.resize(end, 0);
            self.words.resize(end * W as usize, 0);
        }
        let w = self.word_at(seq);
        self.words[w] |= 1 << (seq % W);
        let k = w / W as usize;
        self.summary[k] |= 1 << (w as u64 % W);
        self.lead = self.lead.min(k);
    }

    /// Takes `seq` out (if it is in).
    pub(super) fn remove(&mut self, seq: u64) {
        let g = seq / (W * W);
        if g < self.first || g >= self.first + self.summary.len() as u64 {
            return;
        }
        let w = self.word_at(seq);
        self.words[w] &= !(1 << (seq % W));
        let k = w / W as usize;
        if self.words[w] == 0 {
            self.summary[k] &= !(1 << (w as u64 % W));
        }
        if k == self.lead {
            while self.summary.get(self.lead) == Some(&0) {
                self.lead += 1;
            }
        }
    }

    /// No number below `seq` is a member any more, nor will be: the
    /// groups wholly below it are dropped, so that the groups held span
    /// the queue's messages, not every number handed out.
    pub(super) fn forget_below(&mut self, seq: u64) {
        let below = (seq / (W * W)).saturating_sub(self.first);
        let drop = usize::try_from(below).map_or(usize::MAX, |b| b.min(self.summary.len()));
        if drop == 0 {
            return;
        }
        debug_assert!(
            self.summary[..drop].iter().all(|&x| x == 0),
            "a member below {seq}"
        );
        self.summary.drain(..drop);
        self.words.drain(..drop * W as usize);
        self.first += drop as u64;
        self.lead = self.lead.saturating_sub(drop);
    }

    /// The index in `words` of `seq`'s word (its group is held).
    fn word_at(&self, seq: u64) -> usize {
        usize::try_from(seq / W - self.first * W).expect("a held group")
    }

    /// The first member at or after `from`.
    pub(super) fn first_from(&self, from: u64) -> Option<u64> {
        let base = self.first * W * W;
        let lead = base + (self.lead as u64) * W * W;
        let from = from.max(lead);
        let w = usize::try_from(from / W - self.first * W).ok()?;
        let here = self.words.get(w)? & (u64::MAX << (from % W));
        if here != 0 {
            return Some(base + W * w as u64 + u64::from(here.trailing_zeros()));
        }
        // The words after `w`: the rest of its group, then whole groups.
        let k = w / W as usize;
        let rest = match (w as u64 % W) + 1 {
            W => 0,
            b => self.summary[k] & (u64::MAX << b),
        };
        let (k, bits) = std::iter::once((k, rest))
            .chain((k + 1..self.summary.len()).map(|k| (k, self.summary[k])))
            .find(|&(_, bits)| bits != 0)?;
        let w = k * W as usize + bits.trailing_zeros() as usize;
        let bit = self.words[w].trailing_zeros();
        Some(base + W * w as u64 + u64::from(bit))
    }

    /// Every member, in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        std::iter::successors(self.first_from(0), |&s| self.first_from(s + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        #[test]
        fn a_seqset_is_the_set_of_its_members_in_order(
            ops in proptest::collection::vec(
                (0..5u8, prop_oneof![0u64..200, 0u64..20_000, 100_000u64..100_100]),
                0..200,
            ),
            probes in proptest::collection::vec(0u64..120_000, 0..10),
        ) {
            let mut s = SeqSet::default();
            let mut m = BTreeSet::new();
            for (op, seq) in ops {
                match op {
                    0 | 1 => {
                        s.insert(seq);
                        m.insert(seq);
                    }
                    2 | 3 => {
                        s.remove(seq);
                        m.remove(&seq);
                    }
                    _ => {
                        // The queue's first message is now `seq`.
                        for x in m.range(..seq).copied().collect::<Vec<_>>() {
                            s.remove(x);
                            m.remove(&x);
                        }
                        s.forget_below(seq);
                        prop_assert!(s.summary.is_empty() || (s.first + 1) * W * W > seq);
                    }
                }
                prop_assert_eq!(s.iter().collect::<Vec<_>>(), m.iter().copied().collect::<Vec<_>>());
                prop_assert_eq!(s.words.len(), s.summary.len() * W as usize);
                prop_assert!(s.summary.iter().take(s.lead).all(|&x| x == 0));
            }
            for p in probes {
                prop_assert_eq!(s.first_from(p), m.range(p..).next().copied());
            }
        }
    }

    #[test]
    fn members_far_apart_are_found_across_empty_groups() {
        let mut s = SeqSet::default();
        for seq in [5, 4_095, 4_096, 70_000, 70_001] {
            s.insert(seq);
        }
        assert_eq!(s.first_from(6), Some(4_095));
        assert_eq!(s.first_from(4_097), Some(70_000));
        s.remove(5);
        s.remove(4_095);
        s.remove(4_096);
        assert_eq!(s.first_from(0), Some(70_000));
        // The groups below the queue's first message are dropped.
        s.forget_below(70_000);
        assert_eq!(s.summary.len(), 1);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![70_000, 70_001]);
        s.insert(3);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![3, 70_000, 70_001]);
        assert_eq!(s.first_from(71_000), None);
    }
}
