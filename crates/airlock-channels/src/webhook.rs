//! Signed webhooks, for home-automation and workflow tools: inbound `POST`s to a local
//! listener, outbound `POST`s to a configured URL, both signed with HMAC-SHA256.
//!
//! A request carries `X-Airlock-Timestamp` (Unix seconds) and
//! `X-Airlock-Signature: sha256=<hex>`, the HMAC of `<timestamp>.<body>` under the shared
//! secret. Inbound, a request is taken only when the signature verifies (in constant
//! time), its timestamp is within [`REPLAY_WINDOW`] of now, and the same signature was
//! not taken before within that window; anything else gets a bare 401, which tells a
//! prober nothing. The listener binds where it is told, and the host's default is
//! loopback.
//!
//! Inbound body: `{"chat": "hall", "from": "doorbell", "text": "someone rang"}`, or a press
//! of an earlier card: `{"press": {"chat": …, "from": …, "data": …}}`. Outbound body:
//! `{"chat": …, "text": …}`, and for a card `"buttons": [{"label": …, "data": …}]` too.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use ring::hmac;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::{Card, Channel, ChannelError, ChatId, Inbound, Sender};

const PLATFORM: &str = "webhook";
/// How far a request's timestamp may be from now, either way.
pub const REPLAY_WINDOW: Duration = Duration::from_secs(300);
/// The largest inbound body taken.
pub const MAX_BODY: usize = 64 * 1024;
/// The path inbound requests are posted to.
pub const INBOUND_PATH: &str = "/v1/inbound";
pub const TIMESTAMP_HEADER: &str = "x-airlock-timestamp";
pub const SIGNATURE_HEADER: &str = "x-airlock-signature";

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Now, as a webhook's timestamp (for senders, and for tests that sign requests).
pub fn now_for_tests() -> u64 {
    now_secs()
}

/// The `X-Airlock-Signature` value for `body` sent at `timestamp`.
pub fn signature(key: &[u8], timestamp: u64, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    let mut ctx = hmac::Context::with_key(&key);
    ctx.update(timestamp.to_string().as_bytes());
    ctx.update(b".");
    ctx.update(body);
    let tag = ctx.sign();
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// Why an inbound request was not taken (for the host's log; the caller gets a bare 401).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejected {
    Unsigned,
    BadSignature,
    Stale,
    Replayed,
    Malformed(String),
    TooLarge,
}

impl Rejected {
    /// The reason, without its detail: what refusals are counted by.
    pub fn reason(&self) -> &'static str {
        match self {
            Rejected::Unsigned => "unsigned",
            Rejected::BadSignature => "bad signature",
            Rejected::Stale => "stale",
            Rejected::Replayed => "replayed",
            Rejected::Malformed(_) => "malformed",
            Rejected::TooLarge => "too large",
        }
    }
}

/// Signatures taken within the window (as the tag's bytes, so that one tag spelled in
/// other letters is the same signature): oldest first, and as a set.
type Seen = (VecDeque<(u64, Vec<u8>)>, HashMap<Vec<u8>, u64>);

/// Refusals counted by reason. Anyone who can reach the port can send unsigned posts, so
/// not every refusal becomes a record: only the 1st, 2nd, 4th, 8th … of each reason are
/// kept for the host to record, with the count so far. A flood leaves a few dozen
/// records, not one per post.
#[derive(Default)]
struct Refusals {
    counts: HashMap<&'static str, u64>,
    to_record: Vec<(Rejected, u64)>,
}

impl Refusals {
    fn count(&mut self, why: Rejected) {
        let n = self.counts.entry(why.reason()).or_default();
        *n += 1;
        if n.is_power_of_two() {
            let n = *n;
            self.to_record.push((why, n));
        }
    }
}

struct Inner {
    key: hmac::Key,
    /// Signatures taken within the window, to refuse a replay.
    seen: Mutex<Seen>,
    queue: Mutex<VecDeque<Inbound>>,
    arrived: tokio::sync::Notify,
    rejected: Mutex<Refusals>,
}

