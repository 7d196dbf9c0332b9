//! The messages that keep a root's result for its replacement
//! ([`super::Msg::Results`]; see [`crate::results`] and the book's chapter
//! Surviving failures of the application, A replaced root).
//!
//! The result itself never travels in these frames: the root exposes it
//! under [`crate::results::result_key`], its holder under
//! [`crate::results::held_result_key`], and each is fetched with a
//! one-sided get bounded by the length announced and verified against its
//! checksum. Every field is untrusted: a key names nothing the receiver
//! does not find itself, and who may send each message is checked by the
//! router (a root speaks only for itself).

use rkyv::{Archive, Deserialize, Serialize};

/// One message about a kept result.
#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum ResultMsg {
    /// Root → its buddy: my result of `key` (`len` bytes, a replica
    /// buffer with checksum `crc`) is exposed: fetch it and keep it until
    /// I release it, then answer [`ResultMsg::Stored`].
    Offer {
        /// The reduction.
        key: u64,
        /// Bytes of the buffer (header included).
        len: u64,
        /// The checksum in its header.
        crc: u32,
    },
    /// Buddy → root: the copy of `key` is kept (`ok`), or refused (bound
    /// reached, or it could not be read).
    Stored {
        /// The reduction.
        key: u64,
        /// True if kept.
        ok: bool,
    },
    /// Root → master, just before its last task's report: my result of
    /// `key` is kept at `holder`.
    Kept {
        /// The reduction.
        key: u64,
        /// The rank that keeps the copy.
        holder: u32,
    },
    /// Master → a replacement root that joined `key` again: it completed,
    /// and its result is kept at `holder`: fetch it, it is your result.
    At {
        /// The reduction.
        key: u64,
        /// The rank that keeps the copy.
        holder: u32,
    },
    /// Root → master: my application checkpointed past these results
    /// (one key per result released).
    Released {
        /// The reductions.
        keys: Vec<u64>,
    },
    /// Holder → another rank, once `root` died, or at once where the
    /// job makes further copies: my copy of `root`'s result of `key`
    /// (`len` bytes, checksum `crc`) is exposed under
    /// [`crate::results::held_result_key`]: fetch it and keep it too, so
    /// that my death before `root`'s replacement took it costs nothing.
    /// The new holder tells the master ([`ResultMsg::AlsoKept`]) and,
    /// while `more` is above 0, relays its copy on in turn, with one
    /// fewer.
    Relay {
        /// Whose result.
        root: u32,
        /// The reduction.
        key: u64,
        /// Bytes of the buffer (header included).
        len: u64,
        /// The checksum in its header.
        crc: u32,
        /// Copies still to make after this one.
        more: u32,
    },
    /// New holder → master: I keep a second copy of dead `root`'s result
    /// of `key`, relayed by the holder `first`, which keeps its own.
    AlsoKept {
        /// Whose result.
        root: u32,
        /// The reduction.
        key: u64,
        /// The holder that relayed the copy: the master may hear of its
        /// copy only from this message (the root died before it said).
        first: u32,
    },
    /// Replacement root → master: the holder you sent me to for `key`
    /// failed me (it died meanwhile): where else is it kept? Answered
    /// with [`ResultMsg::At`], or the reduction's end with `ResultLost`
    /// for `id`.
    Where {
        /// The reduction.
        key: u64,
        /// Its id, for the error if no copy is left.
        id: String,
    },
    /// Root (or master, for the root) → holder: drop your copies of
    /// `root`'s results of `keys`.
    Drop {
        /// Whose results.
        root: u32,
        /// The reductions.
        keys: Vec<u64>,
    },
}
