//! Appending versions: the one write path every change to a record takes (agent writes,
//! approved reviews, rollbacks), which keeps the record's pointer, the recall index and
//! the retention limit in step.

use rusqlite::{params, OptionalExtension, Transaction};

use crate::error::StoreError;
use crate::memory::namespace::Namespace;
use crate::memory::record::MemoryRecord;
use crate::memory::schemas::validate_state;
use crate::memory::types::{MemoryVersion, Tier, VersionOrigin, WriteProvenance};
use crate::time::Timestamp;

use super::decode::{check_task_state, decode_version, load_schema, TOMBSTONE, VERSION_COLUMNS};

/// Versions kept per record; older ones are dropped as new ones are written.
pub const MAX_VERSIONS_PER_RECORD: i64 = 50;

/// How far back sessions keep their rollback anchors. Anchors keep one version per session
/// that wrote a record, so without a window a record that every session touches once would
/// keep its whole history. A session none of whose versions is among the newest
/// `ANCHOR_WINDOW` has been overwritten by everything since and loses its anchor.
const ANCHOR_WINDOW: i64 = 4 * MAX_VERSIONS_PER_RECORD;

/// The most versions a record keeps: the newest [`ANCHOR_WINDOW`], and at most one anchor
/// for each session that wrote one of them.
pub const MAX_KEPT_VERSIONS_PER_RECORD: i64 = 2 * ANCHOR_WINDOW;

/// The current version of `id`, within `ns` when given. `None` if there is no such record.
pub(crate) fn current(
    tx: &Transaction<'_>,
    ns: Option<&Namespace>,
    id: &str,
) -> Result<Option<MemoryVersion>, StoreError> {
    let sql = format!(
        "SELECT {VERSION_COLUMNS}, r.namespace AS record_namespace FROM memory_records r
         JOIN memory_versions v ON v.record_id = r.id AND v.version = r.current_version
         WHERE r.id = ?1 AND (?2 IS NULL OR r.namespace = ?2)"
    );
    let key = ns.map(Namespace::key);
    let mut stmt = tx.prepare_cached(&sql)?;
    let mut rows = stmt.query(params![id, key])?;
    let Some(row) = rows.next()? else {
        let exists: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM memory_records WHERE id = ?1 AND (?2 IS NULL OR namespace = ?2))",
            params![id, key],
            |r| r.get(0),
        )?;
        if exists {
            // The record points at a version that is not there.
            return Err(crate::sqlite::decode::RowRef::new("memory_records", id)
                .corrupt("current_version", "names a version that does not exist")
                .into());
        }
        return Ok(None);
    };
    let v = decode_version(row)?;
    let record_ns: String = row.get("record_namespace")?;
    if v.namespace.key() != record_ns {
        return Err(crate::sqlite::decode::RowRef::new(
            "memory_versions",
            format!("{}@{}", v.record_id, v.version),
        )
        .corrupt("namespace", "differs from its record's namespace")
        .into());
    }
    check_task_state(tx, &v)?;
    Ok(Some(v))
}

/// Refuse a `task_state` whose schema is not registered or that does not match it.
pub(crate) fn validate_record(
    tx: &Transaction<'_>,
    record: &MemoryRecord,
) -> Result<(), StoreError> {
    if let MemoryRecord::TaskState(t) = record {
        let schema = load_schema(tx, &t.schema)?.ok_or_else(|| {
            StoreError::invalid(
                "task_state",
                format!("no schema named `{}` is registered", t.schema),
                "the operator registers schemas with `airlock memory schema add NAME FILE`",
            )
        })?;
        validate_state(&schema, &t.state).map_err(|e| {
            StoreError::invalid("task_state", e, "send a state that matches the schema")
        })?;
    }
    Ok(())
}

/// What a new version holds.
pub(crate) struct NewVersion<'a> {
    pub namespace: &'a Namespace,
    pub record_id: &'a str,
    pub tier: Tier,
    pub record: Option<&'a MemoryRecord>,
    pub provenance: &'a WriteProvenance,
    pub origin: VersionOrigin,
    pub actor: Option<&'a str>,
}

