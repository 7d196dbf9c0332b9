//! Each member's lifecycle in one reduction, as the master sees it.
//!
//! [`Roster`] sits beside [`crate::schedule::Schedule`]: the scheduler pairs
//! data, the roster knows the members — whether each joined, where copies
//! of its original lie, whether it died and what became of its original
//! then. It is a pure state machine: the master feeds it the members'
//! joins, their buddies' notices, deaths and verdicts, and carries its
//! decisions out (offers, held reports, where a task reads its data). It
//! does no I/O.
//!
//! # A member's lifecycle
//!
//! ```text
//!  Pending ──join──▶ Joined ──death, standing copy at a live buddy──▶ Awaiting
//!     │                │                                                 │
//!     │ death          │ death, otherwise                             verdict
//!     ▼                ▼                                                 ▼
//!  Dead (unannounced)  Dead (announced) ◀────────────────────────────────┘
//! ```
//!
//! A verdict is the buddy's answer, or the master's decision that none
//! can come (the buddy died, or the wait for it ran out).
//!
//! A member's copies — its buddy's replica, its own disk copy that others
//! can read — are recorded in any state: a buddy's acknowledgement may
//! come before the member's join, or after its death. A dead member's
//! original is either still to be had ([`Roster::copy_at`]) or lost. Which
//! one can change without any event about that member (the holder of its
//! replica dies), so it is asked of the roster with the set of dead ranks
//! rather than stored.
//!
//! # Verdicts
//!
//! When a member whose join named a standing copy (its buddy on the same
//! node maps its original where it lies, [`crate::wire::Joining::standing`])
//! dies, that buddy is offered the original on its behalf — unless the
//! buddy died first: the copy went with it. Until the verdict, the member
//! is `Awaiting`: the scheduler does not hear of its death yet, and the
//! whole reduction is held — no task goes out, and the fetch failures
//! reported meanwhile are held too ([`Roster::hold`]) and handed back once
//! no verdict is awaited ([`Roster::take_held`]), when the scheduler knows
//! whether the original can be had.

use crate::rankset::RankSet;
use crate::wire::{Locator, Standing};

/// A standing copy of a member's original (see the module's
/// documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StandingCopy {
    /// Group position of the buddy that maps the original.
    pub buddy: usize,
    /// What the buddy is offered if the member dies (`copy.buddy` is the
    /// buddy's global rank).
    pub copy: Standing,
}

/// What a live, joined member said about itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Joined {
    /// Its future completes once its data was folded in (`Join::early`):
    /// its data is released even when that data is one original.
    pub early: bool,
    /// Where a receiver on its node reads its current data in place (from
    /// its last message: each names the sender's current data).
    pub direct: Option<Locator>,
    /// A standing copy of its original at a same-node buddy.
    pub standing: Option<StandingCopy>,
}

/// Where one member is in its lifecycle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Neither its join nor its death arrived yet.
    Pending,
    /// Its join arrived and it lives.
    Joined(Joined),
    /// It died after joining with a standing copy whose buddy (group
    /// position `buddy`) lived: the buddy was offered the copy, and its
    /// verdict is awaited. The scheduler has not heard of this death.
    Awaiting {
        /// Group position of the buddy whose verdict is awaited.
        buddy: usize,
    },
    /// Dead, with nothing left to wait for: the scheduler may hear of it.
    Dead {
        /// Its join arrived before it died (it wrote its disk copy, if
        /// any, before sending the join).
        joined: bool,
        /// Its unannounced disk copy was looked for (once: a copy that
        /// failed to read is not looked for again).
        disk_looked_for: bool,
    },
}

impl State {
    /// Whether the member lives.
    pub fn lives(&self) -> bool {
        matches!(self, State::Pending | State::Joined(_))
    }
}

/// Where copies of a member's original lie, as far as the master was told.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Copies {
    /// The rank (global) holding its buddy's copy.
    pub replica: Option<u32>,
    /// The directory of its own disk copy, if others may read it.
    pub disk: Option<String>,
    /// Its buddy refused to keep a copy.
    pub refused: bool,
}

