//! Global restart at a rank (Reinit++; `TASKFOLD_RESTART=global`): when a
//! rank is replaced, the master rolls the job back to a new epoch; every
//! rank's live reductions and barriers end with [`ReduceError::Reinit`],
//! and so does every call until the application is back at its re-init
//! entry point, [`Runtime::run_reinit`]. There each rank tells the master
//! the newest checkpoint it holds; once every rank (the replacement too)
//! is there, all resume from the newest version every rank holds. The
//! master's side is `taskfold_core::reinit`.

use crate::commands::Command;
use crate::{Lifecycle, Runtime};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use taskfold_core::ReduceError;

/// Where the application's entry point stands, as the master said.
#[derive(Debug, Default)]
struct State {
    /// The epoch the master rolled the job back to (0: never).
    epoch: u32,
    /// Unwinding to `epoch`: calls fail until the go.
    unwinding: bool,
    /// The last go: its epoch and the version to resume from.
    go: Option<(u32, Option<u64>)>,
    /// The epoch in which the master took this rank's leave of its entry
    /// point (`Msg::ReinitLeft`).
    left: Option<u32>,
}

/// The rollback state shared by the runtime and its router.
#[derive(Clone, Debug, Default)]
pub(crate) struct Rollbacks(Arc<(Mutex<State>, Condvar)>);

impl Rollbacks {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0 .0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The master rolls the job back to `epoch`.
    pub(crate) fn unwind(&self, epoch: u32) {
        let mut s = self.state();
        if epoch > s.epoch {
            (s.epoch, s.unwinding) = (epoch, true);
        }
        self.0 .1.notify_all();
    }

    /// Every rank is at its entry point for `epoch`: go on from `version`.
    pub(crate) fn go(&self, epoch: u32, version: Option<u64>) {
        let mut s = self.state();
        if epoch >= s.epoch {
            (s.epoch, s.unwinding, s.go) = (epoch, false, Some((epoch, version)));
        }
        self.0 .1.notify_all();
    }

    /// The master took this rank's leave of its entry point in `epoch`.
    pub(crate) fn left(&self, epoch: u32) {
        let mut s = self.state();
        s.left = s.left.max(Some(epoch));
        self.0 .1.notify_all();
    }

    /// The epoch the job runs in, or the error every call gets while the
    /// job rolls back.
    pub(crate) fn running(&self) -> Result<u32, ReduceError> {
        let s = self.state();
        match s.unwinding {
            true => Err(ReduceError::Reinit { epoch: s.epoch }),
            false => Ok(s.epoch),
        }
    }

    /// The error every call gets while the job rolls back, if it does.
    pub(crate) fn check(&self) -> Result<(), ReduceError> {
        let s = self.state();
        match s.unwinding {
            true => Err(ReduceError::Reinit { epoch: s.epoch }),
            false => Ok(()),
        }
    }
}

/// How often a rank that leaves its entry point, or waits at it for the
/// go, sends its leave or its readiness again while no answer came (its
/// master may have died meanwhile; a repeated one changes nothing).
const LEAVE_RESEND: Duration = Duration::from_millis(500);

/// What the application's entry point is called with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Where this process stands ([`Runtime::lifecycle`]).
    pub lifecycle: Lifecycle,
    /// The checkpoint version to resume from, the newest every rank holds
    /// ([`crate::checkpoint::Checkpointer::restore_upto`]); `None`: start from the beginning
    /// (the first entry of a process started with the job, or no version
    /// held by every rank).
    pub resume: Option<u64>,
}

impl Runtime {
    /// Runs `body`, the application's re-init entry point. Under
    /// `TASKFOLD_RESTART=global`, when a rank is replaced every rank's
    /// calls fail with [`ReduceError::Reinit`]; `body` returns that error
    /// (with `?`), every rank meets the others here, and `body` runs again
    /// with [`Entry::resume`], the newest checkpoint version every rank
    /// holds, to restore with [`crate::checkpoint::Checkpointer::restore_upto`]. A replacement
    /// meets the others before its first run. Any other result of `body`
    /// is returned. Without global restart this is one call of `body`.
    ///
    /// Under global restart, once `body` returned a value this rank takes
    /// its leave of the entry point: the master takes it (no death rolls
    /// the job back from then on: the steps this rank was in could not
    /// be redone), or a rollback came first and `body` runs again with
    /// the others. See the book's chapter Surviving failures of the
    /// application, Global restart.
    ///
    /// Bounded: at most one more run than the job's replacements, and each
    /// meeting, and the leave, waits at most the respawn wait plus twice
    /// the failure timeout ([`ReduceError::Timeout`]).
    pub fn run_reinit<T>(
        &self,
        mut body: impl FnMut(&Runtime, Entry) -> Result<T, ReduceError>,
    ) -> Result<T, ReduceError> {
        let global = self.config.respawn.restart == taskfold_core::settings::Restart::Global;
        let mut resume = None;
        if global && matches!(self.lifecycle(), Lifecycle::Restarted { .. }) {
            resume = self.meet(None)?;
        }
        let runs = self.config.respawn.replacements().saturating_add(2);
        let mut last = ReduceError::Reinit { epoch: 0 };
        for _ in 0..runs {
            let entry = Entry {
                lifecycle: self.lifecycle(),
                resume,
            };
            match body(self, entry) {
                Err(ReduceError::Reinit { epoch }) if global => {
                    last = ReduceError::Reinit { epoch };
                    resume = self.meet(Some(epoch))?;
                }
                Ok(value) if global => match self.leave()? {
                    None => return Ok(value),
                    Some(epoch) => {
                        // A rollback came before the master took the
                        // leave: this rank's steps are redone with the
                        // others', and its result with them.
                        last = ReduceError::Reinit { epoch };
                        resume = self.meet(Some(epoch))?;
                    }
                },
                other => return other,
            }
        }
        Err(last)
    }

