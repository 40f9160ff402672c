//! [`MemoryStore`] for SQLite: what the agent host may do, always inside one namespace.

use rusqlite::params;

use crate::error::StoreError;
use crate::ids::{random_id, validate_id};
use crate::memory::namespace::Namespace;
use crate::memory::traits::{MemoryStore, MAX_SEARCH_RESULTS};
use crate::memory::types::{
    MemoryChange, MemoryEntry, MemoryVersion, MemoryWrite, PendingChange, ReviewStatus, SearchHit,
    VersionOrigin, WriteProvenance,
};
use crate::session::MAX_NAME_BYTES;
use crate::sqlite::decode::{to_json_checked, RowRef};
use crate::sqlite::SqliteStore;
use crate::time::Timestamp;
use crate::traits::Listing;

use super::decode::VERSION_COLUMNS;
use super::listing::{checked, versions};
use super::search::{query_words, ranked};
use super::versions::{append, current, validate_record, NewVersion};

/// Most changes one session may have waiting for review, so a hijacked session cannot
/// bury the owner in requests.
pub const MAX_PENDING_PER_SESSION: i64 = 20;

fn check_provenance(p: &WriteProvenance) -> Result<(), StoreError> {
    validate_id("session id", &p.session_id)?;
    if p.principal.is_empty() || p.principal.len() > MAX_NAME_BYTES {
        return Err(StoreError::invalid(
            "principal",
            "empty or too long",
            "report this as a bug",
        ));
    }
    if p.tool_call_id.len() > 256 {
        return Err(StoreError::invalid(
            "tool call id",
            "over 256 bytes",
            "report this as a bug",
        ));
    }
    Ok(())
}

/// The record a write targets and its current version (`None` for a new record),
/// refusing a write that would move a record between tiers.
fn target(
    tx: &rusqlite::Transaction<'_>,
    ns: &Namespace,
    write: &MemoryWrite,
) -> Result<(String, Option<MemoryVersion>), StoreError> {
    match &write.id {
        Some(id) => {
            validate_id("memory id", id)?;
            let cur = current(tx, Some(ns), id)?.ok_or_else(|| StoreError::NotFound {
                what: "memory record",
                id: id.clone(),
            })?;
            if cur.tier != write.tier {
                return Err(StoreError::invalid(
                    "tier",
                    format!(
                        "record `{id}` is in the {} tier, not {}",
                        cur.tier.as_str(),
                        write.tier.as_str()
                    ),
                    "a record keeps its tier; forget it and save a new record in the other tier",
                ));
            }
            if cur.record.is_none() && write.change == MemoryChange::Forget {
                return Err(StoreError::NotFound {
                    what: "memory record",
                    id: id.clone(),
                });
            }
            Ok((id.clone(), Some(cur)))
        }
        None => match write.change {
            MemoryChange::Forget => Err(StoreError::invalid(
                "memory write",
                "forgetting needs the id of a record",
                "pass the id returned by memory_save or memory_search",
            )),
            MemoryChange::Put(_) => Ok((random_id("m")?, None)),
        },
    }
}

fn record_of(change: &MemoryChange) -> Option<&crate::memory::record::MemoryRecord> {
    match change {
        MemoryChange::Put(r) => Some(r),
        MemoryChange::Forget => None,
    }
}

impl MemoryStore for SqliteStore {
    fn memory_write(
        &self,
        ns: &Namespace,
        write: &MemoryWrite,
        provenance: &WriteProvenance,
        now: Timestamp,
    ) -> Result<MemoryVersion, StoreError> {
        check_provenance(provenance)?;
        let r = self.write(|tx| {
            let (id, _) = target(tx, ns, write)?;
            append(
                tx,
                &NewVersion {
                    namespace: ns,
                    record_id: &id,
                    tier: write.tier,
                    record: record_of(&write.change),
                    provenance,
                    origin: VersionOrigin::Agent,
                    actor: None,
                },
                now,
            )
        });
        self.reported(r)
    }

    fn memory_propose(
        &self,
        ns: &Namespace,
        write: &MemoryWrite,
        provenance: &WriteProvenance,
        reasons: &[String],
        now: Timestamp,
    ) -> Result<PendingChange, StoreError> {
        check_provenance(provenance)?;
        let reasons_json = to_json_checked("reasons", &reasons, 8 * 1024)?;
        let r = self.write(|tx| {
            let pending: i64 = tx.query_row(
                "SELECT count(*) FROM memory_reviews WHERE session_id = ?1 AND status = 'pending'",
                [&provenance.session_id],
                |r| r.get(0),
            )?;
            if pending >= MAX_PENDING_PER_SESSION {
                return Err(StoreError::invalid(
                    "memory write",
                    format!("this session already has {pending} changes waiting for review"),
                    "wait for the owner to review them (`airlock memory review`)",
                ));
            }
            let (record_id, cur) = target(tx, ns, write)?;
            let record = record_of(&write.change);
            let (kind, body) = match record {
                Some(r) => {
                    validate_record(tx, r)?;
                    (r.kind().as_str(), Some(r.body_json()?))
                }
                None => (super::decode::TOMBSTONE, None),
            };
            let id = random_id("c")?;
            let base = cur.as_ref().map(|c| c.version);
            tx.execute(
                "INSERT INTO memory_reviews (id, namespace, record_id, base_version, tier, kind, body, session_id, principal, tainted, tool_call_id, requested_at, reasons, status)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, 'pending')",
                params![
                    id, ns.key(), record_id, base, write.tier.as_str(), kind, body,
                    provenance.session_id, provenance.principal, provenance.tainted as i64,
                    provenance.tool_call_id, now.as_unix_ms(), reasons_json,
                ],
            )?;
            Ok(PendingChange {
                id,
                namespace: ns.clone(),
                record_id,
                base_version: base,
                tier: write.tier,
                record: record.cloned(),
                provenance: provenance.clone(),
                requested_at: now,
                reasons: reasons.to_vec(),
                status: ReviewStatus::Pending,
                decided_by: None,
                decided_at: None,
            })
        });
        self.reported(r)
    }

