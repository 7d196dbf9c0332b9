//! The handshake every TCP connection opens with: the caller's `HELLO`
//! (its claim and a fresh nonce), the listener's `CHALLENGE` (its nonce
//! and its proof of the job key), the caller's `PROOF`, the listener's
//! `ACCEPTED` once it checked that proof. The state and the
//! proofs are `taskfold_core::auth`'s [`Handshake`]; this module moves its
//! frames, on tokio streams (the listener, a rank's calls to its peers)
//! and on blocking ones (a registration, a launcher's report).
//!
//! The caller checks the listener's proof before it sends anything else
//! (no control frame, no get request reaches a process that does not
//! hold the key); the listener reads nothing after the hello but the
//! proof until the proof matched (no rank slot, no registration, no
//! launcher report, no get served before). A caller whose proof fails is
//! refused with [`REFUSAL`], which names neither the job id nor its size;
//! a caller takes the connection as its own only on `ACCEPTED`: until
//! the listener checked the proof, its gate may still close the
//! connection to make room (see the `gate` module), and a connection
//! closed then is an attempt to make again, not a peer gone;
//! a caller that finds the listener's proof wrong sends a `REFUSE` saying
//! so and closes. A refusal that comes before the listener proved the key
//! is anybody's word: its text is quoted ([`PRE_PROOF_QUOTE`] characters
//! at most, escaped) and it ends nothing but this connection (the callers
//! retry). A side whose random source fails sends nothing and ends the
//! handshake.

