//! Who reaches a session from a chat platform, and who is bound to a role on it, are Gate
//! decisions (`channel.admit`, `channel.bind`), recorded before they take effect like any
//! other: so `airlock audit tail` shows every message let in or dropped, every pairing and
//! every member change, with the policy that decided it, and an operator's policy can
//! forbid more than the shipped one does (`crates/airlock-core/policy/base.cedar`,
//! "Chat channels").
//!
//! The host fills these actions from the channel's own state; a model never proposes
//! them. Messages dropped for their rate are not asked of the Gate: a flood would
//! otherwise be a flood of synced records (`host::chat_limits` records them sparsely).

use airlock_audit::{AuditEvent, AuditLog};
use airlock_core::action::{ChannelAdmitAction, ChannelBindAction};
use airlock_core::gate::{Approval, AskTicket, Gate, Session, Verdict};
use airlock_core::provenance::TaintState;
use airlock_core::{Attribution, Authorized, IntoAction, Principal, Via};
use serde_json::json;

/// How long an owner's answer about a held sender is good for once given: it is used at
/// once, so a minute only covers a slow disk.
const ANSWER_VALID_SECS: u64 = 60;

/// The session id of a channel's own decisions (they belong to no conversation).
pub fn channel_session_id(channel: &str) -> String {
    format!("channel-{channel}")
}

/// The session a channel decision is made in: acting for the owner, proposed by `actor`
/// (`system:channel` for what the host does on a platform's event, the owner for the
/// command line), through `via`.
fn channel_session(channel: &str, actor: Principal, via: Via) -> Session {
    Session {
        id: channel_session_id(channel),
        principal: "owner".into(),
        role: "owner".into(),
        taint: TaintState::new(),
        via,
        actor: Some(actor),
    }
}

/// `system:channel`, the host acting on a platform's event.
pub fn channel_actor() -> Principal {
    Principal::System {
        part: "channel".into(),
    }
}

/// The `via` of a channel's name (`telegram`, …); `internal` if it is not a valid name,
/// which the configured names always are.
pub fn via_of(channel: &str) -> Via {
    channel.parse().unwrap_or_else(|_| Via::internal())
}

/// Decide `action` with `gate`, recorded in `log` before the verdict is returned (a
/// record that fails refuses the action: the Gate fails closed).
pub fn decide<A: IntoAction>(
    log: &mut AuditLog,
    gate: &Gate,
    channel: &str,
    actor: Principal,
    via: Via,
    action: A,
) -> Verdict<A> {
    let session = channel_session(channel, actor, via);
    gate.decide(&session, action, log)
}

/// The owner answered "let them in" to a held admission: the approval is recorded and
/// the admission token minted (or refused, if it no longer matches the held payload).
pub fn approve_admission(
    log: &mut AuditLog,
    gate: &Gate,
    ticket: AskTicket<ChannelAdmitAction>,
    approver: Principal,
    via: Via,
) -> anyhow::Result<Authorized<ChannelAdmitAction>> {
    let now = crate::runtime::now_unix();
    let approval = Approval {
        approver,
        via,
        payload_hash: ticket.action_hash.clone(),
        expires_at: now + ANSWER_VALID_SECS,
    };
    gate.approve(ticket, &approval, now, log)
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// The owner ignored a held sender, or did not answer in time: recorded against the
/// held payload's hash, as any refused approval is.
pub fn refuse_admission(
    log: &mut AuditLog,
    ticket: &AskTicket<ChannelAdmitAction>,
    who: &Attribution,
    reason: &str,
) -> anyhow::Result<()> {
    let action = serde_json::to_value(ticket.action().to_action()).unwrap_or_default();
    log.append(
        AuditEvent::by("approval-denied", &ticket.session, who)
            .with_action(action, ticket.action_hash.clone())
            .with_detail(json!({"reason": reason})),
    )
    .map_err(|e| anyhow::anyhow!("recording the refused sender failed: {e}"))?;
    Ok(())
}

/// The `channel.bind` of `user` to `role` on `channel`.
pub fn bind_action(channel: &str, user: &str, role: &str, how: &str) -> ChannelBindAction {
    ChannelBindAction {
        channel: channel.into(),
        user: user.into(),
        role: role.into(),
        how: how.into(),
    }
}

/// The reasons of a refusal, on one line, for the operator or the log.
pub fn refusal_text(reasons: &[String]) -> String {
    if reasons.is_empty() {
        "no policy permits it".into()
    } else {
        reasons.join("; ")
    }
}
