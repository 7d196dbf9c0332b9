//! Per-frame MACs (`TASKFOLD_INTEGRITY=mac`): after its handshake, every
//! frame a connection carries is followed by a tag, a keyed BLAKE3 hash
//! (truncated to [`TAG_LEN`] bytes) of the frame's sequence number and its
//! bytes, under the key of its direction ([`FrameKeys`], derived from the
//! handshake). The sequence number is not sent: each side counts the
//! frames of each direction from 0, so a frame replayed, dropped,
//! reordered, changed or injected by whoever is on the path fails the
//! next tag, and the receiver drops the connection before it acts on the
//! frame. Tags are compared in constant time.
//!
//! Pure: [`FrameMac`] is one direction's key and count; a sender calls
//! [`FrameMac::seal`] over a frame's parts, a receiver feeds the bytes it
//! reads to [`FrameMac::begin`]'s hasher and checks with
//! [`FrameMac::check`].

/// Bytes of a frame's tag.
pub const TAG_LEN: usize = 16;

/// The keys of one connection's frame MACs, one per direction; wiped when
/// dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct FrameKeys {
    caller: [u8; 32],
    listener: [u8; 32],
}

impl std::fmt::Debug for FrameKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FrameKeys(<secret>)")
    }
}

impl Drop for FrameKeys {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.caller);
        zeroize::Zeroize::zeroize(&mut self.listener);
    }
}

impl FrameKeys {
    pub(super) fn new(caller: [u8; 32], listener: [u8; 32]) -> FrameKeys {
        FrameKeys { caller, listener }
    }

    /// The MAC of the frames the caller sends.
    pub fn from_caller(&self) -> FrameMac {
        FrameMac::new(self.caller)
    }

    /// The MAC of the frames the listener sends.
    pub fn from_listener(&self) -> FrameMac {
        FrameMac::new(self.listener)
    }

    /// `(what this side sends, what it receives)`: the caller's side if
    /// `caller`, else the listener's.
    pub fn for_side(&self, caller: bool) -> (FrameMac, FrameMac) {
        if caller {
            (self.from_caller(), self.from_listener())
        } else {
            (self.from_listener(), self.from_caller())
        }
    }
}

/// A tag that did not match: the frame was changed, injected, replayed or
/// reordered (or a frame before it was dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("frame {seq} failed its integrity check (changed or injected on the way)")]
pub struct MacError {
    /// The frame's number in its direction.
    pub seq: u64,
}

/// One direction's MAC: its key and the number of the next frame.
#[derive(Clone)]
pub struct FrameMac {
    key: [u8; 32],
    seq: u64,
}

impl std::fmt::Debug for FrameMac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FrameMac(<secret>, seq {})", self.seq)
    }
}

impl Drop for FrameMac {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.key);
    }
}

impl FrameMac {
    fn new(key: [u8; 32]) -> FrameMac {
        FrameMac { key, seq: 0 }
    }

    /// A hasher for the next frame, its number fed first.
    pub fn begin(&self) -> blake3::Hasher {
        let mut h = blake3::Hasher::new_keyed(&self.key);
        h.update(&self.seq.to_le_bytes());
        h
    }

    /// The tag of the next frame, made of `parts` in order; counts it.
    pub fn seal(&mut self, parts: &[&[u8]]) -> [u8; TAG_LEN] {
        let mut h = self.begin();
        for p in parts {
            h.update(p);
        }
        self.finish(&h)
    }

    /// Checks the tag of the next frame, whose bytes `h` was fed (from
    /// [`FrameMac::begin`]); counts it either way.
    pub fn check(&mut self, h: &blake3::Hasher, tag: &[u8]) -> Result<(), MacError> {
        let seq = self.seq;
        let want = self.finish(h);
        // Constant time: every byte is compared whatever the first differ.
        let diff = want
            .iter()
            .zip(tag)
            .fold(u8::from(tag.len() != TAG_LEN), |d, (a, b)| d | (a ^ b));
        if diff == 0 {
            Ok(())
        } else {
            Err(MacError { seq })
        }
    }

    fn finish(&mut self, h: &blake3::Hasher) -> [u8; TAG_LEN] {
        self.seq += 1;
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&h.finalize().as_bytes()[..TAG_LEN]);
        tag
    }

    /// The number of the next frame.
    pub fn seq(&self) -> u64 {
        self.seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (FrameMac, FrameMac) {
        let k = FrameKeys::new([1; 32], [2; 32]);
        (k.from_caller(), k.from_caller())
    }

    #[test]
    fn a_frame_checks_once_in_its_place() {
        let (mut tx, mut rx) = pair();
        let t0 = tx.seal(&[b"head", b"body"]);
        let t1 = tx.seal(&[b"second"]);
        let mut h = rx.begin();
        h.update(b"headbody");
        assert_eq!(rx.check(&h, &t0), Ok(()));
        // A replay of frame 0 in frame 1's place fails.
        let mut h = rx.begin();
        h.update(b"headbody");
        assert_eq!(rx.check(&h, &t0), Err(MacError { seq: 1 }));
        let _ = t1;
    }

    #[test]
    fn a_changed_byte_or_another_key_or_direction_fails() {
        let (mut tx, mut rx) = pair();
        let tag = tx.seal(&[b"frame"]);
        let mut h = rx.begin();
        h.update(b"frams");
        assert!(rx.check(&h, &tag).is_err());
        let k = FrameKeys::new([1; 32], [2; 32]);
        let mut other = k.from_listener();
        let mut h = other.begin();
        h.update(b"frame");
        assert!(other.check(&h, &tag).is_err(), "the other direction's key");
        let mut short = k.from_caller();
        let h = short.begin();
        assert!(short.check(&h, &tag[..8]).is_err(), "a short tag");
    }

    #[test]
    fn both_sides_agree_on_their_directions() {
        let k = FrameKeys::new([3; 32], [4; 32]);
        let (mut caller_tx, _) = k.for_side(true);
        let (_, mut listener_rx) = k.for_side(false);
        let tag = caller_tx.seal(&[b"x"]);
        let mut h = listener_rx.begin();
        h.update(b"x");
        assert_eq!(listener_rx.check(&h, &tag), Ok(()));
    }
}
