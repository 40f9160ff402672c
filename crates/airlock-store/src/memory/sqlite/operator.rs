//! [`MemoryOperator`] for SQLite: review, rollback, purge and export, for the operator's
//! CLI only.

use rusqlite::{params, OptionalExtension, Transaction};

use crate::error::StoreError;
use crate::ids::validate_id;
use crate::memory::namespace::Namespace;
use crate::memory::schemas::parse_schema;
use crate::memory::traits::MemoryOperator;
use crate::memory::types::{
    MemoryEntry, MemoryVersion, PendingChange, ReviewStatus, SessionRollback, Tier, VersionOrigin,
    WriteProvenance,
};
use crate::sqlite::SqliteStore;
use crate::time::Timestamp;
use crate::traits::Listing;

use super::decode::{decode_review, REVIEW_COLUMNS, VERSION_COLUMNS};
use super::listing::{checked, versions};
use super::versions::{append, current, NewVersion};

fn not_found(what: &'static str, id: &str) -> StoreError {
    StoreError::NotFound {
        what,
        id: id.to_string(),
    }
}

fn load_review(tx: &Transaction<'_>, id: &str) -> Result<PendingChange, StoreError> {
    let sql = format!("SELECT {REVIEW_COLUMNS} FROM memory_reviews WHERE id = ?1");
    let mut stmt = tx.prepare_cached(&sql)?;
    let mut rows = stmt.query([id])?;
    match rows.next()? {
        Some(row) => Ok(decode_review(row)?),
        None => Err(not_found("memory change", id)),
    }
}

fn decide(
    tx: &Transaction<'_>,
    id: &str,
    status: ReviewStatus,
    by: &str,
    now: Timestamp,
) -> Result<(), StoreError> {
    tx.execute(
        "UPDATE memory_reviews SET status = ?2, decided_by = ?3, decided_at = ?4 WHERE id = ?1",
        params![id, status.as_str(), by, now.as_unix_ms()],
    )?;
    Ok(())
}

fn require_pending(change: &PendingChange) -> Result<(), StoreError> {
    if change.status != ReviewStatus::Pending {
        return Err(StoreError::invalid(
            "memory change",
            format!(
                "change `{}` is already {}",
                change.id,
                change.status.as_str()
            ),
            "list the changes still waiting with `airlock memory review`",
        ));
    }
    Ok(())
}

/// One kept version of a record.
fn version_at(
    tx: &Transaction<'_>,
    id: &str,
    version: i64,
) -> Result<Option<MemoryVersion>, StoreError> {
    let sql = format!(
        "SELECT {VERSION_COLUMNS}, r.namespace AS record_namespace FROM memory_versions v
         JOIN memory_records r ON r.id = v.record_id WHERE v.record_id = ?1 AND v.version = ?2"
    );
    let (mut items, mut corrupt) = versions(tx, &sql, params![id, version], |_, v| Ok(v))?;
    if let Some(c) = corrupt.pop() {
        return Err(c.into());
    }
    let l = checked(
        tx,
        std::mem::take(&mut items),
        vec![],
        |v: &MemoryVersion| v,
    )?;
    if let Some(c) = l.corrupt.into_iter().next() {
        return Err(c.into());
    }
    Ok(l.items.into_iter().next())
}

/// Write `target`'s content (or a tombstone) as the record's next version.
fn restore(
    tx: &Transaction<'_>,
    cur: &MemoryVersion,
    target: Option<&MemoryVersion>,
    by: &str,
    now: Timestamp,
) -> Result<MemoryVersion, StoreError> {
    let operator = WriteProvenance {
        session_id: "operator".into(),
        principal: by.to_string(),
        tainted: false,
        tool_call_id: String::new(),
    };
    append(
        tx,
        &NewVersion {
            namespace: &cur.namespace,
            record_id: &cur.record_id,
            tier: cur.tier,
            record: target.and_then(|t| t.record.as_ref()),
            // Restored content keeps the provenance of whoever wrote it.
            provenance: target.map_or(&operator, |t| &t.provenance),
            origin: VersionOrigin::Rollback,
            actor: Some(by),
        },
        now,
    )
}

impl MemoryOperator for SqliteStore {
    fn operator_memory_list(
        &self,
        ns: Option<&Namespace>,
        tier: Option<Tier>,
    ) -> Result<Listing<MemoryEntry>, StoreError> {
        let sql = format!(
            "SELECT {VERSION_COLUMNS}, r.namespace AS record_namespace
             FROM memory_records r
             JOIN memory_versions v ON v.record_id = r.id AND v.version = r.current_version
             WHERE (?1 IS NULL OR r.namespace = ?1) AND (?2 IS NULL OR v.tier = ?2)
               AND v.kind <> 'forgotten'
             ORDER BY r.namespace, r.created_at, r.id"
        );
        let key = ns.map(Namespace::key);
        let tier = tier.map(Tier::as_str);
        let listing = self.read(|tx| {
            let (items, corrupt) = versions(tx, &sql, params![key, tier], |_, v| Ok(v))?;
            checked(tx, items, corrupt, |v: &MemoryVersion| v)
        })?;
        self.quarantine(&listing.corrupt);
        Ok(listing)
    }

