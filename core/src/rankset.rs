//! Paths: sets of group positions as bitsets.

use rkyv::{Archive, Deserialize, Serialize};
use smallvec::SmallVec;

/// The most group positions a [`RankSet`] holds, and so the most ranks of a
/// job: positions `0..MAX_POSITIONS` (4,194,304).
///
/// Why a bound: a set's words start at a word offset of 16 bits, so that a
/// set read from the wire spans at most 65,536 words beyond its own, and
/// what a union of two sets allocates stays bounded whatever a peer sends.
pub const MAX_POSITIONS: usize = (u16::MAX as usize + 1) * 64;

/// Words a [`RankSet`] holds without allocating: two, as many as a heap
/// allocation's pointer and length take in its place.
const INLINE_WORDS: usize = 2;

/// A set of group positions (`0..group.len()`), stored as 64-bit words
/// from the first word that holds a member to the last.
///
/// A path `P_i` says whose originals are folded into an intermediate value.
/// Union and disjointness are word-wise over the words the sets span: a
/// node's contiguous positions take a word or two wherever they lie in the
/// group, and only paths that span the group (a root's, at the end) take
/// `p / 64` words, 1,024 at 65,536 ranks. So a task's paths cost the master
/// and the wire a few words, not the whole group's.
#[derive(Debug, PartialEq, Eq, Hash, Default, Archive, Serialize, Deserialize)]
pub struct RankSet {
    /// The word of positions `64·first .. 64·first + 64` is `words[0]`.
    first: u16,
    /// Neither the first word nor the last is zero, and the empty set has
    /// no word and `first` 0: so `==` is the sets' equality. (A set from
    /// the wire in another form is compared as unequal, never misread.)
    ///
    /// Up to [`INLINE_WORDS`] words lie in the set itself: a single
    /// position's set, and a node's, cost no allocation, and the master
    /// makes one per ready message. Archived as a `Vec<u64>`'s words.
    words: SmallVec<[u64; INLINE_WORDS]>,
}

impl Clone for RankSet {
    /// Copies the words as one slice (the derived clone would push them
    /// one by one: the master clones a path per message it hands out).
    fn clone(&self) -> Self {
        RankSet {
            first: self.first,
            words: SmallVec::from_slice(&self.words),
        }
    }

    fn clone_from(&mut self, source: &Self) {
        self.first = source.first;
        self.words.clear();
        self.words.extend_from_slice(&source.words);
    }
}

impl RankSet {
    /// The empty set.
    pub fn new() -> Self {
        RankSet::default()
    }

    /// The set `{index}`.
    pub fn single(index: usize) -> Self {
        let mut s = RankSet::new();
        s.insert(index);
        s
    }

    /// The set `{0, .., n-1}`.
    pub fn full(n: usize) -> Self {
        assert!(n <= MAX_POSITIONS, "{n} positions, beyond {MAX_POSITIONS}");
        let mut words = SmallVec::from_elem(u64::MAX, n / 64);
        if !n.is_multiple_of(64) {
            words.push((1u64 << (n % 64)) - 1);
        }
        RankSet { first: 0, words }
    }

    fn start(&self) -> usize {
        usize::from(self.first)
    }

    fn end(&self) -> usize {
        self.start() + self.words.len()
    }

    /// The word of positions `64·w ..`, 0 outside the words held.
    fn word(&self, w: usize) -> u64 {
        (w.checked_sub(self.start()))
            .and_then(|i| self.words.get(i))
            .copied()
            .unwrap_or(0)
    }

    /// Adds `index`; returns false if it was already present. Panics
    /// beyond [`MAX_POSITIONS`] (a job that large is refused at start).
    pub fn insert(&mut self, index: usize) -> bool {
        assert!(
            index < MAX_POSITIONS,
            "position {index}, beyond {MAX_POSITIONS}"
        );
        let (w, bit) = (index / 64, 1u64 << (index % 64));
        let first = u16::try_from(w).expect("below MAX_POSITIONS");
        if self.words.is_empty() {
            self.first = first;
            self.words.push(bit);
            return true;
        }
        if w < self.start() {
            let pad = self.start() - w;
            self.words.insert_many(0, std::iter::repeat_n(0, pad));
            self.first = first;
        } else if w >= self.end() {
            self.words.resize(w - self.start() + 1, 0);
        }
        let i = w - self.start();
        let had = self.words[i] & bit != 0;
        self.words[i] |= bit;
        !had
    }

    /// Takes `index` out; true if it was in. Zero words at either end are
    /// dropped, so equal sets stay equal (`==` compares the words).
    pub fn remove(&mut self, index: usize) -> bool {
        if !self.contains(index) {
            return false;
        }
        let i = index / 64 - self.start();
        self.words[i] &= !(1 << (index % 64));
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
        if self.words.is_empty() {
            self.first = 0;
            return true;
        }
        let lead = self.words.iter().take_while(|&&w| w == 0).count();
        // A set read from the wire may hold members beyond
        // MAX_POSITIONS: its first word then stays where it is (the
        // offset cannot name it), its members unchanged.
        if let Ok(first) = u16::try_from(self.start() + lead) {
            self.words.drain(..lead);
            self.first = first;
        }
        true
    }

