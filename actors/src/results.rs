//! A root's results kept for its replacement: the runtime's shared part
//! (see [`taskfold_core::results`] and the book's chapter Surviving
//! failures of the application, A replaced root).
//!
//! # Layout
//!
//! - here: [`Kept`], the ledger of results handed to the application and
//!   not released, shared by the worker (which fills it) and
//!   [`crate::checkpoint::Checkpointer::save`] (which releases what was taken before
//!   the call, once that checkpoint is durable);
//! - `router/results.rs`: the router's part, which hands each
//!   `Msg::Results` to its actor after checking its sender;
//! - `worker/results.rs`: the root's side (the copy offered to the buddy
//!   before the root's last report; a replacement root's fetch of its kept
//!   result);
//! - `replica/results.rs`: the holder's side (the copies, their bound);
//! - `master/results.rs`: where each result is kept, and the answer to a
//!   replacement root.

use crate::future::Slot;
use std::sync::{Arc, Mutex};
use taskfold_core::results::Ledger;

/// A result handed to the application, not released: its future (did
/// the application take it?) and the root's own serialised copy (to copy
/// it again if its holder dies).
pub(crate) struct Handoff {
    pub(crate) slot: Arc<Slot>,
    pub(crate) bytes: bytes::Bytes,
}

/// Whether this rank's roots keep their results, and the results handed
/// to its application that are not released yet.
#[derive(Clone, Default)]
pub(crate) struct Kept {
    on: bool,
    ledger: Arc<Mutex<Ledger<Handoff>>>,
}

impl Kept {
    /// Roots keep their results if `on` (`Config::keeps_results`).
    pub(crate) fn new(on: bool) -> Self {
        Kept {
            on,
            ledger: Arc::default(),
        }
    }

    /// Whether roots keep their results.
    pub(crate) fn on(&self) -> bool {
        self.on
    }

    /// The ledger, locked (never held across an await or a send).
    pub(crate) fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger<Handoff>> {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// At a checkpoint call, on the application's thread: the results it
    /// took (or dropped unread: it will never take them), to be released
    /// once that checkpoint is durable. A result taken after the call is
    /// not in this checkpoint's state.
    pub(crate) fn taken(&self) -> Vec<u64> {
        if !self.on {
            return Vec::new();
        }
        self.ledger()
            .taken(|h| h.slot.is_taken() || Arc::strong_count(&h.slot) == 1)
    }
}
