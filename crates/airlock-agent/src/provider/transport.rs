//! The HTTP layer both protocols share: one POST with bounded retries, exponential backoff
//! with jitter and `retry-after`, status classification, bounded body reads, and a
//! server-sent-events reader with an idle timeout.

use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures_util::{Stream, StreamExt};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use reqwest::StatusCode;
use secrecy::{ExposeSecret, SecretString};

use super::config::{ProviderConfig, ProviderKind, RetryPolicy};
use super::error::{ProviderError, Redactor};

/// Largest response body (or total streamed bytes) accepted from a provider. Model answers
/// are far smaller; the bound keeps a hostile endpoint from exhausting memory.
pub(crate) const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// How the API key travels.
pub(crate) enum KeyHeader {
    /// `x-api-key: KEY` (Anthropic).
    XApiKey,
    /// `Authorization: Bearer KEY` (OpenAI and compatibles).
    Bearer,
}

/// One endpoint, ready to post to.
pub(crate) struct Transport {
    pub(crate) kind: ProviderKind,
    client: reqwest::Client,
    url: String,
    headers: HeaderMap,
    timeout: Duration,
    retry: RetryPolicy,
    pub(crate) redactor: Redactor,
}

impl Transport {
    /// Builds a transport for `config`, posting to `base_url` + `path`.
    pub(crate) fn new(
        config: &ProviderConfig,
        path: &str,
        key_header: KeyHeader,
        mut headers: HeaderMap,
    ) -> Result<Transport, ProviderError> {
        let kind = config.kind;
        let redactor = Redactor::new(config.api_key.clone());
        let client_err = |detail: String| ProviderError::Client {
            provider: kind,
            detail: redactor.clean(&detail),
        };
        config.validate().map_err(|e| client_err(e.to_string()))?;
        if let Some(key) = &config.api_key {
            let (name, value) = match key_header {
                KeyHeader::XApiKey => (HeaderName::from_static("x-api-key"), key_value(key, "")),
                KeyHeader::Bearer => (reqwest::header::AUTHORIZATION, key_value(key, "Bearer ")),
            };
            let value = value.map_err(|()| {
                client_err(
                    "the API key contains characters that cannot go in an HTTP header \
                     (help: check for a stray newline or quote in the stored key)"
                        .to_string(),
                )
            })?;
            headers.insert(name, value);
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let url = format!("{}{}", config.base_url.trim_end_matches('/'), path);
        let is_loopback = url::Url::parse(&url)
            .ok()
            .and_then(|u| u.host().map(|h| host_is_loopback(&h)))
            .unwrap_or(false);
        let mut builder = reqwest::Client::builder()
            // Never follow a redirect: it could carry the key to another host.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(config.timeout);
        if is_loopback {
            builder = builder.no_proxy();
        }
        let client = builder.build().map_err(|e| client_err(e.to_string()))?;
        Ok(Transport {
            kind,
            client,
            url,
            headers,
            timeout: config.timeout,
            retry: config.retry.clone(),
            redactor,
        })
    }

    /// Posts `body`, retrying 429, 5xx and connection failures. Returns a 2xx response whose
    /// body has not been read yet; any other outcome is a typed error.
    pub(crate) async fn post(
        &self,
        body: Vec<u8>,
        model: &str,
    ) -> Result<reqwest::Response, ProviderError> {
        let body = Bytes::from(body);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let last = attempt >= self.retry.max_attempts;
            let request = self
                .client
                .post(&self.url)
                .headers(self.headers.clone())
                .body(body.clone())
                .send();
            let response = match tokio::time::timeout(self.timeout, request).await {
                Err(_) => {
                    return Err(ProviderError::Timeout {
                        provider: self.kind,
                        after: self.timeout,
                        phase: "waiting for the response headers",
                    })
                }
                Ok(Err(e)) => {
                    if last {
                        return Err(ProviderError::Connect {
                            provider: self.kind,
                            url: self.redactor.clean(&self.url),
                            attempts: attempt,
                            detail: self.redactor.clean(&error_chain(&e)),
                        });
                    }
                    tracing::debug!(attempt, "provider connection failed; retrying");
                    tokio::time::sleep(backoff(&self.retry, attempt, &mut fastrand::Rng::new()))
                        .await;
                    continue;
                }
                Ok(Ok(r)) => r,
            };
            let status = response.status();
            if status.is_success() {
                return Ok(response);
            }
            let retry_after = parse_retry_after(response.headers());
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let raw = self.read_error_body(response).await;
            let retryable = status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error();
            if retryable && !last {
                match retry_after {
                    Some(wait) if wait > self.retry.max_retry_after => {}
                    Some(wait) => {
                        tokio::time::sleep(wait).await;
                        continue;
                    }
                    None => {
                        tokio::time::sleep(backoff(
                            &self.retry,
                            attempt,
                            &mut fastrand::Rng::new(),
                        ))
                        .await;
                        continue;
                    }
                }
            }
            return Err(self.status_error(status, &raw, model, attempt, retry_after, location));
        }
    }

