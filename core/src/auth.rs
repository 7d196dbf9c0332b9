//! An authenticated job: the job key and the mutual challenge–response
//! that every connection between two processes of a job runs before
//! anything else (see the book's Security chapter, An authenticated job).
//!
//! Every process of a job holds the same secret [`JobKey`] (256 bits). A
//! connection opens with the caller's claim (its hello: role, rank, size,
//! job id, protocol version, with a fresh random nonce of its own); the
//! listener answers with a fresh nonce and its proof; the caller checks
//! that proof, then sends its own; the listener checks it and only then
//! reads anything else. A proof is an HMAC-SHA256 under the job key of:
//!
//! ```text
//! DOMAIN | side (caller or listener) | callee rank | caller nonce | listener nonce | claim
//! ```
//!
//! so it is bound to the direction of the connection, to the rank called,
//! to both nonces and to everything the caller claims (its role and rank
//! among them): a transcript recorded once proves nothing on another
//! connection (the other side's nonce is new), and a proof made for one
//! role, rank or direction does not pass for another. Proofs are compared
//! in constant time.
//!
//! This module is pure: the nonces come from the caller (the transports
//! draw them from the operating system's random source), and the state of
//! one handshake is the [`Handshake`] state machine. A failed check is a
//! typed [`AuthError`], final: a handshake that failed accepts nothing
//! more. The refusal a listener sends ([`REFUSAL`]) names neither the key
//! nor the job id nor the size.
//!
//! A job run in the insecure mode uses [`JobAuth::Insecure`]: the
//! handshake still runs, with [`JobKey::PUBLIC`], a key everybody knows,
//! so it keeps out only processes of another job by mistake.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;

mod frame_mac;
#[cfg(test)]
mod tests;

pub use frame_mac::{FrameKeys, FrameMac, MacError, TAG_LEN};

/// Bytes of a job key.
pub const KEY_LEN: usize = 32;
/// Bytes of a nonce.
pub const NONCE_LEN: usize = 32;
/// Bytes of a proof (an HMAC-SHA256).
pub const PROOF_LEN: usize = 32;

/// Separates these MACs from any other use of the key.
const DOMAIN: &[u8] = b"taskfold job handshake v1";

/// Separates the frame keys from the proofs.
const FRAME_KEY_DOMAIN: &[u8] = b"taskfold frame keys v1";

/// Why a listener refuses a caller whose proof did not match: no job id,
/// no size, no key.
pub const REFUSAL: &str = "not of this job: the proof of the job key did not match";

/// The secret every process of a job holds. Its `Debug` shows no byte of
/// it.
#[derive(Clone, PartialEq, Eq)]
pub struct JobKey([u8; KEY_LEN]);

impl JobKey {
    /// The key of the insecure mode: all zeros, known to everybody.
    pub const PUBLIC: JobKey = JobKey([0; KEY_LEN]);

    /// A key of these bytes (draw them from a cryptographic random
    /// source).
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> JobKey {
        JobKey(bytes)
    }

    /// A key written as 64 hexadecimal digits (either case, surrounding
    /// whitespace ignored); `None` for anything else.
    pub fn from_hex(text: &str) -> Option<JobKey> {
        let text = text.trim().as_bytes();
        if text.len() != 2 * KEY_LEN {
            return None;
        }
        let digit = |c: u8| char::from(c).to_digit(16).map(|d| d as u8);
        let mut key = [0u8; KEY_LEN];
        for (k, pair) in key.iter_mut().zip(text.chunks_exact(2)) {
            *k = (digit(pair[0])? << 4) | digit(pair[1])?;
        }
        Some(JobKey(key))
    }

    /// The key as 64 lowercase hexadecimal digits (what
    /// [`JobKey::from_hex`] reads back).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl JobKey {
    /// Overwrites the key with zeros (`zeroize`: writes the compiler
    /// keeps even though nothing reads them after).
    pub fn wipe(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }

    /// True if every byte is zero (a wiped key, or the public one).
    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|&b| b == 0)
    }
}

/// Every copy of a key is wiped when dropped: a runtime that ended leaves
/// no key in its memory.
impl Drop for JobKey {
    fn drop(&mut self) {
        self.wipe();
    }
}

impl fmt::Debug for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JobKey(<secret>)")
    }
}

/// What describes a key or its absence in error messages and settings.
pub const KEY_EXPECTED: &str =
    "64 hexadecimal digits, a 256-bit key (e.g. from `openssl rand -hex 32`)";

