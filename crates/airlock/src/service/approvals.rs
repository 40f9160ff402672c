//! Deciding a held request: the operator's approve and deny, for `airlock approvals` run
//! embedded and for the host's `/v1/approvals/…` routes alike. The decision is bound to
//! the hash of the payload the store holds (and to the hash the operator saw, when given);
//! a grant always expires; every decision is in the audit log with who made it. The store
//! wakes the waiting call as soon as the decision commits (`airlock_store::ApprovalWatch`).

use serde::{Deserialize, Serialize};
use serde_json::json;

use airlock_agent::agent::{grant_pattern, GrantPattern};
use airlock_audit::AuditEvent;
use airlock_core::terminal_text::escape_line;
use airlock_core::Action;
use airlock_store::{
    ApprovalDecisions, ApprovalRequest, ApproveRequest, GrantScope, GrantTarget, NewGrant,
    SessionStore, SqliteStore, Timestamp,
};

use crate::cmd::approvals::{
    decision_error, get, human, open_store, operator, operator_detail, parse_grant_duration, Scope,
    OPERATOR,
};
use crate::home::Home;
use crate::{config, runtime};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApproveInput {
    pub id: String,
    /// Also grant for this long (`30m`, `2h`).
    #[serde(default)]
    pub duration: Option<String>,
    /// Widen the grant (needs `duration`).
    #[serde(default)]
    pub scope: Option<Scope>,
    /// Refuse unless the held payload has this hash.
    #[serde(default)]
    pub hash: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Approved {
    pub id: String,
    pub payload_hash: String,
    pub grant: Option<GrantMade>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GrantMade {
    pub id: String,
    /// What it lets through: the same payload, or the pattern's summary.
    pub matches: String,
    /// For how long, in words.
    pub lasts: String,
    /// Which sessions it reaches, in words.
    pub reach: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DenyInput {
    pub id: String,
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Denied {
    pub id: String,
}

/// Approve a pending request, with a grant when `duration` is given.
pub fn approve(home: &Home, input: &ApproveInput) -> anyhow::Result<Approved> {
    let store = open_store(home)?;
    let id = input.id.as_str();
    if input.scope.is_some() && input.duration.is_none() {
        anyhow::bail!(
            "a grant's scope needs its duration\nhelp: add --for 30m (or another duration)"
        );
    }
    let now = Timestamp::now();
    let request = get(&store, id)?;
    let bound = input
        .duration
        .as_deref()
        .map(parse_grant_duration)
        .transpose()?;
    let cfg = config::load(&home.config_file())?;
    let pattern = match input.scope {
        Some(scope) if bound.is_some() => Some(scoped_pattern(&store, &cfg, &request, scope)?),
        _ => None,
    };
    let grant = bound.map(|d| NewGrant {
        scope: match input.scope {
            Some(Scope::Rule) => GrantScope::Rule,
            Some(Scope::Session) | None => GrantScope::Session {
                session_id: request.session_id.clone(),
            },
        },
        target: match &pattern {
            Some(p) => GrantTarget::Pattern {
                action_kind: request.action_kind.clone(),
                pattern: p.pattern.clone(),
            },
            None => GrantTarget::Payload {
                action_kind: request.action_kind.clone(),
                action_hash: request.payload_hash.clone(),
            },
        },
        created_by: OPERATOR.into(),
        expires_at: now.plus(d),
    });
    // The audit log must be writable before anything is decided.
    let mut log = runtime::open_audit(home, &cfg)?;
    let approved = store
        .approve(
            id,
            &ApproveRequest {
                approver: OPERATOR,
                payload_hash: input.hash.as_deref().unwrap_or(&request.payload_hash),
                grant: grant.clone(),
            },
            now,
        )
        .map_err(|e| decision_error(id, e))?;
    let payload: serde_json::Value =
        serde_json::from_str(&approved.request.payload).unwrap_or(serde_json::Value::Null);
    let ev = AuditEvent::by(
        "approval-granted",
        approved.request.session_id.as_str(),
        &operator(),
    )
    .with_action(payload.clone(), approved.request.payload_hash.clone())
    .with_detail(json!({
        "approval_id": approved.request.id,
        "decided_by": operator_detail(),
        "grant_id": approved.grant_id,
    }));
    log.append(ev)
        .map_err(|e| anyhow::anyhow!("approved `{id}`, but its audit record failed: {e}"))?;
    if let (Some(g), Some(grant_id)) = (&grant, &approved.grant_id) {
        let ev = AuditEvent::by(
            "grant-created",
            approved.request.session_id.as_str(),
            &operator(),
        )
        .with_action(payload, approved.request.payload_hash.clone())
        .with_detail(json!({
            "grant_id": grant_id,
            "approval_id": approved.request.id,
            "scope": g.scope,
            "target": g.target,
            "shape": pattern.as_ref().map(|p| &p.shape),
            "matches": pattern.as_ref().map(|p| &p.summary),
            "expires_at_ms": g.expires_at.as_unix_ms(),
            "decided_by": operator_detail(),
        }));
        log.append(ev).map_err(|e| {
            anyhow::anyhow!("granted `{grant_id}`, but its audit record failed: {e}")
        })?;
    }
    log.close().map_err(|e| anyhow::anyhow!("{e}"))?;
    let grant = match (&approved.grant_id, bound) {
        (Some(grant_id), Some(d)) => Some(GrantMade {
            id: grant_id.clone(),
            matches: match &pattern {
                Some(p) => p.summary.clone(),
                None => "the same payload".into(),
            },
            lasts: human(d),
            reach: match input.scope {
                Some(Scope::Rule) => "every session, when held by the same rule",
                Some(Scope::Session) | None => "this session",
            }
            .into(),
        }),
        _ => None,
    };
    Ok(Approved {
        id: approved.request.id.clone(),
        payload_hash: approved.request.payload_hash.clone(),
        grant,
    })
}

/// Deny a pending request.
pub fn deny(home: &Home, input: &DenyInput) -> anyhow::Result<Denied> {
    let store = open_store(home)?;
    let id = input.id.as_str();
    let reason = input.reason.as_deref();
    let now = Timestamp::now();
    get(&store, id)?;
    let cfg = config::load(&home.config_file())?;
    let mut log = runtime::open_audit(home, &cfg)?;
    let denied = store
        .deny(id, OPERATOR, reason, now)
        .map_err(|e| decision_error(id, e))?;
    let payload: serde_json::Value =
        serde_json::from_str(&denied.payload).unwrap_or(serde_json::Value::Null);
    let ev = AuditEvent::by("approval-denied", denied.session_id.as_str(), &operator())
        .with_action(payload, denied.payload_hash.clone())
        .with_detail(json!({
            "approval_id": denied.id,
            "decided_by": operator_detail(),
            "reason": reason,
        }));
    log.append(ev)
        .map_err(|e| anyhow::anyhow!("denied `{id}`, but its audit record failed: {e}"))?;
    log.close().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Denied { id: denied.id })
}

/// The pattern a scoped grant for `request` matches, computed the way the agent loop
/// computes it for held actions (same Gate configuration for the session's workspace).
fn scoped_pattern(
    store: &SqliteStore,
    cfg: &config::Config,
    request: &ApprovalRequest,
    scope: Scope,
) -> anyhow::Result<GrantPattern> {
    let id = escape_line(&request.id);
    if scope == Scope::Rule && request.policies.is_empty() {
        anyhow::bail!(
            "request `{id}` names no asking rule, so a rule-scoped grant has nothing to bind to\nhelp: use `--scope session`, or `--for` alone for this exact payload"
        );
    }
    let action = Action::from_json(&request.payload)
        .map_err(|e| anyhow::anyhow!("the payload held by `{id}` is not a valid action: {e}"))?;
    let session = store.get_session(&request.session_id).map_err(|e| {
        anyhow::anyhow!(
            "cannot read session `{}` of request `{id}`: {e}",
            escape_line(&request.session_id)
        )
    })?;
    let gate_config = crate::service::check::gate_config(cfg, session.workspace.clone());
    grant_pattern(&action, &request.policies, &gate_config)
        .map_err(|e| anyhow::anyhow!("no scoped grant is possible for `{id}`: {e}"))
}
