//! What every transport checks the same way: link states and the errors
//! they give, the checks before a send or a get, and a rank's frames and
//! gets to itself.

use crate::{BufferKey, Event, Exposed, Rank, Received, TransportError};
use bytes::Bytes;

/// State of the link to one peer.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub enum Link {
    /// Usable.
    #[default]
    Up,
    /// The peer said goodbye: it left gracefully.
    Gone,
    /// The link is failing: nothing more can be sent, but what the peer
    /// sent before is still being delivered (TCP reads the peer's own
    /// connection to its end before reporting the link down).
    Draining(String),
    /// The link failed; the reason was reported once as `Event::LinkDown`.
    Down(String),
}

impl Link {
    /// The error a call to `peer` fails with, if this link is not up.
    pub fn error(&self, peer: u32) -> Option<TransportError> {
        match self {
            Link::Up => None,
            Link::Gone => Some(TransportError::LinkDown {
                peer,
                reason: format!("rank {peer} shut down"),
            }),
            Link::Draining(reason) | Link::Down(reason) => Some(TransportError::LinkDown {
                peer,
                reason: reason.clone(),
            }),
        }
    }
}

/// The checks before any call naming `peer`: the transport is open, the
/// rank is in the job.
pub fn check_peer(closed: bool, size: u32, peer: Rank) -> Result<(), TransportError> {
    if closed {
        Err(TransportError::Closed)
    } else if peer.0 >= size {
        Err(TransportError::NoSuchRank(peer.0))
    } else {
        Ok(())
    }
}

/// A control frame of `len` bytes is at most `max`.
pub fn check_frame(len: usize, max: u64) -> Result<(), TransportError> {
    if len as u64 > max {
        Err(TransportError::FrameTooLarge {
            len: len as u64,
            max,
        })
    } else {
        Ok(())
    }
}

/// A frame to oneself: straight to one's own event channel, copied as a
/// wire would.
pub fn send_to_self(events: &flume::Sender<Event>, me: Rank, frame: &[u8]) {
    let frame = Bytes::copy_from_slice(frame);
    let _ = events.send(Event::Message { from: me, frame });
}

/// A get served from the table of `owner`, a rank of this process (a get
/// from oneself, the loopback's gets): a private copy of what it exposes
/// under `key`, as a wire would give.
pub fn copy_exposed<R>(
    exposed: &Exposed<R>,
    owner: Rank,
    key: BufferKey,
) -> Result<Received, TransportError> {
    exposed
        .lookup(key)
        .map(|b| Received::Owned(crate::recv_buf_from(&b)))
        .ok_or(TransportError::NotExposed {
            peer: owner.0,
            key: key.0,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_that_are_not_up_name_the_peer() {
        assert_eq!(Link::Up.error(3), None);
        for l in [
            Link::Gone,
            Link::Draining("x".into()),
            Link::Down("y".into()),
        ] {
            assert!(matches!(
                l.error(3),
                Some(TransportError::LinkDown { peer: 3, .. })
            ));
        }
        assert_eq!(
            check_peer(false, 2, Rank(2)),
            Err(TransportError::NoSuchRank(2))
        );
        assert_eq!(check_peer(true, 2, Rank(1)), Err(TransportError::Closed));
        assert!(check_frame(10, 10).is_ok());
        assert!(matches!(
            check_frame(11, 10),
            Err(TransportError::FrameTooLarge { len: 11, max: 10 })
        ));
    }
}

/// Bytes of control frames a transport delivered that the runtime still
/// holds, at most, before a peer's next frame waits (as for the number of
/// frames in the event channel): a peer sending 64 MiB frames is held to
/// this many bytes, not to thousands of such frames.
pub const MAX_EVENT_BYTES: u64 = 256 << 20;

/// The bytes of delivered frames still alive: each frame delivered is
/// wrapped ([`EventBytes::track`]) so that dropping its last reference,
/// wherever the runtime does, gives its bytes back.
#[derive(Clone, Debug, Default)]
pub struct EventBytes(std::sync::Arc<std::sync::atomic::AtomicU64>);

/// A delivered frame's bytes, counted while they live.
struct Tracked {
    frame: Bytes,
    held: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl AsRef<[u8]> for Tracked {
    fn as_ref(&self) -> &[u8] {
        &self.frame
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.held
            .fetch_sub(self.frame.len() as u64, std::sync::atomic::Ordering::AcqRel);
    }
}

impl EventBytes {
    /// `frame`, counted until its last reference is dropped.
    pub fn track(&self, frame: Bytes) -> Bytes {
        self.0
            .fetch_add(frame.len() as u64, std::sync::atomic::Ordering::AcqRel);
        Bytes::from_owner(Tracked {
            frame,
            held: self.0.clone(),
        })
    }

    /// Bytes held now.
    pub fn held(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }

    /// True if a frame of `len` bytes may be delivered now: within
    /// [`MAX_EVENT_BYTES`], or nothing held at all (a frame larger than
    /// the bound alone still goes, the frame bound caps it).
    pub fn room(&self, len: u64) -> bool {
        let held = self.held();
        held == 0 || held.saturating_add(len) <= MAX_EVENT_BYTES
    }
}

#[cfg(test)]
mod event_bytes_tests {
    use super::*;

    #[test]
    fn tracked_bytes_come_back_when_the_last_reference_goes() {
        let eb = EventBytes::default();
        let a = eb.track(Bytes::from(vec![1u8; 1000]));
        let b = a.slice(10..20);
        assert_eq!(eb.held(), 1000);
        drop(a);
        assert_eq!(eb.held(), 1000, "a slice keeps the frame");
        drop(b);
        assert_eq!(eb.held(), 0);
        assert!(
            eb.room(MAX_EVENT_BYTES * 2),
            "an empty channel takes any frame"
        );
        let big = eb.track(Bytes::from(vec![0u8; (MAX_EVENT_BYTES - 10) as usize]));
        assert!(eb.room(10) && !eb.room(11));
        drop(big);
    }
}
