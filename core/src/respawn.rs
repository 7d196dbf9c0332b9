//! The master's book of replaced ranks: which dead rank awaits a
//! replacement, which replacement is being let in, and which incarnation
//! of every rank is the live one (see the book's chapter Surviving
//! failures of the application).
//!
//! A pure state machine, one [`Slot`] per rank:
//!
//! ```text
//! Live(i) --died, budget left--> Awaited(i) --asks(j > i)--> Admitting(j)
//!    ^  \--died, none left----> Gone(i)   <--wait over--/        |
//!    +--------------------every live rank let it in--------------+
//! ```
//!
//! The master lets a replacement start only once every live rank has let
//! it in on its transport ([`crate::wire::Msg::Readmitted`]), so no rank
//! meets it before knowing of it; a rank that dies meanwhile is waited for
//! no more, nor is a rank awaited or being let in itself (a standby's view
//! may name such a one live, from a dead master's notices: it runs no
//! process yet, and learns of the others when it is let in).

use crate::rankset::RankSet;

/// One rank, as the master sees its processes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Slot {
    /// Incarnation `.0` runs.
    Live(u32),
    /// Incarnation `.0` died; a replacement is expected.
    Awaited(u32),
    /// Replacement incarnation `incarnation` is being let in: the ranks in
    /// `pending` have not yet said they did.
    Admitting {
        /// The replacement's incarnation.
        incarnation: u32,
        /// Live ranks that have not yet let it in.
        pending: RankSet,
    },
    /// Incarnation `.0` died and none will replace it.
    Gone(u32),
}

/// Why a replacement is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The rank is outside the job.
    #[error("rank {0} is not in the job")]
    NoSuchRank(u32),
    /// Its rank still runs, or is being replaced already.
    #[error("rank {rank} is not awaiting a replacement (it is {state})")]
    NotAwaited {
        /// The rank.
        rank: u32,
        /// What it is instead.
        state: &'static str,
    },
    /// An incarnation not newer than the one that died.
    #[error("incarnation {got} of rank {rank} is not newer than {dead}, the one that died")]
    Stale {
        /// The rank.
        rank: u32,
        /// The replacement's incarnation.
        got: u32,
        /// The dead one's.
        dead: u32,
    },
}

/// What a death means ([`Respawns::died`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Death {
    /// A replacement is expected: what needs the rank waits for it.
    Awaited,
    /// None will come: what needs the rank is lost.
    Final,
}

/// Every rank's slot and the job's replacements left.
#[derive(Clone, Debug)]
pub struct Respawns {
    slots: Vec<Slot>,
    left: u32,
    master: u32,
}

impl Respawns {
    /// A job of `size` ranks started with incarnation 0 everywhere,
    /// allowed `budget` replacements; `master`'s rank is never awaited (a
    /// standby takes over from a master instead).
    pub fn new(size: u32, budget: u32, master: u32) -> Self {
        Respawns::joined(&vec![0; size as usize], budget, master)
    }

    /// A job whose rank `r` runs as incarnation `incarnations[r]` (a
    /// replacement may have taken a rank's place while the job started, or
    /// before a standby took over): those replacements count against
    /// `budget`.
    pub fn joined(incarnations: &[u32], budget: u32, master: u32) -> Self {
        let used: u64 = incarnations.iter().map(|&i| u64::from(i)).sum();
        Respawns {
            slots: incarnations.iter().map(|&i| Slot::Live(i)).collect(),
            left: u32::try_from(u64::from(budget).saturating_sub(used)).unwrap_or(0),
            master,
        }
    }

    /// The slot of `rank`.
    pub fn slot(&self, rank: u32) -> Option<&Slot> {
        self.slots.get(rank as usize)
    }

    /// True if `rank` awaits a replacement (or is letting one in).
    pub fn awaited(&self, rank: u32) -> bool {
        matches!(
            self.slot(rank),
            Some(Slot::Awaited(_) | Slot::Admitting { .. })
        )
    }

    /// Replacements the job may still start.
    pub fn left(&self) -> u32 {
        self.left
    }

    /// `rank` was declared dead. A live rank (or a replacement being let
    /// in) is awaited while replacements are left; every live rank's
    /// pending admission waits for it no more. Returns what the death
    /// means, and the ranks whose admission it completed.
    pub fn died(&mut self, rank: u32) -> (Death, Vec<(u32, u32)>) {
        let done = self.forget_pending(rank);
        let Some(slot) = self.slots.get_mut(rank as usize) else {
            return (Death::Final, done);
        };
        let inc = match slot {
            Slot::Live(i) | Slot::Gone(i) | Slot::Awaited(i) => *i,
            Slot::Admitting { incarnation, .. } => *incarnation,
        };
        let death = match slot {
            Slot::Awaited(_) => Death::Awaited,
            Slot::Gone(_) => Death::Final,
            _ if self.left > 0 && rank != self.master => {
                self.left -= 1;
                *slot = Slot::Awaited(inc);
                Death::Awaited
            }
            _ => {
                *slot = Slot::Gone(inc);
                Death::Final
            }
        };
        (death, done)
    }

