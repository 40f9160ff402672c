//! Waiting for a human: an `ask` decision becomes a request in the approvals queue, and
//! the loop polls it until it is approved, denied, expired, cancelled or times out.
//!
//! What runs after approval is the held payload, whose hash the approver approved: the
//! stored payload is compared with the held one, and the Gate checks the hash again
//! before it mints the token.

use serde_json::json;

use airlock_audit::AuditEvent;
use airlock_core::gate::{Approval, AskTicket};
use airlock_core::{Action, Attribution, IntoAction, Principal, Via};
use airlock_store::{
    ApprovalError, ApprovalStatus, Grant, GrantLookup, GrantScope, GrantTarget, NewApproval,
    StoreError, Timestamp,
};

use super::call::Authorization;
use super::grant_pattern::grant_pattern;
use super::outcome::{AgentError, Outcome};
use super::preview::preview;
use super::run::{Agent, RunState};
use super::tools::PlannedCall;

/// Role of whoever answers in the approvals queue: only the operator can reach it.
/// The name the approvals queue records when the host, not a person, ended a request.
const HOST_DECIDER: &str = "airlock";
/// How long the Gate's approval record stays valid once read from the queue: long enough
/// to mint the token at once, no longer.
const APPROVAL_VALIDITY_SECS: u64 = 60;

/// How a held action was answered.
pub(crate) struct ApprovalAnswer<A: IntoAction> {
    pub request_id: Option<String>,
    /// Who decided and why, for the transcript.
    pub reasons: Vec<String>,
    pub result: Authorization<A>,
}

impl<A: IntoAction> ApprovalAnswer<A> {
    fn refused(request_id: Option<String>, text: String) -> Self {
        ApprovalAnswer {
            request_id,
            reasons: vec![text.clone()],
            result: Authorization::Refused(text),
        }
    }

    fn stop(request_id: Option<String>, outcome: Outcome) -> Self {
        ApprovalAnswer {
            request_id,
            reasons: vec![],
            result: Authorization::Stop(outcome),
        }
    }
}

