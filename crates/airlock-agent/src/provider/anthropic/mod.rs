//! The Anthropic Messages API (`POST {base}/v1/messages`), streamed or not.

mod wire;

use std::collections::BTreeMap;

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderValue};

use super::config::{ProviderConfig, ProviderKind};
use super::error::ProviderError;
use super::transport::{KeyHeader, SseReader, Transport};
use super::types::{ChatRequest, ChatResponse, StreamEvent, ToolArguments, ToolCall, Usage};
use super::{synthesized_call_id, EventSink, Provider};
use wire::{BlockIn, DeltaIn, MessagesRequest, MessagesResponse, StreamEventIn};

/// The API version this client speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// A client for the Anthropic Messages API.
pub struct AnthropicProvider {
    transport: Transport,
    stream: bool,
}

impl std::fmt::Debug for AnthropicProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicProvider")
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl AnthropicProvider {
    /// Builds a client from `config` (whose `kind` is not checked, so a test can point either
    /// protocol anywhere).
    pub fn new(config: &ProviderConfig) -> Result<AnthropicProvider, ProviderError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            "anthropic-version",
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        let mut config = config.clone();
        config.kind = ProviderKind::Anthropic;
        Ok(AnthropicProvider {
            transport: Transport::new(&config, "/v1/messages", KeyHeader::XApiKey, headers)?,
            stream: config.stream,
        })
    }

    fn malformed(&self, detail: impl Into<String>) -> ProviderError {
        ProviderError::Malformed {
            provider: ProviderKind::Anthropic,
            detail: detail.into(),
        }
    }

    async fn complete_whole(
        &self,
        req: &ChatRequest,
        sink: EventSink<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        let body = serde_json::to_vec(&MessagesRequest::from_request(req, false))
            .map_err(|e| self.malformed(format!("cannot encode the request: {e}")))?;
        let response = self.transport.post(body, &req.model).await?;
        let raw = self.transport.read_body(response).await?;
        let parsed: MessagesResponse = serde_json::from_slice(&raw)
            .map_err(|e| self.malformed(format!("the body is not a Messages API response: {e}")))?;
        if parsed.kind.as_deref() == Some("error") || parsed.error.is_some() {
            let error = parsed.error.unwrap_or_default();
            return Err(self.reported(error.kind, error.message));
        }
        if parsed.kind.as_deref() != Some("message") {
            return Err(self.malformed("the body has no `\"type\": \"message\"`"));
        }
        let mut text = String::new();
        let mut tool_calls = Vec::new();
        for block in parsed.content {
            match block {
                BlockIn::Text { text: t } => text.push_str(&t),
                BlockIn::ToolUse { id, name, input } => {
                    let index = tool_calls.len();
                    tool_calls.push(ToolCall {
                        id: id.unwrap_or_else(|| synthesized_call_id(index)),
                        name,
                        arguments: wire::input_arguments(input),
                    });
                }
                BlockIn::Other => {}
            }
        }
        let mut usage = Usage::default();
        let usage_reported = parsed.usage.map(|u| u.apply(&mut usage)).unwrap_or(false);
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
        Ok(ChatResponse {
            text,
            tool_calls,
            stop_reason: wire::stop_reason(parsed.stop_reason.as_deref()),
            usage,
            usage_reported,
        })
    }

    async fn complete_streamed(
        &self,
        req: &ChatRequest,
        sink: EventSink<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        let body = serde_json::to_vec(&MessagesRequest::from_request(req, true))
            .map_err(|e| self.malformed(format!("cannot encode the request: {e}")))?;
        let response = self.transport.post(body, &req.model).await?;
        let mut events = self.transport.events(response);
        let mut state = StreamState::default();
        loop {
            let Some(event) = events.next().await? else {
                return Err(events.ended_early("`message_stop`"));
            };
            if event.data.trim().is_empty() {
                continue;
            }
            let parsed: StreamEventIn = serde_json::from_str(&event.data).map_err(|e| {
                self.malformed(format!(
                    "stream event `{}` is not valid: {e}",
                    self.transport.redactor.clean(&event.event)
                ))
            })?;
            if self.apply(&mut state, parsed, sink)? {
                return state.finish(&events);
            }
        }
    }

    /// Applies one event; `Ok(true)` at `message_stop`.
    fn apply(
        &self,
        state: &mut StreamState,
        event: StreamEventIn,
        sink: EventSink<'_>,
    ) -> Result<bool, ProviderError> {
        match event {
            StreamEventIn::MessageStart { message } => {
                state.started = true;
                if let Some(u) = message.usage {
                    state.usage_reported |= u.apply(&mut state.usage);
                }
            }
            StreamEventIn::ContentBlockStart {
                index,
                content_block,
            } => {
                let block = match content_block {
                    BlockIn::Text { text } => {
                        if !text.is_empty() {
                            state.text.push_str(&text);
                            sink(StreamEvent::TextDelta(text));
                        }
                        Block::Text
                    }
                    BlockIn::ToolUse { id, name, .. } => {
                        let order = state.tool_count;
                        state.tool_count += 1;
                        let id = id.unwrap_or_else(|| synthesized_call_id(order));
                        sink(StreamEvent::ToolCallStarted {
                            index: order,
                            id: id.clone(),
                            name: name.clone(),
                        });
                        Block::Tool {
                            order,
                            id,
                            name,
                            json: String::new(),
                            arguments: None,
                        }
                    }
                    BlockIn::Other => Block::Other,
                };
                if state.blocks.insert(index, block).is_some() {
                    return Err(self.malformed(format!("content block {index} started twice")));
                }
            }
            StreamEventIn::ContentBlockDelta { index, delta } => {
                let block = state.blocks.get_mut(&index).ok_or_else(|| {
                    self.malformed(format!(
                        "a delta arrived for content block {index}, which never started"
                    ))
                })?;
                match (block, delta) {
                    (Block::Text, DeltaIn::TextDelta { text }) => {
                        state.text.push_str(&text);
                        sink(StreamEvent::TextDelta(text));
                    }
                    (Block::Tool { json, .. }, DeltaIn::InputJsonDelta { partial_json }) => {
                        json.push_str(&partial_json);
                    }
                    // Deltas of kinds this client does not use (thinking, citations, …).
                    (_, DeltaIn::Other) | (Block::Other, _) => {}
                    _ => {
                        return Err(self.malformed(format!(
                            "content block {index} received a delta of the wrong kind"
                        )))
                    }
                }
            }
            StreamEventIn::ContentBlockStop { index } => {
                if let Some(Block::Tool {
                    json, arguments, ..
                }) = state.blocks.get_mut(&index)
                {
                    *arguments = Some(ToolArguments::parse(json));
                }
            }
            StreamEventIn::MessageDelta { delta, usage } => {
                if delta.stop_reason.is_some() {
                    state.stop_reason = delta.stop_reason;
                }
                if let Some(u) = usage {
                    state.usage_reported |= u.apply(&mut state.usage);
                }
            }
            StreamEventIn::MessageStop {} => return Ok(true),
            StreamEventIn::Ping {} | StreamEventIn::Unknown => {}
            StreamEventIn::Error { error } => return Err(self.reported(error.kind, error.message)),
        }
        Ok(false)
    }

    fn reported(&self, kind: Option<String>, message: Option<String>) -> ProviderError {
        let r = &self.transport.redactor;
        ProviderError::Reported {
            provider: ProviderKind::Anthropic,
            kind: r.clean(kind.as_deref().unwrap_or("error")),
            message: r.clean(message.as_deref().unwrap_or("")),
        }
    }
}

