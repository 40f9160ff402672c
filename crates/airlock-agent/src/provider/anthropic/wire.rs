//! The Anthropic Messages API's JSON, as serde types.
//!
//! Requests are built strictly from [`ChatRequest`]. Responses are read leniently: unknown
//! fields are ignored and unknown block, delta and event types are skipped, so a newer API
//! version does not break an older Airlock.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::provider::types::{ChatRequest, Message, StopReason, ToolArguments, Usage};

#[derive(Serialize)]
pub(crate) struct MessagesRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<&'a str>,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    stream: bool,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<BlockOut<'a>>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockOut<'a> {
    Text {
        text: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Value,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
        is_error: bool,
    },
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
}

impl<'a> MessagesRequest<'a> {
    /// Translates a request. Tool results travel in `user` messages; consecutive messages of
    /// one role are merged because the API requires roles to alternate, and empty text blocks
    /// are dropped because the API rejects them.
    pub(crate) fn from_request(req: &'a ChatRequest, stream: bool) -> MessagesRequest<'a> {
        let mut messages: Vec<WireMessage<'a>> = Vec::new();
        for message in &req.messages {
            let (role, blocks) = match message {
                Message::User { text } => ("user", text_block(text)),
                Message::Assistant { text, tool_calls } => {
                    let mut blocks = text_block(text);
                    for call in tool_calls {
                        blocks.push(BlockOut::ToolUse {
                            id: &call.id,
                            name: &call.name,
                            // The API needs an object; a call whose arguments never parsed
                            // was answered with an error, so `{}` loses nothing.
                            input: call
                                .arguments
                                .as_json()
                                .cloned()
                                .unwrap_or_else(|| Value::Object(Default::default())),
                        });
                    }
                    ("assistant", blocks)
                }
                Message::ToolResult {
                    call_id,
                    text,
                    is_error,
                } => (
                    "user",
                    vec![BlockOut::ToolResult {
                        tool_use_id: call_id,
                        content: text,
                        is_error: *is_error,
                    }],
                ),
            };
            if blocks.is_empty() {
                continue;
            }
            match messages.last_mut() {
                Some(last) if last.role == role => last.content.extend(blocks),
                _ => messages.push(WireMessage {
                    role,
                    content: blocks,
                }),
            }
        }
        MessagesRequest {
            model: &req.model,
            max_tokens: req.max_tokens,
            system: (!req.system.is_empty()).then_some(req.system.as_str()),
            messages,
            tools: req
                .tools
                .iter()
                .map(|t| WireTool {
                    name: &t.name,
                    description: &t.description,
                    input_schema: &t.input_schema,
                })
                .collect(),
            stream,
        }
    }
}

fn text_block(text: &str) -> Vec<BlockOut<'_>> {
    if text.is_empty() {
        Vec::new()
    } else {
        vec![BlockOut::Text { text }]
    }
}

/// A non-streamed response (or an error object sent with status 200).
#[derive(Deserialize)]
pub(crate) struct MessagesResponse {
    #[serde(rename = "type", default)]
    pub(crate) kind: Option<String>,
    #[serde(default)]
    pub(crate) content: Vec<BlockIn>,
    #[serde(default)]
    pub(crate) stop_reason: Option<String>,
    #[serde(default)]
    pub(crate) usage: Option<UsageIn>,
    #[serde(default)]
    pub(crate) error: Option<ErrorIn>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum BlockIn {
    Text {
        text: String,
    },
    ToolUse {
        #[serde(default)]
        id: Option<String>,
        name: String,
        #[serde(default)]
        input: Value,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Default, Clone, Copy)]
pub(crate) struct UsageIn {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

impl UsageIn {
    /// Folds these counts into `usage`; fields the event does not carry stay as they were.
    /// Cached prompt tokens count as input: they are billed and they fill the context.
    pub(crate) fn apply(&self, usage: &mut Usage) -> bool {
        let mut any = false;
        if self.input_tokens.is_some()
            || self.cache_creation_input_tokens.is_some()
            || self.cache_read_input_tokens.is_some()
        {
            usage.input_tokens = self.input_tokens.unwrap_or(0)
                + self.cache_creation_input_tokens.unwrap_or(0)
                + self.cache_read_input_tokens.unwrap_or(0);
            any = true;
        }
        if let Some(out) = self.output_tokens {
            usage.output_tokens = out;
            any = true;
        }
        any
    }
}

#[derive(Deserialize, Default)]
pub(crate) struct ErrorIn {
    #[serde(rename = "type", default)]
    pub(crate) kind: Option<String>,
    #[serde(default)]
    pub(crate) message: Option<String>,
}

/// One streamed event, told apart by its `type` field.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum StreamEventIn {
    MessageStart {
        #[serde(default)]
        message: MessageStartIn,
    },
    ContentBlockStart {
        index: usize,
        content_block: BlockIn,
    },
    ContentBlockDelta {
        index: usize,
        delta: DeltaIn,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        #[serde(default)]
        delta: MessageDeltaIn,
        #[serde(default)]
        usage: Option<UsageIn>,
    },
    MessageStop {},
    Ping {},
    Error {
        #[serde(default)]
        error: ErrorIn,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize, Default)]
pub(crate) struct MessageStartIn {
    #[serde(default)]
    pub(crate) usage: Option<UsageIn>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum DeltaIn {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Default)]
pub(crate) struct MessageDeltaIn {
    #[serde(default)]
    pub(crate) stop_reason: Option<String>,
}

/// Maps the API's `stop_reason`.
pub(crate) fn stop_reason(s: Option<&str>) -> StopReason {
    match s {
        None => StopReason::Unknown,
        Some("end_turn") => StopReason::EndTurn,
        Some("tool_use") => StopReason::ToolUse,
        Some("max_tokens") => StopReason::MaxTokens,
        Some("stop_sequence") => StopReason::StopSequence,
        Some("refusal") => StopReason::Refusal,
        Some(other) => StopReason::Other(other.to_string()),
    }
}

/// A tool call's `input` from a non-streamed response.
pub(crate) fn input_arguments(input: Value) -> ToolArguments {
    match input {
        // Absent input means a call without arguments.
        Value::Null => ToolArguments::Json {
            value: Value::Object(Default::default()),
        },
        // Not what the API sends, but some gateways pass the model's JSON text through.
        Value::String(text) => ToolArguments::parse(&text),
        other => {
            let raw = other.to_string();
            ToolArguments::from_value(other, &raw)
        }
    }
}