    /// True if `index` is in the set.
    pub fn contains(&self, index: usize) -> bool {
        self.word(index / 64) & (1 << (index % 64)) != 0
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// True if the set has no member.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// True if the two sets share no member.
    pub fn is_disjoint(&self, other: &RankSet) -> bool {
        let (lo, hi) = (self.start().max(other.start()), self.end().min(other.end()));
        (lo..hi).all(|w| self.word(w) & other.word(w) == 0)
    }

    /// True if every member of `self` is in `other`.
    pub fn is_subset(&self, other: &RankSet) -> bool {
        let start = self.start();
        (self.words.iter().enumerate()).all(|(i, &w)| w & !other.word(start + i) == 0)
    }

    /// `self ∪ other`.
    pub fn union(&self, other: &RankSet) -> RankSet {
        if self.words.is_empty() {
            return other.clone();
        }
        if other.words.is_empty() {
            return self.clone();
        }
        let lo = self.start().min(other.start());
        let hi = self.end().max(other.end());
        let mut words = SmallVec::from_elem(0u64, hi - lo);
        for s in [self, other] {
            let at = s.start() - lo;
            for (w, &x) in words[at..].iter_mut().zip(&s.words) {
                *w |= x;
            }
        }
        RankSet {
            first: u16::try_from(lo).expect("one of the two sets' own first word"),
            words,
        }
    }

    /// Makes `self` `self ∪ other` in place: the same set as
    /// [`RankSet::union`], without a new allocation unless `other` spans
    /// words beyond `self`'s (folding small paths into a root's large one
    /// costs their words, not the root's).
    pub fn union_with(&mut self, other: &RankSet) {
        if other.words.is_empty() {
            return;
        }
        if self.words.is_empty() {
            self.clone_from(other);
            return;
        }
        if other.start() < self.start() {
            let pad = self.start() - other.start();
            self.words.insert_many(0, std::iter::repeat_n(0, pad));
            self.first = other.first;
        }
        if other.end() > self.end() {
            self.words.resize(other.end() - self.start(), 0);
        }
        let at = other.start() - self.start();
        for (w, &x) in self.words[at..].iter_mut().zip(&other.words) {
            *w |= x;
        }
    }

    /// True if the set is exactly `{0, .., n-1}`.
    ///
    /// Word by word, stopping at the first that differs: the scheduler
    /// asks it of every queue front, and a path that is not full (nearly
    /// every one) is told from its first words, not by counting its bits.
    pub fn is_full(&self, n: usize) -> bool {
        let (whole, rest) = (n / 64, n % 64);
        let tail = match rest {
            0 => 0,
            r => (1u64 << r) - 1,
        };
        (0..whole).all(|w| self.word(w) == u64::MAX)
            && self.word(whole) == tail
            && (whole + 1..self.end()).all(|w| self.word(w) == 0)
    }

    /// Members in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        let start = self.start();
        self.words.iter().enumerate().flat_map(move |(wi, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros() as usize;
                w &= w - 1;
                Some((start + wi) * 64 + b)
            })
        })
    }
}

impl ArchivedRankSet {
    /// Converts the archived set back to a native one.
    pub fn to_native(&self) -> RankSet {
        RankSet {
            first: self.first.to_native(),
            words: self.words.iter().map(|w| w.to_native()).collect(),
        }
    }
}

impl FromIterator<usize> for RankSet {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Self {
        let mut s = RankSet::new();
        for i in iter {
            s.insert(i);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn is_full_is_exactly_every_position_below_n(
            members in proptest::collection::btree_set(0usize..300, 0..300),
            n in 0usize..300,
        ) {
            let s: RankSet = members.iter().copied().collect();
            let want = members.len() == n && members.iter().all(|&i| i < n);
            prop_assert_eq!(s.is_full(n), want);
            prop_assert!(RankSet::full(n).is_full(n));
            let every: RankSet = (0..n).collect();
            prop_assert!(every.is_full(n));
            prop_assert!(!every.is_full(n + 1));
            prop_assert_eq!(every.is_full(n.saturating_sub(1)), n == 0);
        }
    }

    /// Operations on a set, checked against `BTreeSet`.
    #[derive(Debug, Clone)]
    enum Op {
        Insert(usize),
        Remove(usize),
        Union(Vec<usize>),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Positions near each other (a node's) and far apart (the group's).
        let at = prop_oneof![
            0usize..300,
            4000usize..4300,
            (MAX_POSITIONS - 200)..MAX_POSITIONS
        ];
        prop_oneof![
            at.clone().prop_map(Op::Insert),
            at.clone().prop_map(Op::Remove),
            proptest::collection::vec(at, 0..6).prop_map(Op::Union),
        ]
    }

