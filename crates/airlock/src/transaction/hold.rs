//! A held commit waits in the approvals queue: the same queue `airlock approvals` answers
//! and `airlock chat`/`demo` answer inline. The request's payload is the commit action,
//! whose hash binds the change set's digest; its preview is the rendered change set.
//!
//! Blocking: a commit is settled on the thread that ran the sandbox, after the run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::json;

use airlock_audit::{AuditEvent, AuditLog};
use airlock_core::action::WorkspaceCommitAction;
use airlock_core::gate::{Approval, AskTicket, Session};
use airlock_core::terminal_text::escape_line;
use airlock_core::{Action, Authorized, Principal, Via};
use airlock_store::{
    ApprovalDecisions, ApprovalError, ApprovalLimits, ApprovalPreview, ApprovalRequests,
    ApprovalStatus, NewApproval, SessionStatus, SessionStore, SqliteStore, Timestamp,
    MAX_PREVIEW_BYTES,
};

use crate::home::Home;
use crate::service::exec::lock;

/// How often the held request reads its queue entry again.
const POLL: Duration = Duration::from_millis(200);
/// How long the Gate's approval record stays valid once read: long enough to commit.
const APPROVAL_VALIDITY_SECS: u64 = 60;
/// Who the queue records when the host, not a person, ended a request.
const HOST: &str = "airlock";

/// Where a held commit waits and for how long.
pub struct HoldSettings<'a> {
    pub home: &'a Home,
    pub timeout: Duration,
    pub limits: ApprovalLimits,
    /// Set when the run's caller stopped waiting (the call was cancelled): withdraw.
    pub cancelled: Option<&'a AtomicBool>,
    /// Where the caller is told what is held and how to answer it.
    pub notices: &'a crate::service::caller::Notices,
}

/// Hold `ticket` until the owner approves it (a token), or it is denied, expires, or the
/// session is killed (the reason, for the record).
pub fn hold(
    settings: &HoldSettings<'_>,
    gate: &dyn airlock_agent::agent::GateSource,
    log: &Mutex<AuditLog>,
    session: &Session,
    ticket: AskTicket<WorkspaceCommitAction>,
    rendered: &str,
) -> Result<Authorized<WorkspaceCommitAction>, String> {
    let store = SqliteStore::open(&settings.home.state)
        .map_err(|e| format!("cannot open the approvals queue: {e}"))?;
    let action = Action::WorkspaceCommit(ticket.action().clone());
    let now = Timestamp::now();
    let new = NewApproval {
        session_id: &session.id,
        action: &action,
        preview: ApprovalPreview::FileDiff {
            path: format!("workspace {}", ticket.action().workspace),
            diff: cap(rendered, MAX_PREVIEW_BYTES / 2),
        },
        reasons: ticket.reasons.clone(),
        policies: ticket.policies.clone(),
        expires_at: now.plus(settings.timeout),
    };
    let request = store
        .create_approval(&new, &settings.limits, now)
        .map_err(|e| format!("the commit needs approval, but no request could be made: {e}"))?;
    if request.payload_hash != ticket.action_hash {
        let _ = store.deny(&request.id, HOST, Some("payload hash mismatch"), now);
        return Err("the queue's payload differs from the held commit".into());
    }
    let who = session.attribution().map_err(|e| e.to_string())?;
    append(
        log,
        AuditEvent::by("approval_requested", &session.id, &who)
            .with_action(
                serde_json::to_value(&action).unwrap_or_default(),
                &request.payload_hash,
            )
            .with_detail(json!({"request": request.id, "reasons": request.reasons,
                "expires_at": request.expires_at.as_unix_secs(), "via": "workspace commit"})),
    );
    settings.notices.line(&format!(
        "airlock: the run's changes are held for approval: {}\n  see them: airlock approvals show {}\n  approve:  airlock approvals approve {} --hash {}",
        escape_line(&ticket.reasons.join("; ")),
        request.id,
        request.id,
        request.payload_hash
    ));
    // Made before the first read of the status, so an answer from any client wakes the
    // wait at once; the poll is the safety net.
    let watch = store.approval_watch();
    loop {
        match &watch {
            Some(w) => {
                w.wait(POLL);
            }
            None => std::thread::sleep(POLL),
        }
        let stop = |why: &str| {
            let _ = store.withdraw_approval(&request.id, why, Timestamp::now());
            why.to_string()
        };
        if settings
            .cancelled
            .is_some_and(|c| c.load(Ordering::Acquire))
        {
            return Err(stop("the run's caller stopped waiting"));
        }
        if store
            .get_session(&session.id)
            .is_ok_and(|s| s.status == SessionStatus::Killed)
        {
            return Err(stop("the session was killed"));
        }
        let current = store
            .get_approval(&request.id)
            .map_err(|e| format!("approval request {} could not be read: {e}", request.id))?;
        match current.status {
            ApprovalStatus::Pending => {
                if Timestamp::now() >= request.expires_at {
                    return match store.withdraw_approval(
                        &request.id,
                        "no answer within the approval timeout",
                        Timestamp::now(),
                    ) {
                        Err(ApprovalError::NotPending { .. }) => continue,
                        _ => Err(format!(
                            "no answer within the approval timeout ({} s)",
                            settings.timeout.as_secs()
                        )),
                    };
                }
            }
            ApprovalStatus::Approved => {
                let stored = Action::from_json(&current.payload).ok();
                if stored.as_ref() != Some(&action) || current.payload_hash != ticket.action_hash {
                    return Err("the approved payload differs from the held commit".into());
                }
                // An approval releases the held commit; it does not override a forbid
                // the operator added while it waited.
                let gate = gate.current();
                gate.still_permits(session, &action)?;
                let by = current.decided_by.clone().unwrap_or_default();
                let approver: Principal = by
                    .parse()
                    .map_err(|e| format!("the approval names no valid approver: {e}"))?;
                let approval = Approval {
                    approver,
                    via: Via::cli(),
                    payload_hash: current.payload_hash.clone(),
                    expires_at: Timestamp::now().as_unix_secs() + APPROVAL_VALIDITY_SECS,
                };
                return gate
                    .approve(
                        ticket,
                        &approval,
                        Timestamp::now().as_unix_secs(),
                        &mut *lock(log),
                    )
                    .map_err(|e| e.to_string());
            }
            other => {
                let by = current.decided_by.clone().unwrap_or_default();
                let note = current.note.clone().unwrap_or_default();
                return Err(format!("{} by {by} {note}", other.as_str())
                    .trim()
                    .to_string());
            }
        }
    }
}

/// Append a record; a failure is said, never hidden (the decision itself was recorded by
/// the Gate before anything happened).
pub(crate) fn append(log: &Mutex<AuditLog>, ev: AuditEvent) {
    if let Err(e) = lock(log).append(ev) {
        eprintln!("airlock: warning: a workspace record could not be written: {e}");
    }
}

/// At most `max` bytes of `text`, on a character boundary, with a note when cut.
fn cap(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[change set cut at {max} bytes; the run's layer holds the rest]",
        &text[..end]
    )
}
