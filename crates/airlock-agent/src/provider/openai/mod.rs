//! The OpenAI Chat Completions API (`POST {base}/chat/completions`), streamed or not.
//! Also the protocol of Ollama, vLLM, llama.cpp's server, LM Studio and OpenRouter.

mod wire;

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde_json::Value;

use super::config::{ProviderConfig, ProviderKind};
use super::error::ProviderError;
use super::transport::{KeyHeader, Transport};
use super::types::{ChatRequest, ChatResponse, StopReason, StreamEvent, ToolArguments, ToolCall};
use super::{synthesized_call_id, EventSink, Provider};
use wire::{ChunkIn, CompletionRequest, CompletionResponse, ToolCallDeltaIn};

/// A client for the OpenAI Chat Completions API and servers compatible with it.
pub struct OpenAiProvider {
    transport: Transport,
    stream: bool,
}

impl std::fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiProvider")
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl OpenAiProvider {
    /// Builds a client from `config`.
    pub fn new(config: &ProviderConfig) -> Result<OpenAiProvider, ProviderError> {
        let mut config = config.clone();
        config.kind = ProviderKind::Openai;
        Ok(OpenAiProvider {
            transport: Transport::new(
                &config,
                "/chat/completions",
                KeyHeader::Bearer,
                HeaderMap::new(),
            )?,
            stream: config.stream,
        })
    }

    fn malformed(&self, detail: impl Into<String>) -> ProviderError {
        ProviderError::Malformed {
            provider: ProviderKind::Openai,
            detail: detail.into(),
        }
    }

    fn reported(&self, error: &Value) -> ProviderError {
        let (kind, message) = wire::error_parts(error);
        let r = &self.transport.redactor;
        ProviderError::Reported {
            provider: ProviderKind::Openai,
            kind: r.clean(&kind),
            message: r.clean(&message),
        }
    }

    async fn complete_whole(
        &self,
        req: &ChatRequest,
        sink: EventSink<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        let body = serde_json::to_vec(&CompletionRequest::from_request(req, false))
            .map_err(|e| self.malformed(format!("cannot encode the request: {e}")))?;
        let response = self.transport.post(body, &req.model).await?;
        let raw = self.transport.read_body(response).await?;
        let parsed: CompletionResponse = serde_json::from_slice(&raw).map_err(|e| {
            self.malformed(format!("the body is not a chat completion response: {e}"))
        })?;
        if let Some(error) = &parsed.error {
            return Err(self.reported(error));
        }
        let choice = parsed
            .choices
            .and_then(|c| c.into_iter().next())
            .ok_or_else(|| self.malformed("the response has no `choices`"))?;
        let message = choice
            .message
            .ok_or_else(|| self.malformed("the first choice has no `message`"))?;
        let text = wire::content_text(message.content.as_ref());
        let mut tool_calls = Vec::new();
        for (index, call) in message
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .enumerate()
        {
            let function = call
                .function
                .ok_or_else(|| self.malformed(format!("tool call {index} has no `function`")))?;
            let name = function
                .name
                .filter(|n| !n.is_empty())
                .ok_or_else(|| self.malformed(format!("tool call {index} has no function name")))?;
            let arguments = match function.arguments {
                None | Some(Value::Null) => ToolArguments::parse(""),
                Some(Value::String(s)) => ToolArguments::parse(&s),
                Some(other) => {
                    let raw = other.to_string();
                    ToolArguments::from_value(other, &raw)
                }
            };
            tool_calls.push(ToolCall {
                id: call
                    .id
                    .filter(|id| !id.is_empty())
                    .unwrap_or_else(|| synthesized_call_id(index)),
                name,
                arguments,
            });
        }
        if !text.is_empty() {
            sink(StreamEvent::TextDelta(text.clone()));
        }
        for (index, call) in tool_calls.iter().enumerate() {
            sink(StreamEvent::ToolCallStarted {
                index,
                id: call.id.clone(),
                name: call.name.clone(),
            });
        }
        let usage = parsed.usage.and_then(|u| u.to_usage());
        Ok(ChatResponse {
            stop_reason: normalize_stop(
                wire::stop_reason(choice.finish_reason.as_deref()),
                &tool_calls,
            ),
            text,
            tool_calls,
            usage: usage.unwrap_or_default(),
            usage_reported: usage.is_some(),
        })
    }

    async fn complete_streamed(
        &self,
        req: &ChatRequest,
        sink: EventSink<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        let body = serde_json::to_vec(&CompletionRequest::from_request(req, true))
            .map_err(|e| self.malformed(format!("cannot encode the request: {e}")))?;
        let response = self.transport.post(body, &req.model).await?;
        let mut events = self.transport.events(response);
        let mut state = StreamState::default();
        loop {
            let Some(event) = events.next().await? else {
                // Some servers close without `[DONE]`; a finish reason already says the
                // answer is complete.
                if state.finish_reason.is_some() {
                    return Ok(state.finish());
                }
                return Err(events.ended_early("`data: [DONE]`"));
            };
            let data = event.data.trim();
            if data.is_empty() {
                continue;
            }
            if data == "[DONE]" {
                if state.chunks == 0 {
                    return Err(self.malformed("the stream ended before any chunk"));
                }
                return Ok(state.finish());
            }
            let chunk: ChunkIn = serde_json::from_str(data)
                .map_err(|e| self.malformed(format!("a stream chunk is not valid: {e}")))?;
            if let Some(error) = &chunk.error {
                return Err(self.reported(error));
            }
            state.chunks += 1;
            self.apply(&mut state, chunk, sink);
        }
    }

    fn apply(&self, state: &mut StreamState, chunk: ChunkIn, sink: EventSink<'_>) {
        if let Some(usage) = chunk.usage.and_then(|u| u.to_usage()) {
            state.usage = Some(usage);
        }
        // Only the first choice is used (requests never ask for more than one).
        let Some(choice) = chunk
            .choices
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.index.unwrap_or(0) == 0)
        else {
            return;
        };
        if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
            state.finish_reason = Some(reason);
        }
        let Some(delta) = choice.delta else { return };
        let text = wire::content_text(delta.content.as_ref());
        if !text.is_empty() {
            state.text.push_str(&text);
            sink(StreamEvent::TextDelta(text));
        }
        for part in delta.tool_calls.unwrap_or_default() {
            state.apply_tool_delta(part, sink);
        }
    }
}

