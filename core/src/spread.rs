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
//! on other nodes at a time, so that one slow (or stopped) member does not
//! hold up everyone behind its holder: with `k` at once the holders grow
//! `k + 1` fold every round, about `log_{k+1} p` rounds for `p` members
//! when everyone asks at once (each round as long as `k` fetches sharing
//! the holder's link), and a late member waits for one fetch from a free
//! holder.
//!
//! A member whose node holds the value already fetches from the first
//! holder there at once, however many others it serves
//! ([`Spread::with_nodes`]): a same-node fetch reads the holder's memory
//! and costs the holder no link, only its answer, so every member of a
//! node fetches in the same round as the first holder there. The first,
//! because the value lies in its own memory (it is the source, or fetched
//! it from another node), where a fetcher can keep a view of it; a later
//! holder there may hold a view of the first's, which a fetcher would
//! have to copy. Each round
//! costs two messages through the coordinator, which wait for a core
//! where ranks outnumber cores (the book's Architecture chapter, Allreduce
//! and broadcast, has the figures). Without nodes known, every holder is
//! taken for a remote one.
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
//!
//! # What the coordinator's death does
//!
//! Its state dies with it; the members keep theirs, and holders keep
//! serving. Each live rank reports to the new coordinator what it holds
//! and what it wants or fetches ([`Event::Holds`], [`Event::Want`],
//! [`Event::Fetching`], then
//! [`Event::Reported`]), and the spreads it was told had finished
//! ([`Event::Finished`]). A spread rebuilt from reports
//! ([`Spread::awaiting_reports`]) is not declared lost while a live member
//! has not reported: that member may hold the value. So the invariant
//! above holds across a takeover too.

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
    /// A member holds the value, though this coordinator did not send it
    /// to fetch it: its report after a takeover, or a fetch an earlier
    /// coordinator sent it on.
    Holds(u32),
    /// A member fetches the value from `holder` on an earlier
    /// coordinator's word (its report after a takeover): the fetch is out
    /// until the member says how it ended.
    Fetching {
        /// The member that fetches.
        fetcher: u32,
        /// The member it fetches from.
        holder: u32,
    },
    /// A member's report to this coordinator (after a takeover) is in:
    /// what it holds or wants was said before this.
    Reported(u32),
    /// An earlier coordinator told a member that every live member held
    /// the value: the spread is done.
    Finished(u32),
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
    /// Tell `rank`, which waits for the value, that the spread finished
    /// without it (a replacement redoing a finished spread, whose report
    /// to a new coordinator came before one that said it finished):
    /// nobody holds the value any more.
    TooLate {
        /// The member told.
        rank: u32,
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
    /// Fetches out: fetcher → its serve.
    fetching: BTreeMap<u32, Serve>,
    /// Each member's node, where known (see [`Spread::with_nodes`]).
    nodes: BTreeMap<u32, u64>,
    /// The live holders of each known node.
    holders_on: BTreeMap<u64, BTreeSet<u32>>,
    /// When each live holder began to hold (a count of holds), for the
    /// first holder of a node.
    held_at: BTreeMap<u32, u64>,
    /// Holds so far.
    holds: u64,
    /// The holder each fetcher's last fetch failed from: tried last.
    failed_from: BTreeMap<u32, u32>,
    dead: BTreeSet<u32>,
    /// Members told the spread failed.
    failed: BTreeSet<u32>,
    /// Live members whose report to this coordinator is awaited (after a
    /// takeover): the spread is not lost before each reported or died.
    unreported: BTreeSet<u32>,
}

