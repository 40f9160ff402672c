//! The page's connections: how many it holds at once, how many of them one address may
//! hold, and how long a client may take over a request's headers. Anyone who reaches the
//! port can connect without a login, so each of these is bounded before a byte of HTTP is
//! read:
//!
//! - **A slot per connection** ([`Slots`]), taken when it is accepted and given back when
//!   it closes: at most `[web] max_connections` at once, and at most [`PER_ADDRESS`] of
//!   them from one address (an IPv6 address by its /64, as [`super::reads`] counts), so
//!   one address cannot take every slot. A connection past either is refused, never
//!   queued: on plain HTTP with a `503` saying which limit, sent once its request's head
//!   is read or [`REFUSAL_WAIT`] has passed (by at most [`REFUSERS`] tasks at once; past
//!   them it is closed), under TLS by closing it at once (a handshake would cost more
//!   than the refusal saves). Refusals are counted, and only
//!   the 1st, 2nd, 4th, 8th … of each limit are logged and recorded, so a flood leaves a
//!   few dozen records, not one synced record per connection.
//! - **Deadlines**: the TLS handshake within [`super::tls::HANDSHAKE_DEADLINE`], then each
//!   request's headers within [`HEADER_READ_TIMEOUT`] of the connection being ready for
//!   them, which is also how long a kept-alive connection may sit idle between requests
//!   (hyper's `header_read_timeout`, which runs only while a request's head is awaited),
//!   and its body within [`BODY_READ_TIMEOUT`] ([`body_within_deadline`]). An answer
//!   being written is not timed, so an event stream (`stream.rs`, `live.rs`) lasts as
//!   long as its login does.
//!
//! Written here rather than with `axum::serve`, which takes every connection it is given
//! and sets no deadline on reading a request.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper::service::Service as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use super::reads::{self, Peer};

/// Connections held at once unless `[web] max_connections` says otherwise: far more than
/// the owner's browsers open (a browser opens at most six to one page, event streams
/// included), and far fewer than the host's file descriptors.
pub const DEFAULT_MAX_CONNECTIONS: usize = 128;
/// The fewest `[web] max_connections` may be: a browser opens several connections to one
/// page at once, and the page's own files would be refused below it.
pub const MIN_MAX_CONNECTIONS: usize = 8;
/// The most `[web] max_connections` may be: each connection is a file descriptor.
pub const MAX_MAX_CONNECTIONS: usize = 16384;
/// Connections one address may hold (within `max_connections`).
pub const PER_ADDRESS: usize = 16;
/// How long a client may take to send a request's headers, counted from when the
/// connection is ready for them (after the TLS handshake, or after the last answer on a
/// kept-alive connection).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a request's body may take to arrive once its headers have: the page's
/// bodies are forms of at most [`MAX_BODY`].
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest request body the page takes.
pub const MAX_BODY: usize = 64 * 1024;
/// Refused plain-HTTP connections being answered at once; a connection refused past them
/// is closed without an answer, so refusing never holds more than these descriptors.
pub const REFUSERS: usize = 32;
/// How long a refused connection's request head is waited for, and then its answer's
/// sending: an HTTP client sent an answer before its request may take it for a broken
/// connection and never show it.
pub const REFUSAL_WAIT: Duration = Duration::from_secs(1);

/// Which limit refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Full {
    /// `[web] max_connections` are open.
    Page,
    /// [`PER_ADDRESS`] are open from its address.
    Address,
}

impl Full {
    /// The limit's name, in the log and the audit record.
    pub fn reason(self) -> &'static str {
        match self {
            Full::Page => "web.max_connections",
            Full::Address => "connections per address",
        }
    }
}

