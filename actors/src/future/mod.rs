//! [`ReduceFuture`]: the handle an application holds on a live reduction.

use std::any::Any;
use std::collections::HashSet;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use taskfold_core::ReduceError;

/// What a finished reduction hands back before typing: the root's value or
/// nothing, or the error.
pub(crate) type Outcome = Result<Option<Box<dyn Any + Send>>, ReduceError>;

/// Where a slot hands its outcome on instead of keeping it: the first
/// half of an allreduce passes the reduction's outcome to its spread (see
/// `crate::spread`).
pub(crate) type Relay = Box<dyn FnOnce(Outcome) + Send>;

#[derive(Default)]
struct State {
    outcome: Option<Outcome>,
    taken: bool,
    /// Taken through the master's notice board, before the worker filled
    /// it (see [`BoardLink`]).
    by_board: bool,
    waker: Option<Waker>,
    /// The contribution survives this rank's death (the worker's mark, see
    /// [`Slot::mark_safe`]); a filled or taken outcome counts as safe too.
    safe: bool,
    /// The task waiting for [`ReduceFuture::safe`].
    safe_waker: Option<Waker>,
}

impl State {
    /// Safe, or over: nothing this rank's death could lose any more.
    fn settled(&self) -> bool {
        self.safe || self.outcome.is_some() || self.taken
    }

    fn wake_safe(&mut self) {
        if let Some(w) = self.safe_waker.take() {
            w.wake();
        }
    }
}

/// The runtime's side of a future: filled exactly once by the worker, or
/// (a member other than the root, on the master's node) taken first
/// through the master's notice board.
#[derive(Default)]
pub(crate) struct Slot {
    state: Mutex<State>,
    cond: Condvar,
    board: Option<BoardLink>,
    /// 0 until the worker arms the board path; then 1 + the board's count
    /// of completions when the reduction started here.
    armed: AtomicU64,
    /// Takes the outcome when the slot is filled (the slot then keeps
    /// `Ok(None)`, so that it reads as settled).
    relay: Mutex<Option<Relay>>,
}

/// What a future needs to complete through the master's notice board: a
/// member other than the root, waiting for `Completion::Result`, reads
/// its reduction's completion there (posted by the master before its
/// completion notices go out), one `FUTEX_WAKE` after the master saw it,
/// instead of three thread wake-ups later.
///
/// The board only ever says "completed"; failures come as usual. The
/// future then gives its id back itself (`live`), so that the application
/// can reuse it at once; the worker ends the reduction here when the
/// master's notice comes, or when a reduction with the same id starts
/// here first (the notice of the old one is then dropped).
pub(crate) struct BoardLink {
    pub(crate) notices: crate::notices::Notices,
    pub(crate) live: Arc<Mutex<HashSet<u64>>>,
    pub(crate) key: u64,
    /// This rank: once the master declared it failed, it takes nothing
    /// from the board (it hears it was fenced by message).
    pub(crate) rank: u32,
}

impl Slot {
    /// A slot whose future may complete through the notice board.
    pub(crate) fn with_board(link: BoardLink) -> Self {
        Slot {
            board: Some(link),
            ..Slot::default()
        }
    }

    /// A slot that hands its outcome to `relay` (never through the board).
    pub(crate) fn relayed(relay: Relay) -> Self {
        Slot {
            relay: Mutex::new(Some(relay)),
            ..Slot::default()
        }
    }

