//! A root's result kept for its replacement (see the book's chapter
//! Surviving failures of the application, A replaced root).
//!
//! Under local restart a replacement redoes its reductions under the same
//! ids; one that completed before its rank died answers its join at once.
//! For a root that is not enough: the result existed only in the dead
//! process. So while replacements may come, a root keeps a copy of each
//! result at its buddy ([`crate::replica::buddy_on`]) before its future
//! completes, and the master learns where it lies; the copy lives until
//! the application took the result and then wrote a checkpoint (its state
//! holds the result from then on). A replacement root that joins such a
//! reduction again gets the copy as its result, exactly once counted.
//!
//! Three pure pieces, one per place:
//!
//! - [`Handover`] (the root, per reduction): the copy offered to a buddy,
//!   stored, or lost; a buddy that refuses or dies is replaced by the next,
//!   at most [`MAX_HOLDERS`] in all.
//!
//!   ```text
//!   start --buddy--> Offered(h) --stored by h--> Kept(h)
//!     |                 |  \--h refused or died, next buddy--> Offered(h')
//!     +--no buddy--> Lost <--no buddy left / MAX_HOLDERS asked--+
//!   ```
//!
//! - [`Ledger`] (the root): the results handed to the application and not
//!   released yet. A checkpoint call snapshots those taken
//!   ([`Ledger::taken`]); once that checkpoint is durable they are released
//!   ([`Ledger::release`]), and their copies dropped.
//! - [`Book`] (the master): where each kept result lies, bounded; a
//!   replacement root's join is answered from it ([`Book::lookup`]).
//!
//! Ids reused while an earlier result with the same id is unreleased make
//! a replay ambiguous (which instance does the replacement redo?): the
//! book then answers [`Lookup::Lost`], never the other instance's result.

use std::collections::{BTreeMap, VecDeque};

mod book;
#[cfg(test)]
mod tests;

pub use book::{Book, Drop, Lookup};

/// Buddies a root asks in turn before it gives up on a copy.
pub const MAX_HOLDERS: u32 = 3;

/// Results the master's [`Book`] and a root's [`Ledger`] remember, at most
/// (the oldest is dropped beyond: its replay ends with a typed error).
pub const RESULTS_LIMIT: usize = 65_536;

/// Buffer key under which a root exposes its result of reduction `key`
/// to the buddy that copies it (distinct from its data's and original's).
pub fn result_key(key: u64) -> u64 {
    key ^ 0x5245_5355_4c54_2121 // "RESULT!!"
}

/// Buffer key under which a holder exposes its copy of `root`'s result of
/// reduction `key`.
pub fn held_result_key(key: u64, root: u32) -> u64 {
    let mut h = crate::id::stable_hash("result") ^ key;
    h = h.rotate_left(23) ^ u64::from(root).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h
}

/// Where a root's copy of one result stands, while its reduction ends at
/// the root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handover {
    /// Offered to `holder`, its answer awaited; `asked` buddies so far.
    Offered {
        /// The buddy asked.
        holder: u32,
        /// Buddies asked so far, this one included.
        asked: u32,
    },
    /// Stored at `holder`.
    Kept {
        /// The rank that keeps the copy.
        holder: u32,
    },
    /// No copy: no buddy left, or every buddy asked refused.
    Lost,
}

/// What the root does next ([`Handover`]'s output).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Offer the result to this buddy.
    Offer(u32),
    /// The copy is stored there: announce it, then complete.
    Kept(u32),
    /// No copy will exist: complete without one.
    Lost,
    /// Nothing changed (a stale or foreign answer).
    Wait,
}

impl Handover {
    /// The root's result became whole; `buddy` is its buddy now.
    pub fn start(buddy: Option<u32>) -> (Handover, Next) {
        match buddy {
            Some(h) => (
                Handover::Offered {
                    holder: h,
                    asked: 1,
                },
                Next::Offer(h),
            ),
            None => (Handover::Lost, Next::Lost),
        }
    }

    /// `from` answered the offer (`ok`: stored); `next` is the buddy to ask
    /// if it refused (the placement without it).
    pub fn answered(&mut self, from: u32, ok: bool, next: Option<u32>) -> Next {
        match *self {
            Handover::Offered { holder, asked } if holder == from => match ok {
                true => {
                    *self = Handover::Kept { holder };
                    Next::Kept(holder)
                }
                false => self.ask_next(asked, next.filter(|&n| n != from)),
            },
            _ => Next::Wait,
        }
    }

    /// `rank` died; `next` is the buddy the placement gives without it.
    pub fn died(&mut self, rank: u32, next: Option<u32>) -> Next {
        match *self {
            Handover::Offered { holder, asked } if holder == rank => {
                self.ask_next(asked, next.filter(|&n| n != rank))
            }
            _ => Next::Wait,
        }
    }

    fn ask_next(&mut self, asked: u32, next: Option<u32>) -> Next {
        match next {
            Some(h) if asked < MAX_HOLDERS => {
                *self = Handover::Offered {
                    holder: h,
                    asked: asked + 1,
                };
                Next::Offer(h)
            }
            _ => {
                *self = Handover::Lost;
                Next::Lost
            }
        }
    }
}

/// One result handed to the application at its root, not released yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handed<S> {
    /// The reduction.
    pub key: u64,
    /// Where its copy stands: kept at a holder, offered again to another
    /// after its holder died, or lost.
    pub copy: Handover,
    /// This handover's number at the root (a key may be handed again).
    pub seq: u64,
    /// What tells whether the application took it (the runtime's future),
    /// and what the root needs to copy it again.
    pub slot: S,
}

