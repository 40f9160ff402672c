//! Grants: standing permissions created by an approval, scoped and always expiring.
//!
//! The store matches grants by exact keys only. Deriving a pattern key from an action is
//! done on the Gate's normalized facts (`airlock_agent::agent::grant_pattern`: the asking
//! rules plus a narrow target shape, hashed); the store never interprets a command or a
//! URL, so it cannot be fooled by one.
//!
//! A grant is found only while unrevoked and unexpired at the time of use, only in its
//! own session (or any session for an operator rule), and only while that session is
//! active. A pattern grant made by approving a request also covers that request's exact
//! payload.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::time::Timestamp;

/// Longest a grant may last.
pub const MAX_GRANT_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// Longest pattern key.
pub const MAX_PATTERN_BYTES: usize = 4096;

/// Where a grant applies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "scope", rename_all = "snake_case", deny_unknown_fields)]
pub enum GrantScope {
    /// Only in this session.
    Session { session_id: String },
    /// In every session (an operator rule with an expiry).
    Rule,
}

/// What a grant lets through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "target", rename_all = "snake_case", deny_unknown_fields)]
pub enum GrantTarget {
    /// Exactly this payload again.
    Payload {
        action_kind: String,
        action_hash: String,
    },
    /// Actions of this kind whose pattern key (computed from the Gate's facts) equals
    /// `pattern`, plus the exact payload of the approval that created the grant.
    Pattern {
        action_kind: String,
        pattern: String,
    },
}

impl GrantTarget {
    /// The action type tag the grant is for.
    pub fn action_kind(&self) -> &str {
        match self {
            GrantTarget::Payload { action_kind, .. } | GrantTarget::Pattern { action_kind, .. } => {
                action_kind
            }
        }
    }
}

/// A grant to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewGrant {
    pub scope: GrantScope,
    pub target: GrantTarget,
    /// Principal who granted it.
    pub created_by: String,
    /// Required: a grant always ends. At most [`MAX_GRANT_TTL`] ahead.
    pub expires_at: Timestamp,
}

/// A stored grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub id: String,
    pub scope: GrantScope,
    pub target: GrantTarget,
    pub created_by: String,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    /// The approval request it came from, if any.
    pub approval_id: Option<String>,
    pub revoked_at: Option<Timestamp>,
    /// How many actions it let through (each [`crate::GrantQueries::find_grant`] that
    /// returned it).
    pub uses: u64,
    /// When it last let one through.
    pub last_used_at: Option<Timestamp>,
}

/// What to look a grant up for.
#[derive(Debug, Clone, Copy)]
pub struct GrantLookup<'a> {
    pub session_id: &'a str,
    pub action_kind: &'a str,
    pub action_hash: &'a str,
    /// Pattern keys the Gate derived for this action; any one may match.
    pub patterns: &'a [String],
}
