//! The storage seams. SQLite implements them today ([`crate::SqliteStore`]); a Postgres
//! backend implements the same traits.
//!
//! All methods take `&self` and are safe to call from many threads; implementations make
//! each call atomic against other threads *and other processes* using the same database.

use crate::approval::{
    ApprovalError, ApprovalLimits, ApprovalRequest, ApproveRequest, Approved, NewApproval,
};
use crate::budget::{BudgetLimits, BudgetState, ChargeError, Usage};
use crate::error::{CorruptRow, StoreError};
use crate::grant::{Grant, GrantLookup, NewGrant};
use crate::session::{
    KillReport, NewSession, ResumedSession, SessionRecord, SessionStatus, SessionSummary,
    TranscriptEntry, TurnUpdate,
};
use crate::time::Timestamp;

/// The rows of a listing that could be read, and a report for each that could not.
#[derive(Debug, Clone)]
pub struct Listing<T> {
    pub items: Vec<T>,
    /// Malformed rows, each also recorded in the quarantine log.
    pub corrupt: Vec<CorruptRow>,
}

/// Sessions and their transcripts.
pub trait SessionStore {
    /// Start a session: insert it and create its workspace directory (mode 0700).
    fn create_session(&self, new: &NewSession, now: Timestamp)
        -> Result<SessionRecord, StoreError>;

    /// One session, with its taint state.
    fn get_session(&self, id: &str) -> Result<SessionRecord, StoreError>;

    /// Create a sub-agent's session under `parent`, which must be active. Every record of
    /// the child then names it (`agent:<child>;parent=<parent>`), and killing the parent
    /// kills the child.
    fn create_child_session(
        &self,
        parent: &str,
        new: &NewSession,
        now: Timestamp,
    ) -> Result<SessionRecord, StoreError>;

    /// How many parents above session `id` (0 for a session nobody spawned).
    fn family_depth(&self, id: &str) -> Result<usize, StoreError>;

    /// Every session below `id`: its sub-agents, theirs, and so on, parents first.
    fn descendants(&self, id: &str) -> Result<Vec<String>, StoreError>;

    /// Sessions, newest first, optionally only those with `status`.
    fn list_sessions(
        &self,
        status: Option<SessionStatus>,
    ) -> Result<Listing<SessionSummary>, StoreError>;

    /// Load a session to continue it: record, whole transcript and budget. A finished
    /// session becomes active again; a killed one is refused.
    fn resume_session(&self, id: &str, now: Timestamp) -> Result<ResumedSession, StoreError>;

    /// Append events and save the taint in one transaction. Returns the last `seq`
    /// written (or the current last one if `turn.events` is empty).
    fn record_turn(
        &self,
        id: &str,
        turn: &TurnUpdate<'_>,
        now: Timestamp,
    ) -> Result<i64, StoreError>;

    /// The whole transcript, in order. Fails on the first malformed entry: a conversation
    /// is never rebuilt with a hole in it.
    fn transcript(&self, id: &str) -> Result<Vec<TranscriptEntry>, StoreError>;

    /// Mark an active session finished.
    fn finish_session(&self, id: &str, now: Timestamp) -> Result<(), StoreError>;

    /// The kill switch's part in the store, in one transaction: the session becomes
    /// `killed` (final), its pending approvals are cancelled and its grants revoked, and
    /// so for every sub-agent below it.
    fn kill_session(&self, id: &str, by: &str, now: Timestamp) -> Result<KillReport, StoreError>;
}

/// Budget counters. There is deliberately no method here that lowers a counter.
pub trait BudgetStore {
    /// Add `usage` to the session's and today's counters if no limit would be passed;
    /// otherwise add nothing and say which limit. Atomic across threads and processes.
    fn charge(
        &self,
        session_id: &str,
        usage: &Usage,
        limits: &BudgetLimits,
        now: Timestamp,
    ) -> Result<BudgetState, ChargeError>;

    /// Add usage that has already happened (for example the real token count reported
    /// after a model call), even past a limit; later charges then fail.
    fn record_spent(
        &self,
        session_id: &str,
        usage: &Usage,
        now: Timestamp,
    ) -> Result<BudgetState, StoreError>;

