//! The SQLite implementation of the memory traits.
//!
//! Tables (migration 2): `memory_records` points each record at its current version;
//! `memory_versions` keeps every version with its provenance; `memory_reviews` holds
//! changes waiting for the owner; `memory_schemas` the operator's `task_state` schemas;
//! `memory_fts` (FTS5) indexes the live recall records for ranked search, and
//! `memory_fts_terms` (fts5vocab, migration 3) reads how many of them hold each term.

mod agent;
mod decode;
mod listing;
mod operator;
mod search;
mod versions;

pub use agent::MAX_PENDING_PER_SESSION;
pub use versions::{MAX_KEPT_VERSIONS_PER_RECORD, MAX_VERSIONS_PER_RECORD};
