//! The memory seams: what the agent host may do ([`MemoryStore`]) and what only the
//! operator may do ([`MemoryOperator`]). SQLite implements both; a Postgres backend
//! implements the same traits.

use crate::error::StoreError;
use crate::time::Timestamp;
use crate::traits::Listing;

use super::namespace::Namespace;
use super::types::{
    MemoryEntry, MemoryVersion, MemoryWrite, PendingChange, SearchHit, SessionRollback, Tier,
    WriteProvenance,
};

/// Most results one search returns.
pub const MAX_SEARCH_RESULTS: usize = 50;

/// Memory as the agent host uses it. Every method takes the session's [`Namespace`] and
/// touches no row outside it.
pub trait MemoryStore: Send + Sync {
    /// Apply a write the Gate allowed: a new version of the record (created if `id` is
    /// `None`). A `task_state` must match its registered schema.
    fn memory_write(
        &self,
        ns: &Namespace,
        write: &MemoryWrite,
        provenance: &WriteProvenance,
        now: Timestamp,
    ) -> Result<MemoryVersion, StoreError>;

    /// Hold a write the Gate asked about as a change for the owner's review. Nothing
    /// changes until the owner approves it.
    fn memory_propose(
        &self,
        ns: &Namespace,
        write: &MemoryWrite,
        provenance: &WriteProvenance,
        reasons: &[String],
        now: Timestamp,
    ) -> Result<PendingChange, StoreError>;

    /// One live record. A forgotten record is `NotFound`.
    fn memory_get(&self, ns: &Namespace, id: &str) -> Result<MemoryEntry, StoreError>;

    /// Full-text search of the recall tier, best match first (bm25), at most `limit`
    /// (capped at [`MAX_SEARCH_RESULTS`]). The query is words, never FTS syntax. A word in
    /// at least half of all indexed records adds almost nothing to bm25 (under 3e-6 to a
    /// score), so when the query's other words find `limit` records it is left out of the
    /// search and of the scores.
    fn memory_search(
        &self,
        ns: &Namespace,
        query: &str,
        limit: usize,
    ) -> Result<Listing<SearchHit>, StoreError>;

    /// Every live pinned record, oldest first.
    fn memory_pinned(&self, ns: &Namespace) -> Result<Listing<MemoryEntry>, StoreError>;
}

/// Operations for the operator only (the `airlock memory` CLI), never handed to the agent
/// loop. They may cross namespaces, so they are deliberately not in [`MemoryStore`].
pub trait MemoryOperator {
    /// Live records, optionally of one namespace and one tier.
    fn operator_memory_list(
        &self,
        ns: Option<&Namespace>,
        tier: Option<Tier>,
    ) -> Result<Listing<MemoryEntry>, StoreError>;

    /// The current version of a record, even a tombstone.
    fn operator_memory_show(&self, id: &str) -> Result<MemoryVersion, StoreError>;

    /// Every kept version of a record, oldest first.
    fn operator_memory_history(&self, id: &str) -> Result<Listing<MemoryVersion>, StoreError>;

    /// Held changes, oldest first; only pending ones unless `all`.
    fn operator_memory_reviews(&self, all: bool) -> Result<Listing<PendingChange>, StoreError>;

    /// One held change.
    fn operator_memory_review(&self, change: &str) -> Result<PendingChange, StoreError>;

    /// Apply a pending change as a new version. Refused when the record changed since it
    /// was proposed (the diff the owner saw would be stale).
    fn operator_memory_approve(
        &self,
        change: &str,
        by: &str,
        now: Timestamp,
    ) -> Result<MemoryVersion, StoreError>;

    /// Reject a pending change; nothing is written.
    fn operator_memory_reject(
        &self,
        change: &str,
        by: &str,
        now: Timestamp,
    ) -> Result<PendingChange, StoreError>;

    /// Restore a record to version `to` (default: the version before the current one), as
    /// a new version.
    fn operator_memory_rollback(
        &self,
        id: &str,
        to: Option<i64>,
        by: &str,
        now: Timestamp,
    ) -> Result<MemoryVersion, StoreError>;

    /// Undo everything one session wrote: each record it changed goes back to its content
    /// before the session's first write (a tombstone if the session created it), and its
    /// pending changes are rejected.
    fn operator_memory_rollback_session(
        &self,
        session_id: &str,
        by: &str,
        now: Timestamp,
    ) -> Result<SessionRollback, StoreError>;

    /// Delete a record with its whole history and held changes. Returns versions removed.
    fn operator_memory_purge(&self, id: &str) -> Result<usize, StoreError>;

    /// Register (or replace) the JSON Schema `name` for `task_state` records.
    fn operator_memory_register_schema(
        &self,
        name: &str,
        schema: &str,
        by: &str,
        now: Timestamp,
    ) -> Result<(), StoreError>;

    /// Every kept version of every record, by record then version.
    fn operator_memory_export(&self) -> Result<Listing<MemoryVersion>, StoreError>;
}
