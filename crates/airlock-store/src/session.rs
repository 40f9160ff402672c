//! Session records and the transcript that lets a conversation be rebuilt after a restart.

use std::path::PathBuf;

use airlock_core::gate::Session;
use airlock_core::provenance::TaintState;
use airlock_core::DecisionKind;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::budget::BudgetState;
use crate::time::Timestamp;

/// Largest serialized transcript event (a message, tool call, decision or result).
pub const MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;
/// Largest serialized taint state. `TaintState` caps itself well below this.
pub const MAX_TAINT_BYTES: usize = 16 * 1024 * 1024;
/// Largest principal or role name.
pub const MAX_NAME_BYTES: usize = 256;

/// Where a session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionStatus {
    /// Taking turns.
    Active,
    /// Stopped by the kill switch. Final: a killed session never takes work again.
    Killed,
    /// Ended normally; can be resumed.
    Finished,
}

impl SessionStatus {
    /// The name stored in the database and shown to operators.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Active => "active",
            SessionStatus::Killed => "killed",
            SessionStatus::Finished => "finished",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<SessionStatus> {
        match s {
            "active" => Some(SessionStatus::Active),
            "killed" => Some(SessionStatus::Killed),
            "finished" => Some(SessionStatus::Finished),
            _ => None,
        }
    }
}

/// What a caller supplies to start a session.
#[derive(Debug, Clone)]
pub struct NewSession {
    /// Id to use; `None` generates a random one. Checked by [`crate::validate_id`].
    pub id: Option<String>,
    /// Principal the session acts for (`owner`, or another user's id).
    pub principal: String,
    /// `owner` or `user`.
    pub role: String,
    /// An existing directory the session works in, recorded as given: an `airlock exec`
    /// run works in the operator's workspace and needs no directory of its own. `None`
    /// creates a private `<state>/sessions/<id>/workspace`. Must be absolute.
    pub workspace: Option<PathBuf>,
    /// The owner gave the agent `workspace` to work on (`airlock run --workspace DIR`):
    /// the session may be resumed there. Without it, a session recorded with a
    /// directory of the caller's (an `airlock exec` run) is never resumed by an agent.
    pub agent_workspace: bool,
}

impl NewSession {
    /// A session with a generated id acting for the owner.
    pub fn owner() -> NewSession {
        NewSession {
            id: None,
            principal: "owner".into(),
            role: "owner".into(),
            workspace: None,
            agent_workspace: false,
        }
    }
}

/// A stored session.
#[derive(Debug, Clone)]
pub struct SessionRecord {
    /// The Gate's view of the session: id, principal, role and taint.
    pub gate: Session,
    pub status: SessionStatus,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// `<state>/sessions/<id>/workspace`, created with mode 0700, or the directory the
    /// session was created with ([`NewSession::workspace`]).
    pub workspace: PathBuf,
}

impl SessionRecord {
    /// The session id.
    pub fn id(&self) -> &str {
        &self.gate.id
    }
}

/// A session as listed: everything but the (possibly large) taint state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSummary {
    pub id: String,
    pub principal: String,
    pub role: String,
    pub status: SessionStatus,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// Whether untrusted content has entered the session.
    pub tainted: bool,
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MessageRole {
    User,
    Assistant,
    Tool,
}

/// One entry of a conversation, in the order it happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum TranscriptEvent {
    /// A message; `content` is the provider-neutral content (text or content blocks).
    Message { role: MessageRole, content: Value },
    /// The model proposed a tool call.
    ToolCall {
        call_id: String,
        tool: String,
        arguments: Value,
        /// `sha256:` hash of the canonical action the call became.
        action_hash: String,
    },
    /// The Gate's decision about a tool call.
    Decision {
        call_id: String,
        decision: DecisionKind,
        reasons: Vec<String>,
        policies: Vec<String>,
    },
    /// What a tool call returned. `untrusted` marks content from outside.
    Result {
        call_id: String,
        text: String,
        untrusted: bool,
    },
}

impl TranscriptEvent {
    /// The event's type tag, as stored in the `kind` column.
    pub fn kind(&self) -> &'static str {
        match self {
            TranscriptEvent::Message { .. } => "message",
            TranscriptEvent::ToolCall { .. } => "tool_call",
            TranscriptEvent::Decision { .. } => "decision",
            TranscriptEvent::Result { .. } => "result",
        }
    }
}

/// A transcript event with its place and time.
#[derive(Debug, Clone, PartialEq)]
pub struct TranscriptEntry {
    /// Position in the session, from 1, without gaps.
    pub seq: i64,
    pub at: Timestamp,
    pub event: TranscriptEvent,
}

/// Everything one step of a turn changes, committed together or not at all.
#[derive(Debug, Clone, Copy, Default)]
pub struct TurnUpdate<'a> {
    /// Events to append, in order.
    pub events: &'a [TranscriptEvent],
    /// The session's taint after these events, if it changed.
    pub taint: Option<&'a TaintState>,
}

/// A session loaded to continue it.
#[derive(Debug, Clone)]
pub struct ResumedSession {
    pub record: SessionRecord,
    pub transcript: Vec<TranscriptEntry>,
    pub budget: BudgetState,
}

/// What the kill switch did in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KillReport {
    /// Pending approval requests that were cancelled.
    pub cancelled_approvals: usize,
    /// Session-scoped grants that were revoked.
    pub revoked_grants: usize,
    /// The session had been killed before this kill (a repeat, which changed nothing).
    pub already_killed: bool,
}