impl Agent<'_> {
    pub(crate) async fn await_approval<A: IntoAction>(
        &mut self,
        run: &mut RunState,
        ticket: AskTicket<A>,
        planned: &PlannedCall,
    ) -> Result<ApprovalAnswer<A>, AgentError> {
        let id = run.session.id.clone();
        let action: Action = ticket.action().to_action();
        let now = Timestamp::now();

        // A standing grant answers at once: one for this exact payload, or a scoped one
        // whose pattern (same asking rules, same target shape) this action has. The store
        // only returns grants unexpired at `now` and of this session or an operator rule;
        // the Gate checks the expiry again when it mints the token.
        let patterns: Vec<String> =
            grant_pattern(&action, &ticket.policies, self.gate.current().config())
                .map(|p| vec![p.pattern])
                .unwrap_or_default();
        let lookup = GrantLookup {
            session_id: &id,
            action_kind: action.kind(),
            action_hash: &ticket.action_hash,
            patterns: &patterns,
        };
        if let Some(grant) = self.store.find_grant(&lookup, now)? {
            return self.use_grant(run, ticket, &grant, now);
        }

        let new = NewApproval {
            session_id: &id,
            action: &action,
            preview: preview(planned),
            reasons: ticket.reasons.clone(),
            policies: ticket.policies.clone(),
            expires_at: now.plus(self.config.approval_timeout),
        };
        let request = match self
            .store
            .create_approval(&new, &self.config.approval_limits, now)
        {
            Ok(r) => r,
            Err(ApprovalError::Store(StoreError::SessionKilled { .. })) => {
                return Ok(ApprovalAnswer::stop(None, Outcome::Killed))
            }
            Err(ApprovalError::Store(e)) => return Err(e.into()),
            // Rate limits and other refusals: the action is not held, so it is denied.
            Err(e) => {
                return Ok(ApprovalAnswer::refused(
                    None,
                    format!("this action needs approval, but no request could be made: {e}"),
                ))
            }
        };
        let request_id = Some(request.id.clone());
        self.record(
            AuditEvent::by("approval_requested", &id, &run.session.attribution()?)
                .with_action(
                    serde_json::to_value(&action).unwrap_or_default(),
                    &request.payload_hash,
                )
                .with_detail(json!({
                    "request": request.id,
                    "reasons": request.reasons,
                    "expires_at": request.expires_at.as_unix_secs(),
                })),
        )?;

        // Made before the first read of the status: an answer written from now on wakes
        // the wait at once (any client, any process); the poll is the safety net.
        let mut watch = self.store.approval_watch().map(std::sync::Arc::new);
        loop {
            if self.is_killed(&id)? {
                if self.is_abandoned() {
                    // Nobody waits for the answer any more: the request leaves the queue
                    // rather than wait there, answerable, for its timeout.
                    const WHY: &str =
                        "nobody waits for it any more: its client went away, or the host stopped";
                    match self
                        .store
                        .withdraw_approval(&request.id, WHY, Timestamp::now())
                    {
                        Ok(_) => {
                            self.refuse::<A>(
                                run,
                                request_id.clone(),
                                "withdrawn",
                                HOST_DECIDER,
                                Some(WHY),
                            )?;
                        }
                        Err(ApprovalError::Store(e)) => return Err(e.into()),
                        // Answered, expired or gone meanwhile: nothing waits in the queue.
                        Err(_) => {}
                    }
                }
                return Ok(ApprovalAnswer::stop(request_id, Outcome::Killed));
            }
            let current = self.store.get_approval(&request.id)?;
            match current.status {
                ApprovalStatus::Pending => {
                    if Timestamp::now() >= request.expires_at {
                        match self.store.withdraw_approval(
                            &request.id,
                            "no answer within the approval timeout",
                            Timestamp::now(),
                        ) {
                            // Answered in the meantime: read it again.
                            Err(ApprovalError::NotPending { .. }) => continue,
                            Err(ApprovalError::Expired { .. }) | Ok(_) => {}
                            Err(ApprovalError::Store(e)) => return Err(e.into()),
                            Err(_) => {}
                        }
                        return self.refuse(run, request_id, "expired", HOST_DECIDER, None);
                    }
                    wait_for_an_answer(&mut watch, self.config.approval_poll).await;
                }
                ApprovalStatus::Approved => {
                    let approver = current.decided_by.clone().unwrap_or_default();
                    let stored = Action::from_json(&current.payload).ok();
                    if stored.as_ref() != Some(&action)
                        || current.payload_hash != ticket.action_hash
                    {
                        return self.refuse(
                            run,
                            request_id,
                            "refused",
                            &approver,
                            Some("the approved payload differs from the held action"),
                        );
                    }
                    // The policy may have been tightened while the request waited (the
                    // session reloads it): an approval releases a held action, it does
                    // not override a forbid that came since.
                    if let Err(why) = self.gate.current().still_permits(&run.session, &action) {
                        return self.refuse(run, request_id, "refused", HOST_DECIDER, Some(&why));
                    }
                    let approver = match approver.parse::<Principal>() {
                        Ok(p) => p,
                        Err(e) => {
                            return Ok(ApprovalAnswer::refused(
                                request_id,
                                format!("the approval does not name a valid approver, so the action was not run: {e}"),
                            ))
                        }
                    };
                    let approval = Approval {
                        approver: approver.clone(),
                        // The queue is answered from the command line (`airlock approvals`
                        // or the inline prompt) until a channel records its own.
                        via: Via::cli(),
                        payload_hash: current.payload_hash.clone(),
                        expires_at: Timestamp::now().as_unix_secs() + APPROVAL_VALIDITY_SECS,
                    };
                    let now_secs = Timestamp::now().as_unix_secs();
                    let approved = self.gate.current().approve(
                        ticket,
                        &approval,
                        now_secs,
                        &mut *self.audit_log(),
                    );
                    return Ok(match approved {
                        Ok(t) => ApprovalAnswer {
                            request_id,
                            reasons: vec![format!("approved by {approver}")],
                            result: Authorization::Granted(t),
                        },
                        Err(e) => ApprovalAnswer::refused(request_id, e.to_string()),
                    });
                }
                ApprovalStatus::Denied => {
                    let by = current.decided_by.clone().unwrap_or_default();
                    return self.refuse(run, request_id, "denied", &by, current.note.as_deref());
                }
                ApprovalStatus::Expired => {
                    return self.refuse(run, request_id, "expired", HOST_DECIDER, None);
                }
                // Only a process that is gone is marked orphaned; if this one was taken for
                // gone, nothing will answer the request: refuse rather than wait.
                ApprovalStatus::Orphaned => {
                    return self.refuse(
                        run,
                        request_id,
                        "orphaned",
                        HOST_DECIDER,
                        current.note.as_deref(),
                    );
                }
                ApprovalStatus::Cancelled => {
                    if self.is_killed(&id)? {
                        return Ok(ApprovalAnswer::stop(request_id, Outcome::Killed));
                    }
                    let by = current.decided_by.clone().unwrap_or_default();
                    return self.refuse(run, request_id, "cancelled", &by, current.note.as_deref());
                }
            }
        }
    }

    /// Let a held action through on a standing grant: audit which grant, who made it and
    /// until when, then have the Gate record the approval and mint the token.
    fn use_grant<A: IntoAction>(
        &mut self,
        run: &RunState,
        ticket: AskTicket<A>,
        grant: &Grant,
        now: Timestamp,
    ) -> Result<ApprovalAnswer<A>, AgentError> {
        let action: Action = ticket.action().to_action();
        let (scope, session) = match &grant.scope {
            GrantScope::Session { session_id } => ("session", Some(session_id.as_str())),
            GrantScope::Rule => ("rule", None),
        };
        let matched = match &grant.target {
            GrantTarget::Payload { .. } => "payload",
            GrantTarget::Pattern { .. } => "pattern",
        };
        let approver: Principal = match grant.created_by.parse() {
            Ok(p) => p,
            Err(e) => {
                return Ok(ApprovalAnswer::refused(
                    None,
                    format!(
                        "grant {} does not name a valid approver, so it covers nothing: {e}",
                        grant.id
                    ),
                ))
            }
        };
        self.record(
            AuditEvent::by(
                "grant-used",
                &run.session.id,
                &decider(run, &grant.created_by)?,
            )
            .with_action(
                serde_json::to_value(&action).unwrap_or_default(),
                &ticket.action_hash,
            )
            .with_detail(json!({
                "grant_id": grant.id,
                "granted_by": grant.created_by,
                "approval_id": grant.approval_id,
                "scope": scope,
                "grant_session": session,
                "matched": matched,
                "asked_by": ticket.policies,
                "expires_at_ms": grant.expires_at.as_unix_ms(),
            })),
        )?;
        let approval = Approval {
            approver,
            via: Via::cli(),
            payload_hash: ticket.action_hash.clone(),
            expires_at: grant.expires_at.as_unix_secs(),
        };
        let reason = format!(
            "covered by {scope} grant {} from {} ({matched} match)",
            grant.id, grant.created_by
        );
        let approved = self.gate.current().approve(
            ticket,
            &approval,
            now.as_unix_secs(),
            &mut *self.audit_log(),
        );
        Ok(match approved {
            Ok(t) => ApprovalAnswer {
                request_id: None,
                reasons: vec![reason],
                result: Authorization::Granted(t),
            },
            Err(e) => ApprovalAnswer::refused(None, e.to_string()),
        })
    }

    /// Audit a refused request and build the text the model gets.
    fn refuse<A: IntoAction>(
        &mut self,
        run: &RunState,
        request_id: Option<String>,
        how: &str,
        by: &str,
        note: Option<&str>,
    ) -> Result<ApprovalAnswer<A>, AgentError> {
        self.record(
            AuditEvent::by(
                format!("approval_{how}"),
                &run.session.id,
                &decider(run, by)?,
            )
            .with_detail(json!({
                "request": request_id,
                "decided_by": by,
                "note": note,
            })),
        )?;
        if self.config.end_on_unapproved {
            return Ok(ApprovalAnswer::stop(
                request_id.clone(),
                Outcome::Unapproved {
                    request: request_id,
                    how: how.to_string(),
                    by: by.to_string(),
                },
            ));
        }
        let text = match how {
            "expired" => "the action needed approval and none came before the timeout, so it was not run (treated as denied)".to_string(),
            _ => format!(
                "the action needed approval and was {how} by {by}{}; it was not run",
                note.map(|n| format!(": {n}")).unwrap_or_default()
            ),
        };
        Ok(ApprovalAnswer::refused(request_id, text))
    }
}