#[async_trait]
impl Provider for AnthropicProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Anthropic
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

enum Block {
    Text,
    Tool {
        order: usize,
        id: String,
        name: String,
        json: String,
        arguments: Option<ToolArguments>,
    },
    Other,
}

#[derive(Default)]
struct StreamState {
    started: bool,
    text: String,
    blocks: BTreeMap<usize, Block>,
    tool_count: usize,
    stop_reason: Option<String>,
    usage: Usage,
    usage_reported: bool,
}

impl StreamState {
    fn finish(self, events: &SseReader<'_>) -> Result<ChatResponse, ProviderError> {
        if !self.started {
            return Err(events.ended_early("`message_start` before `message_stop`"));
        }
        let mut calls: Vec<(usize, ToolCall)> = Vec::new();
        for block in self.blocks.into_values() {
            if let Block::Tool {
                order,
                id,
                name,
                json,
                arguments,
            } = block
            {
                // A block left open at `message_stop` is parsed as it stands.
                let arguments = arguments.unwrap_or_else(|| ToolArguments::parse(&json));
                calls.push((
                    order,
                    ToolCall {
                        id,
                        name,
                        arguments,
                    },
                ));
            }
        }
        calls.sort_by_key(|(order, _)| *order);
        Ok(ChatResponse {
            text: self.text,
            tool_calls: calls.into_iter().map(|(_, c)| c).collect(),
            stop_reason: wire::stop_reason(self.stop_reason.as_deref()),
            usage: self.usage,
            usage_reported: self.usage_reported,
        })
    }
}
