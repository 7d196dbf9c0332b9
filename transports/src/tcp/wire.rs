//! What a connection's frames travel on after its handshake: the socket
//! itself, or, between ranks of one node, the connection's rings (the
//! `ring` module). Readers and writers see one byte stream either way.

use super::ring::{RingRead, RingWrite};
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// A connection's read side.
pub(crate) enum WireRead {
    Tcp(OwnedReadHalf),
    Ring(Box<RingRead>),
}

impl WireRead {
    fn socket(&self) -> &OwnedReadHalf {
        match self {
            WireRead::Tcp(s) => s,
            WireRead::Ring(r) => r.socket(),
        }
    }

    /// The socket's local address.
    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket().local_addr()
    }

    /// The socket's peer address.
    pub(crate) fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.socket().peer_addr()
    }
}

impl AsyncRead for WireRead {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WireRead::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            WireRead::Ring(r) => Pin::new(r.as_mut()).poll_read(cx, buf),
        }
    }
}

/// A connection's write side, written through `&self` by the writer task
/// and by senders' direct writes (see the `writer` module).
pub(crate) enum WireWrite {
    Tcp(OwnedWriteHalf),
    Ring(Box<RingWrite>),
}

impl WireWrite {
    /// One non-blocking write; `WouldBlock` if there is no room.
    pub(crate) fn try_write(&self, b: &[u8]) -> io::Result<usize> {
        self.try_write_vectored(&[IoSlice::new(b)])
    }

    /// One non-blocking vectored write; `WouldBlock` if there is no room.
    pub(crate) fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            WireWrite::Tcp(s) => s.try_write_vectored(bufs),
            WireWrite::Ring(r) => r.try_write_vectored(bufs),
        }
    }

    /// Waits until a write may take some bytes (or would fail).
    pub(crate) async fn writable(&self) -> io::Result<()> {
        match self {
            WireWrite::Tcp(s) => s.writable().await,
            WireWrite::Ring(r) => r.writable().await,
        }
    }
}