use super::frame::{self, kind, Hello, HANDSHAKE_MAX};
use crate::auth::nonce;
use std::io::{self, Read, Write};
use taskfold_core::auth::{
    AuthError, Challenge, FrameKeys, Handshake, JobAuth, Proof, PROOF_LEN, REFUSAL,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Characters of an unauthenticated refusal quoted, at most: enough for
/// every refusal a listener of the job sends before its proof.
pub(crate) const PRE_PROOF_QUOTE: usize = 120;

/// Why a handshake did not end in an authenticated connection.
#[derive(Debug)]
pub(crate) enum Failed {
    /// The other side refused us before it proved the job key, with this
    /// reason (quoted: anybody may have sent it).
    Refused(String),
    /// The other side did not prove the job key (`AuthError::Listener`),
    /// or did not (`AuthError::Caller`: refuse it with [`REFUSAL`]).
    Auth(AuthError),
    /// The stream failed, closed or carried something else.
    Broken(String),
}

impl Failed {
    /// What a caller reports when calling `who` failed so.
    pub(crate) fn describe(&self, who: &str) -> String {
        match self {
            Failed::Refused(r) => {
                format!("{who} refused the connection before proving the job key: {r}")
            }
            Failed::Auth(e) => format!("{who} is {e}"),
            Failed::Broken(d) => format!("handshake with {who} failed: {d}"),
        }
    }
}

/// The caller's hello: `hello` with a fresh nonce, and the handshake that
/// waits for the challenge of rank `callee`.
fn open(auth: &JobAuth, mut hello: Hello, callee: u32) -> Result<(Vec<u8>, Handshake), Failed> {
    let n = nonce().map_err(Failed::Broken)?;
    hello.nonce = n.0;
    let body = hello.encode();
    let hs = Handshake::call(auth.key(), &body, callee, n);
    Ok((frame::frame(kind::HELLO, &body), hs))
}

/// The quoted text of a refusal received before the proof.
pub(crate) fn unproven(payload: &[u8]) -> String {
    let text = String::from_utf8_lossy(payload);
    taskfold_core::quote::quote_at_most(&text, PRE_PROOF_QUOTE).to_string()
}

/// The caller's answer to the listener's first frame: its proof, or why
/// there is none.
fn answer(hs: &mut Handshake, kind: u8, payload: &[u8]) -> Result<Proof, Failed> {
    match kind {
        kind::CHALLENGE => {
            let c = Challenge::decode(payload)
                .ok_or_else(|| Failed::Broken(format!("a challenge of {} bytes", payload.len())))?;
            hs.on_challenge(&c).map_err(Failed::Auth)
        }
        kind::REFUSE => Err(Failed::Refused(unproven(payload))),
        k => Err(Failed::Broken(format!(
            "frame kind {k} where the challenge belongs"
        ))),
    }
}

/// The listener's last handshake frame, as the caller reads it: the
/// proof was accepted, or why not (a refusal now comes from a listener
/// that proved the key: its text is still quoted, as any peer's).
fn accepted(kind: u8, payload: &[u8]) -> Result<(), Failed> {
    match kind {
        kind::ACCEPTED if payload.is_empty() => Ok(()),
        kind::REFUSE => Err(Failed::Refused(unproven(payload))),
        k => Err(Failed::Broken(format!(
            "frame kind {k} ({} bytes) where the acceptance belongs",
            payload.len()
        ))),
    }
}

/// The listener's `ACCEPTED`: sent once its gate let the connection go
/// (see [`accepted`]).
pub(crate) fn accepted_frame() -> Vec<u8> {
    frame::frame(kind::ACCEPTED, &[])
}

/// The refusal a caller sends a listener whose proof did not match.
fn refuse_listener() -> Vec<u8> {
    frame::refuse_frame(&format!(
        "the caller found the listener {}",
        AuthError::Listener
    ))
}

/// The keys of an authenticated handshake's frame MACs.
fn keys(hs: &Handshake) -> FrameKeys {
    hs.frame_keys()
        .cloned()
        .expect("an authenticated handshake has frame keys")
}

/// The caller's side on a blocking stream: sends `hello` (to rank
/// `callee`), checks the challenge, sends its proof; returns the frame
/// keys. The stream's own timeouts bound the wait.
pub(crate) fn call_sync<S: Read + Write>(
    s: &mut S,
    auth: &JobAuth,
    hello: Hello,
    callee: u32,
) -> Result<FrameKeys, Failed> {
    let (bytes, mut hs) = open(auth, hello, callee)?;
    let broken = |e: io::Error| Failed::Broken(e.to_string());
    s.write_all(&bytes).map_err(broken)?;
    let (h, payload) = frame::read_frame_sync(s, u64::from(HANDSHAKE_MAX))
        .map_err(broken)?
        .ok_or_else(|| Failed::Broken("closed before its challenge".into()))?;
    match answer(&mut hs, h.kind, &payload) {
        Ok(p) => {
            s.write_all(&frame::frame(kind::PROOF, &p.0))
                .map_err(broken)?;
            let (h, payload) = frame::read_frame_sync(s, u64::from(HANDSHAKE_MAX))
                .map_err(broken)?
                .ok_or_else(|| Failed::Broken("closed before accepting the proof".into()))?;
            accepted(h.kind, &payload).map(|()| keys(&hs))
        }
        Err(f) => {
            if matches!(f, Failed::Auth(_)) {
                let _ = s.write_all(&refuse_listener());
            }
            Err(f)
        }
    }
}

/// The caller's side on a tokio stream; returns the bytes it sent and the
/// frame keys.
pub(crate) async fn call<R, W>(
    rd: &mut R,
    wr: &mut W,
    auth: &JobAuth,
    hello: Hello,
    callee: u32,
) -> Result<(usize, FrameKeys), Failed>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (bytes, mut hs) = open(auth, hello, callee)?;
    let broken = |e: io::Error| Failed::Broken(e.to_string());
    wr.write_all(&bytes).await.map_err(broken)?;
    let (k, payload) = read_small(rd).await?;
    match answer(&mut hs, k, &payload) {
        Ok(p) => {
            let proof = frame::frame(kind::PROOF, &p.0);
            wr.write_all(&proof).await.map_err(broken)?;
            let (k, payload) = read_small(rd).await?;
            accepted(k, &payload)?;
            Ok((bytes.len() + proof.len(), keys(&hs)))
        }
        Err(f) => {
            if matches!(f, Failed::Auth(_)) {
                let _ = wr.write_all(&refuse_listener()).await;
            }
            Err(f)
        }
    }
}

