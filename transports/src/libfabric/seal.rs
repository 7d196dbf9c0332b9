//! `TASKFOLD_INTEGRITY=mac` on the fabric: every message a rank sends a
//! peer is sealed, and every message it takes from a peer is checked
//! before it is decoded.
//!
//! A sealed message is the message's bytes ([`super::wire`]), then a
//! trailer of [`TRAILER`] bytes: the digest of the bulk bytes the message
//! points to (a `GET_OK`'s buffer, a `LARGE` frame; zeros otherwise), the
//! message's number in its direction, and a tag — a keyed BLAKE3 hash,
//! truncated to [`TAG_LEN`] bytes, of the number, the message and the
//! digest.
//!
//! The key of each direction of each pair of ranks ([`KeyMaker`]) is
//! derived from the job key and both processes' fresh nonces, which the
//! ranks exchange in their endpoint-name frames over their authenticated
//! (and, with this setting, sealed) TCP connections: known to nobody
//! without the job key, new with each process. Fabric messages may arrive
//! out of order, so numbers are sent, not counted as over TCP: the
//! receiver takes each number once, within a window of
//! [`WINDOW`] behind the highest seen ([`Window`]).
//!
//! What a failure does: a message whose tag does not match (changed or
//! injected on the way, or sealed with another key) or whose number was
//! taken already or is older than the window (replayed) is a protocol
//! error for that peer: dropped before it is decoded, logged and counted
//! in `taskfold_transport_bad_connections_total{transport="libfabric"}`,
//! and the peer is suspected (reported down unless it turns out to have
//! left), since a dropped ordered message would stall its stream, as a
//! TCP connection whose frame fails ends. Bulk bytes whose digest differs
//! from the one in their (sealed) descriptor are never handed over: the
//! get fails with a protocol error, a large frame's peer is suspected.

use zeroize::Zeroize;

/// Bytes of a message's tag.
pub const TAG_LEN: usize = 16;
/// Bytes of a bulk digest (BLAKE3).
pub const DIGEST_LEN: usize = 32;
/// Bytes a sealed message carries after the message itself.
pub const TRAILER: usize = DIGEST_LEN + 8 + TAG_LEN;
/// Bytes of a process's nonce.
pub const NONCE_LEN: usize = 32;
/// How far behind the highest number taken a message may still arrive
/// (the provider reorders messages only within its queues, far fewer).
pub const WINDOW: u64 = 4096;

/// Separates these keys from every other use of the job key.
const DOMAIN: &[u8] = b"taskfold fabric message keys v1";

/// A bulk digest: BLAKE3 of the bytes (zeros: no bulk bytes).
pub type Digest = [u8; DIGEST_LEN];

/// The digest of bulk bytes a descriptor points to.
pub fn digest(bytes: &[u8]) -> Digest {
    *blake3::hash(bytes).as_bytes()
}

/// Why a received message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// Shorter than a trailer.
    #[error("sealed message of {0} bytes: too short for its trailer")]
    Short(usize),
    /// No key for this peer (no replacement's name yet).
    #[error("no message key for this peer yet")]
    NoKey,
    /// The tag does not match: changed or injected on the way.
    #[error("message {0} failed its integrity check (changed or injected on the way)")]
    BadTag(u64),
    /// The number was taken already, or is older than the window.
    #[error("message {0} was replayed (its number was taken already)")]
    Replayed(u64),
}

/// Bulk bytes whose digest is not the one their descriptor announced.
pub const BULK_MISMATCH: &str = "bulk data failed its integrity check (changed on the way)";

/// Messages and bulk reads this process refused for failing their
/// integrity check (all fabric transports of the process together).
static REFUSED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many messages and bulk reads this process refused for failing
/// their integrity check (also counted in
/// `taskfold_transport_bad_connections_total{transport="libfabric"}`).
pub fn refused() -> u64 {
    REFUSED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Logs and counts a refusal by `rank` of what `peer` sent.
pub(crate) fn count_refusal(rank: u32, peer: u32, why: &dyn std::fmt::Display) {
    REFUSED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    metrics::counter!(crate::tcp::metrics::BAD_CONNECTIONS, "transport" => "libfabric")
        .increment(1);
    tracing::warn!(rank, peer, error = %why, "fabric message refused: integrity (TASKFOLD_INTEGRITY=mac)");
}

/// What a test makes the path do to the next message or read
/// (`LibfabricTransport::tamper`; hidden, not API): play an on-path
/// attacker without a key.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tamper {
    /// The next message this rank sends the peer has a byte changed after
    /// it was sealed.
    Message,
    /// The next message this rank sends the peer is sent twice.
    Replay,
    /// The next bulk bytes this rank reads from the peer have a byte
    /// changed before they are checked.
    Bulk,
}

