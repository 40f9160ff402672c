//! The approvals queue in SQLite.

use airlock_core::action::MAX_ACTION_JSON_BYTES;
use airlock_core::Action;
use rusqlite::{params, Row, Transaction};

use super::decode::{to_json_checked, RowRef};
use super::grants::insert_grant;
use super::sessions::require_active;
use super::SqliteStore;
use crate::approval::{
    ApprovalError, ApprovalLimits, ApprovalPreview, ApprovalRequest, ApprovalStatus,
    ApproveRequest, Approved, NewApproval, MAX_APPROVAL_TTL, MAX_PREVIEW_BYTES, MAX_REASONS_BYTES,
};
use crate::error::{CorruptRow, StoreError};
use crate::grant::{GrantScope, GrantTarget};
use crate::ids::random_id;
use crate::session::MAX_NAME_BYTES;
use crate::time::Timestamp;
use crate::traits::{ApprovalDecisions, ApprovalRequests, Listing};
use crate::waiter::Waiter;

const COLUMNS: &str =
    "id, session_id, action_kind, payload, payload_hash, preview, reasons, policies, \
                       created_at, expires_at, status, decided_by, decided_at, note";

/// Longest note (a denial reason).
const MAX_NOTE_BYTES: usize = 4096;

/// `sha256:` followed by 64 lower-case hex digits.
fn is_hash(s: &str) -> bool {
    s.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

fn decode(row: &Row<'_>) -> Result<ApprovalRequest, CorruptRow> {
    let id = RowRef::new("approvals", "?").text(row, "id", crate::ids::MAX_ID_LEN)?;
    let r = RowRef::new("approvals", id.clone());
    let payload_hash = r.text(row, "payload_hash", 128)?;
    if !is_hash(&payload_hash) {
        return Err(r.corrupt("payload_hash", "not a `sha256:` hash"));
    }
    let preview: ApprovalPreview = r.json(row, "preview", MAX_PREVIEW_BYTES)?;
    Ok(ApprovalRequest {
        session_id: r.text(row, "session_id", crate::ids::MAX_ID_LEN)?,
        action_kind: r.text(row, "action_kind", 64)?,
        payload: r.text(row, "payload", MAX_ACTION_JSON_BYTES)?,
        payload_hash,
        preview,
        reasons: r.json(row, "reasons", MAX_REASONS_BYTES)?,
        policies: r.json(row, "policies", MAX_REASONS_BYTES)?,
        created_at: r.time(row, "created_at")?,
        expires_at: r.time(row, "expires_at")?,
        status: r.name(row, "status", ApprovalStatus::parse)?,
        decided_by: r.opt_text(row, "decided_by", MAX_NAME_BYTES)?,
        decided_at: r.opt_time(row, "decided_at")?,
        note: r.opt_text(row, "note", MAX_NOTE_BYTES)?,
        id,
    })
}

fn load(tx: &Transaction<'_>, id: &str) -> Result<ApprovalRequest, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM approvals WHERE id = ?1");
    let mut stmt = tx.prepare_cached(&sql)?;
    let mut rows = stmt.query([id])?;
    match rows.next()? {
        Some(row) => Ok(decode(row)?),
        None => Err(StoreError::NotFound {
            what: "approval",
            id: id.to_string(),
        }),
    }
}

/// Cancel every pending request of a session. Used by the kill switch.
pub(super) fn cancel_pending(
    tx: &Transaction<'_>,
    session_id: &str,
    by: &str,
    note: &str,
    now: Timestamp,
) -> Result<usize, StoreError> {
    Ok(tx.execute(
        "UPDATE approvals SET status = 'cancelled', decided_by = ?2, decided_at = ?3, note = ?4
         WHERE session_id = ?1 AND status = 'pending'",
        params![session_id, by, now.as_unix_ms(), note],
    )?)
}

/// The process waiting for request `id`, if one was recorded.
fn waiter_of(tx: &Transaction<'_>, id: &str) -> Result<Option<Waiter>, StoreError> {
    let (pid, start): (Option<i64>, Option<i64>) = tx.query_row(
        "SELECT waiter_pid, waiter_start FROM approvals WHERE id = ?1",
        [id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    Ok(pid.map(|pid| to_waiter(pid, start)))
}

/// A waiter from its stored columns; values no process can have name no live process.
fn to_waiter(pid: i64, start: Option<i64>) -> Waiter {
    Waiter {
        pid: u32::try_from(pid).unwrap_or(0),
        start: start
            .and_then(|s| u64::try_from(s).ok())
            .unwrap_or(u64::MAX),
    }
}

fn describe(w: &Waiter) -> String {
    format!("pid {}", w.pid)
}

/// Mark request `id` orphaned: its waiter `w` is gone.
fn mark_orphaned(
    tx: &Transaction<'_>,
    id: &str,
    w: &Waiter,
    now: Timestamp,
) -> Result<(), StoreError> {
    tx.execute(
        "UPDATE approvals SET status = 'orphaned', decided_by = 'airlock', decided_at = ?2, note = ?3
         WHERE id = ?1 AND status = 'pending'",
        params![
            id,
            now.as_unix_ms(),
            format!("the waiting process ({}) is gone", describe(w))
        ],
    )?;
    Ok(())
}

/// Mark orphaned every pending request whose waiter is gone. Returns how many.
fn orphan_abandoned(tx: &Transaction<'_>, now: Timestamp) -> Result<usize, StoreError> {
    let waiting: Vec<(String, i64, Option<i64>)> = {
        let mut stmt = tx.prepare_cached(
            "SELECT id, waiter_pid, waiter_start FROM approvals WHERE status = 'pending' AND waiter_pid IS NOT NULL",
        )?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        rows.collect::<Result<_, _>>()?
    };
    let mut n = 0;
    for (id, pid, start) in waiting {
        let w = to_waiter(pid, start);
        if !w.is_alive() {
            mark_orphaned(tx, &id, &w, now)?;
            n += 1;
        }
    }
    Ok(n)
}

/// Mark one request expired.
fn mark_expired(tx: &Transaction<'_>, id: &str, now: Timestamp) -> Result<(), StoreError> {
    tx.execute(
        "UPDATE approvals SET status = 'expired', decided_at = ?2 WHERE id = ?1 AND status = 'pending'",
        params![id, now.as_unix_ms()],
    )?;
    Ok(())
}

/// Read the stored payload back and prove it is the one that was hashed, so what runs is
/// what the approver saw even if the row was edited after it was created.
fn verified_payload(req: &ApprovalRequest) -> Result<Action, CorruptRow> {
    let r = RowRef::new("approvals", req.id.clone());
    let action = Action::from_json(&req.payload)
        .map_err(|e| r.corrupt("payload", format!("not a valid action: {e}")))?;
    let hash = action
        .hash()
        .map_err(|e| r.corrupt("payload", e.to_string()))?;
    if hash != req.payload_hash || action.kind() != req.action_kind {
        return Err(r.corrupt("payload", "does not match its stored hash or kind"));
    }
    Ok(action)
}

/// What a decision found, so an expiry can be committed and still reported as an error.
enum Decided<T> {
    Done(T),
    Expired,
    Orphaned(Waiter),
}

impl ApprovalRequests for SqliteStore {
    fn create_approval(
        &self,
        new: &NewApproval<'_>,
        limits: &ApprovalLimits,
        now: Timestamp,
    ) -> Result<ApprovalRequest, ApprovalError> {
        if new.expires_at <= now || new.expires_at > now.plus(MAX_APPROVAL_TTL) {
            return Err(StoreError::invalid(
                "expires_at",
                "the expiry must lie after now and at most 7 days ahead",
                "pass the approval timeout from the configuration",
            )
            .into());
        }
        let invalid_action = |e: airlock_core::ActionError| {
            StoreError::invalid(
                "action",
                e.to_string(),
                "hold only actions the Gate accepted",
            )
        };
        new.action.validate().map_err(invalid_action)?;
        let payload = new.action.canonical().map_err(invalid_action)?;
        let payload_hash = new.action.hash().map_err(invalid_action)?;
        let preview = to_json_checked("preview", &new.preview, MAX_PREVIEW_BYTES)?;
        let reasons = to_json_checked("reasons", &new.reasons, MAX_REASONS_BYTES)?;
        let policies = to_json_checked("policies", &new.policies, MAX_REASONS_BYTES)?;
        let id = random_id("a")?;
        let session = new.session_id;
        // The creating process is the one that waits for the answer.
        let waiter = Waiter::current();
        self.write(|tx| {
            require_active(tx, session)?;
            let pending: u64 = tx.query_row(
                "SELECT count(*) FROM approvals WHERE session_id = ?1 AND status = 'pending' AND expires_at > ?2",
                params![session, now.as_unix_ms()],
                |r| r.get(0),
            )?;
            if pending >= u64::from(limits.max_pending_per_session) {
                return Err(ApprovalError::TooManyPending {
                    session: session.to_string(),
                    count: pending,
                    limit: limits.max_pending_per_session,
                });
            }
            let window_start = now.minus(std::time::Duration::from_secs(60));
            let recent: u64 = tx.query_row(
                "SELECT count(*) FROM approvals WHERE session_id = ?1 AND created_at > ?2",
                params![session, window_start.as_unix_ms()],
                |r| r.get(0),
            )?;
            if recent >= u64::from(limits.max_created_per_minute) {
                return Err(ApprovalError::TooManyPerMinute {
                    session: session.to_string(),
                    count: recent,
                    limit: limits.max_created_per_minute,
                });
            }
            tx.execute(
                &format!("INSERT INTO approvals ({COLUMNS}, waiter_pid, waiter_start) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 'pending', NULL, NULL, NULL, ?11, ?12)"),
                params![
                    id,
                    session,
                    new.action.kind(),
                    payload,
                    payload_hash,
                    preview,
                    reasons,
                    policies,
                    now.as_unix_ms(),
                    new.expires_at.as_unix_ms(),
                    waiter.map(|w| i64::from(w.pid)),
                    waiter.and_then(|w| i64::try_from(w.start).ok()),
                ],
            )?;
            Ok(())
        })?;
        Ok(ApprovalRequest {
            id,
            session_id: session.to_string(),
            action_kind: new.action.kind().to_string(),
            payload,
            payload_hash,
            preview: new.preview.clone(),
            reasons: new.reasons.clone(),
            policies: new.policies.clone(),
            created_at: now,
            expires_at: new.expires_at,
            status: ApprovalStatus::Pending,
            decided_by: None,
            decided_at: None,
            note: None,
        })
    }

    fn get_approval(&self, id: &str) -> Result<ApprovalRequest, StoreError> {
        let r = self.read(|tx| load(tx, id));
        self.reported(r)
    }

    fn withdraw_approval(
        &self,
        id: &str,
        reason: &str,
        now: Timestamp,
    ) -> Result<ApprovalRequest, ApprovalError> {
        self.deny_inner(id, "airlock", Some(reason), now)
    }

    fn approval_watch(&self) -> Option<crate::ApprovalWatch> {
        crate::ApprovalWatch::new(&self.state_dir).ok()
    }
}

impl ApprovalDecisions for SqliteStore {
    fn pending_approvals(&self, now: Timestamp) -> Result<Listing<ApprovalRequest>, StoreError> {
        self.list_where("status = 'pending' AND expires_at > ?1", now)
    }

    fn approve(
        &self,
        id: &str,
        req: &ApproveRequest<'_>,
        now: Timestamp,
    ) -> Result<Approved, ApprovalError> {
        let r = self.write(|tx| {
            let mut request = load(tx, id)?;
            if request.status == ApprovalStatus::Orphaned {
                return Err(ApprovalError::Orphaned {
                    id: id.to_string(),
                    waiter: request.note.clone().unwrap_or_else(|| "its waiter".into()),
                });
            }
            if request.status != ApprovalStatus::Pending {
                return Err(ApprovalError::NotPending {
                    id: id.to_string(),
                    status: request.status,
                });
            }
            if now >= request.expires_at {
                mark_expired(tx, id, now)?;
                return Ok(Decided::Expired);
            }
            // Approving a request nobody waits for would report success while nothing runs.
            if let Some(w) = waiter_of(tx, id)?.filter(|w| !w.is_alive()) {
                mark_orphaned(tx, id, &w, now)?;
                return Ok(Decided::Orphaned(w));
            }
            if req.payload_hash != request.payload_hash {
                return Err(ApprovalError::HashMismatch {
                    id: id.to_string(),
                    stored: request.payload_hash.clone(),
                    given: req.payload_hash.to_string(),
                });
            }
            let action = verified_payload(&request)?;
            let grant_id = match &req.grant {
                Some(grant) => {
                    check_grant_fits(grant, &request)?;
                    Some(insert_grant(tx, grant, Some(id), now)?.id)
                }
                None => None,
            };
            tx.execute(
                "UPDATE approvals SET status = 'approved', decided_by = ?2, decided_at = ?3 WHERE id = ?1",
                params![id, req.approver, now.as_unix_ms()],
            )?;
            request.status = ApprovalStatus::Approved;
            request.decided_by = Some(req.approver.to_string());
            request.decided_at = Some(now);
            Ok(Decided::Done(Approved {
                request,
                action,
                grant_id,
            }))
        });
        self.decided(id, r)
    }

    fn deny(
        &self,
        id: &str,
        by: &str,
        reason: Option<&str>,
        now: Timestamp,
    ) -> Result<ApprovalRequest, ApprovalError> {
        self.deny_inner(id, by, reason, now)
    }

    fn orphan_abandoned(&self, now: Timestamp) -> Result<usize, StoreError> {
        let n = self.write(|tx| orphan_abandoned(tx, now))?;
        if n > 0 {
            self.signal_approvals_changed();
        }
        Ok(n)
    }

    fn orphaned_approvals(&self, now: Timestamp) -> Result<Listing<ApprovalRequest>, StoreError> {
        self.list_where("status = 'orphaned' AND expires_at > ?1", now)
    }

    fn expire_due(&self, now: Timestamp) -> Result<usize, StoreError> {
        let n: usize = self.write(|tx| {
            Ok::<_, StoreError>(tx.execute(
                "UPDATE approvals SET status = 'expired', decided_at = ?1 WHERE status = 'pending' AND expires_at <= ?1",
                [now.as_unix_ms()],
            )?)
        })?;
        if n > 0 {
            self.signal_approvals_changed();
        }
        Ok(n)
    }

    fn cancel_all_for_session(
        &self,
        session_id: &str,
        by: &str,
        now: Timestamp,
    ) -> Result<usize, StoreError> {
        let n = self
            .write(|tx| cancel_pending(tx, session_id, by, "cancelled by the kill switch", now))?;
        self.signal_approvals_changed();
        Ok(n)
    }
}

impl SqliteStore {
    /// Deny a pending request (an operator's answer, or a requester withdrawing).
    fn deny_inner(
        &self,
        id: &str,
        by: &str,
        reason: Option<&str>,
        now: Timestamp,
    ) -> Result<ApprovalRequest, ApprovalError> {
        if reason.is_some_and(|r| r.len() > MAX_NOTE_BYTES) {
            return Err(StoreError::invalid(
                "reason",
                "too long",
                format!("keep it under {MAX_NOTE_BYTES} bytes"),
            )
            .into());
        }
        let r = self.write(|tx| {
            let mut request = load(tx, id)?;
            if request.status != ApprovalStatus::Pending {
                return Err(ApprovalError::NotPending {
                    id: id.to_string(),
                    status: request.status,
                });
            }
            if now >= request.expires_at {
                mark_expired(tx, id, now)?;
                return Ok(Decided::Expired);
            }
            tx.execute(
                "UPDATE approvals SET status = 'denied', decided_by = ?2, decided_at = ?3, note = ?4 WHERE id = ?1",
                params![id, by, now.as_unix_ms(), reason],
            )?;
            request.status = ApprovalStatus::Denied;
            request.decided_by = Some(by.to_string());
            request.decided_at = Some(now);
            request.note = reason.map(str::to_string);
            Ok(Decided::Done(request))
        });
        self.decided(id, r)
    }

    /// Requests matching `condition` (in which `?1` is `now`), oldest first.
    fn list_where(
        &self,
        condition: &str,
        now: Timestamp,
    ) -> Result<Listing<ApprovalRequest>, StoreError> {
        let listing = self.read(|tx| {
            let sql = format!(
                "SELECT {COLUMNS} FROM approvals WHERE {condition} ORDER BY created_at, id"
            );
            let mut stmt = tx.prepare_cached(&sql)?;
            let mut rows = stmt.query([now.as_unix_ms()])?;
            let mut listing = Listing {
                items: Vec::new(),
                corrupt: Vec::new(),
            };
            while let Some(row) = rows.next()? {
                match decode(row) {
                    Ok(a) => listing.items.push(a),
                    Err(c) => listing.corrupt.push(c),
                }
            }
            Ok(listing)
        })?;
        self.quarantine(&listing.corrupt);
        Ok(listing)
    }

    /// Turn a committed expiry into its error, and log a malformed row.
    fn decided<T>(
        &self,
        id: &str,
        r: Result<Decided<T>, ApprovalError>,
    ) -> Result<T, ApprovalError> {
        if r.is_ok() {
            // Decided, expired or orphaned: the status changed, so its waiter may go on.
            self.signal_approvals_changed();
        }
        match r {
            Ok(Decided::Done(t)) => Ok(t),
            Ok(Decided::Expired) => Err(ApprovalError::Expired { id: id.to_string() }),
            Ok(Decided::Orphaned(w)) => Err(ApprovalError::Orphaned {
                id: id.to_string(),
                waiter: describe(&w),
            }),
            Err(e) => {
                if let ApprovalError::Store(StoreError::CorruptRow(c)) = &e {
                    self.quarantine(std::slice::from_ref(c));
                }
                Err(e)
            }
        }
    }
}

/// A grant made while approving must be about the approved action and its session.
fn check_grant_fits(
    grant: &crate::grant::NewGrant,
    request: &ApprovalRequest,
) -> Result<(), StoreError> {
    let refuse = |reason: &str| {
        StoreError::invalid("grant", reason.to_string(), "grant only what was approved")
    };
    if let GrantScope::Session { session_id } = &grant.scope {
        if *session_id != request.session_id {
            return Err(refuse(
                "a session grant must be for the approval's own session",
            ));
        }
    }
    if grant.target.action_kind() != request.action_kind {
        return Err(refuse("the grant is for another kind of action"));
    }
    if let GrantTarget::Payload { action_hash, .. } = &grant.target {
        if *action_hash != request.payload_hash {
            return Err(refuse(
                "a payload grant must name the approved payload's hash",
            ));
        }
    }
    Ok(())
}
