//! A root's results kept for its replacement: the runtime's shared part
//! (see [`taskfold_core::results`] and the book's chapter Surviving
//! failures of the application, A replaced root).
//!
//! # Layout
//!
//! - here: [`Kept`], the ledger of results handed to the application and
//!   not released, shared by the worker (which fills it) and
//!   [`crate::Runtime::checkpoint`] (which releases what was taken before
//!   the call, once that checkpoint is durable); and the router's part,
//!   which hands each `Msg::Results` to its actor after checking its
//!   sender;
//! - `worker/results.rs`: the root's side (the copy offered to the buddy
//!   before the root's last report; a replacement root's fetch of its kept
//!   result);
//! - `replica/results.rs`: the holder's side (the copies, their bound);
//! - `master/results.rs`: where each result is kept, and the answer to a
//!   replacement root.

use crate::future::Slot;
use crate::master::{ResultAlsoKeptIn, ResultKeptIn, ResultWhereIn, ResultsReleasedIn};
use crate::replica::{ResultDropIn, ResultOfferIn};
use crate::router::Router;
use crate::worker::{ResultAtIn, ResultStoredIn};
use std::sync::{Arc, Mutex};
use taskfold_core::results::Ledger;
use taskfold_core::wire::results::ResultMsg;
use taskfold_core::Rank;

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

impl Router {
    /// Hands a message about kept results to its actor, if `from` may send
    /// it: a root speaks only for itself, the master only answers
    /// replacement roots and drops copies.
    pub(crate) fn route_results(&mut self, from: Rank, msg: ResultMsg) {
        let from_master = from == self.out.master();
        match msg {
            ResultMsg::Offer { key, len, crc } => self.store.do_send(ResultOfferIn {
                root: from,
                from,
                key,
                len,
                crc,
            }),
            // A holder relays a dead root's result (this rank may hear of
            // the death after the relay: the master's record decides), never
            // a sender's own nor this rank's.
            ResultMsg::Relay {
                root,
                key,
                len,
                crc,
            } if root != from.0 && root != self.rank.0 => self.store.do_send(ResultOfferIn {
                root: Rank(root),
                from,
                key,
                len,
                crc,
            }),
            ResultMsg::Where { key, id } => match &self.master {
                Some(m) => m.do_send(ResultWhereIn { from, key, id }),
                None => {
                    tracing::debug!(%from, "a kept result's question reached a rank that is not the master")
                }
            },
            ResultMsg::AlsoKept { root, key } => match &self.master {
                Some(m) => m.do_send(ResultAlsoKeptIn { from, root, key }),
                None => {
                    tracing::debug!(%from, "a second copy's notice reached a rank that is not the master")
                }
            },
            ResultMsg::Stored { key, ok } => self.worker.do_send(ResultStoredIn { from, key, ok }),
            ResultMsg::At { key, holder } if from_master => {
                self.worker.do_send(ResultAtIn { key, holder })
            }
            ResultMsg::Drop { root, keys } if root == from.0 || from_master => {
                self.store.do_send(ResultDropIn {
                    root: Rank(root),
                    keys,
                })
            }
            ResultMsg::Kept { key, holder } => match &self.master {
                Some(m) => m.do_send(ResultKeptIn { from, key, holder }),
                None => {
                    tracing::debug!(%from, "a kept result's notice reached a rank that is not the master")
                }
            },
            ResultMsg::Released { keys } => match &self.master {
                Some(m) => m.do_send(ResultsReleasedIn { from, keys }),
                None => {
                    tracing::debug!(%from, "a release of kept results reached a rank that is not the master")
                }
            },
            other => {
                metrics::counter!(crate::metrics::BAD_FRAMES).increment(1);
                tracing::error!(%from, msg = ?other, "message not accepted from this sender; dropped");
            }
        }
    }
}
