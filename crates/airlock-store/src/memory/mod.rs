//! Typed, versioned, provenance-tagged memory.
//!
//! Records have declared kinds ([`MemoryRecord`]) read only through strict serde, live in a
//! [`Namespace`] that every query filters on, and sit in one of two tiers: *pinned*
//! (loaded into every session's context) and *recall* (searched with FTS5, ranked by
//! bm25). Every change is a new version carrying its [`WriteProvenance`]; forgetting is a
//! tombstone version, so it can be undone. Changes the Gate asks about are held as
//! [`PendingChange`]s until the owner approves them.
//!
//! The agent host uses [`MemoryStore`]; review, rollback, purge and export are in
//! [`MemoryOperator`], which only the operator's CLI uses.
//!
//! ```
//! use airlock_store::*;
//! let dir = tempfile::tempdir().unwrap();
//! let store = SqliteStore::open(dir.path()).unwrap();
//! let ns = Namespace::new("airlock", "owner").unwrap();
//! let by = WriteProvenance {
//!     session_id: "s-1".into(), principal: "owner".into(), tainted: false,
//!     tool_call_id: "call-1".into(),
//! };
//! let note = MemoryRecord::Note(Note { text: "The build uses cargo nextest".into() });
//! let write = MemoryWrite { id: None, tier: Tier::Recall, change: MemoryChange::Put(note) };
//! let v = store.memory_write(&ns, &write, &by, Timestamp::now()).unwrap();
//! let hits = store.memory_search(&ns, "nextest", 5).unwrap();
//! assert_eq!(hits.items[0].entry.record_id, v.record_id);
//! ```

mod namespace;
mod record;
mod retention;
mod schemas;
mod sqlite;
mod traits;
mod types;

pub use namespace::{Namespace, MAX_NAMESPACE_PART};
pub use record::{
    AddressKind, Contact, ContactAddress, Fact, MemoryKind, MemoryRecord, Note, Preference,
    TaskState, MAX_ADDRESSES, MAX_RECORD_BYTES, MAX_SHORT_BYTES, MAX_TEXT_BYTES,
};
pub use retention::{MemoryClock, MemoryRetention, MAX_RETENTION_DAYS};
pub use schemas::MAX_SCHEMA_BYTES;
pub use sqlite::{MAX_KEPT_VERSIONS_PER_RECORD, MAX_PENDING_PER_SESSION, MAX_VERSIONS_PER_RECORD};
pub use traits::{MemoryOperator, MemoryStore, MAX_SEARCH_RESULTS};
pub use types::{
    MemoryChange, MemoryEntry, MemoryVersion, MemoryWrite, PendingChange, ReviewStatus, SearchHit,
    SessionRollback, Tier, VersionOrigin, WriteProvenance, MAX_MEMORY_ID,
};