    pub(crate) fn fill(&self, outcome: Outcome) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.outcome.is_some() || s.taken {
            return;
        }
        let relay = self.relay.lock().unwrap_or_else(|e| e.into_inner()).take();
        let (outcome, relayed) = match relay {
            Some(r) => (Ok(None), Some((r, outcome))),
            None => (outcome, None),
        };
        s.outcome = Some(outcome);
        if let Some(w) = s.waker.take() {
            w.wake();
        }
        s.wake_safe();
        self.cond.notify_all();
        drop(s);
        if let Some(link) = &self.board {
            // A waiter on the board sleeps on its bell, not on `cond`.
            link.notices.ring();
        }
        // Outside the lock: the relay may fill other slots.
        if let Some((relay, outcome)) = relayed {
            relay(outcome);
        }
    }

    /// The worker's mark: this rank's contribution survives its death from
    /// now on (its state machine's safe event). Once per reduction, under
    /// the slot's own lock.
    pub(crate) fn mark_safe(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.safe {
            return;
        }
        s.safe = true;
        s.wake_safe();
        self.cond.notify_all();
    }

    /// Safe, or the outcome is known.
    pub(crate) fn is_settled(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .settled()
            || self.completed_on_board()
    }

    /// Blocks until [`Slot::is_settled`], at most `d` if given; false if
    /// `d` passed first.
    pub(crate) fn wait_settled(&self, d: Option<Duration>) -> bool {
        // A completion on the master's board rings no `cond`: looked at
        // again at least this often.
        const BOARD_LOOK: Duration = Duration::from_millis(5);
        let deadline = d.map(|d| Instant::now() + d);
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if s.settled() || self.completed_on_board() {
                return true;
            }
            let mut wait = if self.board.is_some() {
                BOARD_LOOK
            } else {
                Duration::MAX
            };
            if let Some(dl) = deadline {
                let now = Instant::now();
                if now >= dl {
                    return false;
                }
                wait = wait.min(dl - now);
            }
            s = if wait == Duration::MAX {
                self.cond.wait(s).unwrap_or_else(|e| e.into_inner())
            } else {
                self.cond
                    .wait_timeout(s, wait)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            };
        }
    }

    /// Whether the application took the outcome (read the future's value).
    pub(crate) fn is_taken(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).taken
    }

    pub(crate) fn is_filled(&self) -> bool {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.outcome.is_some()
    }

    /// Arms the board path: completions of this key posted from now on
    /// are this reduction's. The worker calls it when the reduction starts
    /// here, before its join (so before the master can post it), and only
    /// if no earlier reduction with the same key may still be posted.
    pub(crate) fn arm(&self) {
        if let Some(b) = self.board.as_ref().and_then(|l| l.notices.get()) {
            self.armed.store(b.completions() + 1, Ordering::Release);
        }
    }

    /// Whether the future was completed through the board.
    pub(crate) fn by_board(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by_board
    }

    /// Gives the reduction's key back to `live` unless the future did so
    /// itself (taken through the board: the key may already name a new
    /// reduction). Under `live`'s lock, as the future's own claim is, so
    /// that exactly one of the two removes it, before the application can
    /// reuse the id.
    pub(crate) fn release_key(&self, live: &Mutex<HashSet<u64>>, key: u64) {
        let mut live = live.lock().unwrap_or_else(|e| e.into_inner());
        if !self.by_board() {
            live.remove(&key);
        }
    }

    /// Whether the board says this reduction completed.
    fn completed_on_board(&self) -> bool {
        let (Some(link), since) = (&self.board, self.armed.load(Ordering::Acquire)) else {
            return false;
        };
        since > 0
            && link.notices.get().is_some_and(|b| {
                b.completed_since(link.key, since - 1) == Some(true) && !b.is_fenced(link.rank)
            })
    }

    /// Takes the outcome `Ok(None)` through the board, unless the worker
    /// filled the slot meanwhile (then that outcome).
    fn claim(&self, link: &BoardLink) -> Outcome {
        let mut live = link.live.lock().unwrap_or_else(|e| e.into_inner());
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(o) = take(&mut s) {
            return o;
        }
        s.taken = true;
        s.by_board = true;
        drop(s);
        live.remove(&link.key);
        drop(live);
        link.notices.count_reduction();
        Ok(None)
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
///
/// On the master's node, a member other than the root that waits for the
/// result in [`ReduceFuture::get`] or [`ReduceFuture::wait_timeout`] reads
/// the completion on the master's notice board (see
/// [`crate::Config::notice_board`]) as soon as the master saw it, without
/// waiting for the master's message; `.await` waits for the message.
///
/// # When the contribution is safe
///
/// Apart from the result, the handle says when this rank's contribution
/// survives this rank's death ([`ReduceFuture::is_safe`],
/// [`ReduceFuture::wait_safe`], [`ReduceFuture::safe`]): from then on,
/// this process may die (SIGKILL included) and the reduction still ends
/// with the right value at the root, as far as the other ranks' failures
/// allow. It is safe once its announcement to the master went out naming
/// a copy outside this process (with [`crate::Durability::Sync`], the
/// buddy's acknowledged replica; with [`crate::Durability::Async`], the
/// disk copy written or a same-node buddy's standing copy; either may fall
/// back on the other), once its data was folded into another rank's and
/// released, or once the reduction ended here. The root is safe at its
/// announcement: no copy recovers the root's loss. With
/// [`crate::Durability::Off`] only a release or the end makes it safe.
/// With [`crate::Durability::Sync`], [`crate::Runtime::reduce`] returns
/// only once the contribution is safe. See the book's Fault tolerance
/// chapter, "The durability window".
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

    /// The slot this future reads.
    pub(crate) fn slot(&self) -> &Arc<Slot> {
        &self.slot
    }

    /// The reduction's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// True once the outcome is known (never blocks).
    pub fn is_done(&self) -> bool {
        self.slot.is_filled() || self.slot.completed_on_board()
    }

    /// True once this rank's contribution survives this rank's death, or
    /// the outcome is known (never blocks; see "When the contribution is
    /// safe" above).
    pub fn is_safe(&self) -> bool {
        self.slot.is_settled()
    }

    /// Blocks until [`ReduceFuture::is_safe`]. Returns at the latest when
    /// the reduction ends (then [`ReduceFuture::get`] says how).
    pub fn wait_safe(&self) {
        self.slot.wait_settled(None);
    }

    /// Blocks at most `d` until [`ReduceFuture::is_safe`];
    /// [`ReduceError::Timeout`] if it is not by then (the reduction goes
    /// on, and the handle can be waited on again).
    pub fn wait_safe_timeout(&self, d: Duration) -> Result<(), ReduceError> {
        if self.slot.wait_settled(Some(d)) {
            Ok(())
        } else {
            Err(ReduceError::Timeout(d))
        }
    }

    /// Completes once [`ReduceFuture::is_safe`] (the async form of
    /// [`ReduceFuture::wait_safe`]; like `.await` on the handle, it hears
    /// of completions by message, not on the master's notice board).
    pub fn safe(&self) -> Safe<'_> {
        Safe { slot: &self.slot }
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
        if let Some(link) = &self.slot.board {
            if let Some(board) = link.notices.get() {
                // On the board's bell, which rings for every post and for
                // every fill of a linked slot: both are looked at after
                // each ring.
                let slot = &self.slot;
                let got = crate::notices::watch(board, deadline, || {
                    let mut s = slot.state.lock().unwrap_or_else(|e| e.into_inner());
                    take(&mut s).or_else(|| {
                        drop(s);
                        slot.completed_on_board().then(|| slot.claim(link))
                    })
                });
                return match got {
                    Some(o) => o.and_then(downcast::<T>),
                    None => Err(ReduceError::Timeout(d.unwrap_or_default())),
                };
            }
        }
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

/// Completes once a reduction's contribution is safe: see
/// [`ReduceFuture::safe`].
pub struct Safe<'a> {
    slot: &'a Slot,
}

impl Future for Safe<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = self.slot.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.settled() {
            return Poll::Ready(());
        }
        s.safe_waker = Some(cx.waker().clone());
        Poll::Pending
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
mod tests;
