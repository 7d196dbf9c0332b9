//! Which batch reduction a rank issues next, and what it does when one
//! fails because ranks were lost: the batch is redone by the survivors,
//! over the survivors' group, each survivor migrating its own traces of
//! the batch and a share of the lost ranks' (see
//! [`crate::job::Job::attempt_traces`]).
//!
//! Pure bookkeeping, no I/O. Every survivor must take the same decisions
//! in the same order, or their reductions would not match (different ids
//! or groups) and wait for each other for ever. That holds because:
//!
//! - the lost ranks are learnt only from the errors of reductions (the
//!   book's Fault tolerance chapter, "A rank that left, or was fenced":
//!   every member of a failed reduction gets the same `RanksLost`, when
//!   members wait for the result, `Completion::Result`);
//! - the rank loop interleaves issuing and settling by count alone (issue
//!   until the window is full, then settle the oldest), so the sequence of
//!   attempts issued is a function of the sequence of outcomes settled.
//!
//! A failure is fatal, not redone, when it names the root (nobody can hold
//! the image), this rank, or no rank that was still a member when the
//! attempt was issued (the runtime broke its word: not retried, so that
//! retries stay bounded: every redo follows a new lost rank, at most
//! `size - 1` of them).

use std::collections::VecDeque;
use std::fmt;

/// One reduction of one batch: the batch, and the ranks lost when it was
/// issued (its group is every other rank).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// The batch.
    pub batch: usize,
    /// The ranks lost when it was issued, sorted.
    pub lost: Vec<u32>,
}

impl Attempt {
    /// The reduction's id: `psdm-batch-B` before any loss, then
    /// `psdm-batch-B-N` with `N` lost ranks (a redo always follows a new
    /// loss, so two attempts of a batch never share an id).
    pub fn id(&self) -> String {
        suffixed(format!("psdm-batch-{}", self.batch), &self.lost)
    }

    /// The ranks that take part: every rank of `size` not lost.
    pub fn group(&self, size: u32) -> Vec<u32> {
        survivors(size, &self.lost)
    }
}

/// `base`, with `-N` for `N` lost ranks if any were lost.
pub fn suffixed(base: String, lost: &[u32]) -> String {
    if lost.is_empty() {
        base
    } else {
        format!("{base}-{}", lost.len())
    }
}

/// The ranks of `size` not in `lost`.
pub fn survivors(size: u32, lost: &[u32]) -> Vec<u32> {
    (0..size).filter(|r| !lost.contains(r)).collect()
}

/// Why a `RanksLost` cannot be redone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fatal {
    /// It names the root: nobody can hold the image.
    RootLost(u32),
    /// It names this rank (it was declared failed).
    ThisRank(u32),
    /// It names no rank that was a member when the reduction started.
    NotMembers(Vec<u32>),
}

impl fmt::Display for Fatal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fatal::RootLost(r) => write!(f, "the root, rank {r}, was lost: there is no image"),
            Fatal::ThisRank(r) => write!(f, "rank {r} itself was declared lost"),
            Fatal::NotMembers(v) => write!(
                f,
                "a reduction failed naming ranks {v:?}, none of them a member"
            ),
        }
    }
}

/// The rank's schedule of batch reductions: fresh batches in order, and
/// the batches to redo, first.
#[derive(Clone, Debug)]
pub struct Schedule {
    size: u32,
    root: u32,
    me: u32,
    batches: usize,
    /// Sorted; never holds the root nor `me`.
    lost: Vec<u32>,
    next_fresh: usize,
    redo: VecDeque<usize>,
    done: usize,
    redone: usize,
}

impl Schedule {
    /// The schedule of rank `me` among `size`, `batches` batches reduced
    /// to `root`.
    pub fn new(size: u32, root: u32, me: u32, batches: usize) -> Schedule {
        Schedule {
            size,
            root,
            me,
            batches,
            lost: Vec::new(),
            next_fresh: 0,
            redo: VecDeque::new(),
            done: 0,
            redone: 0,
        }
    }

    /// The next attempt to issue (a batch to redo first), with the ranks
    /// lost so far; `None` once every batch was issued and nothing waits
    /// to be redone.
    pub fn next_attempt(&mut self) -> Option<Attempt> {
        let batch = match self.redo.pop_front() {
            Some(b) => b,
            None if self.next_fresh < self.batches => {
                self.next_fresh += 1;
                self.next_fresh - 1
            }
            None => return None,
        };
        Some(Attempt {
            batch,
            lost: self.lost.clone(),
        })
    }

    /// Resumes after `done` batches (a checkpoint's): they count as done
    /// and the next fresh batch is `done`. Only before any attempt.
    pub fn resume_at(&mut self, done: usize) {
        assert_eq!(self.next_fresh, 0, "resumed after an attempt was issued");
        self.next_fresh = done.min(self.batches);
        self.done = self.next_fresh;
    }

    /// An attempt succeeded: its batch is done. Returns the batches done.
    pub fn succeeded(&mut self) -> usize {
        self.done += 1;
        self.done
    }

    /// `attempt` failed, `ranks` lost: learns them and schedules the batch
    /// again. Returns the ranks newly learnt lost.
    pub fn failed(&mut self, attempt: &Attempt, ranks: &[u32]) -> Result<Vec<u32>, Fatal> {
        let new = self.learn(&attempt.lost, ranks)?;
        self.redo.push_back(attempt.batch);
        self.redone += 1;
        Ok(new)
    }

    /// A reduction issued when `issued_with` were lost failed, naming
    /// `ranks`: learns them. Returns the ranks newly learnt lost.
    pub fn learn(&mut self, issued_with: &[u32], ranks: &[u32]) -> Result<Vec<u32>, Fatal> {
        if ranks.contains(&self.root) {
            return Err(Fatal::RootLost(self.root));
        }
        if ranks.contains(&self.me) {
            return Err(Fatal::ThisRank(self.me));
        }
        let members: Vec<u32> = ranks
            .iter()
            .copied()
            .filter(|r| *r < self.size && !issued_with.contains(r))
            .collect();
        if members.is_empty() {
            return Err(Fatal::NotMembers(ranks.to_vec()));
        }
        let new: Vec<u32> = members
            .into_iter()
            .filter(|r| !self.lost.contains(r))
            .collect();
        self.lost.extend(&new);
        self.lost.sort_unstable();
        self.lost.dedup();
        Ok(new)
    }

    /// The ranks lost so far, sorted.
    pub fn lost(&self) -> &[u32] {
        &self.lost
    }

    /// The ranks still in the job.
    pub fn survivors(&self) -> Vec<u32> {
        survivors(self.size, &self.lost)
    }

    /// Attempts that failed and were scheduled again.
    pub fn redone(&self) -> usize {
        self.redone
    }

    /// The most attempts a run can issue: each batch once, and again after
    /// each of at most `size - 1` lost ranks.
    pub fn most_attempts(&self) -> usize {
        self.batches * self.size as usize
    }

    /// Batches, as [`crate::job::Job::batches`].
    pub fn batches(&self) -> usize {
        self.batches
    }
}

#[cfg(test)]
mod tests;
