//! Encoding and sending control messages, with per-role accounting.

use bytes::Bytes;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use taskfold_core::wire::{self, Msg};
use taskfold_core::Rank;
use taskfold_transports::{Transport, TransportError};

/// Encodes [`Msg`]s into frames and hands them to the transport.
///
/// Its clones share which rank is the master: rank 0, until a standby
/// takes over from a dead master (the router moves it, see
/// [`taskfold_core::failover`]).
#[derive(Clone)]
pub(crate) struct Outbox {
    transport: Arc<dyn Transport>,
    master: Arc<AtomicU32>,
}

impl Outbox {
    pub(crate) fn new(transport: Arc<dyn Transport>) -> Self {
        Outbox {
            transport,
            master: Arc::new(AtomicU32::new(0)),
        }
    }

    /// The rank that runs the master now.
    pub(crate) fn master(&self) -> Rank {
        Rank(self.master.load(Ordering::Acquire))
    }

    /// A standby took over: messages for the master go to `rank` from now.
    pub(crate) fn set_master(&self, rank: Rank) {
        self.master.store(rank.0, Ordering::Release);
    }

    /// Sends `msg` to the master.
    pub(crate) fn to_master(&self, msg: &Msg) -> Result<usize, TransportError> {
        self.send(self.master(), msg)
    }

    /// Sends `msg` to `to`; returns the frame's length.
    pub(crate) fn send(&self, to: Rank, msg: &Msg) -> Result<usize, TransportError> {
        let frame = wire::encode(msg);
        let len = frame.len();
        self.transport.send(to, Bytes::from(frame))?;
        Ok(len)
    }

    pub(crate) fn transport(&self) -> &Arc<dyn Transport> {
        &self.transport
    }
}
