//! Provider configuration: which protocol, which model, where, with which key, and the
//! environment overrides (`AIRLOCK_PROVIDER`, `AIRLOCK_MODEL`, `AIRLOCK_BASE_URL`,
//! `AIRLOCK_API_KEY`).

use std::fmt;
use std::time::Duration;

use secrecy::SecretString;
use serde::{Deserialize, Serialize};

/// The wire protocol a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// The Anthropic Messages API (`POST {base}/v1/messages`).
    Anthropic,
    /// The OpenAI Chat Completions API (`POST {base}/chat/completions`), also spoken by
    /// Ollama, vLLM, llama.cpp's server, LM Studio and OpenRouter.
    Openai,
}

impl ProviderKind {
    /// Parses the `kind` value of `[provider]` or `AIRLOCK_PROVIDER`.
    pub fn parse(s: &str) -> Result<ProviderKind, ConfigError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "anthropic" => Ok(ProviderKind::Anthropic),
            "openai" => Ok(ProviderKind::Openai),
            _ => Err(ConfigError::UnknownKind {
                value: s.to_string(),
            }),
        }
    }

    /// The base URL used when none is configured.
    pub fn default_base_url(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "https://api.anthropic.com",
            ProviderKind::Openai => "https://api.openai.com/v1",
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Openai => "openai",
        })
    }
}

/// How failed requests are retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts, including the first (at least 1).
    pub max_attempts: u32,
    /// Backoff before the second attempt; doubles for each further attempt.
    pub base_delay: Duration,
    /// Upper bound on one backoff.
    pub max_delay: Duration,
    /// The longest `retry-after` the client will wait; a longer one ends the retries at once.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

/// A resolved provider configuration.
///
/// `Debug` never shows the API key: it is a [`SecretString`].
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    /// Which wire protocol.
    pub kind: ProviderKind,
    /// Model name sent with each request.
    pub model: String,
    /// Base URL: for Anthropic the host (`…/v1/messages` is appended), for OpenAI the API root
    /// including `/v1` (`…/chat/completions` is appended).
    pub base_url: String,
    /// The API key. `None` for local servers that need none (Ollama, llama.cpp, LM Studio).
    pub api_key: Option<SecretString>,
    /// Output token cap per call.
    pub max_tokens: u32,
    /// Whether to request streamed responses.
    pub stream: bool,
    /// Longest wait for response headers, for a whole non-streamed body, and between two
    /// chunks of a streamed body.
    pub timeout: Duration,
    /// Retry policy for 429, 5xx and connection failures.
    pub retry: RetryPolicy,
}

/// Default output cap when neither the config file nor the caller sets one.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

impl ProviderConfig {
    /// A configuration with defaults for everything but the protocol and model.
    pub fn new(kind: ProviderKind, model: impl Into<String>) -> ProviderConfig {
        ProviderConfig {
            kind,
            model: model.into(),
            base_url: kind.default_base_url().to_string(),
            api_key: None,
            max_tokens: DEFAULT_MAX_TOKENS,
            stream: true,
            timeout: Duration::from_secs(120),
            retry: RetryPolicy::default(),
        }
    }

    /// Applies environment overrides on top of the configuration from `airlock.toml`
    /// (`base`, with its key already looked up in the secrets store). Without a base, the
    /// environment must name at least the provider and the model.
    pub fn from_env_overrides(
        base: Option<ProviderConfig>,
        env: EnvOverrides,
    ) -> Result<ProviderConfig, ConfigError> {
        let mut config = match base {
            Some(mut c) => {
                if let Some(kind) = env.provider.as_deref() {
                    let kind = ProviderKind::parse(kind)?;
                    if kind != c.kind && env.base_url.is_none() {
                        // Switching protocol without a URL means the old URL is for the
                        // other protocol; use the new protocol's default instead.
                        c.base_url = kind.default_base_url().to_string();
                    }
                    c.kind = kind;
                }
                c
            }
            None => {
                let kind = env.provider.as_deref().ok_or(ConfigError::Missing {
                    key: "kind",
                    env: "AIRLOCK_PROVIDER",
                })?;
                let kind = ProviderKind::parse(kind)?;
                let model = env.model.clone().ok_or(ConfigError::Missing {
                    key: "model",
                    env: "AIRLOCK_MODEL",
                })?;
                ProviderConfig::new(kind, model)
            }
        };
        if let Some(model) = env.model {
            config.model = model;
        }
        if let Some(url) = env.base_url {
            config.base_url = url;
        }
        if let Some(key) = env.api_key {
            config.api_key = Some(key);
        }
        config.validate()?;
        Ok(config)
    }