/// One direction's key; wiped when dropped.
#[derive(Clone)]
struct Key([u8; 32]);

impl Drop for Key {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl Key {
    fn tag(&self, seq: u64, msg: &[u8], digest: &[u8]) -> [u8; TAG_LEN] {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(&seq.to_le_bytes());
        h.update(&(msg.len() as u64).to_le_bytes());
        h.update(msg);
        h.update(digest);
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(&h.finalize().as_bytes()[..TAG_LEN]);
        t
    }
}

/// Derives each pair's keys: this process's job key, job, rank and nonce.
#[derive(Clone)]
pub struct KeyMaker {
    key: Key,
    job: u64,
    rank: u32,
    nonce: [u8; NONCE_LEN],
}

impl KeyMaker {
    /// The key maker of `rank` in `job` under the job key `key`, with a
    /// fresh nonce (`Err`: the system's random source failed).
    pub fn new(
        key: &taskfold_core::auth::JobKey,
        job: u64,
        rank: u32,
    ) -> std::io::Result<KeyMaker> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(KeyMaker::with_nonce(key, job, rank, nonce))
    }

    /// As [`KeyMaker::new`] with a nonce of the caller's (the fuzz
    /// targets'; hidden, not API: a nonce must be fresh).
    #[doc(hidden)]
    pub fn with_nonce(
        key: &taskfold_core::auth::JobKey,
        job: u64,
        rank: u32,
        nonce: [u8; NONCE_LEN],
    ) -> KeyMaker {
        let mut hex = key.to_hex();
        let mut bytes = [0u8; 32];
        for (b, pair) in bytes.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
            let digit = |c: u8| char::from(c).to_digit(16).unwrap_or(0) as u8;
            *b = (digit(pair[0]) << 4) | digit(pair[1]);
        }
        hex.zeroize();
        let k = Key(bytes);
        bytes.zeroize();
        KeyMaker {
            key: k,
            job,
            rank,
            nonce,
        }
    }

    /// This process's nonce, which its endpoint-name frame carries.
    pub fn nonce(&self) -> &[u8; NONCE_LEN] {
        &self.nonce
    }

    fn direction(&self, from: u32, to: u32, from_nonce: &[u8], to_nonce: &[u8]) -> Key {
        let mut h = blake3::Hasher::new_keyed(&self.key.0);
        h.update(DOMAIN);
        h.update(&self.job.to_le_bytes());
        h.update(&from.to_le_bytes());
        h.update(&to.to_le_bytes());
        h.update(from_nonce);
        h.update(to_nonce);
        Key(*h.finalize().as_bytes())
    }

    /// The keys of this rank's messages to and from `peer`, whose process
    /// sent `theirs` as its nonce.
    pub fn pair(&self, peer: u32, theirs: &[u8; NONCE_LEN]) -> PairKeys {
        PairKeys {
            send: self.direction(self.rank, peer, &self.nonce, theirs),
            recv: self.direction(peer, self.rank, theirs, &self.nonce),
        }
    }
}

/// The keys of one pair of processes, one per direction.
#[derive(Clone)]
pub struct PairKeys {
    send: Key,
    recv: Key,
}

impl std::fmt::Debug for PairKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PairKeys(<secret>)")
    }
}

/// The numbers taken from one peer: the highest, and which of the
/// [`WINDOW`] before it.
#[derive(Debug, Clone, Default)]
pub struct Window {
    /// One more than the highest number taken (0: none yet).
    top: u64,
    /// Bit `i` of word `i / 64`: number `top - 1 - i` was taken.
    bits: Vec<u64>,
}

impl Window {
    fn words() -> usize {
        (WINDOW / 64) as usize
    }

    /// Whether `seq` may still be taken.
    pub fn fresh(&self, seq: u64) -> bool {
        if seq >= self.top {
            return true;
        }
        let back = self.top - 1 - seq;
        back < WINDOW
            && self
                .bits
                .get((back / 64) as usize)
                .is_none_or(|w| w & (1 << (back % 64)) == 0)
    }