    /// Replacement `incarnation` of `rank` asks again, of a master that
    /// took over before it could start (the dead master's death cut its
    /// admission, after the ranks had let it in): `rank` is awaited again
    /// as if that incarnation had not been let in, so [`Respawns::asks`]
    /// admits it, and the budget is as it was (the book counted it when
    /// it was made). `None` unless `rank` runs exactly that incarnation:
    /// a death declared of it is never undone. Otherwise, as it never
    /// ran, no pending admission waits for it any more (it cannot answer
    /// until it is in, and learns of the others when it is): returns the
    /// admissions that completed `(rank, incarnation)`.
    pub fn reopen(&mut self, rank: u32, incarnation: u32) -> Option<Vec<(u32, u32)>> {
        match self.slots.get_mut(rank as usize) {
            Some(slot) if incarnation > 0 && *slot == Slot::Live(incarnation) => {
                *slot = Slot::Awaited(incarnation - 1);
            }
            _ => return None,
        }
        Some(self.forget_pending(rank))
    }

    /// Replacement `incarnation` of `rank` asks to join; `live` are the
    /// ranks that must let it in first (the master's own need not, nor
    /// the replacement, nor a rank this book does not see live: one
    /// awaited or being let in, which a standby's view may name live
    /// after a dead master's notices, runs no process that could
    /// answer). Refused unless `rank` is awaited and the incarnation is
    /// newer than the dead one. `Ok(true)` if no rank must answer: it is
    /// in at once.
    pub fn asks(
        &mut self,
        rank: u32,
        incarnation: u32,
        live: impl IntoIterator<Item = u32>,
    ) -> Result<bool, Refusal> {
        let slot = self
            .slots
            .get_mut(rank as usize)
            .ok_or(Refusal::NoSuchRank(rank))?;
        let dead = match slot {
            Slot::Awaited(i) => *i,
            other => {
                let state = match other {
                    Slot::Live(_) => "alive",
                    Slot::Admitting { .. } => "being replaced already",
                    _ => "dead with no replacement left",
                };
                return Err(Refusal::NotAwaited { rank, state });
            }
        };
        if incarnation <= dead {
            return Err(Refusal::Stale {
                rank,
                got: incarnation,
                dead,
            });
        }
        let mut pending = RankSet::new();
        for r in live.into_iter().filter(|&r| r != rank && r != self.master) {
            if matches!(self.slots.get(r as usize), Some(Slot::Live(_)) | None) {
                pending.insert(r as usize);
            }
        }
        let now = pending.is_empty();
        let slot = &mut self.slots[rank as usize];
        *slot = match now {
            true => Slot::Live(incarnation),
            false => Slot::Admitting {
                incarnation,
                pending,
            },
        };
        Ok(now)
    }

    /// `from` let replacement `incarnation` of `rank` in; true if that was
    /// the last one: the replacement is live now. Anything else (a stale
    /// or repeated answer) is ignored.
    pub fn let_in(&mut self, from: u32, rank: u32, incarnation: u32) -> bool {
        let Some(slot) = self.slots.get_mut(rank as usize) else {
            return false;
        };
        let Slot::Admitting {
            incarnation: i,
            pending,
        } = slot
        else {
            return false;
        };
        if *i != incarnation || !pending.remove(from as usize) || !pending.is_empty() {
            return false;
        }
        *slot = Slot::Live(incarnation);
        true
    }

    /// The wait for `rank`'s replacement is over: it is gone for good
    /// unless its replacement is already being let in. True if it was
    /// awaited.
    pub fn give_up(&mut self, rank: u32) -> bool {
        match self.slots.get_mut(rank as usize) {
            Some(slot) => match *slot {
                Slot::Awaited(i) => {
                    *slot = Slot::Gone(i);
                    true
                }
                _ => false,
            },
            None => false,
        }
    }

    /// Takes `rank` out of every pending admission; returns the
    /// admissions that completed `(rank, incarnation)`.
    fn forget_pending(&mut self, rank: u32) -> Vec<(u32, u32)> {
        let mut done = Vec::new();
        for (r, slot) in self.slots.iter_mut().enumerate() {
            if let Slot::Admitting {
                incarnation,
                pending,
            } = slot
            {
                if pending.remove(rank as usize) && pending.is_empty() {
                    done.push((r as u32, *incarnation));
                    *slot = Slot::Live(*incarnation);
                }
            }
        }
        done
    }
}

#[cfg(test)]
mod tests;