impl<S> Handed<S> {
    /// The rank that keeps (or is asked to keep) its copy.
    pub fn holder(&self) -> Option<u32> {
        match self.copy {
            Handover::Kept { holder } | Handover::Offered { holder, .. } => Some(holder),
            Handover::Lost => None,
        }
    }
}

/// What a release sends: the keys to the master (one per result released)
/// and, per holder, the keys whose copies it drops.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Release {
    /// For the master's [`Book::released`].
    pub master: Vec<u64>,
    /// Holder → keys of its copies to drop.
    pub holders: BTreeMap<u32, Vec<u64>>,
    /// Keys whose copy was being made again (the root stops offering it).
    pub offered: Vec<u64>,
}

impl Release {
    /// Nothing to send.
    pub fn is_empty(&self) -> bool {
        self.master.is_empty()
    }

    fn add<S>(&mut self, h: &Handed<S>) {
        self.master.push(h.key);
        if let Some(holder) = h.holder() {
            self.holders.entry(holder).or_default().push(h.key);
        }
        if matches!(h.copy, Handover::Offered { .. }) {
            self.offered.push(h.key);
        }
    }
}

/// The results a root handed to its application and has not released,
/// oldest first, at most [`RESULTS_LIMIT`]. A copy whose holder dies is
/// offered again to the next buddy ([`Ledger::holder_died`]), so that a
/// holder's death followed by the root's costs nothing.
#[derive(Clone, Debug)]
pub struct Ledger<S> {
    handed: VecDeque<Handed<S>>,
    next: u64,
    limit: usize,
}

impl<S> Default for Ledger<S> {
    fn default() -> Self {
        Ledger::new(RESULTS_LIMIT)
    }
}

impl<S> Ledger<S> {
    /// An empty ledger holding at most `limit` results.
    pub fn new(limit: usize) -> Self {
        Ledger {
            handed: VecDeque::new(),
            next: 0,
            limit: limit.max(1),
        }
    }

    /// Forgets every result handed over (the job rolled back: the next
    /// epoch's reductions reuse their keys, and their copies are gone).
    pub fn clear(&mut self) {
        self.handed.clear();
    }

    /// The result of `key`, kept at `holder`, goes to the application
    /// through `slot`. Beyond the limit the oldest is released at once
    /// (returned: its copy is dropped, and its replay ends in an error).
    pub fn handed(&mut self, key: u64, holder: u32, slot: S) -> Release {
        let seq = self.next;
        self.next += 1;
        self.handed.push_back(Handed {
            key,
            copy: Handover::Kept { holder },
            seq,
            slot,
        });
        let mut out = Release::default();
        while self.handed.len() > self.limit {
            if let Some(old) = self.handed.pop_front() {
                out.add(&old);
            }
        }
        out
    }

    /// The handovers the application took (`is_taken`), as a checkpoint
    /// call finds them: released once that checkpoint is durable.
    pub fn taken(&self, is_taken: impl Fn(&S) -> bool) -> Vec<u64> {
        self.handed
            .iter()
            .filter(|h| is_taken(&h.slot))
            .map(|h| h.seq)
            .collect()
    }

    /// Releases the handovers `seqs` still here (a later checkpoint may
    /// have released some already).
    pub fn release(&mut self, seqs: &[u64]) -> Release {
        let mut out = Release::default();
        self.handed.retain(|h| {
            let go = seqs.contains(&h.seq);
            if go {
                out.add(h);
            }
            !go
        });
        out
    }

    /// `rank` died: each copy it kept (or was asked to keep) is offered
    /// to the buddy `next` gives for its key (the placement without the
    /// dead), or lost if there is none or enough were asked. Returns the
    /// offers to make: `(key, buddy)`.
    pub fn holder_died(&mut self, rank: u32, next: impl Fn(u64) -> Option<u32>) -> Vec<(u64, u32)> {
        let mut offers = Vec::new();
        for h in self.handed.iter_mut().filter(|h| h.holder() == Some(rank)) {
            let buddy = next(h.key).filter(|&b| b != rank);
            let step = match h.copy {
                Handover::Kept { .. } => {
                    let (copy, step) = Handover::start(buddy);
                    h.copy = copy;
                    step
                }
                _ => h.copy.died(rank, buddy),
            };
            if let Next::Offer(b) = step {
                offers.push((h.key, b));
            }
        }
        offers
    }

    /// `from` answered the offer of `key`'s copy made again (`ok`:
    /// stored); `next` is the buddy to ask if it refused. `None` if no
    /// such offer awaits `from`'s answer.
    pub fn answered(&mut self, key: u64, from: u32, ok: bool, next: Option<u32>) -> Option<Next> {
        let h = self.handed.iter_mut().rev().find(|h| {
            h.key == key && matches!(h.copy, Handover::Offered { holder, .. } if holder == from)
        })?;
        Some(h.copy.answered(from, ok, next))
    }

    /// The newest result of `key` not released.
    pub fn get(&self, key: u64) -> Option<&Handed<S>> {
        self.handed.iter().rev().find(|h| h.key == key)
    }

    /// Results not released.
    pub fn len(&self) -> usize {
        self.handed.len()
    }

    /// True if none.
    pub fn is_empty(&self) -> bool {
        self.handed.is_empty()
    }
}
