//! Protocol-neutral conversation types: what the agent loop sends to a model and what comes back.
//!
//! These types are the same for every wire protocol. Each protocol module translates them to
//! and from its own JSON. They derive `Serialize`/`Deserialize` so a session store can persist
//! them with strict serde.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One message of the conversation history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case", deny_unknown_fields)]
pub enum Message {
    /// Text from the operator (or another trusted principal).
    User {
        /// The message text.
        text: String,
    },
    /// A previous model turn: its text and the tool calls it proposed.
    Assistant {
        /// Text the model produced (may be empty when it only called tools).
        text: String,
        /// Tool calls the model proposed, in order.
        tool_calls: Vec<ToolCall>,
    },
    /// The outcome of one tool call, sent back to the model.
    ToolResult {
        /// The id of the [`ToolCall`] this answers.
        call_id: String,
        /// The result text (or the reason the call was refused or failed).
        text: String,
        /// True when the call failed or was denied.
        is_error: bool,
    },
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolDefinition {
    /// The tool's name, as the model will call it.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub input_schema: Value,
}

/// Everything one model call needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatRequest {
    /// The model name, as the provider knows it.
    pub model: String,
    /// System prompt; empty means none.
    pub system: String,
    /// The conversation so far, oldest first.
    pub messages: Vec<Message>,
    /// Tools the model may call.
    pub tools: Vec<ToolDefinition>,
    /// Upper bound on output tokens for this call.
    pub max_tokens: u32,
}

/// A tool call proposed by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    /// The provider's id for the call (synthesized when the provider sent none).
    pub id: String,
    /// The tool name the model asked for.
    pub name: String,
    /// The arguments, parsed, or why they could not be.
    pub arguments: ToolArguments,
}

/// A tool call's arguments. Models sometimes emit broken JSON; that is an error for that one
/// call (the loop can send it back to the model as a tool error), not for the whole turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToolArguments {
    /// A JSON object.
    Json {
        /// The parsed arguments object.
        value: Value,
    },
    /// The model's text was not a JSON object.
    Invalid {
        /// Exactly what the model sent.
        raw: String,
        /// Why it was rejected.
        error: String,
    },
}

impl ToolArguments {
    /// Parses the argument text a model streamed or returned. Empty text means `{}` (a call
    /// with no arguments); anything else must be a JSON object.
    pub fn parse(raw: &str) -> ToolArguments {
        if raw.trim().is_empty() {
            return ToolArguments::Json {
                value: Value::Object(Default::default()),
            };
        }
        match serde_json::from_str::<Value>(raw) {
            Ok(value) => ToolArguments::from_value(value, raw),
            Err(e) => ToolArguments::Invalid {
                raw: raw.to_string(),
                error: format!("arguments are not valid JSON: {e}"),
            },
        }
    }

    /// Accepts an already-parsed value; only an object is valid.
    pub fn from_value(value: Value, raw: &str) -> ToolArguments {
        if value.is_object() {
            ToolArguments::Json { value }
        } else {
            ToolArguments::Invalid {
                raw: raw.to_string(),
                error: format!(
                    "arguments must be a JSON object, got {}",
                    json_kind_name(&value)
                ),
            }
        }
    }

    /// The arguments object, if it parsed.
    pub fn as_json(&self) -> Option<&Value> {
        match self {
            ToolArguments::Json { value } => Some(value),
            ToolArguments::Invalid { .. } => None,
        }
    }

    /// The arguments as text for a wire format that carries them as a string.
    pub fn to_wire_string(&self) -> String {
        match self {
            ToolArguments::Json { value } => value.to_string(),
            ToolArguments::Invalid { raw, .. } => raw.clone(),
        }
    }
}

fn json_kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "raw", rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished its turn.
    EndTurn,
    /// The model wants tool results before it continues.
    ToolUse,
    /// The output hit `max_tokens`.
    MaxTokens,
    /// A stop sequence matched.
    StopSequence,
    /// The provider filtered the output.
    ContentFilter,
    /// The provider refused to answer.
    Refusal,
    /// A reason this crate does not know, kept verbatim.
    Other(String),
    /// The provider gave no reason.
    Unknown,
}

/// Token counts for one call, as the provider reported them (zero when it did not).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
}

/// The complete result of one model call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatResponse {
    /// All text the model produced, concatenated.
    pub text: String,
    /// Tool calls, in the order the model made them.
    pub tool_calls: Vec<ToolCall>,
    /// Why the model stopped.
    pub stop_reason: StopReason,
    /// Token usage.
    pub usage: Usage,
    /// False when the provider did not report usage (some OpenAI-compatible servers omit it);
    /// budgets should then estimate rather than trust the zeros.
    pub usage_reported: bool,
}

/// Incremental output delivered while a response streams in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// More text from the model.
    TextDelta(String),
    /// The model started a tool call; its arguments follow and arrive in the final response.
    ToolCallStarted {
        /// Position of the call within this response.
        index: usize,
        /// The call id.
        id: String,
        /// The tool name.
        name: String,
    },
}
