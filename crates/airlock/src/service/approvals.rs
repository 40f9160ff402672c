//! Deciding a held request: the operator's approve and deny, for `airlock approvals` run
//! embedded and for the host's `/v1/approvals/…` routes alike. The decision is bound to
//! the hash of the payload the store holds (and to the hash the operator saw, when given);
//! a grant always expires; every decision is in the audit log with who made it. The store
//! wakes the waiting call as soon as the decision commits (`airlock_store::ApprovalWatch`).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;

use airlock_agent::agent::{grant_pattern, GrantPattern};
use airlock_audit::AuditEvent;
use airlock_core::terminal_text::escape_line;
use airlock_core::Action;
use airlock_store::{
    ApprovalDecisions, ApprovalError, ApprovalPreview, ApprovalRequest, ApprovalRequests,
    ApprovalStatus, ApproveRequest, GrantScope, GrantTarget, NewGrant, SessionStore, SqliteStore,
    StoreError, Timestamp, MAX_GRANT_TTL,
};

use crate::config;
use crate::home::Home;
use crate::service::decider::Decider;
use crate::service::fault;
use crate::service::record_log::RecordLog;

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

/// A held request as the operator is shown it (`approvals list|show`, the host's
/// `GET /v1/approvals…`). `status` is the effective one: pending past its expiry reads as
/// expired, whatever the store has marked yet.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApprovalView {
    pub id: String,
    pub session_id: String,
    pub action_kind: String,
    /// The canonical JSON of the action: what runs if approved, byte for byte.
    pub payload: String,
    pub payload_hash: String,
    pub preview: ApprovalPreview,
    pub reasons: Vec<String>,
    pub policies: Vec<String>,
    pub status: String,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub decided_by: Option<String>,
    pub note: Option<String>,
}

impl ApprovalView {
    fn of(r: &ApprovalRequest, now: Timestamp) -> ApprovalView {
        let status = match r.status {
            ApprovalStatus::Pending if r.expires_at <= now => "expired",
            s => s.as_str(),
        };
        ApprovalView {
            id: r.id.clone(),
            session_id: r.session_id.clone(),
            action_kind: r.action_kind.clone(),
            payload: r.payload.clone(),
            payload_hash: r.payload_hash.clone(),
            preview: r.preview.clone(),
            reasons: r.reasons.clone(),
            policies: r.policies.clone(),
            status: status.to_string(),
            created_at_ms: r.created_at.as_unix_ms(),
            expires_at_ms: r.expires_at.as_unix_ms(),
            decided_by: r.decided_by.clone(),
            note: r.note.clone(),
        }
    }
}

/// The queue as the operator lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApprovalsListing {
    /// When it was read (ages and expiries count from here).
    pub now_ms: i64,
    pub pending: Vec<ApprovalView>,
    /// Requests whose waiting process is gone: they can never be approved.
    pub orphaned: Vec<ApprovalView>,
    /// Rows that could not be read, each also in the store's quarantine log.
    pub corrupt: Vec<String>,
}

/// One request, as `approvals show` prints it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApprovalShown {
    pub now_ms: i64,
    pub request: ApprovalView,
}

/// The pending and orphaned requests. Listing first marks what is due: a request past its
/// expiry counts as denied, and one whose waiting process is gone as orphaned.
pub fn list(home: &Home, _: &()) -> anyhow::Result<ApprovalsListing> {
    let store = open_store(home).map_err(fault)?;
    let now = Timestamp::now();
    store
        .expire_due(now)
        .map_err(|e| fault(anyhow::anyhow!("cannot expire old requests: {e}")))?;
    store.orphan_abandoned(now).map_err(|e| {
        fault(anyhow::anyhow!(
            "cannot check who waits for the requests: {e}"
        ))
    })?;
    let listing = store
        .pending_approvals(now)
        .map_err(|e| fault(anyhow::anyhow!("cannot list approval requests: {e}")))?;
    let orphaned = store
        .orphaned_approvals(now)
        .map_err(|e| fault(anyhow::anyhow!("cannot list approval requests: {e}")))?;
    Ok(ApprovalsListing {
        now_ms: now.as_unix_ms(),
        pending: listing
            .items
            .iter()
            .map(|r| ApprovalView::of(r, now))
            .collect(),
        orphaned: orphaned
            .items
            .iter()
            .map(|r| ApprovalView::of(r, now))
            .collect(),
        corrupt: listing
            .corrupt
            .iter()
            .chain(&orphaned.corrupt)
            .map(|c| c.to_string())
            .collect(),
    })
}