/// The slots connections take.
pub struct Slots {
    max: usize,
    per_address: usize,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

/// A connection's place under the limits; given back when dropped.
pub struct Slot {
    slots: Arc<Slots>,
    address: IpAddr,
}

impl Slots {
    /// At most `max` connections, [`PER_ADDRESS`] of them (or `max`, if fewer) from one
    /// address.
    pub fn new(max: usize) -> Arc<Slots> {
        Arc::new(Slots {
            max,
            per_address: PER_ADDRESS.min(max),
            held: Mutex::new(Held::default()),
        })
    }

    /// A slot for a connection from `ip`, or the limit that refuses it.
    pub fn take(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Full> {
        let address = reads::address_key(ip);
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.total >= self.max {
            return Err(Full::Page);
        }
        let mine = held.by_address.entry(address).or_default();
        if *mine >= self.per_address {
            return Err(Full::Address);
        }
        *mine += 1;
        held.total += 1;
        Ok(Slot {
            slots: self.clone(),
            address,
        })
    }

    /// The refusal a plain-HTTP client is sent, saying which limit.
    fn refusal(&self, why: Full) -> Vec<u8> {
        let body = match why {
            Full::Page => format!(
                "too many connections to this page: {} are open (web.max_connections = {}); try again in a few seconds\nhelp: close other tabs of the page, or raise web.max_connections in airlock.toml\n",
                self.max, self.max
            ),
            Full::Address => format!(
                "too many connections from your address: {} are open, the most one address may hold (of web.max_connections = {}); try again in a few seconds\nhelp: close other tabs of the page\n",
                self.per_address, self.max
            ),
        };
        format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nretry-after: 5\r\ncache-control: no-store\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.slots.held.lock().unwrap_or_else(|p| p.into_inner());
        held.total = held.total.saturating_sub(1);
        if let Some(n) = held.by_address.get_mut(&self.address) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                // Addresses are chosen by whoever connects: keep only those holding a slot.
                held.by_address.remove(&self.address);
            }
        }
    }
}

/// Accept on `listener` for as long as the page is served, and serve `app` on each
/// connection that gets a slot (shaking hands with `tls` first, when given).
/// `refused(limit, count)` is called for the refusals to record.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<TlsAcceptor>,
    slots: Arc<Slots>,
    refused: impl Fn(Full, u64) + Send + 'static,
) {
    let mut refusals = crate::sampled_refusals::SampledRefusals::default();
    let refusers = Arc::new(tokio::sync::Semaphore::new(REFUSERS));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of descriptors and the like: wait, as axum's own listener does.
                tracing::warn!(error = %e, "web: cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let slot = match slots.take(peer.ip()) {
            Ok(slot) => slot,
            Err(why) => {
                if tls.is_none() {
                    if let Ok(refuser) = refusers.clone().try_acquire_owned() {
                        let answer = slots.refusal(why);
                        tokio::spawn(async move {
                            say_refused(stream, &answer).await;
                            drop(refuser);
                        });
                    }
                }
                if let Some(count) = refusals.count(why) {
                    tracing::warn!(%peer, limit = why.reason(), count, "web: refused a connection past a limit");
                    refused(why, count);
                }
                continue;
            }
        };
        let app = app.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            // Held for as long as the connection lives, handshake included.
            let _slot = slot;
            let Some(acceptor) = tls else {
                return http(stream, app, peer).await;
            };
            match tokio::time::timeout(super::tls::HANDSHAKE_DEADLINE, acceptor.accept(stream))
                .await
            {
                Ok(Ok(tls)) => http(tls, app, peer).await,
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "web: a TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "web: a TLS handshake took too long"),
            }
        });
    }
}