    /// Takes `seq` (which [`Window::fresh`] allowed).
    pub fn take(&mut self, seq: u64) {
        if self.bits.is_empty() {
            self.bits = vec![0; Self::words()];
        }
        if seq >= self.top {
            let shift = seq + 1 - self.top;
            self.shift(shift);
            self.top = seq + 1;
        }
        let back = self.top - 1 - seq;
        if back < WINDOW {
            self.bits[(back / 64) as usize] |= 1 << (back % 64);
        }
    }

    /// Moves the window `n` numbers forward.
    fn shift(&mut self, n: u64) {
        if n >= WINDOW {
            self.bits.iter_mut().for_each(|w| *w = 0);
            return;
        }
        let (words, bits) = ((n / 64) as usize, (n % 64) as u32);
        let len = self.bits.len();
        for i in (0..len).rev() {
            let lo = i.checked_sub(words).map_or(0, |j| self.bits[j]);
            let below = i
                .checked_sub(words + 1)
                .filter(|_| bits > 0)
                .map_or(0, |j| self.bits[j] >> (64 - bits));
            self.bits[i] = (lo << bits) | below;
        }
    }
}

/// One peer's sealing state: its keys, the next number this rank sends
/// it, the numbers taken from it.
#[derive(Default)]
struct PeerSeal {
    keys: Option<PairKeys>,
    next: u64,
    window: Window,
}

/// Every peer's sealing state. See the [module documentation](self).
#[derive(Default)]
pub struct Seals {
    peers: Vec<PeerSeal>,
}

impl Seals {
    /// The state of a job whose ranks have these keys (indexed by rank;
    /// `None`: none yet).
    pub fn new(keys: Vec<Option<PairKeys>>) -> Seals {
        Seals {
            peers: keys
                .into_iter()
                .map(|keys| PeerSeal {
                    keys,
                    ..PeerSeal::default()
                })
                .collect(),
        }
    }

    /// `peer`'s (current process's) keys: numbers start anew both ways.
    pub fn set_keys(&mut self, peer: u32, keys: Option<PairKeys>) {
        if let Some(p) = self.peers.get_mut(peer as usize) {
            *p = PeerSeal {
                keys,
                ..PeerSeal::default()
            };
        }
    }

    /// Appends the trailer of the next message to `to` (`msg` holds it)
    /// carrying `digest`; false (nothing appended) if there is no key.
    pub fn seal(&mut self, to: u32, msg: &mut Vec<u8>, digest: &Digest) -> bool {
        let Some(p) = self.peers.get_mut(to as usize) else {
            return false;
        };
        let Some(keys) = &p.keys else {
            return false;
        };
        let seq = p.next;
        p.next += 1;
        let tag = keys.send.tag(seq, msg, digest);
        msg.extend_from_slice(digest);
        msg.extend_from_slice(&seq.to_le_bytes());
        msg.extend_from_slice(&tag);
        true
    }

    /// Checks a sealed message from `from`: the message's bytes and the
    /// digest it carries, its number taken; or why it is refused (nothing
    /// taken).
    pub fn open<'a>(
        &mut self,
        from: u32,
        sealed: &'a [u8],
    ) -> Result<(&'a [u8], Digest), SealError> {
        let p = self.peers.get_mut(from as usize).ok_or(SealError::NoKey)?;
        let keys = p.keys.as_ref().ok_or(SealError::NoKey)?;
        check(&keys.recv, &mut p.window, sealed)
    }
}

/// Checks `sealed` under `key` against `window` (see [`Seals::open`]).
fn check<'a>(
    key: &Key,
    window: &mut Window,
    sealed: &'a [u8],
) -> Result<(&'a [u8], Digest), SealError> {
    let n = sealed.len();
    if n < TRAILER {
        return Err(SealError::Short(n));
    }
    let (msg, trailer) = sealed.split_at(n - TRAILER);
    let (digest, rest) = trailer.split_at(DIGEST_LEN);
    let (seq, tag) = rest.split_at(8);
    let seq = u64::from_le_bytes(seq.try_into().expect("8 bytes"));
    let want = key.tag(seq, msg, digest);
    // Constant time: every byte is compared whatever the first differ.
    let diff = want.iter().zip(tag).fold(0u8, |d, (a, b)| d | (a ^ b));
    if diff != 0 {
        return Err(SealError::BadTag(seq));
    }
    if !window.fresh(seq) {
        return Err(SealError::Replayed(seq));
    }
    window.take(seq);
    Ok((msg, digest.try_into().expect("a digest")))
}

#[cfg(test)]
mod tests;
