//! The state of a checkpoint made across ranks, pure: a rank's own
//! ([`Progress`]: which of the levels due are durable) and a group
//! encoder's ([`Coding`]: one version of a group's L3).
//!
//! The runtime feeds them what it sees — a level written, an answer, a
//! rank dead, a deadline past — and carries out what they return. A level
//! settles once, durable or failed; a failed level never undoes the
//! others: the checkpoint's outcome names every level written and every
//! level failed, with its reason.

use super::Level;

/// Where one level of a rank's checkpoint stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Being written, or awaiting a holder's answer.
    Waiting,
    /// Durable (for a remote level: its holders said so).
    Durable,
    /// Failed, with the reason.
    Failed(String),
}

/// A rank's checkpoint of one version, level by level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    version: u64,
    steps: Vec<(Level, Step)>,
}

/// The levels of a checkpoint that settled with at least one failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partial {
    /// The levels durable, cheapest first.
    pub written: Vec<Level>,
    /// The levels failed, cheapest first, each with its reason.
    pub failed: Vec<(Level, String)>,
}

impl Progress {
    /// Version `version`, with every level of `due` waiting.
    pub fn new(version: u64, due: &[Level]) -> Progress {
        let mut levels = due.to_vec();
        levels.sort();
        levels.dedup();
        Progress {
            version,
            steps: levels.into_iter().map(|l| (l, Step::Waiting)).collect(),
        }
    }

    /// The version.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Where `level` stands (`None`: not due).
    pub fn step(&self, level: Level) -> Option<&Step> {
        self.steps.iter().find(|(l, _)| *l == level).map(|(_, s)| s)
    }

    fn settle(&mut self, level: Level, to: Step) -> bool {
        match self.steps.iter_mut().find(|(l, _)| *l == level) {
            Some((_, s)) if *s == Step::Waiting => {
                *s = to;
                true
            }
            _ => false,
        }
    }

    /// `level` is durable; false (and nothing changes) if it was not
    /// waiting.
    pub fn durable(&mut self, level: Level) -> bool {
        self.settle(level, Step::Durable)
    }

    /// `level` failed for `reason`; false (and nothing changes) if it was
    /// not waiting.
    pub fn failed(&mut self, level: Level, reason: impl Into<String>) -> bool {
        self.settle(level, Step::Failed(reason.into()))
    }

    /// Fails every level still waiting (a deadline past, a shutdown).
    pub fn fail_waiting(&mut self, reason: &str) {
        for (_, s) in &mut self.steps {
            if *s == Step::Waiting {
                *s = Step::Failed(reason.to_string());
            }
        }
    }

    /// The outcome once every level settled: the levels written, or the
    /// levels written and those failed. `None` while a level waits.
    pub fn outcome(&self) -> Option<Result<Vec<Level>, Partial>> {
        if self.steps.iter().any(|(_, s)| *s == Step::Waiting) {
            return None;
        }
        let written: Vec<Level> = self
            .steps
            .iter()
            .filter(|(_, s)| *s == Step::Durable)
            .map(|(l, _)| *l)
            .collect();
        let failed: Vec<(Level, String)> = self
            .steps
            .iter()
            .filter_map(|(l, s)| match s {
                Step::Failed(r) => Some((*l, r.clone())),
                _ => None,
            })
            .collect();
        Some(match failed.is_empty() {
            true => Ok(written),
            false => Err(Partial { written, failed }),
        })
    }
}

/// One version of a group's L3 at its encoder: the members' shards are
/// gathered, coded, the parity stored at its holders, the members told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Coding {
    /// Gathering the members' states: `lens[i]` is member `i`'s length
    /// once fetched; all of one type.
    Gathering {
        /// The type of the shards gathered so far.
        type_tag: Option<u64>,
        /// Each member's state length, once fetched.
        lens: Vec<Option<u64>>,
        /// Parity pieces to make.
        m: usize,
    },
    /// The parity pieces were sent to their holders: `stored[j]` once
    /// holder `j` said piece `j` is durable.
    Storing {
        /// Every member's state length.
        lens: Vec<u64>,
        /// Which holders answered.
        stored: Vec<bool>,
    },
    /// Every holder stored its parity piece; the members were told.
    Done,
    /// The version's L3 failed; the members were told why.
    Failed(String),
}