    fn operator_memory_show(&self, id: &str) -> Result<MemoryVersion, StoreError> {
        validate_id("memory id", id)?;
        let r =
            self.read(|tx| current(tx, None, id)?.ok_or_else(|| not_found("memory record", id)));
        self.reported(r)
    }

    fn operator_memory_history(&self, id: &str) -> Result<Listing<MemoryVersion>, StoreError> {
        validate_id("memory id", id)?;
        let sql = format!(
            "SELECT {VERSION_COLUMNS}, r.namespace AS record_namespace FROM memory_versions v
             JOIN memory_records r ON r.id = v.record_id WHERE v.record_id = ?1 ORDER BY v.version"
        );
        let listing = self.read(|tx| {
            let exists: bool = tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM memory_records WHERE id = ?1)",
                [id],
                |r| r.get(0),
            )?;
            if !exists {
                return Err(not_found("memory record", id));
            }
            let (items, corrupt) = versions(tx, &sql, [id], |_, v| Ok(v))?;
            checked(tx, items, corrupt, |v: &MemoryVersion| v)
        })?;
        self.quarantine(&listing.corrupt);
        Ok(listing)
    }

    fn operator_memory_reviews(&self, all: bool) -> Result<Listing<PendingChange>, StoreError> {
        let sql = format!(
            "SELECT {REVIEW_COLUMNS} FROM memory_reviews WHERE (?1 OR status = 'pending')
             ORDER BY requested_at, id"
        );
        let listing = self.read(|tx| {
            let mut stmt = tx.prepare_cached(&sql)?;
            let mut rows = stmt.query([all])?;
            let mut listing = Listing {
                items: vec![],
                corrupt: vec![],
            };
            while let Some(row) = rows.next()? {
                match decode_review(row) {
                    Ok(c) => listing.items.push(c),
                    Err(c) => listing.corrupt.push(c),
                }
            }
            Ok(listing)
        })?;
        self.quarantine(&listing.corrupt);
        Ok(listing)
    }

    fn operator_memory_review(&self, change: &str) -> Result<PendingChange, StoreError> {
        validate_id("memory change", change)?;
        let r = self.read(|tx| load_review(tx, change));
        self.reported(r)
    }

    fn operator_memory_approve(
        &self,
        change: &str,
        by: &str,
        now: Timestamp,
    ) -> Result<MemoryVersion, StoreError> {
        validate_id("memory change", change)?;
        let r = self.write(|tx| {
            let c = load_review(tx, change)?;
            require_pending(&c)?;
            let cur = current(tx, Some(&c.namespace), &c.record_id)?;
            if cur.as_ref().map(|v| v.version) != c.base_version {
                return Err(StoreError::invalid(
                    "memory change",
                    format!(
                        "record `{}` changed after `{}` was proposed, so the diff you reviewed is stale",
                        c.record_id, c.id
                    ),
                    "reject this change; the agent can propose it again",
                ));
            }
            let v = append(
                tx,
                &NewVersion {
                    namespace: &c.namespace,
                    record_id: &c.record_id,
                    tier: c.tier,
                    record: c.record.as_ref(),
                    provenance: &c.provenance,
                    origin: VersionOrigin::Review,
                    actor: Some(by),
                },
                now,
            )?;
            decide(tx, change, ReviewStatus::Approved, by, now)?;
            Ok(v)
        });
        self.reported(r)
    }

    fn operator_memory_reject(
        &self,
        change: &str,
        by: &str,
        now: Timestamp,
    ) -> Result<PendingChange, StoreError> {
        validate_id("memory change", change)?;
        let r = self.write(|tx| {
            let mut c = load_review(tx, change)?;
            require_pending(&c)?;
            decide(tx, change, ReviewStatus::Rejected, by, now)?;
            c.status = ReviewStatus::Rejected;
            c.decided_by = Some(by.to_string());
            c.decided_at = Some(now);
            Ok(c)
        });
        self.reported(r)
    }

    fn operator_memory_rollback(
        &self,
        id: &str,
        to: Option<i64>,
        by: &str,
        now: Timestamp,
    ) -> Result<MemoryVersion, StoreError> {
        validate_id("memory id", id)?;
        let r = self.write(|tx| {
            let cur = current(tx, None, id)?.ok_or_else(|| not_found("memory record", id))?;
            let to = to.unwrap_or(cur.version - 1);
            if to == cur.version {
                return Err(StoreError::invalid(
                    "version",
                    format!("{id} is already at version {to}"),
                    "see the versions with `airlock memory history ID`",
                ));
            }
            let target = version_at(tx, id, to)?.ok_or_else(|| {
                StoreError::invalid(
                    "version",
                    format!("record `{id}` has no kept version {to}"),
                    "see the kept versions with `airlock memory history ID`",
                )
            })?;
            restore(tx, &cur, Some(&target), by, now)
        });
        self.reported(r)
    }

    fn operator_memory_rollback_session(
        &self,
        session_id: &str,
        by: &str,
        now: Timestamp,
    ) -> Result<SessionRollback, StoreError> {
        validate_id("session id", session_id)?;
        let r = self.write(|tx| {
            let mut out = SessionRollback::default();
            let touched: Vec<(String, i64)> = {
                let mut stmt = tx.prepare(
                    "SELECT record_id, min(version) FROM memory_versions
                     WHERE session_id = ?1 AND origin <> 'rollback'
                     GROUP BY record_id ORDER BY record_id",
                )?;
                let rows = stmt.query_map([session_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
                rows.collect::<Result<_, _>>()?
            };
            for (record_id, first) in touched {
                let Some(cur) = current(tx, None, &record_id)? else {
                    continue;
                };
                // The content just before the session's first write, if it is still kept.
                let before: Option<i64> = tx
                    .query_row(
                        "SELECT max(version) FROM memory_versions WHERE record_id = ?1 AND version < ?2",
                        params![record_id, first],
                        |r| r.get(0),
                    )
                    .optional()?
                    .flatten();
                // No earlier version: the session created the record (retention keeps the
                // version before each session's first write), and undoing it forgets it.
                let target = match before {
                    Some(v) => version_at(tx, &record_id, v)?,
                    None => None,
                };
                let wanted = target.as_ref().and_then(|t| t.record.as_ref());
                if cur.record.as_ref() == wanted {
                    continue;
                }
                out.restored
                    .push(restore(tx, &cur, target.as_ref(), by, now)?);
            }
            let pending: Vec<String> = {
                let mut stmt = tx.prepare(
                    "SELECT id FROM memory_reviews WHERE session_id = ?1 AND status = 'pending' ORDER BY id",
                )?;
                let rows = stmt.query_map([session_id], |r| r.get(0))?;
                rows.collect::<Result<_, _>>()?
            };
            for id in pending {
                decide(tx, &id, ReviewStatus::Rejected, by, now)?;
                out.rejected.push(id);
            }
            Ok(out)
        });
        self.reported(r)
    }

    fn operator_memory_purge(&self, id: &str) -> Result<usize, StoreError> {
        validate_id("memory id", id)?;
        self.write(|tx| {
            let rowid: Option<i64> = tx
                .query_row("SELECT rowid FROM memory_records WHERE id = ?1", [id], |r| {
                    r.get(0)
                })
                .optional()?;
            let Some(rowid) = rowid else {
                return Err(not_found("memory record", id));
            };
            tx.execute("DELETE FROM memory_fts WHERE rowid = ?1", [rowid])?;
            let n = tx.execute("DELETE FROM memory_versions WHERE record_id = ?1", [id])?;
            tx.execute("DELETE FROM memory_reviews WHERE record_id = ?1", [id])?;
            tx.execute("DELETE FROM memory_records WHERE id = ?1", [id])?;
            tx.execute(
                "DELETE FROM quarantine WHERE table_name = 'memory_versions' AND row_key LIKE ?1 ESCAPE '\\'",
                [format!("{}@%", id.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"))],
            )?;
            Ok(n)
        })
    }

    fn operator_memory_register_schema(
        &self,
        name: &str,
        schema: &str,
        by: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        validate_id("schema name", name)?;
        parse_schema(schema).map_err(|e| {
            StoreError::invalid(
                "schema",
                e,
                "give a JSON Schema document (draft 2020-12 or older)",
            )
        })?;
        self.write(|tx| {
            tx.execute(
                "INSERT INTO memory_schemas (name, schema, registered_by, registered_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (name) DO UPDATE SET schema = excluded.schema,
                   registered_by = excluded.registered_by, registered_at = excluded.registered_at",
                params![name, schema, by, now.as_unix_ms()],
            )?;
            Ok(())
        })
    }

    fn operator_memory_export(&self) -> Result<Listing<MemoryVersion>, StoreError> {
        let sql = format!(
            "SELECT {VERSION_COLUMNS}, r.namespace AS record_namespace FROM memory_versions v
             JOIN memory_records r ON r.id = v.record_id ORDER BY v.record_id, v.version"
        );
        let listing = self.read(|tx| {
            let (items, corrupt) = versions(tx, &sql, [], |_, v| Ok(v))?;
            checked(tx, items, corrupt, |v: &MemoryVersion| v)
        })?;
        self.quarantine(&listing.corrupt);
        Ok(listing)
    }
}