    /// Current counters for the session and for `now`'s UTC day.
    fn budget_state(&self, session_id: &str, now: Timestamp) -> Result<BudgetState, StoreError>;

    /// What all sessions together have used on `now`'s UTC day.
    fn day_usage(&self, now: Timestamp) -> Result<Usage, StoreError>;

    /// Hand `cap` of session `parent`'s budget to a sub-agent: add it to the parent's
    /// session counters (not the day's: the child's own spending is counted there) if
    /// `limits` (the parent's per-session limits) allow it; otherwise add nothing and say
    /// which limit. The child then runs with `cap` as its own limit, so the family never
    /// spends more than the parent was allowed. What the child leaves unused is not
    /// returned: no counter is ever lowered.
    fn draw_for_child(
        &self,
        parent: &str,
        cap: &Usage,
        limits: &crate::budget::Limits,
        now: Timestamp,
    ) -> Result<BudgetState, ChargeError>;
}

/// The approvals queue as the requester sees it (the agent loop, the proxy's hook): hold an
/// action, read the answer, withdraw the request. Nothing here decides one; see
/// [`ApprovalDecisions`].
pub trait ApprovalRequests {
    /// Hold an action for approval, subject to the per-session rate limits. The calling
    /// process is recorded as the one waiting for the answer.
    fn create_approval(
        &self,
        new: &NewApproval<'_>,
        limits: &ApprovalLimits,
        now: Timestamp,
    ) -> Result<ApprovalRequest, ApprovalError>;

    /// One request, whatever its status.
    fn get_approval(&self, id: &str) -> Result<ApprovalRequest, StoreError>;

    /// Give up waiting for a pending request (its time ran out, say): it becomes expired
    /// if its expiry has passed (then `Err(Expired)`), denied by `airlock` with `reason`
    /// otherwise. Never approves.
    fn withdraw_approval(
        &self,
        id: &str,
        reason: &str,
        now: Timestamp,
    ) -> Result<ApprovalRequest, ApprovalError>;

    /// A watch that wakes when any approval's status changes (or its session is killed),
    /// made before the status it guards is read; `None` when this store cannot tell, and
    /// the waiter polls only.
    fn approval_watch(&self) -> Option<crate::ApprovalWatch> {
        None
    }
}

/// The approvals queue as the operator sees it: list, approve, deny, expire, cancel. Only
/// the binary's operator-side handle has it; the agent's [`Store`] bundle does not.
pub trait ApprovalDecisions {
    /// Requests still pending and unexpired at `now`, oldest first.
    fn pending_approvals(&self, now: Timestamp) -> Result<Listing<ApprovalRequest>, StoreError>;

    /// Approve a pending, unexpired request whose stored hash equals
    /// `req.payload_hash` and whose waiting process still runs. Returns the stored payload
    /// for the caller to run.
    fn approve(
        &self,
        id: &str,
        req: &ApproveRequest<'_>,
        now: Timestamp,
    ) -> Result<Approved, ApprovalError>;

    /// Deny a pending request.
    fn deny(
        &self,
        id: &str,
        by: &str,
        reason: Option<&str>,
        now: Timestamp,
    ) -> Result<ApprovalRequest, ApprovalError>;

    /// Mark orphaned every pending request whose waiting process is gone. Returns how many.
    fn orphan_abandoned(&self, now: Timestamp) -> Result<usize, StoreError>;

    /// Orphaned requests that would not have expired yet at `now`, oldest first.
    fn orphaned_approvals(&self, now: Timestamp) -> Result<Listing<ApprovalRequest>, StoreError>;

    /// Mark every pending request whose expiry has passed as expired. Returns how many.
    fn expire_due(&self, now: Timestamp) -> Result<usize, StoreError>;

    /// Cancel every pending request of a session (kill switch). Returns how many.
    fn cancel_all_for_session(
        &self,
        session_id: &str,
        by: &str,
        now: Timestamp,
    ) -> Result<usize, StoreError>;
}