/// [`JobKey::PUBLIC`] in a place of its own (a key with a destructor is
/// not promoted to one).
static PUBLIC_KEY: JobKey = JobKey::PUBLIC;

/// How the processes of a job prove they belong to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobAuth {
    /// Every connection proves knowledge of this key.
    Key(JobKey),
    /// No secret: the handshake runs with [`JobKey::PUBLIC`], and any
    /// process that reaches a rank's port can take part in the job.
    Insecure,
}

impl JobAuth {
    /// The key the handshake uses.
    pub fn key(&self) -> &JobKey {
        match self {
            JobAuth::Key(k) => k,
            JobAuth::Insecure => &PUBLIC_KEY,
        }
    }
}

/// A fresh random number of one side of one handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nonce(pub [u8; NONCE_LEN]);

/// One side's proof of the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proof(pub [u8; PROOF_LEN]);

/// The listener's answer to a hello: its nonce and its proof.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// The listener's fresh nonce.
    pub nonce: Nonce,
    /// The listener's proof over the transcript.
    pub proof: Proof,
}

/// Bytes of an encoded [`Challenge`].
pub const CHALLENGE_LEN: usize = NONCE_LEN + PROOF_LEN;

impl Challenge {
    /// The nonce, then the proof.
    pub fn encode(&self) -> [u8; CHALLENGE_LEN] {
        let mut out = [0u8; CHALLENGE_LEN];
        out[..NONCE_LEN].copy_from_slice(&self.nonce.0);
        out[NONCE_LEN..].copy_from_slice(&self.proof.0);
        out
    }

    /// Reads what [`Challenge::encode`] wrote; `None` if the length is
    /// not [`CHALLENGE_LEN`].
    pub fn decode(b: &[u8]) -> Option<Challenge> {
        if b.len() != CHALLENGE_LEN {
            return None;
        }
        let (n, p) = b.split_at(NONCE_LEN);
        Some(Challenge {
            nonce: Nonce(n.try_into().ok()?),
            proof: Proof(p.try_into().ok()?),
        })
    }
}

/// A failed handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The caller's proof did not match: it does not hold the job key (or
    /// replays another connection's transcript).
    #[error("{REFUSAL}")]
    Caller,
    /// The listener's proof did not match: the process called does not
    /// hold the job key, or is not the rank called.
    #[error("not of this job: its proof of the job key did not match")]
    Listener,
    /// A step came that this side does not expect now.
    #[error("handshake step out of order: {0}")]
    OutOfOrder(&'static str),
}

/// Which side a proof is made by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Caller = 1,
    Listener = 2,
}

/// What both proofs of one connection are made over (opaque: the key, the
/// claim, the callee and the caller's nonce).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transcript {
    key: JobKey,
    claim: Vec<u8>,
    callee: u32,
    caller_nonce: Nonce,
}

impl Transcript {
    fn mac(&self, side: Side, listener_nonce: &Nonce) -> Hmac<Sha256> {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.key.0).expect("HMAC takes any key length");
        mac.update(DOMAIN);
        mac.update(&[side as u8]);
        mac.update(&self.callee.to_le_bytes());
        mac.update(&self.caller_nonce.0);
        mac.update(&listener_nonce.0);
        mac.update(&(self.claim.len() as u64).to_le_bytes());
        mac.update(&self.claim);
        mac
    }

    fn prove(&self, side: Side, listener_nonce: &Nonce) -> Proof {
        Proof(
            self.mac(side, listener_nonce)
                .finalize()
                .into_bytes()
                .into(),
        )
    }

    /// The frame keys of this connection (see [`Handshake::frame_keys`]):
    /// HMAC-SHA256 under the job key of the whole transcript and the
    /// direction, under a label of their own (a key is never a proof).
    fn frame_keys(&self, listener_nonce: &Nonce) -> FrameKeys {
        let key = |dir: u8| -> [u8; 32] {
            let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key.0)
                .expect("HMAC takes any key length");
            mac.update(FRAME_KEY_DOMAIN);
            mac.update(&[dir]);
            mac.update(&self.callee.to_le_bytes());
            mac.update(&self.caller_nonce.0);
            mac.update(&listener_nonce.0);
            mac.update(&(self.claim.len() as u64).to_le_bytes());
            mac.update(&self.claim);
            mac.finalize().into_bytes().into()
        };
        FrameKeys::new(key(Side::Caller as u8), key(Side::Listener as u8))
    }

    /// Constant-time check of the other side's proof.
    fn verify(&self, side: Side, listener_nonce: &Nonce, proof: &Proof) -> bool {
        self.mac(side, listener_nonce)
            .verify_slice(&proof.0)
            .is_ok()
    }
}