/// Append a version (creating the record if it does not exist), move the record's
/// pointer, refresh the recall index and drop versions past the retention limit.
pub(crate) fn append(
    tx: &Transaction<'_>,
    new: &NewVersion<'_>,
    now: Timestamp,
) -> Result<MemoryVersion, StoreError> {
    let (body, kind) = match new.record {
        Some(r) => {
            validate_record(tx, r)?;
            (Some(r.body_json()?), r.kind().as_str())
        }
        None => (None, TOMBSTONE),
    };
    let ns_key = new.namespace.key();
    let existing: Option<(i64, String)> = tx
        .query_row(
            "SELECT current_version, namespace FROM memory_records WHERE id = ?1",
            [new.record_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let version = match existing {
        Some((_, ns)) if ns != ns_key => {
            return Err(StoreError::NotFound {
                what: "memory record",
                id: new.record_id.to_string(),
            })
        }
        Some((v, _)) => v + 1,
        None => {
            tx.execute(
                "INSERT INTO memory_records (id, namespace, current_version, created_at) VALUES (?1, ?2, 0, ?3)",
                params![new.record_id, ns_key, now.as_unix_ms()],
            )?;
            1
        }
    };
    let p = new.provenance;
    tx.execute(
        "INSERT INTO memory_versions (record_id, version, namespace, tier, kind, body, session_id, principal, tainted, tool_call_id, written_at, origin, actor)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        params![
            new.record_id, version, ns_key, new.tier.as_str(), kind, body,
            p.session_id, p.principal, p.tainted as i64, p.tool_call_id,
            now.as_unix_ms(), new.origin.as_str(), new.actor,
        ],
    )?;
    tx.execute(
        "UPDATE memory_records SET current_version = ?2 WHERE id = ?1",
        params![new.record_id, version],
    )?;
    let rowid: i64 = tx.query_row(
        "SELECT rowid FROM memory_records WHERE id = ?1",
        [new.record_id],
        |r| r.get(0),
    )?;
    tx.execute("DELETE FROM memory_fts WHERE rowid = ?1", [rowid])?;
    if let (Tier::Recall, Some(r)) = (new.tier, new.record) {
        tx.execute(
            "INSERT INTO memory_fts (rowid, text, namespace) VALUES (?1, ?2, ?3)",
            params![rowid, r.search_text(), ns_key],
        )?;
    }
    // Past the retention limit, old versions go, except each session's anchor: the version
    // just before that session's first remaining write. `rollback --session` restores the
    // anchor, so a session that writes a record more often than the limit allows cannot
    // push the content it replaced out of reach; a session with no anchor created the
    // record, and undoing it forgets the record.
    tx.execute(
        "DELETE FROM memory_versions WHERE record_id = ?1 AND version <= ?2
           AND version NOT IN (
             SELECT anchor FROM (
               SELECT (SELECT max(p.version) FROM memory_versions p
                       WHERE p.record_id = ?1 AND p.version < s.first) AS anchor
               FROM (SELECT min(version) AS first FROM memory_versions
                     WHERE record_id = ?1 AND origin <> 'rollback'
                     GROUP BY session_id) s)
             WHERE anchor IS NOT NULL)",
        params![new.record_id, version - MAX_VERSIONS_PER_RECORD],
    )?;
    // Past the anchor window, only the anchors of sessions that still wrote one of the
    // newest versions stay (see [`ANCHOR_WINDOW`]).
    tx.execute(
        "DELETE FROM memory_versions WHERE record_id = ?1 AND version <= ?2
           AND version NOT IN (
             SELECT anchor FROM (
               SELECT (SELECT max(p.version) FROM memory_versions p
                       WHERE p.record_id = ?1 AND p.version < s.first) AS anchor
               FROM (SELECT min(version) AS first FROM memory_versions
                     WHERE record_id = ?1 AND origin <> 'rollback'
                     GROUP BY session_id HAVING max(version) > ?2) s)
             WHERE anchor IS NOT NULL)",
        params![new.record_id, version - ANCHOR_WINDOW],
    )?;
    Ok(MemoryVersion {
        record_id: new.record_id.to_string(),
        version,
        namespace: new.namespace.clone(),
        tier: new.tier,
        record: new.record.cloned(),
        provenance: p.clone(),
        written_at: now,
        origin: new.origin,
        actor: new.actor.map(str::to_string),
    })
}
