//! [`CheckpointFuture`]: the handle on a checkpoint being written.

use super::CheckpointError;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use taskfold_core::checkpoint::Level;

/// A checkpoint that is durable: the version and the levels it was
/// written at (empty if no level was due at that version).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// The version.
    pub version: u64,
    /// The levels it was written at, cheapest first.
    pub levels: Vec<Level>,
}

type Outcome = Result<Written, CheckpointError>;

#[derive(Default)]
struct State {
    outcome: Option<Outcome>,
    taken: bool,
    waker: Option<Waker>,
    /// Run once the checkpoint is durable (not if it fails).
    then: Option<Box<dyn FnOnce() + Send>>,
}

/// Where the writer leaves the outcome of one checkpoint.
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    cond: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The writer's side of a [`CheckpointFuture`]: fills it once; dropped
/// unfilled (the writer stopped first), it fails it with
/// [`CheckpointError::Shutdown`], so that no future waits forever.
pub(crate) struct Completer(Arc<Shared>);

impl Completer {
    pub(crate) fn fill(self, outcome: Outcome) {
        self.set(outcome);
    }

    fn set(&self, outcome: Outcome) {
        let mut s = self.0.lock();
        if s.outcome.is_some() || s.taken {
            return;
        }
        let then = s.then.take().filter(|_| outcome.is_ok());
        s.outcome = Some(outcome);
        if let Some(w) = s.waker.take() {
            w.wake();
        }
        self.0.cond.notify_all();
        drop(s);
        if let Some(f) = then {
            f();
        }
    }
}

impl Drop for Completer {
    fn drop(&mut self) {
        self.set(Err(CheckpointError::Shutdown));
    }
}

/// A checkpoint under way: [`crate::checkpoint::Checkpointer::save`] returns it once
/// the state is serialised; the levels due are written behind the
/// application's back. It completes when they are durable (synced and in
/// place), or with the error that stopped the write. Dropping it does not
/// cancel the write.
pub struct CheckpointFuture {
    shared: Arc<Shared>,
    version: u64,
}

impl CheckpointFuture {
    /// A future for `version` and the writer's side of it.
    pub(crate) fn pending(version: u64) -> (CheckpointFuture, Completer) {
        let shared = Arc::new(Shared::default());
        let f = CheckpointFuture {
            shared: shared.clone(),
            version,
        };
        (f, Completer(shared))
    }

    /// A future already complete with `outcome`.
    pub(crate) fn ready(version: u64, outcome: Outcome) -> CheckpointFuture {
        let (f, done) = CheckpointFuture::pending(version);
        done.fill(outcome);
        f
    }

    /// Runs `f` once the checkpoint is durable (at once if it is; never if
    /// it failed).
    pub(crate) fn on_durable(&self, f: impl FnOnce() + Send + 'static) {
        let mut s = self.shared.lock();
        match &s.outcome {
            None if !s.taken => s.then = Some(Box::new(f)),
            Some(Ok(_)) => {
                drop(s);
                f();
            }
            _ => {}
        }
    }

    /// The version being written.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Whether the checkpoint is durable, or failed.
    pub fn is_done(&self) -> bool {
        let s = self.shared.lock();
        s.outcome.is_some() || s.taken
    }

    /// Blocks until the checkpoint is durable, or failed.
    pub fn wait(mut self) -> Result<Written, CheckpointError> {
        self.wait_until(None)
            .unwrap_or(Err(CheckpointError::Shutdown))
    }

    /// Blocks at most `d`: `None` if the checkpoint is still being written
    /// (the handle can be waited on again).
    pub fn wait_timeout(&mut self, d: Duration) -> Option<Result<Written, CheckpointError>> {
        self.wait_until(Some(Instant::now() + d))
    }

    fn wait_until(&mut self, deadline: Option<Instant>) -> Option<Outcome> {
        let mut s = self.shared.lock();
        loop {
            if let Some(o) = s.outcome.take() {
                s.taken = true;
                return Some(o);
            }
            if s.taken {
                return Some(Err(CheckpointError::Shutdown));
            }
            s = match deadline {
                None => self.shared.cond.wait(s).unwrap_or_else(|e| e.into_inner()),
                Some(at) => {
                    let left = at.checked_duration_since(Instant::now())?;
                    let (s, _) = self
                        .shared
                        .cond
                        .wait_timeout(s, left)
                        .unwrap_or_else(|e| e.into_inner());
                    s
                }
            };
        }
    }
}

impl Future for CheckpointFuture {
    type Output = Result<Written, CheckpointError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut s = self.shared.lock();
        if let Some(o) = s.outcome.take() {
            s.taken = true;
            return Poll::Ready(o);
        }
        if s.taken {
            return Poll::Ready(Err(CheckpointError::Shutdown));
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}
