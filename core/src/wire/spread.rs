//! The messages of a spread: an allreduce's result, or a broadcast's
//! value, going to every member ready-first ([`super::Msg::Spread`]; the
//! state machine is [`crate::spread`], the coordinator the master's rank).
//!
//! The value itself never travels in these frames: each holder exposes it
//! under the spread's key and a member fetches it with a one-sided get.
//! Every field is untrusted: the coordinator checks that the sender is a
//! member and that every member describes the spread alike.

use rkyv::{Archive, Deserialize, Serialize};

/// What a member says of a spread when it first speaks of it.
#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Opening {
    /// The spread (a stable hash of its kind, id, group and call number).
    pub key: u64,
    /// The user's id.
    pub id: String,
    /// Global ranks of the group, sorted.
    pub group: Vec<u32>,
    /// The rank the value comes from (the reduction's root, or the
    /// broadcast's).
    pub source: u32,
    /// Tag of the value's type.
    pub type_tag: u64,
}

/// One message about a spread.
#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum SpreadMsg {
    /// Source → coordinator: I hold the value, exposed under the key.
    Have(Opening),
    /// Member → coordinator: I want the value.
    Want(Opening),
    /// Source → coordinator: I cannot serve the value (it could not be
    /// encoded); the spread goes on as if the source had died.
    Gone {
        /// The spread.
        key: u64,
    },
    /// Coordinator → member: fetch the value from `from`.
    Fetch {
        /// The spread.
        key: u64,
        /// The holder to fetch from.
        from: u32,
    },
    /// Member → coordinator: I fetched it (`ok`) and expose it now, or
    /// the fetch failed (`!ok`).
    Fetched {
        /// The spread.
        key: u64,
        /// True if the value is here.
        ok: bool,
    },
    /// Coordinator → member: no live rank holds the value: it was lost
    /// with its source, `root`.
    Lost {
        /// The spread.
        key: u64,
        /// The source.
        root: u32,
    },
    /// Coordinator → member: your description of the spread differs from
    /// the first member's (`detail` says how).
    Refused {
        /// The spread.
        key: u64,
        /// What differs.
        detail: String,
    },
    /// Coordinator → holder: every live member holds the value: stop
    /// exposing it.
    Finished {
        /// The spread.
        key: u64,
    },
    /// Member → a coordinator that took over from a dead one: every
    /// spread this rank is in, so that the new coordinator rebuilds them
    /// (see [`crate::spread`], "What the coordinator's death does").
    Report(Report),
}

/// What a member tells a coordinator that took over ([`SpreadMsg::Report`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub struct Report {
    /// The spreads whose value this rank holds and serves.
    pub holding: Vec<Opening>,
    /// The spreads whose value this rank wants, each with the holder it is
    /// fetching it from on the dead coordinator's word, if a fetch is out.
    pub wanting: Vec<(Opening, Option<u32>)>,
    /// The newest spreads the dead coordinator told this rank had finished
    /// (every live member held the value then).
    pub finished: Vec<u64>,
}
