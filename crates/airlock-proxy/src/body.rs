//! The response body as the client sees it: capped at the size limit, scrubbed of echoed
//! secret values, counted, and reported once when it ends.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::BodyExt;

use crate::secrets::StreamScrubber;

/// Error type of bodies the proxy sends.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Body type of every response the proxy sends.
pub type ProxyBody = http_body_util::combinators::BoxBody<Bytes, BoxError>;

/// A complete body.
pub fn full(data: impl Into<Bytes>) -> ProxyBody {
    http_body_util::Full::new(data.into())
        .map_err(|never| match never {})
        .boxed()
}

/// How a streamed body ended.
#[derive(Debug, Clone, Default)]
pub struct BodyOutcome {
    pub bytes: u64,
    pub truncated: bool,
    pub scrubbed: usize,
    pub error: Option<String>,
}

type OnDone = Box<dyn FnOnce(BodyOutcome) + Send + Sync>;

/// Wraps the upstream body.
pub struct CappedBody<B> {
    inner: B,
    cap: u64,
    outcome: BodyOutcome,
    scrub: Option<StreamScrubber>,
    /// Set after the capped slice was sent: the next poll fails, so the client cannot
    /// mistake a cut body for a complete one.
    cut: bool,
    done: bool,
    on_done: Option<OnDone>,
}

impl<B> CappedBody<B> {
    pub fn new(inner: B, cap: u64, scrub: Option<StreamScrubber>, on_done: OnDone) -> Self {
        CappedBody {
            inner,
            cap,
            outcome: BodyOutcome::default(),
            scrub,
            cut: false,
            done: false,
            on_done: Some(on_done),
        }
    }

    fn report(&mut self) {
        if let Some(f) = self.on_done.take() {
            if let Some(s) = &self.scrub {
                self.outcome.scrubbed = s.replaced();
            }
            f(self.outcome.clone());
        }
    }

    /// Pass `data` on, cutting it at the cap.
    fn emit(&mut self, data: Bytes) -> Option<Bytes> {
        let room = self.cap - self.outcome.bytes;
        if data.len() as u64 > room {
            self.outcome.truncated = true;
            self.cut = true;
            self.outcome.bytes = self.cap;
            self.report();
            return Some(data.slice(..room as usize)).filter(|d| !d.is_empty());
        }
        self.outcome.bytes += data.len() as u64;
        Some(data).filter(|d| !d.is_empty())
    }
}

impl<B> Body for CappedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if this.cut {
                this.cut = false;
                this.done = true;
                return Poll::Ready(Some(Err(format!(
                    "response body cut at the {}-byte cap",
                    this.cap
                )
                .into())));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else {
                        continue; // trailers are dropped: they could carry echoed values
                    };
                    let data = match &mut this.scrub {
                        Some(s) => s.push(data),
                        None => data,
                    };
                    if let Some(d) = this.emit(data) {
                        return Poll::Ready(Some(Ok(Frame::data(d))));
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    let e: BoxError = e.into();
                    this.outcome.error = Some(e.to_string());
                    this.done = true;
                    this.report();
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => {
                    let tail = this.scrub.as_mut().map(|s| s.finish()).unwrap_or_default();
                    let out = this.emit(tail);
                    if !this.cut {
                        this.done = true;
                        this.report();
                    }
                    match out {
                        Some(d) => return Poll::Ready(Some(Ok(Frame::data(d)))),
                        None => continue,
                    }
                }
            }
        }
    }
}

impl<B> Drop for CappedBody<B> {
    fn drop(&mut self) {
        if self.on_done.is_some() {
            self.outcome
                .error
                .get_or_insert_with(|| "client went away".into());
            self.report();
        }
    }
}
