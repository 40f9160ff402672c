//! Language-model providers: one trait, two wire protocols.
//!
//! The agent loop holds the conversation and calls [`Provider::complete`] once per model
//! turn. A failed call returns a typed [`ProviderError`] and changes nothing the caller holds,
//! so a turn that fails loses no session state.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use airlock_agent::provider::{connect, EnvOverrides, Message, ProviderConfig, StreamEvent};
//!
//! let config = ProviderConfig::from_env_overrides(None, EnvOverrides::take_from_process())?;
//! let provider = connect(&config)?;
//! let request = config.request("You are terse.", vec![Message::User { text: "hi".into() }], vec![]);
//! let response = provider
//!     .complete(&request, &mut |event| {
//!         if let StreamEvent::TextDelta(t) = event {
//!             print!("{t}");
//!         }
//!     })
//!     .await?;
//! println!("\n{:?} {:?}", response.stop_reason, response.usage);
//! # Ok(()) }
//! ```

mod anthropic;
mod config;
mod error;
mod openai;
mod prices;
mod transport;
mod types;

use async_trait::async_trait;

pub use anthropic::{AnthropicProvider, ANTHROPIC_VERSION};
pub use config::{
    ConfigError, EnvOverrides, ProviderConfig, ProviderKind, ProviderSection, RetryPolicy,
    DEFAULT_MAX_TOKENS,
};
pub use error::{ProviderError, Redactor};
pub use openai::OpenAiProvider;
pub use prices::{shipped_price, shipped_prices_taken};
pub use types::{
    ChatRequest, ChatResponse, Message, StopReason, StreamEvent, ToolArguments, ToolCall,
    ToolDefinition, Usage,
};

/// Where streamed output goes as it arrives (e.g. the terminal).
pub type EventSink<'a> = &'a mut (dyn FnMut(StreamEvent) + Send);

/// A language model behind some wire protocol.
#[async_trait]
pub trait Provider: Send + Sync {
    /// The protocol this provider speaks.
    fn kind(&self) -> ProviderKind;

    /// Runs one model turn. Text deltas and tool-call starts go to `sink` as they arrive (all
    /// at once at the end when streaming is off); the full response is returned at the end.
    ///
    /// On error, anything already sent to `sink` belongs to a turn that did not happen.
    async fn complete(
        &self,
        req: &ChatRequest,
        sink: EventSink<'_>,
    ) -> Result<ChatResponse, ProviderError>;
}

/// Builds the provider `config` names.
pub fn connect(config: &ProviderConfig) -> Result<Box<dyn Provider>, ProviderError> {
    Ok(match config.kind {
        ProviderKind::Anthropic => Box::new(AnthropicProvider::new(config)?),
        ProviderKind::Openai => Box::new(OpenAiProvider::new(config)?),
    })
}

impl ProviderConfig {
    /// A request with this configuration's model and output cap.
    pub fn request(
        &self,
        system: impl Into<String>,
        messages: Vec<Message>,
        tools: Vec<ToolDefinition>,
    ) -> ChatRequest {
        ChatRequest {
            model: self.model.clone(),
            system: system.into(),
            messages,
            tools,
            max_tokens: self.max_tokens,
        }
    }
}

/// An id for a tool call the provider sent without one (some OpenAI-compatible servers do).
/// Random so ids from different turns of one session never collide.
pub(crate) fn synthesized_call_id(index: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let suffix: String = (0..12)
        .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
        .collect();
    format!("call_{suffix}_{index}")
}
