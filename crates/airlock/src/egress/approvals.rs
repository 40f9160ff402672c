//! The approval hook of a run's egress proxy: a request that a rule marks *ask* becomes a
//! request in the store's approvals queue, where the operator answers it with
//! `airlock approvals approve|deny`.
//!
//! The held request waits while the queue entry is pending, polling the store. It goes on
//! only for an approval of exactly its payload (the stored payload is compared with the
//! held one, and the Gate checks the hash again before it lets the request through). A
//! denial, an expiry, a cancellation by `airlock kill`, or the proxy's ask timeout refuses
//! it; on a timeout the entry is marked denied by `airlock`, so it never lingers as
//! pending. A standing grant for the same payload (`approve --for`) answers at once.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use airlock_agent::agent::grant_pattern;
use airlock_audit::{AuditEvent, AuditLog};
use airlock_core::facts::GateConfig;
use airlock_core::gate::Approval;
use airlock_core::{Action, Attribution, Principal, Via};
use airlock_proxy::{ApprovalHook, ApprovalRequest, BoxFuture};
use airlock_store::{
    ApprovalDecisions, ApprovalError, ApprovalLimits, ApprovalPreview, ApprovalRequests,
    ApprovalStatus, GrantLookup, GrantQueries, NewApproval, SqliteStore, Timestamp,
};
use serde_json::json;

/// How often a held request reads its queue entry again.
const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// How long the Gate's approval record stays valid once read from the queue: long enough
/// to let the held request through at once, no longer.
const APPROVAL_VALIDITY_SECS: u64 = 60;
/// Who decides when nobody answered in time (the name the queue records).
const TIMEOUT_DECIDER: &str = "airlock";

/// The host part that holds egress requests, acting for the run's owner (every run is
/// the owner's until channels bring other principals).
fn holder() -> Attribution {
    Attribution::system("egress-approvals", Principal::Owner, Via::internal())
}

/// Who answered a request, from the name the queue recorded; the holder when that is not
/// a principal (a timeout, or nothing recorded).
fn decider(by: &str) -> Attribution {
    match by.parse::<Principal>() {
        Ok(p) => Attribution {
            principal: p.clone(),
            on_behalf_of: p,
            // The queue is answered from the command line.
            via: Via::cli(),
        },
        Err(_) => holder(),
    }
}

/// Holds *ask* requests in the store's approvals queue until the operator answers.
pub struct QueueApprovals {
    shared: Arc<Shared>,
}

struct Shared {
    /// The hook's own connection, opened at the first *ask* (most runs have none) and
    /// then kept for the whole run. It sees the operator's commits from other processes
    /// as long as nothing in this process closes a descriptor of the database file behind
    /// SQLite's back (see `airlock_store`'s `SqliteStore::open_with`).
    store: OnceLock<Result<SqliteStore, String>>,
    state_dir: PathBuf,
    /// Weak, so that a run's proxy can tell when every audit record it queued is written
    /// (it counts the log's strong holders).
    audit: Weak<Mutex<AuditLog>>,
    limits: ApprovalLimits,
    /// Lifetime of a queue entry; the proxy's ask timeout should be the same.
    timeout: Duration,
    /// The run's Gate configuration, to find scoped grants (`approve --scope`) by the
    /// same pattern the operator's grant was made with.
    gate_config: GateConfig,
}

impl QueueApprovals {
    /// A hook on the store in `state_dir` whose requests expire after `timeout`, rate-limited by `limits`,
    /// recording what happens to each request in `audit`.
    pub fn new(
        state_dir: &Path,
        audit: &Arc<Mutex<AuditLog>>,
        limits: ApprovalLimits,
        timeout: Duration,
        gate_config: GateConfig,
    ) -> QueueApprovals {
        QueueApprovals {
            shared: Arc::new(Shared {
                store: OnceLock::new(),
                state_dir: state_dir.to_path_buf(),
                audit: Arc::downgrade(audit),
                limits,
                timeout,
                gate_config,
            }),
        }
    }
}

impl ApprovalHook for QueueApprovals {
    fn request(&self, req: ApprovalRequest) -> BoxFuture<'static, Option<Approval>> {
        let shared = self.shared.clone();
        Box::pin(async move { shared.hold(req).await })
    }
}

/// Run blocking store and audit work off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