/// One member (group position) of a reduction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    state: State,
    copies: Copies,
}

impl Member {
    /// Where it is in its lifecycle.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// Where copies of its original lie.
    pub fn copies(&self) -> &Copies {
        &self.copies
    }
}

/// A member's join, as the roster records it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Announcement {
    /// `Join::early`.
    pub early: bool,
    /// Where its data is read in place.
    pub direct: Option<Locator>,
    /// The buddy that acknowledged a copy of its original, if it waited
    /// for one.
    pub replica: Option<u32>,
    /// The directory of its disk copy, if others may read it.
    pub disk: Option<String>,
    /// A standing copy of its original (ignored if it names the member
    /// itself or a position outside the group: untrusted input).
    pub standing: Option<StandingCopy>,
}

/// Where a dead member's original can be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyAt<'a> {
    /// From the copy its buddy, `holder`, keeps.
    Replica {
        /// The live rank (global) holding the copy.
        holder: u32,
    },
    /// From its own disk copy in `dir`.
    Disk {
        /// The directory.
        dir: &'a str,
    },
}

/// What the death of a member calls for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Death {
    /// Nothing to wait for: the scheduler hears of the death now.
    Settled,
    /// Offer this standing copy to its buddy (`buddy` of the copy) on the
    /// dead member's behalf: the member awaits the buddy's verdict, and
    /// the scheduler hears of the death with it.
    Offer(Standing),
}

/// An event that does not fit the member's state (untrusted input: the
/// message that carried it is refused).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RosterError {
    /// Position outside the group.
    #[error("group position {0} is outside the group")]
    OutOfGroup(usize),
    /// A member joined twice.
    #[error("group position {0} joined twice")]
    AlreadyJoined(usize),
    /// A dead member joined.
    #[error("group position {0} joined after it died")]
    Dead(usize),
}

/// The members of one reduction, and the fetch failures held while a
/// verdict is awaited (`F`: a failure report, as the master keeps it).
#[derive(Clone, Debug)]
pub struct Roster<F> {
    members: Vec<Member>,
    /// Members in [`State::Awaiting`].
    awaited: usize,
    held: Vec<F>,
    fetch_failures: u32,
}

impl<F> Roster<F> {
    /// `n` members, none joined yet.
    pub fn new(n: usize) -> Self {
        let pending = Member {
            state: State::Pending,
            copies: Copies::default(),
        };
        Roster {
            members: vec![pending; n],
            awaited: 0,
            held: Vec::new(),
            fetch_failures: 0,
        }
    }

    /// Group size.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// True for a group without members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Member `index`, if it is one.
    pub fn member(&self, index: usize) -> Option<&Member> {
        self.members.get(index)
    }

    /// Member `index` joined: `Pending` becomes `Joined`, and the copies
    /// its join names are recorded.
    pub fn join(&mut self, index: usize, a: Announcement) -> Result<(), RosterError> {
        let n = self.members.len();
        let m = self
            .members
            .get_mut(index)
            .ok_or(RosterError::OutOfGroup(index))?;
        match m.state {
            State::Pending => {}
            State::Joined(_) => return Err(RosterError::AlreadyJoined(index)),
            State::Awaiting { .. } | State::Dead { .. } => return Err(RosterError::Dead(index)),
        }
        if let Some(holder) = a.replica {
            m.copies.replica = Some(holder);
        }
        if let Some(dir) = a.disk {
            m.copies.disk = Some(dir);
        }
        let standing = a.standing.filter(|s| s.buddy < n && s.buddy != index);
        m.state = State::Joined(Joined {
            early: a.early,
            direct: a.direct,
            standing,
        });
        Ok(())
    }

    /// `holder` stored a copy of member `index`'s original (`ok`), or
    /// refused to. Recorded in any state (the notice may come before the
    /// join, or after the death). False if `index` is no member.
    pub fn replicated(&mut self, index: usize, holder: u32, ok: bool) -> bool {
        let Some(m) = self.members.get_mut(index) else {
            return false;
        };
        if ok {
            m.copies.replica = Some(holder);
        } else {
            m.copies.refused = true;
        }
        true
    }

