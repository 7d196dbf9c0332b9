//! Dialling a peer: a connection whose handshake the listener accepted,
//! tried again within the connect timeout when it was closed or refused
//! before the proof (see the `outgoing` module for what runs on it).

use super::frame::{Hello, Role};
use super::{handshake, metrics, Shared};
use crate::version::VERSION;
use std::net::SocketAddr;
use std::time::Duration;
use taskfold_core::auth::FrameKeys;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// Connects to `peer` at `addr` and runs the caller's handshake: the
/// connection is returned once `peer` proved the job key (and we sent our
/// proof), within the connect timeout. A connection that its listener
/// closed, or that was refused or answered by someone without the key,
/// before the proof is tried again until then: the listener's gate may
/// have made room for newer connections (see [`gate`]), and what comes
/// before the proof is anybody's word. A connection refused by the
/// kernel (nobody listens: the peer died) fails at once.
pub(super) async fn connect_proven(
    shared: &Shared,
    peer: u32,
    addr: SocketAddr,
) -> Result<Connected, String> {
    let until = tokio::time::Instant::now() + shared.connect_timeout;
    let mut backoff = Duration::from_millis(5);
    loop {
        let why = match tokio::time::timeout_at(until, connect_once(shared, peer, addr)).await {
            Ok(Ok(c)) => return Ok(c),
            Ok(Err(Once::Fatal(why))) => return Err(why),
            Ok(Err(Once::Again(why))) => why,
            Err(_) => format!("handshake with rank {peer} at {addr} timed out"),
        };
        if tokio::time::Instant::now() + backoff >= until {
            return Err(why);
        }
        tracing::debug!(rank = shared.rank, peer, %why, "connecting again");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(200));
    }
}

/// Why one attempt to connect failed.
enum Once {
    /// Nobody listens there.
    Fatal(String),
    /// Worth another attempt.
    Again(String),
}

/// A connection whose handshake succeeded, and its frame keys.
pub(super) type Connected = (OwnedReadHalf, OwnedWriteHalf, FrameKeys);

async fn connect_once(shared: &Shared, peer: u32, addr: SocketAddr) -> Result<Connected, Once> {
    let stream = super::sock::connect(addr)
        .await
        .map_err(|e| Once::Fatal(format!("connecting to rank {peer} at {addr}: {e}")))?;
    let (mut rd, mut wr) = stream.into_split();
    let hello = Hello {
        version: VERSION,
        role: Role::Peer,
        job: shared.job,
        rank: shared.rank,
        size: shared.size,
        addr: None,
        node: 0,
        nonce: [0; taskfold_core::auth::NONCE_LEN],
        incarnation: shared.incarnation,
        mac: shared.integrity,
    };
    match handshake::call(&mut rd, &mut wr, &shared.auth, hello, peer).await {
        Ok((sent, keys)) => {
            metrics::sent(sent as u64, 2);
            Ok((rd, wr, keys))
        }
        Err(f) => Err(Once::Again(f.describe(&format!("rank {peer} at {addr}")))),
    }
}