    /// Checks the fields a request depends on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.model.trim().is_empty() {
            return Err(ConfigError::Missing {
                key: "model",
                env: "AIRLOCK_MODEL",
            });
        }
        let url = url::Url::parse(&self.base_url).map_err(|e| ConfigError::BadBaseUrl {
            value: self.base_url.clone(),
            reason: e.to_string(),
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ConfigError::BadBaseUrl {
                value: self.base_url.clone(),
                reason: format!("scheme `{}` is not http or https", url.scheme()),
            });
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(ConfigError::BadBaseUrl {
                value: "(not shown: it contains credentials)".to_string(),
                reason: "the URL carries a user name or password".to_string(),
            });
        }
        if self.max_tokens == 0 {
            return Err(ConfigError::ZeroMaxTokens);
        }
        if self.retry.max_attempts == 0 {
            return Err(ConfigError::ZeroAttempts);
        }
        Ok(())
    }
}

/// The `[provider]` section of `airlock.toml`, read strictly (unknown keys are errors).
///
/// ```toml
/// [provider]
/// kind = "openai"
/// model = "llama3.1"
/// base_url = "http://127.0.0.1:11434/v1"
/// api_key_secret = "ollama"   # a name in the secrets store, never the key itself
/// max_tokens = 4096
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderSection {
    /// `anthropic` or `openai`.
    pub kind: ProviderKind,
    /// Model name.
    pub model: String,
    /// Endpoint; the protocol's public API when absent.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Name of the secret holding the API key.
    #[serde(default)]
    pub api_key_secret: Option<String>,
    /// Output token cap per call.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Whether to stream responses (default true).
    #[serde(default)]
    pub stream: Option<bool>,
}

impl ProviderSection {
    /// The configuration this section describes, with `api_key` looked up (by the caller)
    /// from the secrets store under [`ProviderSection::api_key_secret`].
    pub fn into_config(self, api_key: Option<SecretString>) -> Result<ProviderConfig, ConfigError> {
        let mut config = ProviderConfig::new(self.kind, self.model);
        if let Some(url) = self.base_url {
            config.base_url = url;
        }
        if let Some(max) = self.max_tokens {
            config.max_tokens = max;
        }
        if let Some(stream) = self.stream {
            config.stream = stream;
        }
        config.api_key = api_key;
        config.validate()?;
        Ok(config)
    }
}

/// The provider settings found in the environment. Build it once at startup.
#[derive(Debug, Default)]
pub struct EnvOverrides {
    /// `AIRLOCK_PROVIDER`.
    pub provider: Option<String>,
    /// `AIRLOCK_MODEL`.
    pub model: Option<String>,
    /// `AIRLOCK_BASE_URL`.
    pub base_url: Option<String>,
    /// `AIRLOCK_API_KEY`.
    pub api_key: Option<SecretString>,
}

impl EnvOverrides {
    /// Reads the overrides through `lookup` (for tests, or a saved environment). Empty values
    /// count as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> EnvOverrides {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        EnvOverrides {
            provider: get("AIRLOCK_PROVIDER"),
            model: get("AIRLOCK_MODEL"),
            base_url: get("AIRLOCK_BASE_URL"),
            api_key: get("AIRLOCK_API_KEY").map(SecretString::from),
        }
    }

    /// Reads the overrides from the process environment and removes `AIRLOCK_API_KEY` from it,
    /// so the key is read exactly once and no child process inherits it.
    ///
    /// Call this at startup, before any other thread exists: changing the environment while
    /// another thread reads it is a data race on some platforms.
    pub fn take_from_process() -> EnvOverrides {
        let overrides = EnvOverrides::from_lookup(|name| std::env::var(name).ok());
        std::env::remove_var("AIRLOCK_API_KEY");
        overrides
    }
}

/// A provider configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A required setting is absent.
    #[error("provider setting `{key}` is not set\nhelp: set `{key}` under `[provider]` in airlock.toml, or the environment variable {env}")]
    Missing {
        /// The `[provider]` key.
        key: &'static str,
        /// The environment variable that overrides it.
        env: &'static str,
    },
    /// `kind` is neither protocol.
    #[error("unknown provider kind `{value}`\nhelp: `kind` (or AIRLOCK_PROVIDER) must be \"anthropic\" or \"openai\"; use \"openai\" for Ollama, vLLM, llama.cpp, LM Studio and OpenRouter")]
    UnknownKind {
        /// What was given.
        value: String,
    },
    /// `base_url` does not parse or has the wrong shape.
    #[error("provider base_url `{value}` is not usable: {reason}\nhelp: give an http(s) URL such as https://api.openai.com/v1 or http://127.0.0.1:11434/v1, and keep keys out of it (use api_key_secret or AIRLOCK_API_KEY)")]
    BadBaseUrl {
        /// The URL (withheld when it contains credentials).
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `max_tokens = 0`.
    #[error("provider max_tokens is 0\nhelp: set `max_tokens` under `[provider]` to a positive number, e.g. 4096")]
    ZeroMaxTokens,
    /// A retry policy with no attempts.
    #[error("provider retry policy allows 0 attempts\nhelp: allow at least 1 attempt")]
    ZeroAttempts,
}