/// Who decided a held request, from the name the approvals queue recorded: a person (in
/// strict principal form), or the host itself when a request expired or was orphaned.
fn decider(run: &RunState, by: &str) -> Result<Attribution, AgentError> {
    let on_behalf_of: Principal = run.session.principal.parse()?;
    // A refusal is recorded even when the queue holds no valid decider (the record's
    // detail keeps the name as stored); the host is then the one that refused.
    let Ok(who) = by.parse::<Principal>() else {
        return Ok(Attribution::system(
            "approvals",
            on_behalf_of,
            Via::internal(),
        ));
    };
    Ok(Attribution {
        principal: who.clone(),
        // A person deciding acts on their own authority.
        on_behalf_of: who,
        via: Via::cli(),
    })
}

/// Wait until an approval changes or `poll` passes. The watch waits on a blocking thread
/// (it is one `poll(2)`); without one, or if that thread cannot be had, this only sleeps.
async fn wait_for_an_answer(
    watch: &mut Option<std::sync::Arc<airlock_store::ApprovalWatch>>,
    poll: std::time::Duration,
) {
    let Some(w) = watch.clone() else {
        tokio::time::sleep(poll).await;
        return;
    };
    if tokio::task::spawn_blocking(move || w.wait(poll))
        .await
        .is_err()
    {
        *watch = None;
        tokio::time::sleep(poll).await;
    }
}
