//! Reading memory rows strictly: every column as the SQL type this build wrote,
//! size-checked, and the body through the kind's own struct. A `task_state` is checked
//! against its registered schema again on the way out. A row that fails any check is a
//! [`CorruptRow`]; it is never half-loaded.

use rusqlite::{OptionalExtension, Row, Transaction};
use serde_json::Value;

use crate::error::{CorruptRow, StoreError};
use crate::memory::namespace::Namespace;
use crate::memory::record::{MemoryKind, MemoryRecord, MAX_RECORD_BYTES};
use crate::memory::schemas::validate_state;
use crate::memory::types::{
    MemoryVersion, PendingChange, ReviewStatus, Tier, VersionOrigin, WriteProvenance, MAX_MEMORY_ID,
};
use crate::session::MAX_NAME_BYTES;
use crate::sqlite::decode::RowRef;

/// Columns of `memory_versions`, in the order [`decode_version`] reads them (by name).
pub(crate) const VERSION_COLUMNS: &str = "v.record_id, v.version, v.namespace, v.tier, v.kind, v.body, v.session_id, v.principal, v.tainted, v.tool_call_id, v.written_at, v.origin, v.actor";

/// Columns of `memory_reviews`.
pub(crate) const REVIEW_COLUMNS: &str = "id, namespace, record_id, base_version, tier, kind, body, session_id, principal, tainted, tool_call_id, requested_at, reasons, status, decided_by, decided_at";

/// Largest stored list of reasons.
const MAX_REASONS_BYTES: usize = 8 * 1024;

/// The `kind` column of a tombstone version.
pub(crate) const TOMBSTONE: &str = "forgotten";

fn namespace(r: &RowRef, row: &Row<'_>) -> Result<Namespace, CorruptRow> {
    let text = r.text(row, "namespace", 2 * 64 + 1)?;
    Namespace::parse(&text).map_err(|_| r.corrupt("namespace", "not a valid namespace"))
}

/// The record in `kind`/`body`, or `None` for a tombstone.
fn record(r: &RowRef, row: &Row<'_>) -> Result<Option<MemoryRecord>, CorruptRow> {
    let kind = r.text(row, "kind", 32)?;
    let body = r.opt_text(row, "body", MAX_RECORD_BYTES)?;
    match (kind.as_str(), body) {
        (TOMBSTONE, None) => Ok(None),
        (TOMBSTONE, Some(_)) => Err(r.corrupt("body", "a forgotten version holds a body")),
        (_, None) => Err(r.corrupt("body", "missing")),
        (name, Some(body)) => {
            let kind = MemoryKind::parse(name).ok_or_else(|| {
                r.corrupt("kind", format!("unknown kind `{}`", name.escape_debug()))
            })?;
            MemoryRecord::from_parts(kind, &body)
                .map(Some)
                .map_err(|e| r.corrupt("body", format!("not a valid {name}: {e}")))
        }
    }
}

fn provenance(r: &RowRef, row: &Row<'_>) -> Result<WriteProvenance, CorruptRow> {
    Ok(WriteProvenance {
        session_id: r.text(row, "session_id", MAX_MEMORY_ID)?,
        principal: r.text(row, "principal", MAX_NAME_BYTES)?,
        tainted: r.flag(row, "tainted")?,
        tool_call_id: r.text(row, "tool_call_id", 256)?,
    })
}

fn tier(r: &RowRef, row: &Row<'_>) -> Result<Tier, CorruptRow> {
    r.name(row, "tier", Tier::parse)
}

/// One `memory_versions` row.
pub(crate) fn decode_version(row: &Row<'_>) -> Result<MemoryVersion, CorruptRow> {
    let probe = RowRef::new("memory_versions", "?");
    let record_id = probe.text(row, "record_id", MAX_MEMORY_ID)?;
    let version = RowRef::new("memory_versions", format!("{record_id}@?")).int(row, "version")?;
    let r = RowRef::new("memory_versions", format!("{record_id}@{version}"));
    Ok(MemoryVersion {
        namespace: namespace(&r, row)?,
        tier: tier(&r, row)?,
        record: record(&r, row)?,
        provenance: provenance(&r, row)?,
        written_at: r.time(row, "written_at")?,
        origin: r.name(row, "origin", VersionOrigin::parse)?,
        actor: r.opt_text(row, "actor", MAX_NAME_BYTES)?,
        record_id,
        version,
    })
}

/// One `memory_reviews` row.
pub(crate) fn decode_review(row: &Row<'_>) -> Result<PendingChange, CorruptRow> {
    let id = RowRef::new("memory_reviews", "?").text(row, "id", MAX_MEMORY_ID)?;
    let r = RowRef::new("memory_reviews", id.clone());
    let base_version = match row.get_ref("base_version") {
        Ok(rusqlite::types::ValueRef::Null) => None,
        Ok(rusqlite::types::ValueRef::Integer(i)) => Some(i),
        _ => return Err(r.corrupt("base_version", "expected integer or null")),
    };
    Ok(PendingChange {
        namespace: namespace(&r, row)?,
        record_id: r.text(row, "record_id", MAX_MEMORY_ID)?,
        base_version,
        tier: tier(&r, row)?,
        record: record(&r, row)?,
        provenance: provenance(&r, row)?,
        requested_at: r.time(row, "requested_at")?,
        reasons: r.json(row, "reasons", MAX_REASONS_BYTES)?,
        status: r.name(row, "status", ReviewStatus::parse)?,
        decided_by: r.opt_text(row, "decided_by", MAX_NAME_BYTES)?,
        decided_at: r.opt_time(row, "decided_at")?,
        id,
    })
}

/// The registered schema `name`, parsed.
pub(crate) fn load_schema(tx: &Transaction<'_>, name: &str) -> Result<Option<Value>, StoreError> {
    let text: Option<String> = tx
        .query_row(
            "SELECT schema FROM memory_schemas WHERE name = ?1",
            [name],
            |r| r.get(0),
        )
        .optional()?;
    match text {
        None => Ok(None),
        Some(t) => serde_json::from_str(&t).map(Some).map_err(|e| {
            RowRef::new("memory_schemas", name)
                .corrupt("schema", format!("not JSON: {e}"))
                .into()
        }),
    }
}

/// A decoded version whose `task_state` must still match its schema.
pub(crate) fn check_task_state(tx: &Transaction<'_>, v: &MemoryVersion) -> Result<(), StoreError> {
    if let Some(MemoryRecord::TaskState(t)) = &v.record {
        let r = RowRef::new("memory_versions", format!("{}@{}", v.record_id, v.version));
        let schema = load_schema(tx, &t.schema)?.ok_or_else(|| {
            r.corrupt(
                "body",
                format!("names schema `{}`, which is not registered", t.schema),
            )
        })?;
        validate_state(&schema, &t.state).map_err(|e| r.corrupt("body", e))?;
    }
    Ok(())
}
