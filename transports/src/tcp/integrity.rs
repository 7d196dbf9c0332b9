//! `TASKFOLD_INTEGRITY=mac` on a connection: the reading side. Every byte
//! read through a [`MacRead`] is fed to its direction's MAC
//! (`taskfold_core::auth::FrameMac`); a reader calls
//! [`MacRead::end_frame`] once it has read a whole frame, and before it
//! acts on it: the tag that follows is checked, and a frame that fails it
//! ends the connection as a protocol error. Without integrity the wrapper
//! passes bytes through and `end_frame` does nothing. The writing side
//! seals frames in the connection's writer (`super::writer`).

use super::conn::ReadError;
use std::pin::Pin;
use std::task::{Context, Poll};
use taskfold_core::auth::{FrameMac, TAG_LEN};
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

/// Where a reader's frame checks stand ([`MacRead::into_parts`]).
pub(crate) struct Checks(Option<(FrameMac, blake3::Hasher)>);

/// A read half whose frames are checked (see the [module documentation](self)).
pub(crate) struct MacRead<R> {
    inner: R,
    mac: Option<(FrameMac, blake3::Hasher)>,
}

impl<R: AsyncRead + Unpin> MacRead<R> {
    /// Reads `inner`, checking frames with `mac` if there is one.
    pub fn new(inner: R, mac: Option<FrameMac>) -> MacRead<R> {
        MacRead {
            inner,
            mac: mac.map(|m| {
                let h = m.begin();
                (m, h)
            }),
        }
    }

    /// The stream read.
    pub fn inner(&self) -> &R {
        &self.inner
    }

    /// The stream, unwrapped (to refuse the connection).
    pub fn into_inner(self) -> R {
        self.inner
    }

    /// The stream and the checks' state, apart (to move the checks to
    /// the stream that goes on where this one stopped: a connection moved
    /// to its rings).
    pub fn into_parts(self) -> (R, Checks) {
        (self.inner, Checks(self.mac))
    }

    /// A reader of `inner` that goes on with `checks`.
    pub fn from_parts(inner: R, checks: Checks) -> MacRead<R> {
        MacRead {
            inner,
            mac: checks.0,
        }
    }

    /// The frame read since the last call is whole: reads its tag and
    /// checks it.
    pub async fn end_frame(&mut self) -> Result<(), ReadError> {
        let Some((mac, hasher)) = self.mac.as_mut() else {
            return Ok(());
        };
        let mut tag = [0u8; TAG_LEN];
        self.inner
            .read_exact(&mut tag)
            .await
            .map_err(ReadError::Io)?;
        let checked = mac.check(hasher, &tag);
        *hasher = mac.begin();
        checked.map_err(|e| {
            super::metrics::bad_connection();
            ReadError::Protocol(e.to_string())
        })
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for MacRead<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let (Poll::Ready(Ok(())), Some((_, h))) = (&r, this.mac.as_mut()) {
            h.update(&buf.filled()[before..]);
        }
        r
    }
}
