//! Encoding and sending control messages, with per-role accounting.

use bytes::Bytes;
use std::sync::Arc;
use taskfold_core::wire::{self, Msg};
use taskfold_core::Rank;
use taskfold_transports::{Transport, TransportError};

/// Encodes [`Msg`]s into frames and hands them to the transport.
#[derive(Clone)]
pub(crate) struct Outbox {
    transport: Arc<dyn Transport>,
}

impl Outbox {
    pub(crate) fn new(transport: Arc<dyn Transport>) -> Self {
        Outbox { transport }
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
