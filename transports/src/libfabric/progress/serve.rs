//! Serving: answering peers' gets from the exposed buffers, and lending
//! large control frames, both read by the peer with RMA.
//!
//! Memory peers read (exposed buffers, large frames) is held by a lease per
//! read ([`crate::lease`]), which the reader releases with a `RELEASE`
//! message once its reads completed, or which is dropped when the reader's
//! link goes down: withdrawing a buffer while a peer reads it never frees
//! memory under the provider.

use super::super::seal::{digest, Digest, DIGEST_LEN};
use super::super::shared::{Registered, Registrar};
use super::super::wire::Remote;
use super::flow::Out;
use super::Engine;
use crate::lease::Leases;
use crate::BufferKey;
use bytes::Bytes;
use std::sync::Arc;

/// The registrar and the leases of memory peers are reading.
pub(super) struct Serving {
    pub reg: Arc<Registrar>,
    pub leases: Leases<Arc<Registered>>,
}

impl Serving {
    /// Lends `reg` to `peer` under a new lease `token`: where to read it,
    /// and (if `sealed`) the digest of its bytes.
    fn lend(
        &mut self,
        peer: u32,
        token: u64,
        reg: Arc<Registered>,
        sealed: bool,
    ) -> (Remote, Digest) {
        let at = Remote {
            len: reg.len() as u64,
            addr: reg.addr(),
            key: reg.key(),
            token,
        };
        let digest = if sealed {
            reg.digest()
        } else {
            [0; DIGEST_LEN]
        };
        self.leases.lend(peer, token, reg);
        (at, digest)
    }
}

/// What a get request finds.
enum Found {
    /// Nothing exposed under the key.
    Missing,
    /// An empty buffer: nothing to read.
    Empty,
    /// The buffer's registration.
    Registered(Arc<Registered>),
    /// It could not be registered.
    Failed(super::super::fi::FabricError),
}

impl Engine {
    /// Answers a get request: registers the buffer if needed and lends it.
    pub(super) fn serve(&mut self, from: u32, req: u64, key: u64) {
        if !self.sh.is_up(from) {
            // It left: it will not read, and would never release a lease.
            return;
        }
        let reg = &self.serving.reg;
        let found = self
            .sh
            .exposed
            .with(BufferKey(key), |data, attached| {
                if data.is_empty() {
                    return Found::Empty;
                }
                if let Some(r) = attached {
                    return Found::Registered(r.clone());
                }
                match reg.expose(data.clone()) {
                    Ok(r) => Found::Registered(attached.insert(r).clone()),
                    Err(e) => Found::Failed(e),
                }
            })
            .unwrap_or(Found::Missing);
        let out = match found {
            Found::Missing => Out::GetErr { req, key },
            Found::Empty => Out::GetOk {
                req,
                at: Remote {
                    len: 0,
                    addr: 0,
                    key: 0,
                    token: 0,
                },
                digest: digest(&[]),
            },
            Found::Registered(reg) => {
                let token = self.id();
                let sealed = self.seals.is_some();
                let (at, digest) = self.serving.lend(from, token, reg, sealed);
                Out::GetOk { req, at, digest }
            }
            Found::Failed(e) => {
                tracing::error!(rank = self.sh.rank, key, error = %e, "registering an exposed buffer");
                Out::GetErr { req, key }
            }
        };
        self.flow.enqueue(from, out);
    }

    /// Registers a control frame too large to send inline and tells `to`
    /// where to read it (message `seq`).
    pub(super) fn lend_frame(&mut self, to: u32, seq: u64, frame: Bytes) {
        let len = frame.len() as u64;
        match self.serving.reg.expose(frame) {
            Ok(reg) => {
                let token = self.id();
                let sealed = self.seals.is_some();
                let (at, digest) = self.serving.lend(to, token, reg, sealed);
                self.flow.enqueue(to, Out::Large { seq, at, digest });
            }
            Err(e) => self.suspect(to, format!("registering a frame of {len} bytes: {e}")),
        }
    }

    /// `from` is done reading the lease `token`.
    pub(super) fn released(&mut self, from: u32, token: u64) {
        self.serving.leases.returned(from, token);
    }
}