/// What the encoder does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Nothing yet.
    Wait,
    /// Every shard is here: code them, send the parity to its holders,
    /// then call [`Coding::sent`].
    Encode,
    /// Tell every member that the parity is durable, with these lengths.
    Announce(Vec<u64>),
    /// Tell every member that the version's L3 failed.
    Fail(String),
}

/// A rank of a group, by its part in one version's L3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Data shard `i`'s member.
    Member(usize),
    /// Parity piece `j`'s holder.
    Holder(usize),
}

impl Coding {
    /// A group of `k` members and `m` parity pieces, nothing gathered.
    pub fn new(k: usize, m: usize) -> Coding {
        Coding::Gathering {
            type_tag: None,
            lens: vec![None; k],
            m,
        }
    }

    /// Whether the version settled (done or failed).
    pub fn settled(&self) -> bool {
        matches!(self, Coding::Done | Coding::Failed(_))
    }

    fn fail(&mut self, reason: String) -> Next {
        if self.settled() {
            return Next::Wait;
        }
        *self = Coding::Failed(reason.clone());
        Next::Fail(reason)
    }

    /// Member `index`'s state (`len` bytes, of `type_tag`) was fetched.
    /// A second shard of one member, or one of another type, fails the
    /// version.
    pub fn shard(&mut self, index: usize, len: u64, tag: u64) -> Next {
        let Coding::Gathering { type_tag, lens, .. } = self else {
            return Next::Wait;
        };
        match (lens.get(index), *type_tag) {
            (None, _) => return self.fail(format!("no member {index}")),
            (Some(Some(_)), _) => return self.fail(format!("member {index} sent twice")),
            (_, Some(t)) if t != tag => {
                return self.fail(format!("member {index}'s state is of another type"))
            }
            _ => {}
        }
        *type_tag = Some(tag);
        lens[index] = Some(len);
        match lens.iter().all(Option::is_some) {
            true => Next::Encode,
            false => Next::Wait,
        }
    }

    /// The parity was coded and sent to the holders (after
    /// [`Next::Encode`]).
    pub fn sent(&mut self) {
        if let Coding::Gathering { lens, m, .. } = self {
            if lens.iter().all(Option::is_some) {
                let lens = lens.iter().flatten().copied().collect();
                let stored = vec![false; *m];
                *self = Coding::Storing { lens, stored };
            }
        }
    }

    /// Holder `j` answered: parity piece `j` is durable (`ok`), or not.
    pub fn stored(&mut self, j: usize, ok: bool, reason: &str) -> Next {
        if !ok {
            return self.fail(format!("parity holder {j} refused: {reason}"));
        }
        let Coding::Storing { lens, stored } = self else {
            return Next::Wait;
        };
        match stored.get_mut(j) {
            Some(s) => *s = true,
            None => return Next::Wait,
        }
        if stored.iter().all(|&s| s) {
            let lens = std::mem::take(lens);
            *self = Coding::Done;
            return Next::Announce(lens);
        }
        Next::Wait
    }

    /// A rank of the group died (or cannot be reached): the version fails
    /// if it still needed that rank's part.
    pub fn lost(&mut self, role: Role, reason: &str) -> Next {
        let needed = match (&*self, role) {
            (Coding::Gathering { lens, .. }, Role::Member(i)) => {
                lens.get(i).is_some_and(Option::is_none)
            }
            (Coding::Gathering { .. }, Role::Holder(_)) => true,
            (Coding::Storing { stored, .. }, Role::Holder(j)) => stored.get(j) == Some(&false),
            _ => false,
        };
        match needed {
            true => self.fail(format!("{role:?} lost: {reason}")),
            false => Next::Wait,
        }
    }

    /// Fails the version now (a deadline past, a coder error).
    pub fn abort(&mut self, reason: &str) -> Next {
        self.fail(reason.to_string())
    }
}

#[cfg(test)]
mod tests;
