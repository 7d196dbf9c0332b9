//! Spreading one value to every member of a group, ready-first: the state
//! machine of an allreduce's second half and of a broadcast, as the
//! coordinator (the master's rank) runs it. No I/O: events in, actions out.
//!
//! A *source* (a reduction's root once it holds the result, or a
//! broadcast's root) announces that it holds the value; every other member
//! asks for it. The coordinator pairs each asking member with a holder
//! that is free, ready-first: the holder that has waited longest serves the
//! member that has waited longest, and a member that got the value holds
//! it and serves the next one. A holder serves [`SERVES_AT_ONCE`] members
//! at a time, so that one slow (or stopped) member does not hold up
//! everyone behind its holder: with `k` at once the holders grow `k + 1`
//! fold every round, about `log_{k+1} p` rounds for `p` members when
//! everyone asks at once (each round as long as `k` fetches sharing the
//! holder's link), and a late member waits for one fetch from a free
//! holder.
//!
//! # What a member's death does
//!
//! A dead holder serves nobody again: the member fetching from it is given
//! another holder. The spread is *lost* only once no live rank holds the
//! value and no fetch that could have got it is still out: every member
//! that asks, then and later, is told [`Action::Fail`]. A member that got
//! the value is a holder until the spread ends, so the coordinator can never
//! fail a live member while another live member holds the value: the
//! survivors all get the value, or all the same error.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// How many members one holder serves at once (see the module's doc).
pub const SERVES_AT_ONCE: usize = 2;

/// What the coordinator hears about one spread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The source holds the value (its first message).
    Have(u32),
    /// A member other than the source asks for the value.
    Want(u32),
    /// A member fetched the value: it holds it now.
    Fetched(u32),
    /// A member's fetch failed (its holder died, or the link broke).
    FetchFailed(u32),
    /// A rank was declared failed (or, for this spread only, the source
    /// said it cannot serve the value).
    Dead(u32),
}

/// What the coordinator must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Tell `fetcher` to fetch the value from `holder`.
    Fetch {
        /// The member that fetches.
        fetcher: u32,
        /// The member that serves.
        holder: u32,
    },
    /// Tell `rank` the spread failed: no live rank holds the value.
    Fail {
        /// The member told.
        rank: u32,
    },
    /// Every live member holds the value: tell these holders to let go.
    Finish {
        /// The live holders.
        holders: Vec<u32>,
    },
}

/// Where one spread stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The source's value is not announced yet.
    Awaiting,
    /// Holders serve the members that asked.
    Serving,
    /// Every live member holds the value.
    Done,
    /// No live rank holds the value: every member that asks is failed.
    Lost,
}

/// One spread at the coordinator.
#[derive(Clone, Debug)]
pub struct Spread {
    members: BTreeSet<u32>,
    source: u32,
    phase: Phase,
    /// Live members that hold the value.
    holders: BTreeSet<u32>,
    /// A holder's free serving slots (one entry per slot), longest-free
    /// first.
    free: VecDeque<u32>,
    /// Slots per holder.
    serves: usize,
    /// Members waiting for a holder, longest-waiting first.
    wanting: VecDeque<u32>,
    /// Fetches out: fetcher → holder.
    fetching: BTreeMap<u32, u32>,
    dead: BTreeSet<u32>,
    /// Members told the spread failed.
    failed: BTreeSet<u32>,
}

impl Spread {
    /// A spread of `source`'s value to `members` (which include it), with
    /// `dead` the ranks already known failed.
    pub fn new(members: impl IntoIterator<Item = u32>, source: u32, dead: &[u32]) -> Spread {
        Spread::serving(members, source, dead, SERVES_AT_ONCE)
    }

    /// As [`Spread::new`], each holder serving `serves` members at once
    /// (at least one).
    pub fn serving(
        members: impl IntoIterator<Item = u32>,
        source: u32,
        dead: &[u32],
        serves: usize,
    ) -> Spread {
        let members: BTreeSet<u32> = members.into_iter().collect();
        let dead = dead
            .iter()
            .copied()
            .filter(|r| members.contains(r))
            .collect();
        Spread {
            members,
            source,
            phase: Phase::Awaiting,
            holders: BTreeSet::new(),
            free: VecDeque::new(),
            serves: serves.max(1),
            wanting: VecDeque::new(),
            fetching: BTreeMap::new(),
            dead,
            failed: BTreeSet::new(),
        }
    }