/// One fetch out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Serve {
    holder: u32,
    /// It takes one of the holder's slots (the fetcher is on another node,
    /// or nodes are unknown); a same-node fetch takes none.
    slot: bool,
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
            nodes: BTreeMap::new(),
            holders_on: BTreeMap::new(),
            held_at: BTreeMap::new(),
            holds: 0,
            failed_from: BTreeMap::new(),
            dead,
            failed: BTreeSet::new(),
            unreported: BTreeSet::new(),
        }
    }

    /// The same spread, rebuilt by a coordinator that took over: the
    /// members `ranks` (those alive that have not reported yet) may hold
    /// the value, so it is not declared lost before each of them
    /// [`Event::Reported`] or died.
    pub fn awaiting_reports(mut self, ranks: impl IntoIterator<Item = u32>) -> Spread {
        self.unreported = ranks.into_iter().filter(|r| self.alive(*r)).collect();
        self
    }

    /// The same spread, knowing each member's node (`(member, node)`,
    /// node 0 unknown): a member fetches from a holder on its own node as
    /// soon as there is one, without waiting for a slot (see the module's
    /// doc).
    pub fn with_nodes(mut self, nodes: impl IntoIterator<Item = (u32, u64)>) -> Spread {
        self.nodes = nodes
            .into_iter()
            .filter(|&(r, n)| n != 0 && self.members.contains(&r))
            .collect();
        self
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
            Event::Have(r) if self.alive(r) && r == self.source => self.holds_now(r, &mut out),
            Event::Want(r) if self.members.contains(&r) && r != self.source => {
                // A member counted dead asks: only its replacement speaks
                // for it now (a dead process's messages are read before its
                // death is declared), redoing its call: a member again.
                if self.dead.remove(&r) {
                    self.failed.remove(&r);
                }
                if self.phase == Phase::Lost {
                    self.fail(r, &mut out);
                } else if !self.holders.contains(&r)
                    && !self.wanting.contains(&r)
                    && !self.fetching.contains_key(&r)
                {
                    self.wanting.push_back(r);
                }
            }
            Event::Fetched(r) if self.alive(r) => match self.fetching.remove(&r) {
                Some(serve) => {
                    self.release(serve);
                    self.failed_from.remove(&r);
                    self.hold(r);
                }
                // Sent on by an earlier coordinator: it holds all the same.
                None => self.holds_now(r, &mut out),
            },
            Event::Holds(r) if self.alive(r) => self.holds_now(r, &mut out),
            Event::Fetching { fetcher, holder }
                if self.alive(fetcher) && !self.holders.contains(&fetcher) =>
            {
                self.wanting.retain(|x| *x != fetcher);
                // No slot of the holder's: this coordinator did not count
                // it out.
                let serve = Serve {
                    holder,
                    slot: false,
                };
                self.fetching.entry(fetcher).or_insert(serve);
            }
            Event::Reported(r) => {
                self.unreported.remove(&r);
            }
            Event::Finished(_) if self.phase != Phase::Done => {
                self.phase = Phase::Done;
                out.push(Action::Finish {
                    holders: self.holders.iter().copied().collect(),
                });
                // No holder serves any more: whoever still waits or
                // fetches would wait for ever.
                let waiting = std::mem::take(&mut self.wanting);
                let fetching = std::mem::take(&mut self.fetching);
                let late = waiting.into_iter().chain(fetching.into_keys());
                out.extend(late.map(|rank| Action::TooLate { rank }));
            }
            Event::FetchFailed(r) if self.alive(r) => {
                if let Some(serve) = self.fetching.remove(&r) {
                    self.release(serve);
                    let h = serve.holder;
                    self.failed_from.insert(r, h);
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

    /// `r` holds the value, however it got it: a holder from now on (told
    /// at once to let go if the spread is done).
    fn holds_now(&mut self, r: u32, out: &mut Vec<Action>) {
        match self.phase {
            Phase::Done => {
                self.hold(r);
                out.push(Action::Finish { holders: vec![r] });
            }
            // Every live member reported holding nothing: none can hold it.
            Phase::Lost => {}
            Phase::Awaiting | Phase::Serving => {
                self.wanting.retain(|x| *x != r);
                if let Some(serve) = self.fetching.remove(&r) {
                    self.release(serve);
                }
                self.hold(r);
            }
        }
    }

    fn alive(&self, r: u32) -> bool {
        self.members.contains(&r) && !self.dead.contains(&r)
    }

    fn hold(&mut self, r: u32) {
        if self.phase == Phase::Awaiting {
            self.phase = Phase::Serving;
        }
        if self.holders.insert(r) {
            self.held_at.insert(r, self.holds);
            self.holds += 1;
            if let Some(&n) = self.nodes.get(&r) {
                self.holders_on.entry(n).or_default().insert(r);
            }
            for _ in 0..self.serves {
                self.free.push_back(r);
            }
        }
    }

    /// One serve ended (either way): its slot is free again if its
    /// holder still holds.
    fn release(&mut self, serve: Serve) {
        let h = serve.holder;
        if serve.slot && self.holders.contains(&h) {
            self.free.push_back(h);
        }
    }

    /// A holder on `fetcher`'s node: the first to hold there, the one its
    /// last fetch failed from only if no other.
    fn near_holder(&self, fetcher: u32) -> Option<u32> {
        let node = self.nodes.get(&fetcher)?;
        let avoid = self.failed_from.get(&fetcher).copied();
        self.holders_on.get(node)?.iter().copied().min_by_key(|h| {
            let since = self.held_at.get(h).copied().unwrap_or(u64::MAX);
            (Some(*h) == avoid, since)
        })
    }

    fn died(&mut self, r: u32) {
        if !self.members.contains(&r) || !self.dead.insert(r) {
            return;
        }
        self.holders.remove(&r);
        if let Some(on) = self.nodes.get(&r).and_then(|n| self.holders_on.get_mut(n)) {
            on.remove(&r);
        }
        self.held_at.remove(&r);
        self.unreported.remove(&r);
        self.free.retain(|x| *x != r);
        self.wanting.retain(|x| *x != r);
        if let Some(serve) = self.fetching.remove(&r) {
            self.release(serve);
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
        self.pair(out);
        let source_gone = self.dead.contains(&self.source);
        let all_said = self.unreported.is_empty();
        if self.holders.is_empty() && self.fetching.is_empty() && source_gone && all_said {
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

    /// Pairs each waiting member, longest-waiting first, with a holder on
    /// its node if there is one, else with the longest-free slot; a
    /// member for which there is neither waits on, in its place.
    fn pair(&mut self, out: &mut Vec<Action>) {
        if self.wanting.is_empty() || self.holders.is_empty() {
            return;
        }
        let mut waiting = VecDeque::new();
        while let Some(fetcher) = self.wanting.pop_front() {
            if self.free.is_empty() && self.nodes.is_empty() {
                // Nobody can be served before a slot frees.
                waiting.push_back(fetcher);
                waiting.extend(self.wanting.drain(..));
                break;
            }
            let serve = match self.near_holder(fetcher) {
                Some(holder) => Serve {
                    holder,
                    slot: false,
                },
                None => match self.free.pop_front() {
                    Some(holder) => Serve { holder, slot: true },
                    None => {
                        waiting.push_back(fetcher);
                        continue;
                    }
                },
            };
            self.fetching.insert(fetcher, serve);
            out.push(Action::Fetch {
                fetcher,
                holder: serve.holder,
            });
        }
        self.wanting = waiting;
    }
}

pub mod recent;

#[cfg(test)]
mod tests;