impl Inner {
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: u64) -> Result<(), Rejected> {
        let ts = headers
            .get(TIMESTAMP_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let sig = headers
            .get(SIGNATURE_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("sha256="));
        let (Some(ts), Some(sig)) = (ts, sig) else {
            return Err(Rejected::Unsigned);
        };
        let Some(tag) = decode_hex(sig) else {
            return Err(Rejected::BadSignature);
        };
        let mut signed = ts.to_string().into_bytes();
        signed.push(b'.');
        signed.extend_from_slice(body);
        hmac::verify(&self.key, &signed, &tag).map_err(|_| Rejected::BadSignature)?;
        // Only a signed timestamp is worth judging.
        if ts.abs_diff(now) > REPLAY_WINDOW.as_secs() {
            return Err(Rejected::Stale);
        }
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let (order, set) = &mut *seen;
        while order
            .front()
            .is_some_and(|(t, _)| now.saturating_sub(*t) > 2 * REPLAY_WINDOW.as_secs())
        {
            if let Some((_, s)) = order.pop_front() {
                set.remove(&s);
            }
        }
        if set.contains_key(&tag) {
            return Err(Rejected::Replayed);
        }
        set.insert(tag.clone(), now);
        order.push_back((now, tag));
        Ok(())
    }
}

/// The 32 bytes a signature's 64 hex digits spell (either case; nothing but digits: no
/// sign that `from_str_radix` would take).
fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InboundBody {
    chat: Option<String>,
    from: Option<String>,
    text: Option<String>,
    press: Option<PressBody>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PressBody {
    chat: String,
    from: String,
    data: String,
}

fn parse(body: &[u8]) -> Result<Inbound, Rejected> {
    let b: InboundBody =
        serde_json::from_slice(body).map_err(|e| Rejected::Malformed(e.to_string()))?;
    let who = |id: String| Sender {
        display: id.clone(),
        id,
    };
    match b {
        InboundBody {
            press: Some(p),
            chat: None,
            from: None,
            text: None,
        } => Ok(Inbound::Press {
            press_id: String::new(),
            chat: ChatId(p.chat),
            message_id: String::new(),
            from: who(p.from),
            data: p.data,
        }),
        InboundBody {
            press: None,
            chat: Some(chat),
            from: Some(from),
            text: Some(text),
        } if !text.is_empty() => Ok(Inbound::Message {
            chat: ChatId(chat),
            private: true,
            from: who(from),
            text,
            passed_on_from: None,
        }),
        _ => Err(Rejected::Malformed(
            "a body is {\"chat\", \"from\", \"text\"} or {\"press\": {\"chat\", \"from\", \"data\"}}".into(),
        )),
    }
}

async fn inbound(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let taken = if body.len() > MAX_BODY {
        Err(Rejected::TooLarge)
    } else {
        inner
            .verify(&headers, &body, now_secs())
            .and_then(|()| parse(&body))
    };
    match taken {
        Ok(event) => {
            inner
                .queue
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push_back(event);
            inner.arrived.notify_one();
            StatusCode::ACCEPTED
        }
        Err(why) => {
            let code = match why {
                Rejected::Malformed(_) => StatusCode::BAD_REQUEST,
                Rejected::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
                _ => StatusCode::UNAUTHORIZED,
            };
            inner
                .rejected
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .count(why);
            // The host records refusals after each batch: end the wait for one.
            inner.arrived.notify_one();
            code
        }
    }
}

pub struct Webhook {
    inner: Arc<Inner>,
    secret: SecretString,
    outbound: Option<String>,
    http: reqwest::Client,
    local: SocketAddr,
    poll: Duration,
}

impl Webhook {
    /// Listen on `listen` (on the current tokio runtime) for signed requests under
    /// `secret`; replies go to `outbound`, signed the same way (none: replies are dropped).
    pub async fn bind(
        listen: SocketAddr,
        secret: SecretString,
        outbound: Option<String>,
        poll: Duration,
    ) -> Result<Webhook, ChannelError> {
        let unreachable = |why: String| ChannelError::Unreachable {
            platform: PLATFORM,
            why,
        };
        let inner = Arc::new(Inner {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret.expose_secret().as_bytes()),
            seen: Mutex::new((VecDeque::new(), HashMap::new())),
            queue: Mutex::new(VecDeque::new()),
            arrived: tokio::sync::Notify::new(),
            rejected: Mutex::new(Refusals::default()),
        });
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| unreachable(format!("cannot listen on {listen}: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| unreachable(e.to_string()))?;
        let app = Router::new()
            .route(INBOUND_PATH, post(inbound))
            .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY + 1))
            .with_state(inner.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(15))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| unreachable(e.without_url().to_string()))?;
        Ok(Webhook {
            inner,
            secret,
            outbound,
            http,
            local,
            poll,
        })
    }

    /// Where it listens (with the port the system chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Why requests were refused since the last call (for the host's log and records).
    /// The refusals to record since the last call, each with how many of its reason
    /// there have been so far (see [`Refusals`]).
    pub fn take_rejected(&self) -> Vec<(Rejected, u64)> {
        std::mem::take(
            &mut self
                .inner
                .rejected
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .to_record,
        )
    }

    async fn post(&self, method: &'static str, body: Value) -> Result<(), ChannelError> {
        let Some(url) = &self.outbound else {
            return Ok(());
        };
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let ts = now_secs();
        let sig = signature(self.secret.expose_secret().as_bytes(), ts, &bytes);
        let resp = self
            .http
            .post(url)
            .header("content-type", "application/json")
            .header(TIMESTAMP_HEADER, ts.to_string())
            .header(SIGNATURE_HEADER, sig)
            .body(bytes)
            .send()
            .await
            .map_err(|e| ChannelError::Unreachable {
                platform: PLATFORM,
                why: e.without_url().to_string(),
            })?;
        if !resp.status().is_success() {
            return Err(ChannelError::Refused {
                platform: PLATFORM,
                method,
                why: resp.status().to_string(),
            });
        }
        Ok(())
    }
}

