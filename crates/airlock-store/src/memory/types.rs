//! The values memory operations take and return: tiers, provenance, versions, entries,
//! pending changes.

use crate::time::Timestamp;

use super::namespace::Namespace;
use super::record::MemoryRecord;

/// Longest memory record id.
pub const MAX_MEMORY_ID: usize = 64;

/// Where a record lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tier {
    /// Loaded into the context of every session of the namespace.
    Pinned,
    /// Found on demand by full-text search.
    Recall,
}

impl Tier {
    /// The stored name (also the Gate's `memory.scope`).
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Pinned => "pinned",
            Tier::Recall => "recall",
        }
    }

    /// The tier named `name`, if any.
    pub fn parse(name: &str) -> Option<Tier> {
        match name {
            "pinned" => Some(Tier::Pinned),
            "recall" => Some(Tier::Recall),
            _ => None,
        }
    }
}

/// Who wrote a version: the session, its principal, whether untrusted content had
/// entered the session, and the tool call that asked for the write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteProvenance {
    pub session_id: String,
    pub principal: String,
    pub tainted: bool,
    pub tool_call_id: String,
}

/// How a version came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionOrigin {
    /// Written by the agent through the Gate.
    Agent,
    /// A held change the operator approved.
    Review,
    /// The operator rolled the record back.
    Rollback,
}

impl VersionOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            VersionOrigin::Agent => "agent",
            VersionOrigin::Review => "review",
            VersionOrigin::Rollback => "rollback",
        }
    }

    pub fn parse(name: &str) -> Option<VersionOrigin> {
        match name {
            "agent" => Some(VersionOrigin::Agent),
            "review" => Some(VersionOrigin::Review),
            "rollback" => Some(VersionOrigin::Rollback),
            _ => None,
        }
    }
}

/// What a write does to a record.
#[derive(Debug, Clone, PartialEq)]
pub enum MemoryChange {
    /// Create the record or replace its content.
    Put(MemoryRecord),
    /// Forget it: a tombstone version, which a rollback can undo.
    Forget,
}

/// One write to memory, as the agent proposes it.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryWrite {
    /// The record to change; `None` creates a new one.
    pub id: Option<String>,
    pub tier: Tier,
    pub change: MemoryChange,
}

/// One stored version of a record.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryVersion {
    pub record_id: String,
    pub version: i64,
    pub namespace: Namespace,
    pub tier: Tier,
    /// `None` for a tombstone (the record was forgotten in this version).
    pub record: Option<MemoryRecord>,
    pub provenance: WriteProvenance,
    pub written_at: Timestamp,
    pub origin: VersionOrigin,
    /// The operator who approved or rolled back, for those origins.
    pub actor: Option<String>,
}

impl MemoryVersion {
    /// True when the content came from a tainted session and no operator vouched for it.
    /// Only an approved review vouches: a rollback restores content as it was, so content
    /// a tainted session wrote stays untrusted when an operator brings it back.
    pub fn untrusted(&self) -> bool {
        self.provenance.tainted && self.origin != VersionOrigin::Review
    }
}

/// A record's current, live version.
pub type MemoryEntry = MemoryVersion;

/// A full-text search result.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    pub entry: MemoryEntry,
    /// SQLite's bm25 score: lower is a better match.
    pub score: f64,
}

/// The state of a held change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewStatus {
    Pending,
    Approved,
    Rejected,
}

impl ReviewStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewStatus::Pending => "pending",
            ReviewStatus::Approved => "approved",
            ReviewStatus::Rejected => "rejected",
        }
    }

    pub fn parse(name: &str) -> Option<ReviewStatus> {
        match name {
            "pending" => Some(ReviewStatus::Pending),
            "approved" => Some(ReviewStatus::Approved),
            "rejected" => Some(ReviewStatus::Rejected),
            _ => None,
        }
    }
}

/// A change held for the owner's review; it takes effect only when approved.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingChange {
    pub id: String,
    pub namespace: Namespace,
    /// The record it changes (reserved for a new record).
    pub record_id: String,
    /// The record's version when the change was proposed (`None` for a new record).
    pub base_version: Option<i64>,
    pub tier: Tier,
    /// `None` proposes forgetting the record.
    pub record: Option<MemoryRecord>,
    pub provenance: WriteProvenance,
    pub requested_at: Timestamp,
    /// Why it is held (the Gate's reasons).
    pub reasons: Vec<String>,
    pub status: ReviewStatus,
    pub decided_by: Option<String>,
    pub decided_at: Option<Timestamp>,
}

/// What `rollback --session` did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionRollback {
    /// The new versions written to undo the session's writes.
    pub restored: Vec<MemoryVersion>,
    /// Held changes of the session that were rejected.
    pub rejected: Vec<String>,
}
