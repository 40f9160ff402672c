//! Revoking grants with their records, for `airlock grants revoke` and the kill switch.

use serde_json::json;

use airlock_audit::{AuditEvent, AuditLog};
use airlock_core::terminal_text::escape_line;
use airlock_store::{Grant, GrantAdmin, GrantScope, GrantTarget, Timestamp};

use crate::service::decider::Decider;

/// Revoke every grant in the store and leave one audit record per grant, each `who`'s act.
/// Shared with `airlock kill --all`. Returns how many were revoked.
pub fn revoke_all_recorded(
    store: &impl GrantAdmin,
    log: &mut AuditLog,
    via: &str,
    who: &Decider,
) -> anyhow::Result<usize> {
    let revoked = store
        .revoke_all_grants(Timestamp::now())
        .map_err(|e| anyhow::anyhow!("cannot revoke the grants: {e}"))?;
    for g in &revoked {
        append_revocation(log, g, via, who)?;
    }
    Ok(revoked.len())
}

pub fn append_revocation(
    log: &mut AuditLog,
    g: &Grant,
    via: &str,
    who: &Decider,
) -> anyhow::Result<()> {
    let session = match &g.scope {
        GrantScope::Session { session_id } => session_id.as_str(),
        GrantScope::Rule => "-",
    };
    let ev = AuditEvent::by("grant-revoked", session, &who.attribution()).with_detail(json!({
        "grant": grant_json(g),
        "decided_by": who.detail(),
        "command": via,
    }));
    log.append(ev).map_err(|e| {
        anyhow::anyhow!(
            "grant `{}` was revoked, but its audit record failed: {e}",
            escape_line(&g.id)
        )
    })?;
    Ok(())
}

/// A grant as JSON, for `list --json` and audit records.
pub fn grant_json(g: &Grant) -> serde_json::Value {
    let (scope, session) = match &g.scope {
        GrantScope::Session { session_id } => ("session", Some(session_id.as_str())),
        GrantScope::Rule => ("rule", None),
    };
    let (target, value) = match &g.target {
        GrantTarget::Payload { action_hash, .. } => ("payload", action_hash),
        GrantTarget::Pattern { pattern, .. } => ("pattern", pattern),
    };
    json!({
        "id": g.id,
        "scope": scope,
        "session": session,
        "action_kind": g.target.action_kind(),
        "target": target,
        "value": value,
        "created_by": g.created_by,
        "created_at_ms": g.created_at.as_unix_ms(),
        "expires_at_ms": g.expires_at.as_unix_ms(),
        "approval_id": g.approval_id,
        "uses": g.uses,
        "last_used_at_ms": g.last_used_at.map(|t| t.as_unix_ms()),
    })
}