#[async_trait]
impl Channel for Webhook {
    fn name(&self) -> &'static str {
        PLATFORM
    }

    async fn next_events(&self) -> Result<Vec<Inbound>, ChannelError> {
        let deadline = tokio::time::Instant::now() + self.poll;
        loop {
            let notified = self.inner.arrived.notified();
            {
                let mut q = self.inner.queue.lock().unwrap_or_else(|p| p.into_inner());
                let refused = !self
                    .inner
                    .rejected
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .to_record
                    .is_empty();
                if !q.is_empty() || refused || tokio::time::Instant::now() >= deadline {
                    return Ok(q.drain(..).collect());
                }
            }
            let _ = tokio::time::timeout_at(deadline, notified).await;
        }
    }

    async fn send(&self, chat: &ChatId, text: &str) -> Result<String, ChannelError> {
        self.post("send", json!({"chat": chat.0, "text": text}))
            .await?;
        Ok(String::new())
    }

    async fn send_card(&self, chat: &ChatId, card: &Card) -> Result<String, ChannelError> {
        let buttons: Vec<Value> = card
            .buttons
            .iter()
            .map(|(label, data)| json!({"label": label, "data": data}))
            .collect();
        self.post(
            "card",
            json!({"chat": chat.0, "text": card.text, "buttons": buttons}),
        )
        .await?;
        Ok(String::new())
    }

    async fn close_card(
        &self,
        chat: &ChatId,
        _message_id: &str,
        text: &str,
    ) -> Result<(), ChannelError> {
        self.post("card closed", json!({"chat": chat.0, "text": text}))
            .await
    }

    async fn answer_press(&self, _press_id: &str, _text: &str) -> Result<(), ChannelError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inner(key: &[u8]) -> Inner {
        Inner {
            key: hmac::Key::new(hmac::HMAC_SHA256, key),
            seen: Mutex::new((VecDeque::new(), HashMap::new())),
            queue: Mutex::new(VecDeque::new()),
            arrived: tokio::sync::Notify::new(),
            rejected: Mutex::new(Refusals::default()),
        }
    }

    fn headers(ts: u64, sig: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(TIMESTAMP_HEADER, ts.to_string().parse().unwrap());
        h.insert(SIGNATURE_HEADER, sig.parse().unwrap());
        h
    }

    #[test]
    fn only_a_fresh_correctly_signed_request_is_taken_once() {
        let i = inner(b"shared-secret");
        let body = br#"{"chat":"hall","from":"doorbell","text":"ring"}"#;
        let now = 1_000_000;
        let good = signature(b"shared-secret", now, body);
        assert_eq!(i.verify(&headers(now, &good), body, now), Ok(()));
        assert_eq!(
            i.verify(&headers(now, &good), body, now + 1),
            Err(Rejected::Replayed)
        );
        // Another key, another body, another timestamp: not this signature.
        let other = signature(b"not-the-secret", now, body);
        assert_eq!(
            i.verify(&headers(now, &other), body, now),
            Err(Rejected::BadSignature)
        );
        assert_eq!(
            i.verify(&headers(now + 1, &good), body, now),
            Err(Rejected::BadSignature)
        );
        assert_eq!(
            i.verify(
                &headers(now, &good),
                br#"{"chat":"hall","from":"doorbell","text":"RING"}"#,
                now
            ),
            Err(Rejected::BadSignature)
        );
        // Signed, but outside the window either way.
        let old = now - REPLAY_WINDOW.as_secs() - 1;
        let stale = signature(b"shared-secret", old, body);
        assert_eq!(
            i.verify(&headers(old, &stale), body, now),
            Err(Rejected::Stale)
        );
        let ahead = now + REPLAY_WINDOW.as_secs() + 1;
        let early = signature(b"shared-secret", ahead, body);
        assert_eq!(
            i.verify(&headers(ahead, &early), body, now),
            Err(Rejected::Stale)
        );
        assert_eq!(
            i.verify(&HeaderMap::new(), body, now),
            Err(Rejected::Unsigned)
        );
        assert_eq!(
            i.verify(&headers(now, "sha256=zz"), body, now),
            Err(Rejected::BadSignature)
        );
    }

    /// One tag in other letters is the same signature: a replay however it is spelled.
    #[test]
    fn a_signature_respelled_is_still_a_replay() {
        let i = inner(b"shared-secret");
        let body = br#"{"chat":"hall","from":"doorbell","text":"ring"}"#;
        let now = 1_000_000;
        let good = signature(b"shared-secret", now, body);
        assert_eq!(i.verify(&headers(now, &good), body, now), Ok(()));
        let upper = format!("sha256={}", good["sha256=".len()..].to_uppercase());
        assert_ne!(upper, good);
        assert_eq!(
            i.verify(&headers(now, &upper), body, now),
            Err(Rejected::Replayed)
        );
        // A digit pair with a sign is no spelling of a byte at all.
        let hex = &good["sha256=".len()..];
        let signed = format!("sha256=+{}{}", &hex[1..2], &hex[2..]);
        assert_eq!(
            i.verify(&headers(now, &signed), body, now),
            Err(Rejected::BadSignature)
        );
    }

    /// A flood of refusals is counted, and only a log of them is kept to record.
    #[test]
    fn refusals_are_kept_to_record_a_log_of_times() {
        let mut r = Refusals::default();
        for _ in 0..1000 {
            r.count(Rejected::Unsigned);
        }
        r.count(Rejected::TooLarge);
        let kept: Vec<(&str, u64)> = r.to_record.iter().map(|(w, n)| (w.reason(), *n)).collect();
        let mut expected: Vec<(&str, u64)> = (0..10).map(|k| ("unsigned", 1 << k)).collect();
        expected.push(("too large", 1));
        assert_eq!(kept, expected);
    }

    #[test]
    fn a_body_is_a_message_or_a_press_and_nothing_else() {
        assert!(matches!(
            parse(br#"{"chat":"c","from":"f","text":"t"}"#),
            Ok(Inbound::Message { .. })
        ));
        assert!(matches!(
            parse(br#"{"press":{"chat":"c","from":"f","data":"a:1:2"}}"#),
            Ok(Inbound::Press { .. })
        ));
        for bad in [
            &br#"{"chat":"c","from":"f"}"#[..],
            br#"{"chat":"c","from":"f","text":""}"#,
            br#"{"chat":"c","from":"f","text":"t","extra":1}"#,
            br#"not json"#,
        ] {
            assert!(matches!(parse(bad), Err(Rejected::Malformed(_))), "{bad:?}");
        }
    }
}