    /// Reads an error body for its message; failures to read give an empty body.
    async fn read_error_body(&self, response: reqwest::Response) -> Vec<u8> {
        // Error bodies are short; 64 KiB is plenty for the message.
        match tokio::time::timeout(self.timeout, read_limited(response, 64 * 1024)).await {
            Ok(Ok(b)) | Ok(Err(ReadError::TooLarge(b))) => b,
            _ => Vec::new(),
        }
    }

    fn status_error(
        &self,
        status: StatusCode,
        raw: &[u8],
        model: &str,
        attempts: u32,
        retry_after: Option<Duration>,
        location: Option<String>,
    ) -> ProviderError {
        let message = error_message(raw);
        let detail = self.redactor.clean(&message);
        let provider = self.kind;
        let code = status.as_u16();
        match code {
            401 | 403 => ProviderError::Auth {
                provider,
                status: code,
                detail,
            },
            429 => ProviderError::RateLimited {
                provider,
                attempts,
                retry_after,
                detail,
            },
            500..=599 => ProviderError::Server {
                provider,
                status: code,
                attempts,
                detail,
            },
            300..=399 => ProviderError::Rejected {
                provider,
                status: code,
                detail: self.redactor.clean(&format!(
                    "redirected to {} (redirects are not followed, so the key cannot leak to another host); set base_url to the final address",
                    location.as_deref().unwrap_or("(no location)")
                )),
            },
            _ if code == 404 || mentions_unknown_model(&message) => ProviderError::UnknownModel {
                provider,
                model: self.redactor.clean(model),
                status: code,
                detail,
            },
            _ => ProviderError::Rejected {
                provider,
                status: code,
                detail,
            },
        }
    }

    /// Reads a whole (non-streamed) body within the timeout and size bound.
    pub(crate) async fn read_body(
        &self,
        response: reqwest::Response,
    ) -> Result<Vec<u8>, ProviderError> {
        match tokio::time::timeout(self.timeout, read_limited(response, MAX_RESPONSE_BYTES)).await {
            Err(_) => Err(ProviderError::Timeout {
                provider: self.kind,
                after: self.timeout,
                phase: "reading the response body",
            }),
            Ok(Err(ReadError::TooLarge(_))) => Err(ProviderError::Malformed {
                provider: self.kind,
                detail: format!("the response is larger than {MAX_RESPONSE_BYTES} bytes"),
            }),
            Ok(Err(ReadError::Transport(e))) => Err(ProviderError::TruncatedStream {
                provider: self.kind,
                detail: self.redactor.clean(&format!(
                    "the connection failed while reading the body: {}",
                    error_chain(&e)
                )),
            }),
            Ok(Ok(b)) => Ok(b),
        }
    }