/// One side of one connection's handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Handshake {
    /// The caller sent its claim and nonce; it waits for the listener's
    /// [`Challenge`].
    AwaitingChallenge(Box<Transcript>),
    /// The listener sent its [`Challenge`]; it waits for the caller's
    /// proof.
    AwaitingProof(Box<Transcript>, Nonce),
    /// Both proofs matched: the connection belongs to the job. The keys of
    /// its frames' MACs, if the job asks for them
    /// ([`Handshake::frame_keys`]), are derived from this handshake.
    Authenticated(Box<FrameKeys>),
    /// A proof did not match, or a step came out of order. Final.
    Failed(AuthError),
}

impl Handshake {
    /// The caller's side: it calls rank `callee` with `claim` (the bytes
    /// of its hello) and its fresh `nonce`, which the hello carries.
    pub fn call(key: &JobKey, claim: &[u8], callee: u32, nonce: Nonce) -> Handshake {
        Handshake::AwaitingChallenge(Box::new(Transcript {
            key: key.clone(),
            claim: claim.to_vec(),
            callee,
            caller_nonce: nonce,
        }))
    }

    /// The listener's side: rank `callee` received `claim` carrying the
    /// caller's nonce `theirs`; `nonce` is its own fresh one. Returns the
    /// challenge to send.
    pub fn listen(
        key: &JobKey,
        claim: &[u8],
        callee: u32,
        theirs: Nonce,
        nonce: Nonce,
    ) -> (Handshake, Challenge) {
        let t = Transcript {
            key: key.clone(),
            claim: claim.to_vec(),
            callee,
            caller_nonce: theirs,
        };
        let challenge = Challenge {
            nonce,
            proof: t.prove(Side::Listener, &nonce),
        };
        (Handshake::AwaitingProof(Box::new(t), nonce), challenge)
    }

    /// The caller receives the listener's challenge: checks its proof and
    /// returns the caller's own, to send. The handshake is then
    /// [`Handshake::Authenticated`] on this side.
    pub fn on_challenge(&mut self, c: &Challenge) -> Result<Proof, AuthError> {
        let result = match &*self {
            Handshake::AwaitingChallenge(t) => {
                if t.verify(Side::Listener, &c.nonce, &c.proof) {
                    Ok((t.prove(Side::Caller, &c.nonce), t.frame_keys(&c.nonce)))
                } else {
                    Err(AuthError::Listener)
                }
            }
            _ => Err(AuthError::OutOfOrder(
                "a challenge to a side that expects none",
            )),
        };
        match result {
            Ok((proof, keys)) => {
                *self = Handshake::Authenticated(Box::new(keys));
                Ok(proof)
            }
            Err(e) => {
                *self = Handshake::Failed(e);
                Err(e)
            }
        }
    }

    /// The listener receives the caller's proof.
    pub fn on_proof(&mut self, p: &Proof) -> Result<(), AuthError> {
        let result = match &*self {
            Handshake::AwaitingProof(t, nonce) => {
                if t.verify(Side::Caller, nonce, p) {
                    Ok(t.frame_keys(nonce))
                } else {
                    Err(AuthError::Caller)
                }
            }
            _ => Err(AuthError::OutOfOrder("a proof to a side that expects none")),
        };
        match result {
            Ok(keys) => {
                *self = Handshake::Authenticated(Box::new(keys));
                Ok(())
            }
            Err(e) => {
                *self = Handshake::Failed(e);
                Err(e)
            }
        }
    }

    /// True once both proofs matched.
    pub fn is_authenticated(&self) -> bool {
        matches!(self, Handshake::Authenticated(_))
    }

    /// The keys of this connection's frame MACs, once authenticated: the
    /// same on both sides, one per direction, known to nobody without the
    /// job key and new with every connection (both nonces are in them).
    pub fn frame_keys(&self) -> Option<&FrameKeys> {
        match self {
            Handshake::Authenticated(k) => Some(k),
            _ => None,
        }
    }
}