/// Looking up grants: what the agent loop needs to use one.
pub trait GrantQueries {
    /// An unrevoked grant, unexpired at `now`, that covers the action: same session (or
    /// a rule), same kind, and either the same payload hash or one of the pattern keys.
    /// The caller uses what it finds, so finding one counts as a use of it.
    fn find_grant(
        &self,
        lookup: &GrantLookup<'_>,
        now: Timestamp,
    ) -> Result<Option<Grant>, StoreError>;
}

/// Making, listing and revoking grants: the operator's side only.
pub trait GrantAdmin {
    /// Store a grant. Its expiry must lie in the future and within
    /// [`crate::MAX_GRANT_TTL`].
    fn create_grant(&self, new: &NewGrant, now: Timestamp) -> Result<Grant, StoreError>;

    /// Unrevoked grants unexpired at `now`.
    fn active_grants(&self, now: Timestamp) -> Result<Listing<Grant>, StoreError>;

    /// Revoke one grant. Returns it as it was before (so its revocation can be recorded
    /// with what it allowed), or `None` when it was already revoked.
    fn revoke_grant(&self, id: &str, now: Timestamp) -> Result<Option<Grant>, StoreError>;

    /// Revoke every grant still in force at `now`, of every session and every operator
    /// rule, in one transaction. Returns the grants revoked, as they were before.
    fn revoke_all_grants(&self, now: Timestamp) -> Result<Vec<Grant>, StoreError>;
}

/// A row the store found malformed, as kept in the quarantine log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantinedRow {
    pub table: String,
    pub row: String,
    pub reason: String,
    pub first_seen: Timestamp,
}

/// Operations for the operator only (CLI), never handed to the agent loop. Their names
/// say so, so a call from agent code stands out in review.
pub trait OperatorControls {
    /// Set a session's budget counters back to zero. Returns the counters before.
    fn operator_reset_session_budget(
        &self,
        session_id: &str,
        operator: &str,
        now: Timestamp,
    ) -> Result<Usage, StoreError>;

    /// Set one UTC day's counters back to zero. Returns the counters before.
    fn operator_reset_day_budget(
        &self,
        day: i64,
        operator: &str,
        now: Timestamp,
    ) -> Result<Usage, StoreError>;

    /// Rows found malformed so far.
    fn quarantined_rows(&self) -> Result<Vec<QuarantinedRow>, StoreError>;
}

/// Everything the agent loop needs from storage, and no more: it asks for approvals and
/// reads their answers ([`ApprovalRequests`]) and looks grants up ([`GrantQueries`]), but
/// cannot approve, deny, grant or revoke ([`ApprovalDecisions`], [`GrantAdmin`]) nor reset
/// budgets ([`OperatorControls`]). A `&dyn Store` has no such methods at all:
///
/// ```compile_fail
/// use airlock_store::{ApprovalDecisions, ApproveRequest, Store, Timestamp};
/// fn agent(store: &dyn Store, req: &ApproveRequest<'_>) {
///     let _ = store.approve("a-1", req, Timestamp::now());
/// }
/// ```
///
/// ```compile_fail
/// use airlock_store::{GrantAdmin, NewGrant, Store, Timestamp};
/// fn agent(store: &dyn Store, grant: &NewGrant) {
///     let _ = store.create_grant(grant, Timestamp::now());
/// }
/// ```
///
/// while the agent's own side compiles:
///
/// ```
/// use airlock_store::{ApprovalRequests, GrantLookup, GrantQueries, Store, Timestamp};
/// fn agent(store: &dyn Store, lookup: &GrantLookup<'_>) {
///     let _ = store.get_approval("a-1");
///     let _ = store.withdraw_approval("a-1", "timed out", Timestamp::now());
///     let _ = store.find_grant(lookup, Timestamp::now());
/// }
/// ```
pub trait Store:
    SessionStore + BudgetStore + ApprovalRequests + GrantQueries + Send + Sync
{
}

impl<T: SessionStore + BudgetStore + ApprovalRequests + GrantQueries + Send + Sync> Store for T {}
