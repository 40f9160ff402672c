//! Where the Gate records its decisions before anything runs (invariant I1).
//!
//! `airlock-core` stays free of I/O: it only defines this trait. `airlock-audit`
//! implements it with its hash-chained, fsynced log. The Gate mints an
//! [`crate::Authorized`] token only after `record` returned `Ok`; an error denies.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::authorized::RecordReceipt;

/// One of the three answers the Gate can give.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DecisionKind {
    Allow,
    Ask,
    Deny,
}

impl DecisionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::Allow => "allow",
            DecisionKind::Ask => "ask",
            DecisionKind::Deny => "deny",
        }
    }
}

/// What the audit log stores about one decision. Everything here is data the operator
/// needs to reconstruct *why* something ran; secret values are never put into it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// Record kind, e.g. `decision`, `approval`, `execution`.
    pub kind: String,
    pub session: String,
    /// Who proposed or did it ([`crate::principal::Principal`] text form).
    pub principal: String,
    /// Whose authority it ran under.
    pub on_behalf_of: String,
    /// The client or channel it came through ([`crate::principal::Via`]).
    pub via: String,
    /// The canonical action (as JSON) the decision is about.
    pub action: Value,
    pub action_hash: String,
    /// Normalized facts the policy saw.
    pub facts: Value,
    pub decision: DecisionKind,
    /// Human reasons, one per deciding policy or rule.
    pub reasons: Vec<String>,
    /// Ids of the deciding policies.
    pub policies: Vec<String>,
}

/// Failure to durably record. The Gate turns this into a denial.
#[derive(Debug, thiserror::Error)]
#[error("audit append failed: {0}")]
pub struct SinkError(pub String);

/// A durable, append-only destination for decision records.
pub trait DecisionSink {
    /// Append `record` and make it durable (fsync) before returning `Ok`.
    fn record(&mut self, record: &DecisionRecord) -> Result<RecordReceipt, SinkError>;
}
