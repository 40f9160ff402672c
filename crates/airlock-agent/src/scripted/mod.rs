//! A **scripted** language model for tests and `airlock demo`.
//!
//! [`ScriptedModel`] is a real HTTP server on 127.0.0.1 that speaks the real wire formats of
//! the Anthropic Messages API and the OpenAI Chat Completions API, streamed and not, including
//! tool calls. It answers each request with the next [`Step`] of a script — a [`Reply`] or a
//! deliberate [`Fault`] — and records every request it receives, so a test can check exactly
//! what the host sent (tool results, headers, the API key).
//!
//! It is the one stand-in Airlock's tests allow: everything the host does with the answers
//! runs for real. Its responses carry the model name [`SCRIPTED_MODEL_NAME`] and the header
//! [`SCRIPTED_HEADER`], so nothing it says can pass for a real model's output.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use airlock_agent::provider::{connect, Message, ProviderKind};
//! use airlock_agent::scripted::{ScriptedModel, Step};
//!
//! let model = ScriptedModel::start([Step::text("Hello from the script.")]).await?;
//! let config = model.config(ProviderKind::Openai, true);
//! let provider = connect(&config)?;
//! let request = config.request("", vec![Message::User { text: "hi".into() }], vec![]);
//! let response = provider.complete(&request, &mut |_| {}).await?;
//! assert_eq!(response.text, "Hello from the script.");
//! # Ok(()) }
//! ```

mod encode;
mod script;
mod server;

pub use encode::SCRIPTED_MODEL_NAME;
pub use script::{Fault, Reply, ScriptedToolCall, Step, StreamCut};
pub use server::{Protocol, RecordedRequest, ScriptedModel, SCRIPTED_HEADER};
