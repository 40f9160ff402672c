//! # airlock-core — the Gate
//!
//! Decides, never acts: no network, no database, no filesystem writes, no async runtime.
//!
//! An agent *proposes* an [`Action`]. The Gate normalizes it into facts (parsed shell,
//! resolved paths, URL parts, argument provenance), evaluates the operator's Cedar policy
//! with the session's taint, records the decision through a [`DecisionSink`], and only
//! then mints an [`Authorized`] token that executors require.

pub mod action;
pub mod authorized;
pub mod canonical;
pub mod commit_facts;
pub mod shell;
pub mod sink;

pub use action::{Action, ActionError, IntoAction};
pub use authorized::{Authorized, RecordReceipt};
pub use principal::{Attribution, Principal, PrincipalError, Via};
pub use sink::{DecisionKind, DecisionRecord, DecisionSink, SinkError};

pub mod facts;
pub mod gate;
pub mod gate_source;
pub mod header_facts;
pub mod paths;
pub mod policy;
pub mod policy_probe;
pub mod principal;
pub mod provenance;
pub mod schedule;
pub mod terminal_text;
#[cfg(feature = "testing")]
pub mod testing;
pub mod url_facts;