/// One request by id; an unknown id is the caller's error.
pub fn show(home: &Home, id: &str) -> anyhow::Result<ApprovalShown> {
    let store = open_store(home).map_err(fault)?;
    let r = get(&store, id)?;
    let now = Timestamp::now();
    Ok(ApprovalShown {
        now_ms: now.as_unix_ms(),
        request: ApprovalView::of(&r, now),
    })
}

/// Approve a pending request as the owner at the command line ([`approve_as`]).
pub fn approve(home: &Home, input: &ApproveInput) -> anyhow::Result<Approved> {
    approve_as(home, input, &Decider::cli())
}

/// Approve a pending request, with a grant when `duration` is given, as `who` decides.
pub fn approve_as(home: &Home, input: &ApproveInput, who: &Decider) -> anyhow::Result<Approved> {
    let store = open_store(home).map_err(fault)?;
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
    let cfg = config::load(&home.config_file()).map_err(fault)?;
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
        created_by: who.principal().into(),
        expires_at: now.plus(d),
    });
    // The audit log must be writable before anything is decided.
    let mut log = RecordLog::open(home, &cfg).map_err(fault)?;
    // The decision and its records in one hold of the log (see [`decided_then_recorded`]).
    let approved = decided_then_recorded(&mut log, |log| {
        let approved = store
            .approve(
                id,
                &ApproveRequest {
                    approver: who.principal(),
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
            &who.attribution(),
        )
        .with_action(payload.clone(), approved.request.payload_hash.clone())
        .with_detail(json!({
            "approval_id": approved.request.id,
            "decided_by": who.detail(),
            "grant_id": approved.grant_id,
        }));
        log.append(ev).map_err(|e| {
            fault(anyhow::anyhow!(
                "approved `{id}`, but its audit record failed: {e}"
            ))
        })?;
        if let (Some(g), Some(grant_id)) = (&grant, &approved.grant_id) {
            let ev = AuditEvent::by(
                "grant-created",
                approved.request.session_id.as_str(),
                &who.attribution(),
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
                "decided_by": who.detail(),
            }));
            log.append(ev).map_err(|e| {
                fault(anyhow::anyhow!(
                    "granted `{grant_id}`, but its audit record failed: {e}"
                ))
            })?;
        }
        Ok(approved)
    })?;
    log.close().map_err(|e| fault(anyhow::anyhow!("{e}")))?;
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

/// Deny a pending request as the owner at the command line ([`deny_as`]).
pub fn deny(home: &Home, input: &DenyInput) -> anyhow::Result<Denied> {
    deny_as(home, input, &Decider::cli())
}

/// Deny a pending request, as `who` decides.
pub fn deny_as(home: &Home, input: &DenyInput, who: &Decider) -> anyhow::Result<Denied> {
    let store = open_store(home).map_err(fault)?;
    let id = input.id.as_str();
    let reason = input.reason.as_deref();
    let now = Timestamp::now();
    get(&store, id)?;
    let cfg = config::load(&home.config_file()).map_err(fault)?;
    let mut log = RecordLog::open(home, &cfg).map_err(fault)?;
    let denied = decided_then_recorded(&mut log, |log| {
        let denied = store
            .deny(id, who.principal(), reason, now)
            .map_err(|e| decision_error(id, e))?;
        let payload: serde_json::Value =
            serde_json::from_str(&denied.payload).unwrap_or(serde_json::Value::Null);
        let ev = AuditEvent::by(
            "approval-denied",
            denied.session_id.as_str(),
            &who.attribution(),
        )
        .with_action(payload, denied.payload_hash.clone())
        .with_detail(json!({
            "approval_id": denied.id,
            "decided_by": who.detail(),
            "reason": reason,
        }));
        log.append(ev).map_err(|e| {
            fault(anyhow::anyhow!(
                "denied `{id}`, but its audit record failed: {e}"
            ))
        })?;
        Ok(denied)
    })?;
    log.close().map_err(|e| fault(anyhow::anyhow!("{e}")))?;
    Ok(Denied { id: denied.id })
}