impl Shared {
    /// The queue's store, opened on first use. A store that cannot be opened refuses
    /// every request (nothing is held without a queue entry).
    fn store(&self) -> Result<&SqliteStore, String> {
        self.store
            .get_or_init(|| SqliteStore::open(&self.state_dir).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| format!("cannot open the approvals queue: {e}"))
    }

    fn audit(&self, ev: AuditEvent) {
        if let Some(log) = self.audit.upgrade() {
            let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = log.append(ev) {
                eprintln!("airlock: warning: an egress approval record could not be written: {e}");
            }
        }
    }

    fn approval(&self, approver: Principal, payload_hash: String) -> Approval {
        Approval {
            approver,
            via: Via::cli(),
            payload_hash,
            expires_at: Timestamp::now().as_unix_secs() + APPROVAL_VALIDITY_SECS,
        }
    }

    async fn hold(self: Arc<Self>, req: ApprovalRequest) -> Option<Approval> {
        let action = Action::NetRequest(req.action.clone());
        let this = self.clone();
        let (req2, action2) = (req.clone(), action.clone());
        let created = blocking(move || this.create(&req2, &action2)).await??;
        let request_id = match created {
            Created::Granted(a) => return Some(a),
            Created::Queued(id) => id,
        };
        let mut pending = Pending {
            shared: Some(self.clone()),
            id: request_id.clone(),
            session: req.session.clone(),
        };
        let mut warned = false;
        // An answer from any client wakes the wait at once; the poll is the safety net.
        let watch = airlock_store::ApprovalWatch::new(&self.state_dir)
            .ok()
            .map(Arc::new);
        loop {
            match watch.clone() {
                Some(w) => {
                    if blocking(move || w.wait(POLL_INTERVAL)).await.is_none() {
                        tokio::time::sleep(POLL_INTERVAL).await;
                    }
                }
                None => tokio::time::sleep(POLL_INTERVAL).await,
            }
            let this = self.clone();
            let id = request_id.clone();
            let current = match blocking(move || {
                this.store()
                    .and_then(|s| s.get_approval(&id).map_err(|e| e.to_string()))
            })
            .await
            {
                Some(Ok(current)) => current,
                // Unreadable: keep waiting, the proxy's timeout ends the hold; say so once.
                Some(Err(e)) => {
                    if !std::mem::replace(&mut warned, true) {
                        eprintln!(
                            "airlock: warning: approval request {request_id} could not be read: {e}"
                        );
                    }
                    continue;
                }
                None => continue,
            };
            let status = current.status;
            if status == ApprovalStatus::Pending {
                continue;
            }
            pending.disarm();
            let by = current.decided_by.clone().unwrap_or_default();
            let stored = Action::from_json(&current.payload).ok();
            let answer = (status == ApprovalStatus::Approved
                && stored.as_ref() == Some(&action)
                && current.payload_hash == req.action_hash)
                .then(|| by.parse::<Principal>().ok())
                .flatten()
                .map(|approver| self.approval(approver, current.payload_hash.clone()));
            let outcome = match (status, &answer) {
                (ApprovalStatus::Approved, None) => {
                    "refused: the approved payload differs from the held request"
                }
                (_, Some(_)) => "released",
                _ => "refused",
            };
            let ev = AuditEvent::by("approval_outcome", req.session.as_str(), &decider(&by))
                .with_action(
                    serde_json::to_value(&action).unwrap_or_default(),
                    req.action_hash.clone(),
                )
                .with_detail(json!({
                    "request": request_id, "status": status.as_str(), "decided_by": by,
                    "note": current.note, "outcome": outcome, "via": "egress proxy",
                }));
            let this = self.clone();
            blocking(move || this.audit(ev)).await;
            return answer;
        }
    }

