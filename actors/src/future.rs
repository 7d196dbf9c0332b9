//! [`ReduceFuture`]: the handle an application holds on a live reduction.

use std::any::Any;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use taskfold_core::ReduceError;

/// What a finished reduction hands back before typing: the root's value or
/// nothing, or the error.
pub(crate) type Outcome = Result<Option<Box<dyn Any + Send>>, ReduceError>;

#[derive(Default)]
struct State {
    outcome: Option<Outcome>,
    taken: bool,
    waker: Option<Waker>,
}

/// The runtime's side of a future: filled exactly once by the worker.
#[derive(Default)]
pub(crate) struct Slot {
    state: Mutex<State>,
    cond: Condvar,
}

impl Slot {
    pub(crate) fn fill(&self, outcome: Outcome) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.outcome.is_some() || s.taken {
            return;
        }
        s.outcome = Some(outcome);
        if let Some(w) = s.waker.take() {
            w.wake();
        }
        self.cond.notify_all();
    }

    pub(crate) fn is_filled(&self) -> bool {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.outcome.is_some()
    }
}

/// A reduction in progress. Returned at once by [`crate::Runtime::reduce`];
/// the reduction progresses on the runtime's threads whether or not anybody
/// looks at this handle.
///
/// The root gets `Ok(Some(value))`; every other participant `Ok(None)` once
/// the root holds the result; everyone gets the same typed error if it
/// failed. A participant that chose
/// [`Completion::Contributed`](crate::Completion::Contributed) gets
/// `Ok(None)` as soon as its data was folded in, and hears of no failure
/// after that. Dropping the handle does not cancel the reduction.
pub struct ReduceFuture<T> {
    slot: Arc<Slot>,
    id: String,
    _t: PhantomData<fn() -> T>,
}

impl<T: 'static> ReduceFuture<T> {
    pub(crate) fn new(slot: Arc<Slot>, id: String) -> Self {
        ReduceFuture {
            slot,
            id,
            _t: PhantomData,
        }
    }

    /// The reduction's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// True once the outcome is known (never blocks).
    pub fn is_done(&self) -> bool {
        self.slot.is_filled()
    }

    /// Blocks until the reduction ends.
    pub fn get(mut self) -> Result<Option<T>, ReduceError> {
        self.wait(None)
    }

    /// Blocks at most `d`. On [`ReduceError::Timeout`] the reduction goes on
    /// and the handle can be waited on again.
    pub fn wait_timeout(&mut self, d: Duration) -> Result<Option<T>, ReduceError> {
        self.wait(Some(d))
    }

    fn wait(&mut self, d: Option<Duration>) -> Result<Option<T>, ReduceError> {
        let deadline = d.map(|d| Instant::now() + d);
        let mut s = self.slot.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(o) = take(&mut s) {
                return o.and_then(downcast::<T>);
            }
            match deadline {
                None => s = self.slot.cond.wait(s).unwrap_or_else(|e| e.into_inner()),
                Some(dl) => {
                    let now = Instant::now();
                    if now >= dl {
                        return Err(ReduceError::Timeout(d.unwrap_or_default()));
                    }
                    s = self
                        .slot
                        .cond
                        .wait_timeout(s, dl - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
    }
}

fn take(s: &mut State) -> Option<Outcome> {
    if s.taken {
        return Some(Err(ReduceError::InvalidOptions(
            "the outcome of this reduction was already taken".into(),
        )));
    }
    let o = s.outcome.take()?;
    s.taken = true;
    Some(o)
}

fn downcast<T: 'static>(v: Option<Box<dyn Any + Send>>) -> Result<Option<T>, ReduceError> {
    match v {
        None => Ok(None),
        Some(b) => b
            .downcast::<T>()
            .map(|b| Some(*b))
            .map_err(|_| ReduceError::Decode("result has an unexpected type".into())),
    }
}

impl<T: 'static> Future for ReduceFuture<T> {
    type Output = Result<Option<T>, ReduceError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut s = self.slot.state.lock().unwrap_or_else(|e| e.into_inner());
        match take(&mut s) {
            Some(o) => Poll::Ready(o.and_then(downcast::<T>)),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_then_get() {
        let slot = Arc::new(Slot::default());
        let mut f = ReduceFuture::<u32>::new(slot.clone(), "x".into());
        assert!(!f.is_done());
        assert!(matches!(
            f.wait_timeout(Duration::from_millis(1)),
            Err(ReduceError::Timeout(_))
        ));
        let s2 = slot.clone();
        let t = std::thread::spawn(move || s2.fill(Ok(Some(Box::new(7u32)))));
        assert_eq!(f.get().unwrap(), Some(7));
        t.join().unwrap();
    }

    #[test]
    fn errors_and_wrong_types() {
        let slot = Arc::new(Slot::default());
        slot.fill(Err(ReduceError::Shutdown));
        slot.fill(Ok(None)); // ignored: filled once
        assert_eq!(
            ReduceFuture::<u32>::new(slot, "x".into()).get(),
            Err(ReduceError::Shutdown)
        );
        let slot = Arc::new(Slot::default());
        slot.fill(Ok(Some(Box::new("str"))));
        assert!(matches!(
            ReduceFuture::<u32>::new(slot, "x".into()).get(),
            Err(ReduceError::Decode(_))
        ));
    }

    #[test]
    fn await_works() {
        let slot = Arc::new(Slot::default());
        let f = ReduceFuture::<u32>::new(slot.clone(), "x".into());
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            slot.fill(Ok(None));
        });
        assert_eq!(futures::executor::block_on(f), Ok(None));
        t.join().unwrap();
    }
}