    /// `holder` was replaced by a new process: the copies its dead one
    /// held are gone (the new one holds none of them).
    pub fn holder_replaced(&mut self, holder: u32) {
        for m in &mut self.members {
            if m.copies.replica == Some(holder) {
                m.copies.replica = None;
            }
        }
    }

    /// Member `index`'s latest message names where its current data is
    /// read in place (each names the sender's current data). Only a live,
    /// joined member has data to read.
    pub fn set_direct(&mut self, index: usize, direct: Option<Locator>) {
        if let Some(Member {
            state: State::Joined(j),
            ..
        }) = self.members.get_mut(index)
        {
            j.direct = direct;
        }
    }

    /// Member `index` died; `dead` are the ranks known dead (the buddy of a
    /// standing copy must not be among them). `None` if it was dead
    /// already or is no member.
    ///
    /// The members awaiting its own verdict ([`Roster::awaiting_on`]) wait
    /// no longer: the master decides each of them ([`Roster::verdict`])
    /// once the scheduler heard of this death.
    pub fn died(&mut self, index: usize, dead: &RankSet) -> Option<Death> {
        let offer_to = match &self.members.get(index)?.state {
            State::Awaiting { .. } | State::Dead { .. } => return None,
            State::Pending => None,
            State::Joined(j) => j.standing.as_ref().and_then(|s| {
                let lives = self.members[s.buddy].state.lives();
                (lives && !dead.contains(s.copy.buddy as usize)).then_some(s.buddy)
            }),
        };
        let next = match offer_to {
            Some(buddy) => {
                self.awaited += 1;
                State::Awaiting { buddy }
            }
            None => State::Dead {
                joined: !matches!(self.members[index].state, State::Pending),
                disk_looked_for: false,
            },
        };
        match std::mem::replace(&mut self.members[index].state, next) {
            State::Joined(Joined {
                standing: Some(s), ..
            }) if offer_to.is_some() => Some(Death::Offer(s.copy)),
            _ => Some(Death::Settled),
        }
    }

    /// Member `index` died and its replacement joins in its place, the
    /// dead rank's original having been taken out of the reduction: it is
    /// pending again, with no copies (those were of the dead rank's
    /// original). Nothing unless it is dead.
    pub fn revive(&mut self, index: usize) {
        if let Some(m) = self.members.get_mut(index) {
            if matches!(m.state, State::Dead { .. }) {
                m.state = State::Pending;
                m.copies = Copies::default();
            }
        }
    }