/// Decide in the store and record the decision, in `decide`, with the log held for the
/// whole of it. The decision releases the call that waits for it, and that call records
/// its use of the answer (the Gate's `approval` record). Holding the log's directory lock
/// throughout makes that record wait until the answer's own records are written, through
/// whatever handle it appends (the host's one writer, another the host opened since, or
/// another process's): never the use before the answer.
fn decided_then_recorded<T>(
    log: &mut RecordLog,
    decide: impl FnOnce(&mut airlock_audit::AuditLog) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    log.with(|log| {
        log.holding_lock(decide)
            .map_err(|e| anyhow::anyhow!("{e}"))?
    })
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

// The operator, the store and the inputs, shared with `airlock approvals` and the other
// commands that record the operator's decisions.

/// The principal the local operator decides as.
pub const OPERATOR: &str = "owner";
/// How far a grant reaches beyond the approved payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Matching actions (same asking rule, same target shape) in the session that asked.
    Session,
    /// Matching actions held by the same rule in every session (an operator rule that
    /// expires).
    Rule,
}

/// Open the operator's session database, with an error that names it.
pub fn open_store(home: &Home) -> anyhow::Result<SqliteStore> {
    SqliteStore::open(&home.state).map_err(|e| {
        anyhow::anyhow!(
            "cannot open the session database {}: {e}",
            home.state.join(airlock_store::DATABASE_FILE).display()
        )
    })
}

/// The local operator at the command line, as audit records name them.
pub fn operator() -> airlock_core::Attribution {
    Decider::cli().attribution()
}

/// Who decided at the command line, for audit records: the operator principal and the
/// Unix user behind it ([`Decider::detail`]).
pub fn operator_detail() -> serde_json::Value {
    Decider::cli().detail()
}

pub fn get(store: &SqliteStore, id: &str) -> anyhow::Result<ApprovalRequest> {
    store.get_approval(id).map_err(|e| match e {
        StoreError::NotFound { .. } => anyhow::anyhow!(
            "no approval request `{}`\nhelp: `airlock approvals list` shows the pending ones",
            escape_line(id)
        ),
        e => anyhow::anyhow!("cannot read approval request `{}`: {e}", escape_line(id)),
    })
}

pub fn decision_error(id: &str, e: ApprovalError) -> anyhow::Error {
    match e {
        ApprovalError::NotPending { status, .. } => anyhow::anyhow!(
            "approval request `{}` is already {} and cannot be decided again\nhelp: `airlock approvals show {}` shows who decided",
            escape_line(id),
            status.as_str(),
            escape_line(id)
        ),
        e => anyhow::anyhow!("{e}"),
    }
}

/// A grant's duration: required to be positive and within the store's cap.
pub fn parse_grant_duration(text: &str) -> anyhow::Result<Duration> {
    let d = humantime::parse_duration(text).map_err(|e| {
        anyhow::anyhow!(
            "invalid --for `{}`: {e}\nhelp: give a duration such as 30m, 2h or 1d",
            escape_line(text)
        )
    })?;
    if d < Duration::from_secs(1) {
        anyhow::bail!("--for must be at least 1s\nhelp: a grant lasts a bounded, positive time");
    }
    if d > MAX_GRANT_TTL {
        anyhow::bail!(
            "--for {} is longer than the longest grant ({})\nhelp: grants always expire; use at most {}",
            escape_line(text),
            human(MAX_GRANT_TTL),
            human(MAX_GRANT_TTL)
        );
    }
    Ok(d)
}

/// `45s`, `12m`, `3h`, `2d`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86_399 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_durations_are_bounded() {
        assert_eq!(
            parse_grant_duration("30m").unwrap(),
            Duration::from_secs(1800)
        );
        assert!(parse_grant_duration("0s").is_err());
        assert!(parse_grant_duration("forever").is_err());
        let too_long = format!("{}s", MAX_GRANT_TTL.as_secs() + 1);
        let err = parse_grant_duration(&too_long).unwrap_err().to_string();
        assert!(err.contains("longer than the longest grant"), "{err}");
    }
}
