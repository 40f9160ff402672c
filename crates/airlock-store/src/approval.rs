//! The approvals queue (invariant I6): requests that bind the exact payload and its hash,
//! rate-limited per session, decided once, and always expiring.

use std::time::Duration;

use airlock_core::Action;
use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::grant::NewGrant;
use crate::time::Timestamp;

/// Longest an approval request may wait for a decision.
pub const MAX_APPROVAL_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// Largest serialized preview.
pub const MAX_PREVIEW_BYTES: usize = 256 * 1024;
/// Largest total size of the reasons or policies list of one request.
pub const MAX_REASONS_BYTES: usize = 64 * 1024;

/// Where a request stands. Only `Pending` can change, and only once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Denied,
    Expired,
    /// Cancelled by the kill switch.
    Cancelled,
    /// The process that waited for the answer is gone: nothing would run if it were
    /// approved.
    Orphaned,
}

impl ApprovalStatus {
    /// The name stored in the database and shown to operators.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Expired => "expired",
            ApprovalStatus::Cancelled => "cancelled",
            ApprovalStatus::Orphaned => "orphaned",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<ApprovalStatus> {
        match s {
            "pending" => Some(ApprovalStatus::Pending),
            "approved" => Some(ApprovalStatus::Approved),
            "denied" => Some(ApprovalStatus::Denied),
            "expired" => Some(ApprovalStatus::Expired),
            "cancelled" => Some(ApprovalStatus::Cancelled),
            "orphaned" => Some(ApprovalStatus::Orphaned),
            _ => None,
        }
    }
}

/// What the approver is shown, besides the payload itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ApprovalPreview {
    /// The full command line.
    Command { command: String, cwd: String },
    /// An HTTP request: method, URL, the start of the body, and the headers with their
    /// values (each cut short), which leave with the request as its URL does.
    Http {
        method: String,
        url: String,
        body_preview: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        headers: Vec<(String, String)>,
    },
    /// A file write as a unified diff.
    FileDiff { path: String, diff: String },
    /// A message: where it goes and what it says.
    Message {
        channel: String,
        recipient: String,
        text: String,
    },
    /// Anything else, summarized.
    Other { summary: String },
}

impl ApprovalPreview {
    /// What the held action would do, in one short form for listings and reports
    /// (unescaped: the caller escapes it for where it is shown).
    pub fn headline(&self) -> String {
        match self {
            ApprovalPreview::Command { command, .. } => format!("$ {command}"),
            ApprovalPreview::Http { method, url, .. } => format!("{method} {url}"),
            ApprovalPreview::FileDiff { path, .. } => format!("write {path}"),
            ApprovalPreview::Message {
                channel,
                recipient,
                text,
            } => format!("message {channel}:{recipient}: {text}"),
            ApprovalPreview::Other { summary } => summary.clone(),
        }
    }
}

/// A request to hold an action for approval.
#[derive(Debug, Clone)]
pub struct NewApproval<'a> {
    pub session_id: &'a str,
    /// The exact payload. The store keeps its canonical JSON and computes its hash itself.
    pub action: &'a Action,
    pub preview: ApprovalPreview,
    pub reasons: Vec<String>,
    pub policies: Vec<String>,
    /// When the request times out (a timeout denies). At most [`MAX_APPROVAL_TTL`] ahead.
    pub expires_at: Timestamp,
}

/// Per-session rate limits on creating requests, against approval fatigue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalLimits {
    /// Most requests of one session waiting at once.
    pub max_pending_per_session: u32,
    /// Most requests one session may create in any 60-second window.
    pub max_created_per_minute: u32,
}

impl Default for ApprovalLimits {
    fn default() -> Self {
        ApprovalLimits {
            max_pending_per_session: 3,
            max_created_per_minute: 10,
        }
    }
}

/// A stored approval request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRequest {
    pub id: String,
    pub session_id: String,
    /// Action type tag (`exec`, `net.request`, …).
    pub action_kind: String,
    /// RFC 8785 canonical JSON of the action: what runs if approved, byte for byte.
    pub payload: String,
    /// `sha256:` hash of `payload`.
    pub payload_hash: String,
    pub preview: ApprovalPreview,
    pub reasons: Vec<String>,
    pub policies: Vec<String>,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    pub status: ApprovalStatus,
    /// Principal who approved, denied or cancelled it.
    pub decided_by: Option<String>,
    pub decided_at: Option<Timestamp>,
    /// The denier's reason, or why it was cancelled.
    pub note: Option<String>,
}

/// An approval decision.
#[derive(Debug, Clone)]
pub struct ApproveRequest<'a> {
    /// The authenticated principal approving.
    pub approver: &'a str,
    /// Hash of the payload the approver was shown; must equal the stored hash.
    pub payload_hash: &'a str,
    /// A grant to create in the same transaction, for `--for DURATION --scope …`.
    pub grant: Option<NewGrant>,
}

/// A successful approval: the stored payload, re-read and re-hashed, for the caller to run.
#[derive(Debug, Clone)]
pub struct Approved {
    pub request: ApprovalRequest,
    /// Parsed from the stored payload; its hash equals `request.payload_hash`.
    pub action: Action,
    /// Id of the grant created with the approval, if one was asked for.
    pub grant_id: Option<String>,
}

/// Which rate limit refused a new request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateLimit {
    PendingPerSession,
    CreatedPerMinute,
}

/// Why an approval operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    #[error("session `{session}` already has {count} approval requests waiting (limit {limit})\nhelp: answer the waiting requests first (`airlock approvals list`); the operator can change `max_pending_per_session`")]
    TooManyPending {
        session: String,
        count: u64,
        limit: u32,
    },
    #[error("session `{session}` created {count} approval requests in the last minute (limit {limit})\nhelp: wait a minute; repeated requests may mean the agent is trying to wear the approver down")]
    TooManyPerMinute {
        session: String,
        count: u64,
        limit: u32,
    },
    #[error("approval request `{id}` is {} and cannot be decided again", status.as_str())]
    NotPending { id: String, status: ApprovalStatus },
    #[error("approval request `{id}` is orphaned: the process that asked for it ({waiter}) is gone, so nothing would run if it were approved\nhelp: run the command again if it is still wanted; it will ask again")]
    Orphaned { id: String, waiter: String },
    #[error("approval request `{id}` expired; it counts as denied\nhelp: let the agent propose the action again if it is still wanted")]
    Expired { id: String },
    #[error("approval for `{id}` names payload {given}, but the held payload is {stored}\nhelp: approve the exact payload that is shown (`airlock approvals show {id}`)")]
    HashMismatch {
        id: String,
        stored: String,
        given: String,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ApprovalError {
    /// The rate limit that refused a creation, if that is what this is.
    pub fn rate_limit(&self) -> Option<RateLimit> {
        match self {
            ApprovalError::TooManyPending { .. } => Some(RateLimit::PendingPerSession),
            ApprovalError::TooManyPerMinute { .. } => Some(RateLimit::CreatedPerMinute),
            _ => None,
        }
    }
}

impl From<rusqlite::Error> for ApprovalError {
    fn from(e: rusqlite::Error) -> Self {
        ApprovalError::Store(StoreError::Sqlite(e))
    }
}

impl From<crate::error::CorruptRow> for ApprovalError {
    fn from(e: crate::error::CorruptRow) -> Self {
        ApprovalError::Store(StoreError::CorruptRow(e))
    }
}
