//! A member whose replacement is expected (see the book's chapter
//! Surviving failures of the application): its lost original is awaited
//! from the replacement's join instead of ending the reduction.

use super::{Replacement, Schedule, ScheduleError, Unrecoverable};
use crate::rankset::RankSet;

impl Schedule {
    /// Position `index` is dead, or about to be declared so, and a
    /// replacement of its rank is expected: its original, if no copy of
    /// it survives, is awaited from the replacement's join instead of
    /// ending the reduction ([`Schedule::fail`] then takes it out), and
    /// an awaited root is no loss either. Call before [`Schedule::fail`].
    pub fn await_replacement(&mut self, index: usize) {
        if index < self.n && !self.complete {
            self.awaiting.insert(index);
            // A replacement whose join was held died with its data: it
            // stands in for nothing, and the next one's join is held in
            // its place.
            self.held.remove(index);
            if self.dead.contains(index) {
                // Declared dead already: what it held is taken out now.
                let queued: Vec<RankSet> = self
                    .queue
                    .iter()
                    .filter(|e| e.index == index && e.path.len() == 1)
                    .map(|e| e.path.clone())
                    .collect();
                self.queue
                    .retain(|e| !(e.index == index && e.path.len() == 1));
                self.push_singles(queued, &|_| false);
            }
        }
    }

    /// The replacement of awaited position `index` is in. If its original
    /// was taken out, the position is alive again and its join is awaited
    /// as any member's. If the original is still in the reduction (a copy
    /// of it, or its data being fetched), the position stays dead here,
    /// where that original is read as the dead rank's, until its fate is
    /// known ([`Schedule::join_replacement`]).
    pub fn revive(&mut self, index: usize) {
        if !self.awaiting.remove(index) {
            return;
        }
        if self.joined.contains(index) && self.dead.contains(index) {
            self.replaced.insert(index);
        } else {
            self.dead.remove(index);
            self.queue.reclassify(index);
            self.rejoin_due.insert(index);
        }
    }

    /// Position `index`'s original is in the reduction's data already,
    /// folded in from a dead incarnation before a standby rebuilt the
    /// reduction, and its rank lives again as a replacement that has not
    /// joined: that join, when it comes, is held as any replacement's
    /// whose dead rank's original stays in ([`Schedule::join_replacement`]).
    /// The position is then as [`Schedule::revive`] leaves one whose
    /// original stays in: dead here, where that original is read as the
    /// dead rank's.
    pub fn stand_in(&mut self, index: usize) {
        if index < self.n && self.joined.contains(index) {
            self.dead.insert(index);
            self.queue.reclassify(index);
            self.replaced.insert(index);
        }
    }

    /// The join of position `index`'s replacement ([`Schedule::revive`]
    /// came first). Its original is counted once: as a new join if the
    /// dead rank's was taken out; else the dead rank's stays in (a copy,
    /// or folded into live data, or being fetched) and the replacement's
    /// is held, to stand in if the dead rank's is lost after all. Either
    /// way the replacement hears how the reduction ended, as any member.
    pub fn join_replacement(&mut self, index: usize) -> Result<Replacement, ScheduleError> {
        if index >= self.n {
            return Err(ScheduleError::OutOfGroup(index));
        }
        if !self.replaced.contains(index) {
            return self.join(index).map(|()| Replacement::Joined);
        }
        if !self.held.insert(index) {
            return Err(ScheduleError::DuplicateJoin(index));
        }
        Ok(Replacement::Held)
    }

    /// The replacement of `index` did not come, or did not join again,
    /// in time: its awaited original is lost after all. Errors as
    /// [`Schedule::check_recoverable`], or for the original a replacement
    /// never joined again.
    pub fn give_up(
        &mut self,
        index: usize,
        has_replica: impl Fn(usize) -> bool,
    ) -> Result<(), Unrecoverable> {
        if self.complete {
            return Ok(());
        }
        if self.rejoin_due.remove(index) {
            return Err(Unrecoverable {
                lost: vec![index],
                root: index == self.root,
            });
        }
        if !self.awaiting.remove(index) {
            return Ok(());
        }
        if index == self.root && self.dead.contains(index) {
            return Err(Unrecoverable {
                lost: vec![index],
                root: true,
            });
        }
        self.check_recoverable(has_replica)
    }
}