    proptest! {
        #[test]
        fn a_set_is_the_set_of_its_members_whatever_its_words_span(
            ops in proptest::collection::vec(op(), 0..40),
            probe in proptest::collection::vec(0usize..4400, 0..20),
        ) {
            let mut s = RankSet::new();
            let mut m = std::collections::BTreeSet::new();
            for o in ops {
                match o {
                    Op::Insert(i) => prop_assert_eq!(s.insert(i), m.insert(i)),
                    Op::Remove(i) => prop_assert_eq!(s.remove(i), m.remove(&i)),
                    Op::Union(v) => {
                        let other: RankSet = v.iter().copied().collect();
                        prop_assert_eq!(s.is_disjoint(&other), v.iter().all(|i| !m.contains(i)));
                        prop_assert_eq!(other.is_subset(&s), v.iter().all(|i| m.contains(i)));
                        let mut t = s.clone();
                        t.union_with(&other);
                        s = s.union(&other);
                        prop_assert_eq!(&t, &s);
                        m.extend(v);
                    }
                }
                prop_assert_eq!(s.iter().collect::<Vec<_>>(), m.iter().copied().collect::<Vec<_>>());
                prop_assert_eq!(s.len(), m.len());
                prop_assert_eq!(s.is_empty(), m.is_empty());
                // The same members built another way: equal, and so hashed alike.
                prop_assert_eq!(&s, &m.iter().copied().collect::<RankSet>());
                prop_assert!(s.is_subset(&s));
            }
            for i in probe {
                prop_assert_eq!(s.contains(i), m.contains(&i));
            }
        }
    }

    #[test]
    fn a_nodes_positions_take_a_word_wherever_they_lie() {
        let far: RankSet = (65_520..65_536).collect();
        assert_eq!(far.words.len(), 1);
        let both = far.union(&RankSet::single(65_000));
        assert_eq!((both.start(), both.words.len()), (65_000 / 64, 9));
        assert!(!both.is_full(65_536));
        let wire = rkyv::to_bytes::<rkyv::rancor::Error>(&both).unwrap();
        assert!(wire.len() < 128, "{} bytes", wire.len());
        let back = rkyv::from_bytes::<RankSet, rkyv::rancor::Error>(&wire).unwrap();
        assert_eq!(back, both);
    }

    #[test]
    fn a_set_from_the_wire_spans_at_most_its_words_beyond_the_bound() {
        // The largest offset a peer can send, and a set at 0: their union
        // allocates 65,536 words, not more.
        let high = RankSet {
            first: u16::MAX,
            words: vec![1].into(),
        };
        let u = high.union(&RankSet::single(0));
        assert_eq!(u.words.len(), usize::from(u16::MAX) + 1);
        assert!(u.contains(MAX_POSITIONS - 64) && u.contains(0));
    }

    #[test]
    fn a_set_from_the_wire_beyond_the_bound_keeps_its_members_on_removal() {
        // The largest offset, a member in its word and one beyond it.
        let mut s = RankSet {
            first: u16::MAX,
            words: vec![1, 1].into(),
        };
        assert!(s.remove(MAX_POSITIONS - 64));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![MAX_POSITIONS]);
        assert!(s.contains(MAX_POSITIONS) && !s.is_empty());
        assert!(s.remove(MAX_POSITIONS));
        assert_eq!(s, RankSet::new());
    }

    #[test]
    fn a_path_from_the_wire_in_another_form_is_refused_not_misread() {
        use crate::schedule::{Schedule, ScheduleError, Step};
        // {0, 1} with a trailing zero word: the same members, another form.
        let padded = RankSet {
            first: 0,
            words: vec![0b11, 0].into(),
        };
        let normal: RankSet = [0, 1].into_iter().collect();
        assert_eq!(padded.iter().collect::<Vec<_>>(), vec![0, 1]);
        assert_ne!(padded, normal);
        let mut s = Schedule::new(2, 0);
        s.join(0).unwrap();
        s.join(1).unwrap();
        let Some(Step::Task(t)) = s.next(|_, _| false) else {
            panic!("a task");
        };
        assert!(matches!(
            s.task_done(t.task_id, t.receiver.index, &padded),
            Err(ScheduleError::BadPath { .. })
        ));
        // A protocol error: the master ends the reduction with it.
    }

    #[test]
    fn basic_ops() {
        let a: RankSet = [0, 5, 64, 65_535].into_iter().collect();
        let b = RankSet::single(7);
        assert!(a.is_disjoint(&b));
        let u = a.union(&b);
        assert_eq!(u.len(), 5);
        assert_eq!(u.iter().collect::<Vec<_>>(), vec![0, 5, 7, 64, 65_535]);
        assert!(!u.is_disjoint(&a));
        assert!(RankSet::full(65_536).is_full(65_536));
        assert!(RankSet::full(3).is_full(3));
        assert!(!RankSet::full(3).is_full(4));
        assert!(RankSet::full(0).is_empty());
    }

    #[test]
    fn union_of_halves_is_full() {
        let n = 65_536;
        let even: RankSet = (0..n).step_by(2).collect();
        let odd: RankSet = (1..n).step_by(2).collect();
        assert!(even.is_disjoint(&odd));
        assert!(even.union(&odd).is_full(n));
    }
}