#[async_trait]
impl Provider for OpenAiProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Openai
    }

    async fn complete(
        &self,
        req: &ChatRequest,
        sink: EventSink<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        if self.stream {
            self.complete_streamed(req, sink).await
        } else {
            self.complete_whole(req, sink).await
        }
    }
}

/// Some servers (Ollama among them) say `stop` even when the turn ends in tool calls; the
/// calls are what matters to the loop.
fn normalize_stop(reason: StopReason, calls: &[ToolCall]) -> StopReason {
    match reason {
        StopReason::EndTurn | StopReason::Unknown if !calls.is_empty() => StopReason::ToolUse,
        other => other,
    }
}

/// A tool call being assembled from stream fragments.
struct Slot {
    /// The `index` the server gave, if any.
    wire_index: Option<usize>,
    id: Option<String>,
    name: String,
    arguments: String,
    announced: bool,
}

#[derive(Default)]
struct StreamState {
    chunks: usize,
    text: String,
    slots: Vec<Slot>,
    finish_reason: Option<String>,
    usage: Option<crate::provider::Usage>,
}

impl StreamState {
    fn apply_tool_delta(&mut self, part: ToolCallDeltaIn, sink: EventSink<'_>) {
        let id = part.id.filter(|id| !id.is_empty());
        // Find the call this fragment continues: by `index`; without one, a new `id` starts
        // a new call and anything else continues the last one.
        let position = match part.index {
            Some(i) => self.slots.iter().position(|s| s.wire_index == Some(i)),
            None => match (&id, self.slots.last()) {
                (Some(id), Some(last)) if last.id.as_ref() != Some(id) => None,
                (_, Some(_)) => Some(self.slots.len() - 1),
                (_, None) => None,
            },
        };
        let position = position.unwrap_or_else(|| {
            self.slots.push(Slot {
                wire_index: part.index,
                id: None,
                name: String::new(),
                arguments: String::new(),
                announced: false,
            });
            self.slots.len() - 1
        });
        let slot = &mut self.slots[position];
        if slot.id.is_none() {
            slot.id = id;
        }
        if let Some(function) = part.function {
            match function.name {
                // Some servers repeat the whole name in every fragment.
                Some(name) if !name.is_empty() && name != slot.name => slot.name.push_str(&name),
                _ => {}
            }
            match function.arguments {
                Some(Value::String(fragment)) => slot.arguments.push_str(&fragment),
                Some(Value::Null) | None => {}
                // A server that sends the arguments object whole.
                Some(other) => slot.arguments = other.to_string(),
            }
        }
        if !slot.announced && !slot.name.is_empty() {
            slot.announced = true;
            let id = slot
                .id
                .get_or_insert_with(|| synthesized_call_id(position))
                .clone();
            sink(StreamEvent::ToolCallStarted {
                index: position,
                id,
                name: slot.name.clone(),
            });
        }
    }

    fn finish(self) -> ChatResponse {
        let tool_calls: Vec<ToolCall> = self
            .slots
            .into_iter()
            .enumerate()
            .map(|(index, slot)| ToolCall {
                id: slot.id.unwrap_or_else(|| synthesized_call_id(index)),
                name: slot.name,
                arguments: ToolArguments::parse(&slot.arguments),
            })
            .collect();
        ChatResponse {
            stop_reason: normalize_stop(
                wire::stop_reason(self.finish_reason.as_deref()),
                &tool_calls,
            ),
            text: self.text,
            tool_calls,
            usage: self.usage.unwrap_or_default(),
            usage_reported: self.usage.is_some(),
        }
    }
}
