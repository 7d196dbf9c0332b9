//! The router's part of a root's kept results (see `crate::results`):
//! each `Msg::Results` goes to the actor that owns it, if its sender may
//! send it.

use super::Router;
use crate::master::{ResultAlsoKeptIn, ResultKeptIn, ResultWhereIn, ResultsReleasedIn};
use crate::replica::{RelayKeptIn, ResultDropIn, ResultOfferIn};
use crate::worker::{ResultAtIn, ResultStoredIn};
use taskfold_core::wire::results::ResultMsg;
use taskfold_core::Rank;

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
                more: 0,
            }),
            // A holder relays a dead root's result (this rank may hear of
            // the death after the relay: the master's record decides), never
            // a sender's own nor this rank's.
            ResultMsg::Relay {
                root,
                key,
                len,
                crc,
                more,
            } if root != from.0 && root != self.rank.0 => self.store.do_send(ResultOfferIn {
                root: Rank(root),
                from,
                key,
                len,
                crc,
                more,
            }),
            ResultMsg::Where { key, id } => match &self.master {
                Some(m) => m.do_send(ResultWhereIn { from, key, id }),
                None => {
                    tracing::debug!(%from, "a kept result's question reached a rank that is not the master")
                }
            },
            // To the master, and to the store of the holder that relayed
            // the copy (its answer to the root may wait for it).
            ResultMsg::AlsoKept { root, key, first } => {
                self.store.do_send(RelayKeptIn {
                    from,
                    root: Rank(root),
                    key,
                });
                if let Some(m) = &self.master {
                    m.do_send(ResultAlsoKeptIn {
                        from,
                        root,
                        key,
                        first,
                    });
                }
            }
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
