//! Typed provider failures, each with a message that says what to fix.
//!
//! Every string that came from the provider or the network passes through [`Redactor`] before
//! it lands in an error, so an API key echoed back in an error body never reaches a log.

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};

use super::config::ProviderKind;

/// Why a model call failed. The turn ends; the conversation state the caller holds is intact.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// 401/403: the key is missing, wrong or lacks access.
    #[error("{provider} rejected the API key (HTTP {status}): {detail}\nhelp: check the key in the secrets store (`api_key_secret` under `[provider]`) or AIRLOCK_API_KEY, and that it belongs to {provider}")]
    Auth {
        /// Protocol spoken.
        provider: ProviderKind,
        /// HTTP status.
        status: u16,
        /// Provider's explanation.
        detail: String,
    },
    /// The provider does not know the model.
    #[error("{provider} does not know the model `{model}` (HTTP {status}): {detail}\nhelp: set `model` under `[provider]` (or AIRLOCK_MODEL) to a model this endpoint serves; for Ollama, pull it first")]
    UnknownModel {
        /// Protocol spoken.
        provider: ProviderKind,
        /// Model that was asked for.
        model: String,
        /// HTTP status.
        status: u16,
        /// Provider's explanation.
        detail: String,
    },
    /// 429 on every attempt.
    #[error("{provider} is rate limiting requests (HTTP 429 on {attempts} attempt(s){}): {detail}\nhelp: wait and retry the turn, lower the request rate, or raise the rate limit of your account", retry_after_text(*.retry_after))]
    RateLimited {
        /// Protocol spoken.
        provider: ProviderKind,
        /// Attempts made.
        attempts: u32,
        /// The last `retry-after` the provider sent.
        retry_after: Option<Duration>,
        /// Provider's explanation.
        detail: String,
    },
    /// 5xx on every attempt.
    #[error("{provider} failed with HTTP {status} on {attempts} attempt(s): {detail}\nhelp: the provider is having trouble; retry later, or check the server logs for a self-hosted endpoint")]
    Server {
        /// Protocol spoken.
        provider: ProviderKind,
        /// Last HTTP status.
        status: u16,
        /// Attempts made.
        attempts: u32,
        /// Provider's explanation.
        detail: String,
    },
    /// Another 4xx: the provider refused the request itself.
    #[error("{provider} refused the request (HTTP {status}): {detail}\nhelp: the request was not accepted as sent; check `model`, `max_tokens` and `base_url` under `[provider]`")]
    Rejected {
        /// Protocol spoken.
        provider: ProviderKind,
        /// HTTP status.
        status: u16,
        /// Provider's explanation.
        detail: String,
    },
    /// The endpoint could not be reached.
    #[error("cannot reach {provider} at {url} after {attempts} attempt(s): {detail}\nhelp: check `base_url` under `[provider]` (or AIRLOCK_BASE_URL) and that the server is running")]
    Connect {
        /// Protocol spoken.
        provider: ProviderKind,
        /// Endpoint URL.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// What failed.
        detail: String,
    },
    /// Nothing arrived in time.
    #[error("{provider} did not answer within {}s while {phase}\nhelp: the model or server is slow or stuck; retry, or raise the provider timeout", .after.as_secs_f64())]
    Timeout {
        /// Protocol spoken.
        provider: ProviderKind,
        /// The limit that was hit.
        after: Duration,
        /// What the client was waiting for.
        phase: &'static str,
    },
    /// The response could not be understood.
    #[error("{provider} sent a response Airlock cannot read: {detail}\nhelp: check that `kind` under `[provider]` matches the protocol the endpoint speaks (\"anthropic\" or \"openai\") and that `base_url` points at the API, not a web page")]
    Malformed {
        /// Protocol spoken.
        provider: ProviderKind,
        /// What was wrong.
        detail: String,
    },
    /// The streamed response ended before its final event.
    #[error("{provider} closed the stream before the response was complete: {detail}\nhelp: the connection dropped mid-answer; retry the turn (nothing from the partial answer was kept)")]
    TruncatedStream {
        /// Protocol spoken.
        provider: ProviderKind,
        /// What was missing.
        detail: String,
    },
    /// The provider reported an error inside an otherwise successful response or stream.
    #[error("{provider} reported an error: {kind}: {message}\nhelp: if this repeats, check the provider's status page or server logs")]
    Reported {
        /// Protocol spoken.
        provider: ProviderKind,
        /// Error type as the provider named it.
        kind: String,
        /// Provider's explanation.
        message: String,
    },
    /// The HTTP client could not be built (for example the TLS roots failed to load).
    #[error("cannot set up the HTTP client for {provider}: {detail}")]
    Client {
        /// Protocol spoken.
        provider: ProviderKind,
        /// What failed.
        detail: String,
    },
}

fn retry_after_text(d: Option<Duration>) -> String {
    match d {
        Some(d) => format!(", retry-after {}s", d.as_secs()),
        None => String::new(),
    }
}

impl ProviderError {
    /// Whether another attempt may succeed without any change by the operator.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ProviderError::RateLimited { .. }
                | ProviderError::Server { .. }
                | ProviderError::Connect { .. }
                | ProviderError::Timeout { .. }
                | ProviderError::TruncatedStream { .. }
        )
    }
}

/// Longest provider-supplied text kept in an error.
const MAX_DETAIL_CHARS: usize = 400;

/// Scrubs provider-supplied text before it goes into an error: removes the API key wherever
/// it appears, replaces control characters, and bounds the length.
#[derive(Clone)]
pub struct Redactor {
    key: Option<SecretString>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Redactor")
    }
}

impl Redactor {
    /// A redactor for this key.
    pub fn new(key: Option<SecretString>) -> Redactor {
        Redactor { key }
    }

    /// Returns `text` safe to show: key removed, control characters replaced, at most
    /// a few hundred characters.
    pub fn clean(&self, text: &str) -> String {
        let mut text = text.to_string();
        if let Some(key) = &self.key {
            // The header carries the trimmed key, so that is the form a server can echo.
            let key = key.expose_secret().trim();
            // A very short "key" would redact ordinary words; real keys are long.
            if key.len() >= 4 {
                text = text.replace(key, "[REDACTED]");
            }
        }
        let mut out = String::new();
        for (count, c) in text.chars().enumerate() {
            if count == MAX_DETAIL_CHARS {
                out.push('…');
                break;
            }
            out.push(if c.is_control() && c != '\n' {
                '\u{fffd}'
            } else {
                c
            });
        }
        let out = out.trim().replace('\n', " ");
        if out.is_empty() {
            "(no details given)".to_string()
        } else {
            out
        }
    }

    /// Text from raw bytes (lossy UTF-8), cleaned.
    pub fn clean_bytes(&self, bytes: &[u8]) -> String {
        self.clean(&String::from_utf8_lossy(bytes))
    }
}
