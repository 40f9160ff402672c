//! How a turn ends, and the errors that stop it before it can end normally.

use airlock_core::DecisionKind;
use airlock_store::{BudgetExhausted, BudgetScope, Counter, StoreError};

use crate::provider::ProviderError;

/// Which limit a run reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitKind {
    /// A budget counter (turns, tokens, cost, wall time, tool calls).
    Budget(Counter),
    /// Too many calls of one tool within a minute.
    ToolRate { tool: String },
    /// The same action proposed too many times in a row.
    RepeatedAction { action_hash: String },
}

/// Where a limit applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitScope {
    Session,
    Day,
    /// Within one run of the loop.
    Run,
}

/// How a turn ended.
#[derive(Debug)]
pub enum Outcome {
    /// The model stopped calling tools; its final text.
    Completed { text: String },
    /// A limit was reached. `help` names the `airlock.toml` key that raises it.
    BudgetExhausted {
        which: LimitKind,
        scope: LimitScope,
        limit: u64,
        used: u64,
        help: String,
    },
    /// The session was killed.
    Killed,
    /// A held action was not approved and the session ends its turn there
    /// ([`crate::agent::AgentConfig::end_on_unapproved`]).
    Unapproved {
        /// The approval request, when the action reached the queue.
        request: Option<String>,
        /// `denied`, `expired`, `refused`, `cancelled` or `orphaned`.
        how: String,
        /// Who decided (`airlock` when nobody answered in time).
        by: String,
    },
    /// The model call failed; everything committed before it is kept.
    ProviderFailed(ProviderError),
}

impl Outcome {
    pub(crate) fn from_budget(e: &BudgetExhausted) -> Outcome {
        let scope = match e.scope {
            BudgetScope::Session => LimitScope::Session,
            BudgetScope::Day => LimitScope::Day,
        };
        Outcome::budget(Counter::clone(&e.which), scope, e.limit, e.used)
    }

    pub(crate) fn budget(which: Counter, scope: LimitScope, limit: u64, used: u64) -> Outcome {
        let table = match scope {
            LimitScope::Day => "per_day",
            _ => "per_session",
        };
        Outcome::BudgetExhausted {
            which: LimitKind::Budget(which),
            scope,
            limit,
            used,
            help: format!(
                "the {} budget is used up ({used} of {limit}); the operator can raise `{}` under `[budget.{table}]` in airlock.toml",
                which.as_str(),
                which.as_str()
            ),
        }
    }

    /// What a third party (a member's or a group's chat, a webhook's endpoint) is told of
    /// a turn that did not complete: fixed words only. [`Outcome::summary`] carries text
    /// the model chose (a made-up tool's name in a limit's help) and a provider's error,
    /// and no Gate decision lets such text out to someone other than the owner.
    pub fn summary_for_others(&self) -> &'static str {
        match self {
            Outcome::Completed { .. } => "(the turn completed)",
            Outcome::BudgetExhausted { .. } => "(the turn ended early: a limit was reached)",
            Outcome::Killed => "(the turn was stopped)",
            Outcome::Unapproved { .. } => "(the turn ended at an action that was not approved)",
            Outcome::ProviderFailed(_) => "(the turn failed)",
        }
    }

    /// A one-line summary for logs and the audit record.
    pub fn summary(&self) -> String {
        match self {
            Outcome::Completed { .. } => "completed".into(),
            Outcome::BudgetExhausted { help, .. } => format!("limit reached: {help}"),
            Outcome::Killed => "killed".into(),
            Outcome::Unapproved { request, how, by } => format!(
                "ended: held action {} was {how} (by {by}), and this run ends at an unapproved action",
                request.as_deref().unwrap_or("(not queued)")
            ),
            Outcome::ProviderFailed(e) => format!("provider failed: {e}"),
        }
    }
}

/// One tool call of the turn, as decided and run.
#[derive(Debug, Clone)]
pub struct ToolCallReport {
    pub call_id: String,
    pub tool: String,
    /// The Gate's decision; `None` when the call was refused before reaching the Gate.
    pub decision: Option<DecisionKind>,
    /// The approval request, when the Gate asked.
    pub approval_id: Option<String>,
    /// Whether the action ran.
    pub executed: bool,
    /// What the model was told.
    pub result: String,
    pub is_error: bool,
}

/// Everything a turn did.
#[derive(Debug)]
pub struct TurnReport {
    pub outcome: Outcome,
    pub tool_calls: Vec<ToolCallReport>,
    /// Model calls made in this turn.
    pub model_calls: u32,
}

/// What stops a turn without an [`Outcome`]: the host itself could not go on safely.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("session store: {0}")]
    Store(#[from] StoreError),
    #[error(
        "audit log: {0}\nhelp: check that the audit directory is writable and the disk is not full"
    )]
    Audit(#[from] airlock_audit::AuditError),
    /// The Gate could not record a decision (its reason says why and what to do): every
    /// further action would be denied the same way, so the turn stops here.
    #[error("audit log: {0}")]
    Unrecorded(String),
    #[error("the Gate decides for workspace {gate}, but session `{session}` uses {workspace}\nhelp: build the Gate with the session's workspace")]
    WorkspaceMismatch {
        session: String,
        gate: String,
        workspace: String,
    },
    #[error("session `{0}` has been killed and cannot run\nhelp: start a new session")]
    SessionKilled(String),
    #[error("the session workspace cannot be opened: {0}")]
    Workspace(#[from] super::workspace::FileToolError),
    #[error("stored transcript of session `{session}` is not usable: {detail}")]
    Transcript { session: String, detail: String },
    #[error("an audit record cannot name who acted: {0}")]
    Principal(#[from] airlock_core::PrincipalError),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A made-up tool's name is the model's choice, and so may carry data: the owner is
    /// told it, a third party is not.
    #[test]
    fn a_third_party_is_told_no_word_the_model_chose() {
        let data = "exfil_c2VjcmV0LXBhc3N3b3Jk";
        let rate = Outcome::BudgetExhausted {
            which: LimitKind::ToolRate {
                tool: data.to_string(),
            },
            scope: LimitScope::Run,
            limit: 60,
            used: 60,
            help: format!("`{data}` was called 60 times within a minute"),
        };
        assert!(rate.summary().contains(data));
        let unapproved = Outcome::Unapproved {
            request: Some(data.to_string()),
            how: "denied".into(),
            by: "owner".into(),
        };
        for outcome in [rate, unapproved, Outcome::Killed] {
            let told = outcome.summary_for_others();
            assert!(!told.contains(data), "{told}");
            assert!(told.starts_with("(the turn"), "{told}");
        }
    }
}
