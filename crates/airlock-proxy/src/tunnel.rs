//! The client side of a pass-through tunnel, metered: every byte the client sends is taken
//! from the session's egress budget before it is forwarded, every byte passed back counts
//! against the response cap, and both directions are counted as they pass, so the audit
//! record has the true figures even when the tunnel ends with an error (a reset would
//! otherwise lose the counts, and the budget with them).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::server::Inner;

/// A client connection whose reads are charged to the egress budget and whose writes are
/// capped at the proxy's `max_response_body`.
pub(crate) struct Metered<S> {
    io: S,
    inner: Arc<Inner>,
    /// The tunnel was let through unattended because the session was clean: it may carry
    /// nothing more once the session takes in untrusted content.
    clean_only: bool,
    /// Bytes read from the client (sent upstream).
    pub(crate) sent: u64,
    /// Bytes written to the client (received from upstream).
    pub(crate) received: u64,
}

impl<S> Metered<S> {
    /// `clean_only`: the tunnel was allowed only because the session was not tainted.
    pub(crate) fn new(io: S, inner: Arc<Inner>, clean_only: bool) -> Self {
        Metered {
            io,
            inner,
            clean_only,
            sent: 0,
            received: 0,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.io).poll_read(cx, buf))?;
        let n = (buf.filled().len() - before) as u64;
        if n > 0 {
            // The Gate decided this tunnel for a clean session; after taint a new one
            // would be asked (I5), so an old one must not carry the data instead.
            if self.clean_only && self.inner.is_tainted() {
                buf.set_filled(before);
                return Poll::Ready(Err(io::Error::other(
                    "the session took in untrusted content after this tunnel opened, and a tunnel after that needs approval",
                )));
            }
            let limit = self.inner.limits.egress_budget;
            if let Err(used) = self.inner.budget.take(n, limit) {
                // Drop what was read: none of it may leave.
                buf.set_filled(before);
                return Poll::Ready(Err(io::Error::other(format!(
                    "the session's egress budget is spent ({used} of {limit} bytes)"
                ))));
            }
            self.sent += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        // The proxy cannot see where one response ends inside the tunnel, so the cap on a
        // response is a cap on everything the tunnel passes back.
        let cap = self.inner.limits.max_response_body;
        let left = cap.saturating_sub(self.received);
        if left == 0 && !buf.is_empty() {
            return Poll::Ready(Err(io::Error::other(format!(
                "the tunnel passed back {cap} bytes, the response cap (max_response_body)"
            ))));
        }
        let take = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = ready!(Pin::new(&mut self.io).poll_write(cx, &buf[..take]))?;
        self.received += n as u64;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
