//! Encoding and sending control messages, with per-role accounting.

use crate::membership::View;
use bytes::Bytes;
use std::sync::Arc;
use taskfold_core::wire::{self, Msg};
use taskfold_core::Rank;
use taskfold_transports::{Transport, TransportError};

/// Encodes [`Msg`]s into frames and hands them to the transport.
///
/// Messages for the master go to the rank this rank's membership view
/// names (rank 0, until a standby takes over from a dead master: see
/// [`taskfold_core::failover`]).
#[derive(Clone)]
pub(crate) struct Outbox {
    transport: Arc<dyn Transport>,
    view: View,
}

impl Outbox {
    pub(crate) fn new(transport: Arc<dyn Transport>, view: View) -> Self {
        Outbox { transport, view }
    }

    /// An outbox with a view of its own, as `transport` joined (tests).
    #[cfg(test)]
    pub(crate) fn of(transport: Arc<dyn Transport>) -> Self {
        let view = View::joined(&*transport);
        Outbox { transport, view }
    }

    /// The rank that runs the master now.
    pub(crate) fn master(&self) -> Rank {
        self.view.master()
    }

    /// This rank's membership view.
    pub(crate) fn view(&self) -> &View {
        &self.view
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
