//! The byte stream under an upstream TLS session, shaped for bulk responses.
//!
//! Two things made the proxy's response path cost far more per byte than the TLS work
//! itself (measured with `scripts/bench-proxy` under `perf`):
//!
//! * rustls pulls ciphertext from the socket in 4 KiB reads, so a 16 KiB record took four
//!   system calls. A [`BufReader`] under the TLS session turns those into one large read
//!   per burst of records.
//! * A TLS stream returns at most one record's plaintext per read, and hyper's client reads
//!   once per poll, so every body chunk was at most 16 KiB. Each chunk is a hand-off between
//!   the upstream connection's task and the client's (a wake-up on the other thread) and a
//!   separate write to the client. [`GreedyRead`] keeps reading while records are already
//!   buffered, so hyper gets (and its adaptive read buffer grows to) much larger chunks.
//!
//! Neither changes a byte of what is read; caps and scrubbing apply after hyper as before.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, BufReader, ReadBuf};

/// Ciphertext read from an upstream socket at once, at most: four full TLS records, and
/// small enough to come from the heap rather than a fresh mapping for every exchange.
pub(crate) const UPSTREAM_READ_BUFFER: usize = 64 << 10;

/// `io` with a read buffer of [`UPSTREAM_READ_BUFFER`] bytes (writes pass straight through).
pub(crate) fn buffered<S: AsyncRead>(io: S) -> BufReader<S> {
    BufReader::with_capacity(UPSTREAM_READ_BUFFER, io)
}

/// A reader that fills as much of each read as the inner stream can give without waiting.
pub(crate) struct GreedyRead<S> {
    inner: S,
    /// An error met after some data was read; returned by the next read.
    failed: Option<io::Error>,
}

impl<S> GreedyRead<S> {
    pub(crate) fn new(inner: S) -> Self {
        GreedyRead {
            inner,
            failed: None,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for GreedyRead<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(e) = self.failed.take() {
            return Poll::Ready(Err(e));
        }
        let start = buf.filled().len();
        loop {
            let before = buf.filled().len();
            match Pin::new(&mut self.inner).poll_read(cx, buf) {
                // Nothing more right now: return what this call read, or wait.
                Poll::Pending if before > start => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
                // An error after some data: hand over the data now, the error next time
                // (so a cut connection is never mistaken for the end of the body).
                Poll::Ready(Err(e)) if before > start => {
                    self.failed = Some(e);
                    return Poll::Ready(Ok(()));
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    let eof = buf.filled().len() == before;
                    if eof || buf.remaining() == 0 {
                        return Poll::Ready(Ok(()));
                    }
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for GreedyRead<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use tokio::io::AsyncReadExt;

    /// Gives one scripted step per read: data, "nothing yet", or an error.
    struct Script(VecDeque<Option<io::Result<Vec<u8>>>>);

    impl AsyncRead for Script {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            match self.0.pop_front() {
                None => Poll::Ready(Ok(())),
                Some(None) => {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
                Some(Some(Ok(d))) => {
                    buf.put_slice(&d);
                    Poll::Ready(Ok(()))
                }
                Some(Some(Err(e))) => Poll::Ready(Err(e)),
            }
        }
    }

    #[tokio::test]
    async fn reads_everything_ready_and_defers_an_error_past_the_data() {
        let steps = vec![
            Some(Ok(b"ab".to_vec())),
            Some(Ok(b"cd".to_vec())),
            None,
            Some(Ok(b"ef".to_vec())),
            Some(Err(io::Error::new(io::ErrorKind::ConnectionReset, "reset"))),
        ];
        let mut r = GreedyRead::new(Script(steps.into_iter().collect()));
        let mut buf = [0u8; 64];
        let n = r.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"abcd", "both ready chunks in one read");
        let n = r.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"ef");
        let err = r.read(&mut buf).await.unwrap_err();
        assert_eq!(
            err.kind(),
            io::ErrorKind::ConnectionReset,
            "never a clean end"
        );
    }
}
