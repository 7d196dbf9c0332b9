//! The runtime's side of the master's notice board
//! ([`taskfold_transports::board`]): where application threads wait for
//! released barriers and completed reductions, woken by the master's post
//! or by their own answer (see also `future::BoardLink`).
//!
//! Every completion on the board is also sent as a message; the board only
//! spares a rank on the master's node the three thread wake-ups of that
//! message (transport reader, actors, application), one rank after the
//! other, before its application thread goes on. A released barrier is
//! sent only to the ranks that said they do not read the board
//! (`Msg::Barrier::board`): nothing but the application thread waits for
//! it. Without a board (another node, `Config::notice_board` off, or a
//! kernel that refuses the mapping) waiters use their message alone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use taskfold_core::ReduceError;
use taskfold_transports::board::Board;

/// The board, once known (set at most once: by the master's process at
/// start, by any other rank when the master's `Msg::Board` arrives).
#[derive(Clone, Default)]
pub(crate) struct Notices(Arc<Inner>);

#[derive(Default)]
struct Inner {
    board: OnceLock<Arc<Board>>,
    /// Barriers released through the board (`LocalStats`).
    by_board: AtomicU64,
    /// Futures completed through the board (`LocalStats`).
    reductions_by_board: AtomicU64,
}

/// How long a waiter sleeps on the bell before it looks again for an
/// answer that rang no bell (a runtime that stopped drops its senders).
const RECHECK: Duration = Duration::from_millis(50);

/// Calls `look` until it finds an answer, sleeping on `board`'s bell in
/// between; `None` once `deadline` passed. `look` reads a waiter's own
/// answer and the board; whoever gives either rings the bell.
pub(crate) fn watch<R>(
    board: &Board,
    deadline: Option<Instant>,
    mut look: impl FnMut() -> Option<R>,
) -> Option<R> {
    loop {
        // The bell first: an answer or post after this read moves it, and
        // the wait below returns at once.
        let seen = board.bell();
        if let Some(r) = look() {
            return Some(r);
        }
        let mut sleep = RECHECK;
        if let Some(dl) = deadline {
            let now = Instant::now();
            if now >= dl {
                return None;
            }
            sleep = sleep.min(dl - now);
        }
        board.wait(seen, sleep);
    }
}

impl Notices {
    /// The board, if this rank has one.
    pub(crate) fn get(&self) -> Option<&Arc<Board>> {
        self.0.board.get()
    }

    /// Barriers this rank's threads saw released on the board.
    pub(crate) fn barriers_by_board(&self) -> u64 {
        self.0.by_board.load(Ordering::Relaxed)
    }

    /// Futures of this rank completed through the board.
    pub(crate) fn reductions_by_board(&self) -> u64 {
        self.0.reductions_by_board.load(Ordering::Relaxed)
    }

    /// Counts a future completed through the board.
    pub(crate) fn count_reduction(&self) {
        self.0.reductions_by_board.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(crate::metrics::REDUCTIONS_BY_BOARD).increment(1);
    }

    /// Installs the board (a second one is ignored).
    pub(crate) fn set(&self, board: Arc<Board>) {
        let _ = self.0.board.set(board);
    }

    /// Rings the bell, if there is a board: an answer was sent through a
    /// channel that an application thread may be waiting on beside it.
    pub(crate) fn ring(&self) {
        if let Some(b) = self.get() {
            b.ring();
        }
    }

    /// Waits for barrier `seq`: its answer on `rx`, or its release on the
    /// board, whichever comes first (both say the same; failures only
    /// come on `rx`).
    pub(crate) fn wait_barrier(
        &self,
        seq: u64,
        rx: &flume::Receiver<Result<(), ReduceError>>,
    ) -> Result<(), ReduceError> {
        let Some(board) = self.get() else {
            // No answer at all (the runtime stopped): shut down.
            return rx.recv().unwrap_or(Err(ReduceError::Shutdown));
        };
        let answer = watch(board, None, || match rx.try_recv() {
            Ok(answer) => Some(answer),
            Err(flume::TryRecvError::Disconnected) => Some(Err(ReduceError::Shutdown)),
            Err(flume::TryRecvError::Empty) => board.barrier_released(seq).then(|| {
                self.0.by_board.fetch_add(1, Ordering::Relaxed);
                metrics::counter!(crate::metrics::BARRIERS_BY_BOARD).increment(1);
                Ok(())
            }),
        });
        // (With no deadline, `watch` only returns an answer.)
        answer.unwrap_or(Err(ReduceError::Shutdown))
    }
}

/// An answer to a waiting application thread: sent on its channel, then
/// the bell rung so that a thread waiting on the board sees it.
pub(crate) struct Reply<T> {
    tx: flume::Sender<T>,
    notices: Notices,
}

impl<T> Reply<T> {
    pub(crate) fn new(tx: flume::Sender<T>, notices: Notices) -> Self {
        Reply { tx, notices }
    }

    /// The board the waiter also reads, if it has one.
    pub(crate) fn board(&self) -> Option<&Arc<Board>> {
        self.notices.get()
    }

    /// Sends `v` and rings, unless the waiter is gone (it was answered by
    /// the board): then there is no one to wake.
    pub(crate) fn send(self, v: T) {
        if self.tx.send(v).is_ok() {
            self.notices.ring();
        }
    }
}