    /// Where it stands.
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// The value's source.
    pub fn source(&self) -> u32 {
        self.source
    }

    /// Whether `rank` is a member.
    pub fn is_member(&self, rank: u32) -> bool {
        self.members.contains(&rank)
    }

    /// Nothing more can happen: done, or lost with every live member told.
    pub fn is_over(&self) -> bool {
        match self.phase {
            Phase::Done => true,
            Phase::Lost => self
                .members
                .iter()
                .all(|r| self.dead.contains(r) || self.failed.contains(r)),
            _ => false,
        }
    }

    /// Applies `ev`; returns what to do. Events from ranks that are not
    /// members, or already dead, change nothing.
    pub fn on(&mut self, ev: Event) -> Vec<Action> {
        let mut out = Vec::new();
        match ev {
            Event::Dead(r) => self.died(r),
            Event::Have(r)
                if self.alive(r) && r == self.source && self.phase == Phase::Awaiting =>
            {
                self.phase = Phase::Serving;
                self.hold(r);
            }
            Event::Want(r) if self.alive(r) && r != self.source => {
                if self.phase == Phase::Lost {
                    self.fail(r, &mut out);
                } else if !self.holders.contains(&r)
                    && !self.wanting.contains(&r)
                    && !self.fetching.contains_key(&r)
                {
                    self.wanting.push_back(r);
                }
            }
            Event::Fetched(r) if self.alive(r) => {
                if let Some(h) = self.fetching.remove(&r) {
                    self.release(h);
                    self.hold(r);
                }
            }
            Event::FetchFailed(r) if self.alive(r) => {
                if let Some(h) = self.fetching.remove(&r) {
                    self.release(h);
                    // Back at the head: it waited longest.
                    self.wanting.push_front(r);
                    // Another free holder first, if there is one.
                    let n = self.free.len();
                    self.free.retain(|x| *x != h);
                    for _ in self.free.len()..n {
                        self.free.push_back(h);
                    }
                }
            }
            _ => {}
        }
        self.settle(&mut out);
        out
    }

    fn alive(&self, r: u32) -> bool {
        self.members.contains(&r) && !self.dead.contains(&r)
    }

    fn hold(&mut self, r: u32) {
        if self.holders.insert(r) {
            for _ in 0..self.serves {
                self.free.push_back(r);
            }
        }
    }

    /// `h` finished one serve (either way): that slot is free again if
    /// `h` still holds.
    fn release(&mut self, h: u32) {
        if self.holders.contains(&h) {
            self.free.push_back(h);
        }
    }

    fn died(&mut self, r: u32) {
        if !self.members.contains(&r) || !self.dead.insert(r) {
            return;
        }
        self.holders.remove(&r);
        self.free.retain(|x| *x != r);
        self.wanting.retain(|x| *x != r);
        if let Some(h) = self.fetching.remove(&r) {
            self.release(h);
        }
        // A fetch from `r` fails at its fetcher, which says so: until then
        // it may still have got the value, so the spread is not lost yet.
    }

    fn fail(&mut self, r: u32, out: &mut Vec<Action>) {
        if self.failed.insert(r) {
            out.push(Action::Fail { rank: r });
        }
    }

    /// Pairs free holders with waiting members, then decides the end.
    fn settle(&mut self, out: &mut Vec<Action>) {
        if matches!(self.phase, Phase::Done | Phase::Lost) {
            return;
        }
        while !self.wanting.is_empty() && !self.free.is_empty() {
            let (Some(fetcher), Some(holder)) = (self.wanting.pop_front(), self.free.pop_front())
            else {
                break;
            };
            self.fetching.insert(fetcher, holder);
            out.push(Action::Fetch { fetcher, holder });
        }
        let source_gone = self.dead.contains(&self.source);
        if self.holders.is_empty() && self.fetching.is_empty() && source_gone {
            self.phase = Phase::Lost;
            for r in std::mem::take(&mut self.wanting) {
                self.fail(r, out);
            }
            return;
        }
        let all = self
            .members
            .iter()
            .all(|r| self.dead.contains(r) || self.holders.contains(r));
        if all && self.phase == Phase::Serving {
            self.phase = Phase::Done;
            out.push(Action::Finish {
                holders: self.holders.iter().copied().collect(),
            });
        }
    }
}

#[cfg(test)]
mod tests;