    /// A standing grant, or a new queue entry (audited as requested).
    fn create(&self, req: &ApprovalRequest, action: &Action) -> Option<Created> {
        let now = Timestamp::now();
        // A grant for this exact payload, or a scoped one whose pattern this request has
        // (as the agent loop looks them up).
        let patterns: Vec<String> = grant_pattern(action, &req.policies, &self.gate_config)
            .map(|p| vec![p.pattern])
            .unwrap_or_default();
        let lookup = GrantLookup {
            session_id: &req.session,
            action_kind: action.kind(),
            action_hash: &req.action_hash,
            patterns: &patterns,
        };
        let store = match self.store() {
            Ok(store) => store,
            Err(e) => {
                self.audit(
                    AuditEvent::by("approval_unavailable", req.session.as_str(), &holder())
                        .with_action(
                            serde_json::to_value(action).unwrap_or_default(),
                            req.action_hash.clone(),
                        )
                        .with_detail(json!({"reason": e, "via": "egress proxy"})),
                );
                return None;
            }
        };
        if let Ok(Some(grant)) = store.find_grant(&lookup, now) {
            // A grant whose maker is no valid principal covers nothing: queue instead.
            if let Ok(approver) = grant.created_by.parse::<Principal>() {
                return Some(Created::Granted(
                    self.approval(approver, req.action_hash.clone()),
                ));
            }
        }
        let a = &req.action;
        let new = NewApproval {
            session_id: &req.session,
            action,
            preview: ApprovalPreview::Http {
                method: a.method.clone(),
                url: a.url.clone(),
                body_preview: req.body_preview.clone(),
                headers: airlock_proxy::approval::header_preview(&a.headers),
            },
            reasons: req.reasons.clone(),
            policies: req.policies.clone(),
            expires_at: now.plus(self.timeout),
        };
        let record = |kind: &str, detail: serde_json::Value| {
            AuditEvent::by(kind, req.session.as_str(), &holder())
                .with_action(
                    serde_json::to_value(action).unwrap_or_default(),
                    req.action_hash.clone(),
                )
                .with_detail(detail)
        };
        let created = match store.create_approval(&new, &self.limits, now) {
            Ok(r) => r,
            Err(e) => {
                // Not held, so refused: rate limits, a killed session, a store error.
                let why = match &e {
                    ApprovalError::Store(s) => s.to_string(),
                    e => e.to_string(),
                };
                self.audit(record(
                    "approval_unavailable",
                    json!({"reason": why, "via": "egress proxy"}),
                ));
                return None;
            }
        };
        if created.payload_hash != req.action_hash {
            // The queue would show a different payload than the one held: never ask.
            let _ = store.deny(
                &created.id,
                TIMEOUT_DECIDER,
                Some("payload hash mismatch"),
                now,
            );
            self.audit(record(
                "approval_unavailable",
                json!({"request": created.id, "reason": "the queue's payload hash differs from the held request's"}),
            ));
            return None;
        }
        self.audit(record(
            "approval_requested",
            json!({
                "request": created.id, "reasons": created.reasons,
                "method": a.method, "url": a.url, "body_bytes": a.body_bytes,
                "expires_at": created.expires_at.as_unix_secs(), "via": "egress proxy",
            }),
        ));
        Some(Created::Queued(created.id))
    }

    /// The hold ended without an answer (the proxy's ask timeout, or the run ending):
    /// deny the entry so it never stays pending, and say so in the audit log.
    fn abandon(&self, id: &str, session: &str) {
        let now = Timestamp::now();
        let note = format!(
            "no answer within the approval timeout ({} s)",
            self.timeout.as_secs()
        );
        let Ok(store) = self.store() else {
            return; // nothing was queued without a store
        };
        let status = match store.deny(id, TIMEOUT_DECIDER, Some(&note), now) {
            Ok(_) => "denied",
            Err(ApprovalError::Expired { .. }) => {
                let _ = store.expire_due(now);
                "expired"
            }
            // Answered at the last moment, after the proxy gave up: the request stays
            // refused either way.
            Err(ApprovalError::NotPending { status, .. }) => status.as_str(),
            Err(_) => "unknown",
        };
        self.audit(
            AuditEvent::by("approval_outcome", session, &holder()).with_detail(json!({
                "request": id, "status": status, "decided_by": TIMEOUT_DECIDER,
                "note": note, "outcome": "refused: timed out", "via": "egress proxy",
            })),
        );
    }
}

enum Created {
    Granted(Approval),
    Queued(String),
}

/// A queue entry whose hold is in progress; dropped while armed (the proxy's timeout
/// dropped the hold), it abandons the entry.
struct Pending {
    shared: Option<Arc<Shared>>,
    id: String,
    session: String,
}

impl Pending {
    fn disarm(&mut self) {
        self.shared = None;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let Some(shared) = self.shared.take() else {
            return;
        };
        let (id, session) = (
            std::mem::take(&mut self.id),
            std::mem::take(&mut self.session),
        );
        // Hold the log until the record is written, so the proxy's drain waits for it.
        let log = shared.audit.upgrade();
        let work = move || {
            shared.abandon(&id, &session);
            drop(log);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn_blocking(work);
            }
            Err(_) => work(),
        }
    }
}