    /// Turns a streamed response into an event reader.
    pub(crate) fn events(&self, response: reqwest::Response) -> SseReader<'_> {
        let mut total = 0usize;
        let bytes = response.bytes_stream().map(move |chunk| {
            let chunk = chunk.map_err(StreamFailure::Transport)?;
            total += chunk.len();
            if total > MAX_RESPONSE_BYTES {
                return Err(StreamFailure::TooLarge);
            }
            Ok(chunk)
        });
        SseReader {
            transport: self,
            inner: Box::pin(bytes.eventsource()),
            saw_event: false,
        }
    }
}

/// Why a streamed body stopped delivering bytes.
#[derive(Debug)]
pub(crate) enum StreamFailure {
    Transport(reqwest::Error),
    TooLarge,
}

impl std::fmt::Display for StreamFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamFailure::Transport(e) => f.write_str(&error_chain(e)),
            StreamFailure::TooLarge => write!(f, "more than {MAX_RESPONSE_BYTES} bytes streamed"),
        }
    }
}

type EventStream =
    Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<StreamFailure>>> + Send>>;

/// Reads server-sent events one at a time, each within the idle timeout.
pub(crate) struct SseReader<'t> {
    transport: &'t Transport,
    inner: EventStream,
    saw_event: bool,
}

impl SseReader<'_> {
    /// The next event, `Ok(None)` at a clean end of the body.
    pub(crate) async fn next(&mut self) -> Result<Option<Event>, ProviderError> {
        let t = self.transport;
        let item = match tokio::time::timeout(t.timeout, self.inner.next()).await {
            Err(_) => {
                return Err(ProviderError::Timeout {
                    provider: t.kind,
                    after: t.timeout,
                    phase: "waiting for the next part of the stream",
                })
            }
            Ok(item) => item,
        };
        match item {
            None => Ok(None),
            Some(Ok(event)) => {
                self.saw_event = true;
                Ok(Some(event))
            }
            Some(Err(EventStreamError::Transport(StreamFailure::TooLarge))) => {
                Err(ProviderError::Malformed {
                    provider: t.kind,
                    detail: format!("the stream is larger than {MAX_RESPONSE_BYTES} bytes"),
                })
            }
            Some(Err(EventStreamError::Transport(e))) => Err(ProviderError::TruncatedStream {
                provider: t.kind,
                detail: t
                    .redactor
                    .clean(&format!("the connection failed mid-stream: {e}")),
            }),
            Some(Err(EventStreamError::Utf8(_))) => Err(ProviderError::Malformed {
                provider: t.kind,
                detail: "the stream is not valid UTF-8".to_string(),
            }),
            Some(Err(EventStreamError::Parser(e))) => Err(ProviderError::Malformed {
                provider: t.kind,
                detail: t
                    .redactor
                    .clean(&format!("the stream is not server-sent events: {e}")),
            }),
        }
    }

    /// The error for a body that ended before the protocol's final event: truncated if any
    /// event arrived, otherwise the body was never an event stream at all.
    pub(crate) fn ended_early(&self, missing: &str) -> ProviderError {
        if self.saw_event {
            ProviderError::TruncatedStream {
                provider: self.transport.kind,
                detail: format!("the stream ended without {missing}"),
            }
        } else {
            ProviderError::Malformed {
                provider: self.transport.kind,
                detail: "the response body holds no server-sent events".to_string(),
            }
        }
    }
}

enum ReadError {
    Transport(reqwest::Error),
    TooLarge(Vec<u8>),
}

