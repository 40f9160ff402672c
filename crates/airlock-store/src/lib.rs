//! # airlock-store — persistence behind traits
//!
//! Sessions and their transcripts, budget counters, the approvals queue and grants, stored
//! so that a conversation resumes after a restart with its taint and budget intact, and so
//! that several processes (the agent waiting on an approval, the CLI granting it) share one
//! database safely.
//!
//! The seams are traits — [`SessionStore`], [`BudgetStore`], [`ApprovalRequests`] and
//! [`GrantQueries`], bundled as the agent's [`Store`], and the operator's
//! [`ApprovalDecisions`], [`GrantAdmin`] and [`OperatorControls`] — so a Postgres backend
//! can follow. The embedded
//! default is [`SqliteStore`]: SQLite compiled in, one file `<state>/airlock.db`, WAL, a
//! busy timeout, and every write in a `BEGIN IMMEDIATE` transaction.
//!
//! ## Architecture invariant
//! Nothing stored is ever loaded by guessing its type: every value is read as the SQL type
//! this build wrote, size-checked, and JSON goes through strict serde into declared types.
//! A malformed row is reported as a [`CorruptRow`] naming its table and row and logged in
//! the quarantine table; it never panics and never stops other rows from working.
//!
//! The agent is handed a [`Store`]; it holds no method that lowers a budget counter,
//! decides an approval, or makes or revokes a grant. Those are in [`OperatorControls`],
//! [`ApprovalDecisions`] and [`GrantAdmin`], which only the operator's side uses.
//!
//! ## Example
//!
//! ```
//! use airlock_store::*;
//! use airlock_core::Action;
//! use std::time::Duration;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let store = SqliteStore::open(dir.path()).unwrap();
//! let now = Timestamp::now();
//!
//! // A session, with its workspace directory created 0700.
//! let session = store.create_session(&NewSession::owner(), now).unwrap();
//! assert!(session.workspace.ends_with("workspace"));
//!
//! // Charge a budget: all-or-nothing against the limits.
//! let limits = BudgetLimits {
//!     per_session: Limits { tool_calls: Some(1), ..Limits::default() },
//!     per_day: Limits::default(),
//! };
//! let call = Usage { tool_calls: 1, ..Usage::default() };
//! store.charge(session.id(), &call, &limits, now).unwrap();
//! let err = store.charge(session.id(), &call, &limits, now).unwrap_err();
//! assert!(matches!(err, ChargeError::Exhausted(e) if e.which == Counter::ToolCalls));
//!
//! // Hold an action for approval; approving returns exactly the stored payload.
//! let action = Action::from_json(r#"{"type":"exec","command":"git push","cwd":""}"#).unwrap();
//! let request = store.create_approval(&NewApproval {
//!     session_id: session.id(),
//!     action: &action,
//!     preview: ApprovalPreview::Command { command: "git push".into(), cwd: "".into() },
//!     reasons: vec!["pushes to a remote".into()],
//!     policies: vec!["ask-on-egress".into()],
//!     expires_at: now.plus(Duration::from_secs(300)),
//! }, &ApprovalLimits::default(), now).unwrap();
//! let approved = store.approve(&request.id, &ApproveRequest {
//!     approver: "owner",
//!     payload_hash: &request.payload_hash,
//!     grant: None,
//! }, now).unwrap();
//! assert_eq!(approved.action, action);
//! ```

mod approval;
mod budget;
mod changes;
mod error;
mod grant;
mod ids;
mod memory;
mod session;
mod sqlite;
mod time;
mod traits;
mod waiter;

pub use approval::{
    ApprovalError, ApprovalLimits, ApprovalPreview, ApprovalRequest, ApprovalStatus,
    ApproveRequest, Approved, NewApproval, RateLimit, MAX_APPROVAL_TTL, MAX_PREVIEW_BYTES,
    MAX_REASONS_BYTES,
};
pub use budget::{
    BudgetExhausted, BudgetLimits, BudgetScope, BudgetState, ChargeError, Counter, Limits, Usage,
};
pub use changes::{signal_approvals_changed, ApprovalWatch, APPROVALS_CHANGED_FILE};
pub use error::{CorruptRow, StoreError};
pub use grant::{
    Grant, GrantLookup, GrantScope, GrantTarget, NewGrant, MAX_GRANT_TTL, MAX_PATTERN_BYTES,
};
pub use ids::{validate_id, MAX_ID_LEN};
pub use memory::*;
pub use session::{
    KillReport, MessageRole, NewSession, ResumedSession, SessionRecord, SessionStatus,
    SessionSummary, TranscriptEntry, TranscriptEvent, TurnUpdate, MAX_EVENT_BYTES, MAX_NAME_BYTES,
    MAX_TAINT_BYTES,
};
pub use sqlite::{
    SqliteStore, StoreOptions, SyncMode, APPLICATION_ID, DATABASE_FILE, SCHEMA_VERSION,
};
pub use time::Timestamp;
pub use traits::{
    ApprovalDecisions, ApprovalRequests, BudgetStore, GrantAdmin, GrantQueries, Listing,
    OperatorControls, QuarantinedRow, SessionStore, Store,
};