/// The listener's side, once rank `own` read the caller's `hello` (whose
/// body, as received, is `claim`): sends the challenge, then checks the
/// caller's proof; returns the frame keys. The caller bounds the wait.
pub(crate) async fn listen<R, W>(
    rd: &mut R,
    wr: &mut W,
    auth: &JobAuth,
    own: u32,
    hello: &Hello,
    claim: &[u8],
) -> Result<FrameKeys, Failed>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let theirs = taskfold_core::auth::Nonce(hello.nonce);
    let ours = nonce().map_err(Failed::Broken)?;
    let (mut hs, challenge) = Handshake::listen(auth.key(), claim, own, theirs, ours);
    let c = frame::frame(kind::CHALLENGE, &challenge.encode());
    wr.write_all(&c)
        .await
        .map_err(|e| Failed::Broken(e.to_string()))?;
    match read_small(rd).await? {
        (kind::PROOF, p) if p.len() == PROOF_LEN => {
            let proof = Proof(p.as_slice().try_into().expect("checked length"));
            hs.on_proof(&proof).map_err(Failed::Auth)?;
            Ok(keys(&hs))
        }
        (kind::REFUSE, reason) => Err(Failed::Refused(unproven(&reason))),
        (k, _) => Err(Failed::Broken(format!(
            "frame kind {k} where the proof belongs"
        ))),
    }
}

/// Reads one handshake frame (at most [`HANDSHAKE_MAX`] bytes).
async fn read_small<R: AsyncRead + Unpin>(rd: &mut R) -> Result<(u8, Vec<u8>), Failed> {
    let mut h = [0u8; frame::HEADER_LEN];
    rd.read_exact(&mut h).await.map_err(|e| {
        Failed::Broken(if e.kind() == io::ErrorKind::UnexpectedEof {
            "closed during the handshake".into()
        } else {
            e.to_string()
        })
    })?;
    let hdr = frame::Header::decode(&h).map_err(Failed::Broken)?;
    if hdr.len > HANDSHAKE_MAX {
        return Err(Failed::Broken(format!(
            "handshake frame of {} bytes",
            hdr.len
        )));
    }
    let mut payload = vec![0u8; hdr.len as usize];
    rd.read_exact(&mut payload)
        .await
        .map_err(|e| Failed::Broken(e.to_string()))?;
    Ok((hdr.kind, payload))
}

/// The reason a listener gives a caller whose proof failed.
pub(crate) fn refusal() -> String {
    REFUSAL.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::frame::Role;

    fn hello() -> Hello {
        Hello {
            version: crate::version::VERSION,
            role: Role::Peer,
            job: 7,
            rank: 1,
            size: 2,
            addr: None,
            node: 0,
            nonce: [0; taskfold_core::auth::NONCE_LEN],
            incarnation: 0,
            mac: false,
        }
    }

    /// A caller against a listener that checks its proof, then either
    /// accepts it or closes: what the caller's `call` returns.
    async fn call_against(accept: bool) -> Result<(usize, FrameKeys), Failed> {
        let auth = JobAuth::Key(taskfold_core::auth::JobKey::from_bytes([3; 32]));
        let (caller, listener) = tokio::io::duplex(1 << 16);
        let (mut crd, mut cwr) = tokio::io::split(caller);
        let (mut lrd, mut lwr) = tokio::io::split(listener);
        let la = auth.clone();
        let listening = tokio::spawn(async move {
            let (k, claim) = read_small(&mut lrd).await.expect("a hello");
            assert_eq!(k, kind::HELLO);
            let h = Hello::decode(&claim).expect("a hello");
            listen(&mut lrd, &mut lwr, &la, 0, &h, &claim)
                .await
                .expect("the proof checks");
            if accept {
                lwr.write_all(&accepted_frame()).await.unwrap();
                // Held open until the caller is done.
                let _ = read_small(&mut lrd).await;
            }
        });
        let got = call(&mut crd, &mut cwr, &auth, hello(), 0).await;
        drop((crd, cwr));
        listening.await.unwrap();
        got
    }

    #[tokio::test]
    async fn a_proof_not_yet_accepted_is_no_connection() {
        // The listener's gate may close a connection after the caller's
        // proof went out and before the listener read it: the caller must
        // not take it for an established link (that would go down).
        match call_against(false).await {
            Err(Failed::Broken(d)) => assert!(d.contains("closed"), "{d}"),
            other => panic!("a connection closed before acceptance: {other:?}"),
        }
        let ok = call_against(true).await;
        assert!(ok.is_ok(), "an accepted proof: {:?}", ok.err());
    }
}
