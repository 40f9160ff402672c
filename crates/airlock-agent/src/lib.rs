//! Airlock's agent host.
//!
//! - [`agent`]: the agent loop — tool calls through the Gate, approvals, budgets, the kill
//!   switch, and the workspace file tools;
//! - [`provider`]: clients for the Anthropic Messages API and the OpenAI Chat Completions API
//!   (also spoken by Ollama, vLLM, llama.cpp's server, LM Studio and OpenRouter), with
//!   streaming, tool calls, retries and typed errors;
//! - [`scripted`]: a **scripted** model, a real local HTTP server that speaks both wire
//!   protocols and replays a fixed script. It stands in for a model in tests and in
//!   `airlock demo`, and never for anything else.
//!
//! The model's API key stays in this process: it travels only in the request header to the
//! configured endpoint and is scrubbed from every error.

pub mod agent;
pub mod provider;
pub mod scripted;
