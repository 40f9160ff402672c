//! The conversation as stored, and as sent to the model.
//!
//! Each step of the loop appends [`TranscriptEvent`]s to the store. To resume, the events are
//! read back with strict serde into the provider's [`Message`]s. A tool call left without a
//! result (the run stopped in between) gets a synthetic error result, so the rebuilt
//! conversation is always one a provider accepts.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use airlock_core::DecisionKind;
use airlock_store::{MessageRole, TranscriptEntry, TranscriptEvent};

use crate::provider::{Message, ToolCall};

/// The stored form of a user message.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UserContent {
    pub text: String,
}

/// The stored form of a model turn.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AssistantContent {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
}

/// The text the model gets for a call whose run was interrupted.
pub(crate) const INTERRUPTED: &str =
    "this tool call did not finish: the run stopped before it completed; propose it again if it is still needed";

/// The event for a user message.
pub(crate) fn user_event(text: &str) -> TranscriptEvent {
    TranscriptEvent::Message {
        role: MessageRole::User,
        content: to_value(&UserContent { text: text.into() }),
    }
}

/// The event for a model turn.
pub(crate) fn assistant_event(text: &str, tool_calls: &[ToolCall]) -> TranscriptEvent {
    TranscriptEvent::Message {
        role: MessageRole::Assistant,
        content: to_value(&AssistantContent {
            text: text.into(),
            tool_calls: tool_calls.to_vec(),
        }),
    }
}

fn to_value<T: Serialize>(v: &T) -> Value {
    // These types hold only strings and JSON values, which always serialize.
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// Rebuild the model conversation from the stored transcript.
pub(crate) fn messages(entries: &[TranscriptEntry]) -> Result<Vec<Message>, String> {
    let mut out = Vec::new();
    // Calls of the last model turn still waiting for a result, in order.
    let mut open: Vec<String> = Vec::new();
    // Calls whose final decision was not `allow`: their result is an error.
    let mut refused: HashSet<String> = HashSet::new();
    for entry in entries {
        match &entry.event {
            TranscriptEvent::Message { role, content } => {
                close_open(&mut out, &mut open);
                match role {
                    MessageRole::User => {
                        let c: UserContent = serde_json::from_value(content.clone())
                            .map_err(|e| format!("message {}: {e}", entry.seq))?;
                        out.push(Message::User { text: c.text });
                    }
                    MessageRole::Assistant => {
                        let c: AssistantContent = serde_json::from_value(content.clone())
                            .map_err(|e| format!("message {}: {e}", entry.seq))?;
                        open = c.tool_calls.iter().map(|t| t.id.clone()).collect();
                        out.push(Message::Assistant {
                            text: c.text,
                            tool_calls: c.tool_calls,
                        });
                    }
                    MessageRole::Tool => {
                        return Err(format!("message {}: unexpected tool message", entry.seq))
                    }
                }
            }
            TranscriptEvent::ToolCall { .. } => {}
            TranscriptEvent::Decision {
                call_id, decision, ..
            } => {
                if *decision == DecisionKind::Allow {
                    refused.remove(call_id);
                } else {
                    refused.insert(call_id.clone());
                }
            }
            TranscriptEvent::Result { call_id, text, .. } => {
                open.retain(|c| c != call_id);
                out.push(Message::ToolResult {
                    call_id: call_id.clone(),
                    text: text.clone(),
                    is_error: refused.contains(call_id),
                });
            }
        }
    }
    close_open(&mut out, &mut open);
    Ok(out)
}

fn close_open(out: &mut Vec<Message>, open: &mut Vec<String>) {
    for call_id in open.drain(..) {
        out.push(Message::ToolResult {
            call_id,
            text: INTERRUPTED.into(),
            is_error: true,
        });
    }
}

/// The hash of the most recent action and how many times in a row it was proposed, so the
/// repeated-action breaker survives a restart.
pub(crate) fn repeat_streak(entries: &[TranscriptEntry]) -> (Option<String>, u32) {
    let mut last: Option<String> = None;
    let mut count = 0;
    for entry in entries {
        if let TranscriptEvent::ToolCall { action_hash, .. } = &entry.event {
            // Calls refused before the Gate have no action.
            if action_hash.is_empty() {
                continue;
            }
            if last.as_deref() == Some(action_hash.as_str()) {
                count += 1;
            } else {
                last = Some(action_hash.clone());
                count = 1;
            }
        }
    }
    (last, count)
}