    /// `Err(ReduceError::Reinit)` while the job rolls back (global
    /// restart), else `Ok`; never blocks. An application that computes
    /// long between taskfold calls checks it between units of work, to
    /// come back to its entry point at once rather than at its next call.
    pub fn check_reinit(&self) -> Result<(), ReduceError> {
        self.rollbacks.check()
    }

    /// Tells the master this rank is at its entry point for `epoch`
    /// (`None`: a replacement) and waits for the go; returns the version
    /// to resume from. Told of a newer rollback meanwhile, it answers for
    /// that one.
    fn meet(&self, mut epoch: Option<u32>) -> Result<Option<u64>, ReduceError> {
        self.reset_numbering();
        let limit = self.config.respawn.wait + self.config.failure_timeout * 2;
        let deadline = Instant::now() + limit;
        let held = self.checkpoints.held_versions();
        let (lock, cv) = &*self.rollbacks.0;
        // The rollback this answer is for: a replacement's (`None`) is for
        // whichever the master runs, so a newer one than this rank has
        // heard of must be answered again, as any rank's.
        let mut answered = epoch.unwrap_or(lock.lock().unwrap_or_else(|e| e.into_inner()).epoch);
        self.tell_ready(epoch, &held)?;
        let mut told = Instant::now();
        let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some((e, version)) = s.go {
                if !s.unwinding && epoch.is_none_or(|mine| e >= mine) {
                    // The versions reported stay held until the
                    // application restored the one agreed on.
                    if version.is_none() {
                        self.checkpoints.release_held();
                    }
                    return Ok(version);
                }
            }
            if s.unwinding && s.epoch > answered {
                answered = s.epoch;
                // Another rank was replaced meanwhile: answer again.
                epoch = Some(s.epoch);
                drop(s);
                self.tell_ready(epoch, &held)?;
                s = lock.lock().unwrap_or_else(|e| e.into_inner());
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.checkpoints.release_held();
                return Err(ReduceError::Timeout(limit));
            }
            if told.elapsed() >= LEAVE_RESEND {
                // A master that died before it answered took the readiness
                // with it: the standby that took over answers it.
                drop(s);
                self.tell_ready(epoch, &held)?;
                told = Instant::now();
                s = lock.lock().unwrap_or_else(|e| e.into_inner());
                continue;
            }
            let wait = left.min(Duration::from_millis(200));
            s = cv
                .wait_timeout(s, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Tells the master that the application leaves its entry point for
    /// good, and waits for its answer: `None` once it took the leave (no
    /// death rolls the job back from then on), `Some(epoch)` if a rollback
    /// to `epoch` came first (then this rank meets the others, and its
    /// steps are done again). The leave is sent again every
    /// [`LEAVE_RESEND`] (a standby that took over answers it); bounded as
    /// a meeting is.
    fn leave(&self) -> Result<Option<u32>, ReduceError> {
        let limit = self.config.respawn.wait + self.config.failure_timeout * 2;
        let deadline = Instant::now() + limit;
        let (lock, cv) = &*self.rollbacks.0;
        let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
        let epoch = s.epoch;
        loop {
            if s.unwinding {
                return Ok(Some(s.epoch));
            }
            if s.left.is_some_and(|e| e >= epoch) {
                return Ok(None);
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(ReduceError::Timeout(limit));
            }
            drop(s);
            self.cmd
                .send(Command::LeaveReinit(epoch))
                .map_err(|_| ReduceError::Shutdown)?;
            s = lock.lock().unwrap_or_else(|e| e.into_inner());
            let unanswered = |s: &mut State| !s.unwinding && s.left.is_none_or(|e| e < epoch);
            s = cv
                .wait_timeout_while(s, remaining.min(LEAVE_RESEND), unanswered)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn tell_ready(&self, epoch: Option<u32>, held: &[u64]) -> Result<(), ReduceError> {
        let held = held.to_vec();
        self.cmd
            .send(Command::ReinitReady { epoch, held })
            .map_err(|_| ReduceError::Shutdown)
    }

    /// Every rank numbers its barriers, unnamed reductions and spreads
    /// from zero again, as the replacement does.
    fn reset_numbering(&self) {
        self.barriers.store(0, std::sync::atomic::Ordering::Relaxed);
        self.spreads.clear();
        self.auto_ids.clear();
    }
}
