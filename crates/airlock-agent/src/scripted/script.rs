//! What the scripted model says: a queue of steps, one per request it receives.

use std::time::Duration;

/// One answer of the scripted model: a normal reply or a deliberate fault.
#[derive(Debug, Clone)]
pub enum Step {
    /// Answer with this turn.
    Reply(Reply),
    /// Misbehave in this way.
    Fault(Fault),
}

impl Step {
    /// A turn that only says `text`.
    pub fn text(text: impl Into<String>) -> Step {
        Step::Reply(Reply::text(text))
    }

    /// A turn that makes one tool call with `arguments` (JSON text, sent verbatim).
    pub fn tool_call(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Step {
        Step::Reply(Reply::default().with_tool_call(id, name, arguments))
    }

    /// An HTTP error with a JSON body shaped like the protocol's error objects.
    pub fn status(status: u16, message: impl Into<String>) -> Step {
        Step::Fault(Fault::Status {
            status,
            message: message.into(),
            retry_after: None,
        })
    }
}

/// A normal model turn.
#[derive(Debug, Clone)]
pub struct Reply {
    /// Text of the turn (may be empty).
    pub text: String,
    /// Tool calls, in order.
    pub tool_calls: Vec<ScriptedToolCall>,
    /// Reported prompt tokens.
    pub input_tokens: u64,
    /// Reported output tokens.
    pub output_tokens: u64,
    /// Stop reason / finish reason as sent on the wire; `None` picks the protocol's usual
    /// value (`end_turn`/`stop`, or `tool_use`/`tool_calls` when there are tool calls).
    pub stop_reason: Option<String>,
    /// Characters per streamed text or argument fragment (at least 1).
    pub chunk_chars: usize,
    /// OpenAI format only: leave out tool-call ids, as some compatible servers do.
    pub omit_tool_call_ids: bool,
    /// Leave out usage, as some compatible servers do.
    pub omit_usage: bool,
}

impl Default for Reply {
    fn default() -> Self {
        Reply {
            text: String::new(),
            tool_calls: Vec::new(),
            input_tokens: 42,
            output_tokens: 7,
            stop_reason: None,
            chunk_chars: 4,
            omit_tool_call_ids: false,
            omit_usage: false,
        }
    }
}

impl Reply {
    /// A text-only turn.
    pub fn text(text: impl Into<String>) -> Reply {
        Reply {
            text: text.into(),
            ..Reply::default()
        }
    }

    /// Adds a tool call; `arguments` is JSON text, sent as is (it may be deliberately broken).
    pub fn with_tool_call(
        mut self,
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Reply {
        self.tool_calls.push(ScriptedToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        });
        self
    }

    /// Sets the reported token usage.
    pub fn with_usage(mut self, input_tokens: u64, output_tokens: u64) -> Reply {
        self.input_tokens = input_tokens;
        self.output_tokens = output_tokens;
        self
    }

    /// The stop reason to send, defaulting as [`Reply::stop_reason`] describes.
    pub(crate) fn wire_stop_reason(&self, end: &str, tools: &str) -> String {
        self.stop_reason.clone().unwrap_or_else(|| {
            if self.tool_calls.is_empty() {
                end.to_string()
            } else {
                tools.to_string()
            }
        })
    }
}

/// A tool call the scripted model makes.
#[derive(Debug, Clone)]
pub struct ScriptedToolCall {
    /// Call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments as JSON text.
    pub arguments: String,
}

/// How a streamed reply is cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamCut {
    /// End the body cleanly, without the final event.
    Close,
    /// Drop the connection in the middle of the chunked body.
    Abort,
    /// Keep the connection open and send nothing more.
    Hang,
}

/// A deliberate failure.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Answer with this HTTP status and a protocol-shaped error body carrying `message`.
    Status {
        /// HTTP status.
        status: u16,
        /// Error message in the body.
        message: String,
        /// Value of a `retry-after` header, if any.
        retry_after: Option<String>,
    },
    /// Answer 200 with these bytes as the body.
    Garbage(Vec<u8>),
    /// Stream the first `after_events` events of `reply`, then cut the stream. For a
    /// non-streaming request, the JSON body is cut after `after_events` bytes instead.
    Truncated {
        /// The reply being cut.
        reply: Reply,
        /// Events (or bytes) sent before the cut.
        after_events: usize,
        /// How the cut happens.
        cut: StreamCut,
    },
    /// Wait `delay` before sending the response headers, then do `then`.
    Slow {
        /// Delay before anything is sent.
        delay: Duration,
        /// What follows the delay.
        then: Box<Step>,
    },
}
