//! Messages the engine receives: the sender checked against its address,
//! the seal opened, the message decoded and handed to its part of the
//! engine.

use super::super::fi::FiAddr;
use super::super::seal::SealError;
use super::super::wire::{self, Msg};
use super::flow::InItem;
use super::Engine;
use bytes::Bytes;

impl Engine {
    /// A message arrived in receive `slot` from address `src`, its tag
    /// claiming a sender: taken only if `src` is that rank's address.
    pub(super) fn received(&mut self, slot: usize, len: usize, tag: u64, src: FiAddr) {
        let from = match super::super::source::sender(&self.addrs, tag, src) {
            Ok(r) => r,
            Err(why) => return super::super::source::dropped(self.sh.rank, tag, src, why),
        };
        // After a failure nothing more from the peer; after a goodbye seen
        // on TCP first, its last frames may still be on their way.
        if self.sh.is_down(from) {
            return;
        }
        let len = len.min(wire::SLOT);
        let raw = &self.ops.rx.slot(slot)[..len];
        let (bytes, digest) = match self.seals.as_mut().map(|s| s.open(from, raw)) {
            None => (raw, None),
            Some(Ok((m, d))) => (m, Some(d)),
            Some(Err(e)) => return self.unsealed(from, e),
        };
        let msg = match Msg::decode(bytes) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(rank = self.sh.rank, from, error = %e, "bad fabric message dropped");
                return;
            }
        };
        // Ordered messages count as consumed once delivered (see `drain`),
        // get requests once served (see `get_request`).
        if !matches!(
            msg,
            Msg::Credit { .. }
                | Msg::Control { .. }
                | Msg::Large { .. }
                | Msg::Bye { .. }
                | Msg::GetReq { .. }
        ) {
            self.flow.consumed(from);
        }
        match msg {
            Msg::Control { seq, frame } => {
                let frame = Bytes::copy_from_slice(frame);
                self.arrived(from, seq, InItem::Frame(frame));
            }
            Msg::Large { seq, at } => self.large_frame(from, seq, at, digest),
            Msg::Bye { seq } => {
                self.arrived(from, seq, InItem::Bye);
            }
            Msg::GetReq { req, key } => self.get_request(from, req, key),
            Msg::GetOk { req, at } => self.answered(from, req, Some((at, digest))),
            Msg::GetErr { req, .. } => self.answered(from, req, None),
            Msg::Release { token } => self.released(from, token),
            Msg::Credit { n } => self.flow.credited(from, n),
        }
    }

    /// A message from `from` failed its integrity check: dropped, logged
    /// and counted. If it was changed or injected, the peer's stream lost
    /// a message, so it is suspected, as a TCP connection whose frame
    /// fails ends; a replay (the genuine one came) or a message before the
    /// peer's keys (a replacement's, not let in yet) costs nothing more.
    pub(super) fn unsealed(&mut self, from: u32, e: SealError) {
        super::super::seal::count_refusal(self.sh.rank, from, &e);
        if matches!(e, SealError::BadTag(_) | SealError::Short(_)) {
            self.suspect(from, e.to_string());
        }
    }
}
