//! The OpenAI Chat Completions API's JSON, as serde types.
//!
//! Requests are built strictly from [`ChatRequest`]. Responses are read leniently because
//! OpenAI-compatible servers differ: fields may be absent or `null`, tool calls may lack an
//! `id` or `index`, `content` may be a list of parts, and `finish_reason` has many spellings.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::provider::types::{ChatRequest, Message, StopReason, Usage};

#[derive(Serialize)]
pub(crate) struct CompletionRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    max_tokens: u32,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: &'a str,
    },
    Assistant {
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: Cow<'a, str>,
    },
}

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

#[derive(Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    arguments: String,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

impl<'a> CompletionRequest<'a> {
    /// Translates a request. The protocol has no error flag on tool results, so a failed or
    /// denied call's text is prefixed with `Error: `.
    pub(crate) fn from_request(req: &'a ChatRequest, stream: bool) -> CompletionRequest<'a> {
        let mut messages = Vec::with_capacity(req.messages.len() + 1);
        if !req.system.is_empty() {
            messages.push(WireMessage::System {
                content: &req.system,
            });
        }
        for message in &req.messages {
            messages.push(match message {
                Message::User { text } => WireMessage::User { content: text },
                Message::Assistant { text, tool_calls } => WireMessage::Assistant {
                    // `null` content is how the protocol says "only tool calls"; a message
                    // with neither gets "" since some servers reject that `null`.
                    content: if !text.is_empty() || tool_calls.is_empty() {
                        Some(text)
                    } else {
                        None
                    },
                    tool_calls: tool_calls
                        .iter()
                        .map(|c| WireToolCall {
                            id: &c.id,
                            kind: "function",
                            function: WireFunctionCall {
                                name: &c.name,
                                arguments: c.arguments.to_wire_string(),
                            },
                        })
                        .collect(),
                },
                Message::ToolResult {
                    call_id,
                    text,
                    is_error,
                } => WireMessage::Tool {
                    tool_call_id: call_id,
                    content: if *is_error {
                        Cow::Owned(format!("Error: {text}"))
                    } else {
                        Cow::Borrowed(text)
                    },
                },
            });
        }
        CompletionRequest {
            model: &req.model,
            messages,
            tools: req
                .tools
                .iter()
                .map(|t| WireTool {
                    kind: "function",
                    function: WireFunction {
                        name: &t.name,
                        description: &t.description,
                        parameters: &t.input_schema,
                    },
                })
                .collect(),
            max_tokens: req.max_tokens,
            stream,
            stream_options: stream.then_some(StreamOptions {
                include_usage: true,
            }),
        }
    }
}

/// A non-streamed response.
#[derive(Deserialize)]
pub(crate) struct CompletionResponse {
    #[serde(default)]
    pub(crate) choices: Option<Vec<ChoiceIn>>,
    #[serde(default)]
    pub(crate) usage: Option<UsageIn>,
    #[serde(default)]
    pub(crate) error: Option<Value>,
}

#[derive(Deserialize)]
pub(crate) struct ChoiceIn {
    #[serde(default)]
    pub(crate) message: Option<MessageIn>,
    #[serde(default)]
    pub(crate) finish_reason: Option<String>,
}

#[derive(Deserialize)]
pub(crate) struct MessageIn {
    #[serde(default)]
    pub(crate) content: Option<Value>,
    #[serde(default)]
    pub(crate) tool_calls: Option<Vec<ToolCallIn>>,
}

#[derive(Deserialize)]
pub(crate) struct ToolCallIn {
    #[serde(default)]
    pub(crate) id: Option<String>,
    #[serde(default)]
    pub(crate) function: Option<FunctionIn>,
}

#[derive(Deserialize)]
pub(crate) struct FunctionIn {
    #[serde(default)]
    pub(crate) name: Option<String>,
    /// Normally a string of JSON; some servers send the object itself.
    #[serde(default)]
    pub(crate) arguments: Option<Value>,
}

#[derive(Deserialize, Clone, Copy)]
pub(crate) struct UsageIn {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

impl UsageIn {
    /// The counts, or `None` when the object carries neither.
    pub(crate) fn to_usage(self) -> Option<Usage> {
        if self.prompt_tokens.is_none() && self.completion_tokens.is_none() {
            return None;
        }
        Some(Usage {
            input_tokens: self.prompt_tokens.unwrap_or(0),
            output_tokens: self.completion_tokens.unwrap_or(0),
        })
    }
}

/// One streamed `data:` chunk.
#[derive(Deserialize)]
pub(crate) struct ChunkIn {
    #[serde(default)]
    pub(crate) choices: Option<Vec<ChunkChoiceIn>>,
    #[serde(default)]
    pub(crate) usage: Option<UsageIn>,
    #[serde(default)]
    pub(crate) error: Option<Value>,
}

#[derive(Deserialize)]
pub(crate) struct ChunkChoiceIn {
    #[serde(default)]
    pub(crate) index: Option<u32>,
    #[serde(default)]
    pub(crate) delta: Option<DeltaIn>,
    #[serde(default)]
    pub(crate) finish_reason: Option<String>,
}

#[derive(Deserialize)]
pub(crate) struct DeltaIn {
    #[serde(default)]
    pub(crate) content: Option<Value>,
    #[serde(default)]
    pub(crate) tool_calls: Option<Vec<ToolCallDeltaIn>>,
}

#[derive(Deserialize)]
pub(crate) struct ToolCallDeltaIn {
    #[serde(default)]
    pub(crate) index: Option<usize>,
    #[serde(default)]
    pub(crate) id: Option<String>,
    #[serde(default)]
    pub(crate) function: Option<FunctionIn>,
}

/// Text from a `content` value: a string, or a list of `{"type":"text","text":…}` parts.
pub(crate) fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// The message of an `error` object in a 200 response or a stream chunk.
pub(crate) fn error_parts(error: &Value) -> (String, String) {
    let kind = error
        .get("type")
        .or_else(|| error.get("code"))
        .map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .unwrap_or_else(|| "error".to_string());
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| error.as_str().map(str::to_string))
        .unwrap_or_else(|| error.to_string());
    (kind, message)
}

/// Maps `finish_reason`, whose spelling varies between servers.
pub(crate) fn stop_reason(s: Option<&str>) -> StopReason {
    match s {
        None | Some("") => StopReason::Unknown,
        Some("stop" | "eos" | "end_turn") => StopReason::EndTurn,
        Some("tool_calls" | "function_call" | "tool_use") => StopReason::ToolUse,
        Some("length" | "max_tokens") => StopReason::MaxTokens,
        Some("content_filter") => StopReason::ContentFilter,
        Some("stop_sequence") => StopReason::StopSequence,
        Some(other) => StopReason::Other(other.to_string()),
    }
}