    fn memory_get(&self, ns: &Namespace, id: &str) -> Result<MemoryEntry, StoreError> {
        validate_id("memory id", id)?;
        let now = (self.clock)();
        let r = self.read(|tx| match current(tx, Some(ns), id)? {
            // An expired record is not recalled, even by id.
            Some(v) if !self.retention.is_expired(&v, now) => Ok(v),
            _ => Err(StoreError::NotFound {
                what: "memory record",
                id: id.to_string(),
            }),
        });
        self.reported(r)
    }

    fn memory_search(
        &self,
        ns: &Namespace,
        query: &str,
        limit: usize,
    ) -> Result<Listing<SearchHit>, StoreError> {
        let words = query_words(query);
        let limit = limit.clamp(1, MAX_SEARCH_RESULTS);
        let now = (self.clock)();
        // Rank first (ids and scores only), then join and decode just the best rows.
        // CROSS JOIN keeps the ranked ids as the outer loop: the planner would otherwise
        // start from every record of the namespace.
        let sql = format!(
            "SELECT {VERSION_COLUMNS}, r.namespace AS record_namespace, r.rowid AS fts_rowid
             FROM json_each(?1) j
             CROSS JOIN memory_records r ON r.rowid = j.value
             CROSS JOIN memory_versions v ON v.record_id = r.id AND v.version = r.current_version
             WHERE r.namespace = ?2 AND v.tier = 'recall'"
        );
        let listing = self.read(|tx| {
            // Expired records are still indexed: rank as many as one search may return,
            // so that leaving the expired ones out still fills `limit`.
            let hits = ranked(tx, &ns.key(), &words, MAX_SEARCH_RESULTS)?;
            if hits.is_empty() {
                return Ok(Listing {
                    items: vec![],
                    corrupt: vec![],
                });
            }
            // A JSON array of integers from the database: no text of the query reaches SQL.
            let rowids: Vec<String> = hits.iter().map(|h| h.rowid.to_string()).collect();
            let rowids = format!("[{}]", rowids.join(","));
            let (mut items, corrupt) = versions(tx, &sql, params![rowids, ns.key()], |row, v| {
                let rowid = row.get::<_, i64>("fts_rowid").ok();
                let place = hits.iter().position(|h| Some(h.rowid) == rowid);
                match place {
                    Some(i) => Ok((
                        i,
                        SearchHit {
                            entry: v,
                            score: hits[i].score,
                        },
                    )),
                    None => Err(RowRef::new("memory_fts", v.record_id.clone())
                        .corrupt("rowid", "not among the ranked rows")),
                }
            })?;
            items.sort_by_key(|(i, _)| *i);
            let items = items
                .into_iter()
                .map(|(_, h)| h)
                .filter(|h| !self.retention.is_expired(&h.entry, now))
                .take(limit)
                .collect();
            checked(tx, items, corrupt, |h: &SearchHit| &h.entry)
        })?;
        self.quarantine(&listing.corrupt);
        Ok(listing)
    }

    fn memory_pinned(&self, ns: &Namespace) -> Result<Listing<MemoryEntry>, StoreError> {
        let sql = format!(
            "SELECT {VERSION_COLUMNS}, r.namespace AS record_namespace
             FROM memory_records r
             JOIN memory_versions v ON v.record_id = r.id AND v.version = r.current_version
             WHERE r.namespace = ?1 AND v.tier = 'pinned' AND v.kind <> 'forgotten'
             ORDER BY r.created_at, r.id"
        );
        let now = (self.clock)();
        let listing = self.read(|tx| {
            let (items, corrupt) = versions(tx, &sql, [ns.key()], |_, v| Ok(v))?;
            // An expired record is not loaded into the session's context.
            let items = items
                .into_iter()
                .filter(|v| !self.retention.is_expired(v, now))
                .collect();
            checked(tx, items, corrupt, |v: &MemoryVersion| v)
        })?;
        self.quarantine(&listing.corrupt);
        Ok(listing)
    }
}