/// Send a refused plain-HTTP connection its `503`: after its request's head (or
/// [`REFUSAL_WAIT`]), and reading what else it sends for as long again, so that closing
/// it does not reset the answer away before the client reads it.
async fn say_refused(mut stream: TcpStream, answer: &[u8]) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    let _ = tokio::time::timeout(REFUSAL_WAIT, async {
        while let Ok(n @ 1..) = stream.read(&mut buf).await {
            head.extend_from_slice(&buf[..n]);
            if head.len() > 16 * 1024 || head.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    })
    .await;
    let sent = async {
        stream.write_all(answer).await?;
        stream.shutdown().await
    };
    if let Ok(Ok(())) = tokio::time::timeout(REFUSAL_WAIT, sent).await {
        let _ = tokio::time::timeout(REFUSAL_WAIT, async {
            while let Ok(1..) = stream.read(&mut buf).await {}
        })
        .await;
    }
}

/// Read a request's body (at most [`MAX_BODY`]) within [`BODY_READ_TIMEOUT`] before the
/// page sees it, so a client cannot hold its connection by sending the body a byte at a
/// time: past the deadline the answer is `408` and the connection is closed.
pub async fn body_within_deadline(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{header, HeaderValue, StatusCode};
    use axum::response::IntoResponse;
    let (parts, body) = request.into_parts();
    let read = tokio::time::timeout(BODY_READ_TIMEOUT, axum::body::to_bytes(body, MAX_BODY));
    let refused = match read.await {
        Ok(Ok(body)) => {
            let request = axum::extract::Request::from_parts(parts, axum::body::Body::from(body));
            return next.run(request).await;
        }
        Ok(Err(e)) => (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request's body cannot be read, or is longer than {MAX_BODY} bytes: {e}"),
        ),
        Err(_) => (
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request's body did not arrive within {} s\nhelp: send it again",
                BODY_READ_TIMEOUT.as_secs()
            ),
        ),
    };
    let mut answer = refused.into_response();
    answer
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    answer
}

/// Serve `app` over one connection, with the deadline on each request's headers; `peer`
/// is the address [`super::guard`] counts reads by before a login.
async fn http<I>(io: I, app: Router, peer: SocketAddr)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let app = TowerToHyperService::new(app);
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request
            .extensions_mut()
            .insert(ConnectInfo(Peer(peer.ip())));
        app.call(request)
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    if let Err(e) = http.serve_connection(TokioIo::new(io), service).await {
        tracing::debug!(%peer, error = %e, "web: a connection ended");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_takes_at_most_its_share_and_slots_come_back() {
        let slots = Slots::new(20);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let mine: Vec<Slot> = (0..PER_ADDRESS).map(|_| slots.take(a).unwrap()).collect();
        assert_eq!(slots.take(a).err(), Some(Full::Address));
        // An IPv6 address counts by its /64.
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
        let theirs: Vec<Slot> = (0..4)
            .map(|i| slots.take(v6(&format!("2001:db8::{i}"))).unwrap())
            .collect();
        assert_eq!(slots.take(v6("2001:db8::ff")).err(), Some(Full::Page));
        assert_eq!(slots.take(v6("2001:db9::1")).err(), Some(Full::Page));
        drop(theirs);
        assert!(slots.take(v6("2001:db9::1")).is_ok());
        drop(mine);
        assert!(slots.take(a).is_ok());
        assert!(slots.held.lock().unwrap().by_address.is_empty());
    }

    #[test]
    fn a_limit_below_the_share_is_the_share() {
        let slots = Slots::new(MIN_MAX_CONNECTIONS);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let _all: Vec<Slot> = (0..MIN_MAX_CONNECTIONS)
            .map(|_| slots.take(a).unwrap())
            .collect();
        assert_eq!(slots.take(a).err(), Some(Full::Page));
    }

    #[test]
    fn the_refusal_names_the_limit() {
        let slots = Slots::new(40);
        let page = String::from_utf8(slots.refusal(Full::Page)).unwrap();
        assert!(page.starts_with("HTTP/1.1 503 "), "{page}");
        assert!(page.contains("web.max_connections = 40"), "{page}");
        let (head, body) = page.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let one = String::from_utf8(slots.refusal(Full::Address)).unwrap();
        assert!(one.contains("from your address"), "{one}");
    }
}