async fn read_limited(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, ReadError> {
    let mut out = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(ReadError::Transport)? {
        let room = limit - out.len();
        if chunk.len() > room {
            out.extend_from_slice(&chunk[..room]);
            return Err(ReadError::TooLarge(out));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

fn key_value(key: &SecretString, prefix: &str) -> Result<HeaderValue, ()> {
    let mut value = HeaderValue::from_str(&format!("{prefix}{}", key.expose_secret().trim()))
        .map_err(|_| ())?;
    // Keeps the value out of reqwest/hyper debug output.
    value.set_sensitive(true);
    Ok(value)
}

fn host_is_loopback(host: &url::Host<&str>) -> bool {
    match host {
        url::Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
        url::Host::Ipv4(ip) => ip.is_loopback(),
        url::Host::Ipv6(ip) => ip.is_loopback(),
    }
}

/// Backoff before attempt `attempt + 1`: "full jitter" over an exponentially growing window,
/// so many clients that failed together do not retry together.
pub(crate) fn backoff(policy: &RetryPolicy, attempt: u32, rng: &mut fastrand::Rng) -> Duration {
    let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
    let window = policy
        .base_delay
        .saturating_mul(factor)
        .min(policy.max_delay);
    let millis = window.as_millis().min(u64::MAX as u128) as u64;
    // At least half the window, so retries never hammer the endpoint back to back.
    Duration::from_millis(millis / 2 + rng.u64(0..=millis / 2))
}

/// `retry-after` as seconds (HTTP dates are rare from model APIs and are ignored).
fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    let secs: f64 = value.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(86_400.0)))
}

/// The error message in a provider error body, whatever its shape:
/// `{"error":{"message":…}}` (OpenAI, Anthropic, vLLM), `{"error":"…"}` (Ollama),
/// `{"message":…}`, or plain text.
pub(crate) fn error_message(raw: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(raw) {
        let error = v.get("error");
        let message = error
            .and_then(|e| e.get("message"))
            .or_else(|| error.filter(|e| e.is_string()))
            .or_else(|| v.get("message"))
            .or_else(|| v.get("detail"))
            .and_then(|m| m.as_str());
        if let Some(m) = message {
            let kind = error
                .and_then(|e| e.get("type").or_else(|| e.get("code")))
                .and_then(|t| t.as_str());
            return match kind {
                Some(k) => format!("{k}: {m}"),
                None => m.to_string(),
            };
        }
    }
    String::from_utf8_lossy(raw).into_owned()
}

/// Some servers answer an unknown model with 400 rather than 404.
fn mentions_unknown_model(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("model_not_found")
        || (m.contains("model")
            && (m.contains("not found") || m.contains("does not exist") || m.contains("unknown")))
}

/// An error with its causes, e.g. "error sending request: connection refused".
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_bounded() {
        let policy = RetryPolicy {
            max_attempts: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1000),
            max_retry_after: Duration::from_secs(1),
        };
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..100 {
            let d1 = backoff(&policy, 1, &mut rng);
            assert!(d1 >= Duration::from_millis(50) && d1 <= Duration::from_millis(100));
            let d3 = backoff(&policy, 3, &mut rng);
            assert!(d3 >= Duration::from_millis(200) && d3 <= Duration::from_millis(400));
            let d9 = backoff(&policy, 9, &mut rng);
            assert!(d9 <= Duration::from_millis(1000) && d9 >= Duration::from_millis(500));
        }
    }

    #[test]
    fn error_message_reads_each_provider_shape() {
        assert_eq!(
            error_message(
                br#"{"type":"error","error":{"type":"not_found_error","message":"model: x"}}"#
            ),
            "not_found_error: model: x"
        );
        assert_eq!(
            error_message(br#"{"error":"model \"x\" not found, try pulling it first"}"#),
            "model \"x\" not found, try pulling it first"
        );
        assert_eq!(
            error_message(br#"{"object":"error","message":"The model `x` does not exist."}"#),
            "The model `x` does not exist."
        );
        assert_eq!(
            error_message(b"\xff\xfe garbage"),
            "\u{fffd}\u{fffd} garbage"
        );
        assert!(mentions_unknown_model("The model `x` does not exist."));
        assert!(!mentions_unknown_model("max_tokens is too large"));
    }
}