    /// The members awaiting the verdict of `buddy` (a group position).
    pub fn awaiting_on(&self, buddy: usize) -> impl Iterator<Item = usize> + '_ {
        // Without a verdict awaited there is nothing to look through.
        let members = if self.is_held() {
            &self.members[..]
        } else {
            &[]
        };
        members
            .iter()
            .enumerate()
            .filter_map(move |(i, m)| (m.state == State::Awaiting { buddy }).then_some(i))
    }

    /// Whether member `index` awaits a verdict.
    pub fn awaits(&self, index: usize) -> bool {
        self.awaited_buddy(index).is_some()
    }

    /// The buddy (group position) whose verdict about member `index` is
    /// awaited, if one is.
    pub fn awaited_buddy(&self, index: usize) -> Option<usize> {
        match self.members.get(index)?.state {
            State::Awaiting { buddy } => Some(buddy),
            _ => None,
        }
    }

    /// The verdict about member `index`'s standing copy came (or can no
    /// longer come: the wait ran out). `Awaiting` becomes `Dead`; true if
    /// it was awaited (the scheduler hears of the death now).
    pub fn verdict(&mut self, index: usize) -> bool {
        if !self.awaits(index) {
            return false;
        }
        self.members[index].state = State::Dead {
            joined: true,
            disk_looked_for: false,
        };
        self.awaited -= 1;
        true
    }

    /// Whether the reduction is held: some verdict is awaited.
    pub fn is_held(&self) -> bool {
        self.awaited > 0
    }

    /// Keeps failure report `f` while the reduction is held; hands it back
    /// (`Some`) if it is not, to be handled now.
    pub fn hold(&mut self, f: F) -> Option<F> {
        if self.is_held() {
            self.held.push(f);
            None
        } else {
            Some(f)
        }
    }

    /// The reports held, in the order they came, once no verdict is
    /// awaited (none while one is).
    pub fn take_held(&mut self) -> Vec<F> {
        if self.is_held() {
            Vec::new()
        } else {
            std::mem::take(&mut self.held)
        }
    }

    /// Counts a failed fetch; false once more failed than the reduction
    /// allows (4 per member, and 8): fetches that keep failing although
    /// their providers live must end the reduction, not loop.
    pub fn count_fetch_failure(&mut self) -> bool {
        self.fetch_failures += 1;
        self.fetch_failures as usize <= 4 * self.members.len() + 8
    }

    /// Whether a copy of member `index`'s original can still be had: a
    /// replica whose holder is not in `dead`, or its own disk copy where
    /// others can read it.
    pub fn has_copy(&self, index: usize, dead: &RankSet) -> bool {
        self.copy_at(index, dead).is_some()
    }

    /// Where member `index`'s original can be read from a copy: its
    /// buddy's, if the holder lives, else its disk copy.
    pub fn copy_at(&self, index: usize, dead: &RankSet) -> Option<CopyAt<'_>> {
        let c = &self.members.get(index)?.copies;
        match (c.replica, &c.disk) {
            (Some(holder), _) if !dead.contains(holder as usize) => {
                Some(CopyAt::Replica { holder })
            }
            (_, Some(dir)) => Some(CopyAt::Disk { dir }),
            _ => None,
        }
    }

    /// The live holder of member `index`'s replica, if any.
    pub fn live_replica(&self, index: usize, dead: &RankSet) -> Option<u32> {
        self.members
            .get(index)?
            .copies
            .replica
            .filter(|&h| !dead.contains(h as usize))
    }

    /// Member `index`'s disk copy could not be read: it is no copy.
    pub fn disk_unreadable(&mut self, index: usize) {
        if let Some(m) = self.members.get_mut(index) {
            m.copies.disk = None;
        }
    }

    /// Whether member `index`'s unannounced disk copy should be looked for
    /// now: it died before its join arrived, no disk copy and no live
    /// replica of it is known, and it was not looked for before. Marks it
    /// looked for (once per reduction).
    pub fn look_for_disk(&mut self, index: usize, dead: &RankSet) -> bool {
        let Some(m) = self.members.get_mut(index) else {
            return false;
        };
        let live_copy = m.copies.replica.is_some_and(|h| !dead.contains(h as usize));
        match &mut m.state {
            State::Dead {
                joined: false,
                disk_looked_for,
            } if !*disk_looked_for && m.copies.disk.is_none() && !live_copy => {
                *disk_looked_for = true;
                true
            }
            _ => false,
        }
    }

    /// Member `index`'s disk copy was found in `dir`.
    pub fn found_disk(&mut self, index: usize, dir: String) {
        if let Some(m) = self.members.get_mut(index) {
            m.copies.disk = Some(dir);
        }
    }

    /// Whether member `index` lives, joined, and its future completes once
    /// its data was folded in.
    pub fn early(&self, index: usize) -> bool {
        matches!(
            self.members.get(index),
            Some(Member {
                state: State::Joined(Joined { early: true, .. }),
                ..
            })
        )
    }

    /// Where member `index`'s current data is read in place, if it lives
    /// and said so.
    pub fn direct(&self, index: usize) -> Option<&Locator> {
        match &self.members.get(index)?.state {
            State::Joined(j) => j.direct.as_ref(),
            _ => None,
        }
    }

    /// Members whose join never arrived.
    pub fn unannounced(&self) -> impl Iterator<Item = usize> + '_ {
        self.members.iter().enumerate().filter_map(|(i, m)| {
            matches!(m.state, State::Pending | State::Dead { joined: false, .. }).then_some(i)
        })
    }
}

#[cfg(test)]
mod tests;
