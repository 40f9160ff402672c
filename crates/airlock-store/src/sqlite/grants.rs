//! Grants in SQLite.

use rusqlite::{params, Row, Transaction};

use super::decode::RowRef;
use super::sessions::require_active;
use super::SqliteStore;
use crate::error::{CorruptRow, StoreError};
use crate::grant::{
    Grant, GrantLookup, GrantScope, GrantTarget, NewGrant, MAX_GRANT_TTL, MAX_PATTERN_BYTES,
};
use crate::ids::random_id;
use crate::session::MAX_NAME_BYTES;
use crate::time::Timestamp;
use crate::traits::{GrantAdmin, GrantQueries, Listing};

/// Columns written when a grant is made.
const INSERT_COLUMNS: &str = "id, scope, session_id, target, action_kind, value, created_by, created_at, expires_at, approval_id, revoked_at";
/// Columns read back.
const COLUMNS: &str = "id, scope, session_id, target, action_kind, value, created_by, created_at, expires_at, approval_id, revoked_at, uses, last_used_at";

fn decode(row: &Row<'_>) -> Result<Grant, CorruptRow> {
    let id = RowRef::new("grants", "?").text(row, "id", crate::ids::MAX_ID_LEN)?;
    let r = RowRef::new("grants", id.clone());
    let session_id = r.opt_text(row, "session_id", crate::ids::MAX_ID_LEN)?;
    let scope = match (r.text(row, "scope", 16)?.as_str(), session_id) {
        ("session", Some(session_id)) => GrantScope::Session { session_id },
        ("rule", None) => GrantScope::Rule,
        (other, s) => {
            return Err(r.corrupt(
                "scope",
                format!(
                    "`{}` with session {s:?} is not a valid scope",
                    other.escape_debug()
                ),
            ))
        }
    };
    let action_kind = r.text(row, "action_kind", 64)?;
    let value = r.text(row, "value", MAX_PATTERN_BYTES)?;
    let target = match r.text(row, "target", 16)?.as_str() {
        "payload" => GrantTarget::Payload {
            action_kind,
            action_hash: value,
        },
        "pattern" => GrantTarget::Pattern {
            action_kind,
            pattern: value,
        },
        other => {
            return Err(r.corrupt(
                "target",
                format!("unknown value `{}`", other.escape_debug()),
            ))
        }
    };
    Ok(Grant {
        scope,
        target,
        created_by: r.text(row, "created_by", MAX_NAME_BYTES)?,
        created_at: r.time(row, "created_at")?,
        expires_at: r.time(row, "expires_at")?,
        approval_id: r.opt_text(row, "approval_id", crate::ids::MAX_ID_LEN)?,
        revoked_at: r.opt_time(row, "revoked_at")?,
        uses: r.counter(row, "uses")?,
        last_used_at: r.opt_time(row, "last_used_at")?,
        id,
    })
}

/// Validate and insert a grant. Shared by [`GrantAdmin::create_grant`] and approvals.
pub(super) fn insert_grant(
    tx: &Transaction<'_>,
    new: &NewGrant,
    approval_id: Option<&str>,
    now: Timestamp,
) -> Result<Grant, StoreError> {
    if new.expires_at <= now || new.expires_at > now.plus(MAX_GRANT_TTL) {
        return Err(StoreError::invalid(
            "grant expiry",
            "a grant must expire after now and at most 30 days ahead",
            "pass a duration such as `--for 1h`",
        ));
    }
    let (target, kind, value) = match &new.target {
        GrantTarget::Payload {
            action_kind,
            action_hash,
        } => ("payload", action_kind, action_hash),
        GrantTarget::Pattern {
            action_kind,
            pattern,
        } => ("pattern", action_kind, pattern),
    };
    if kind.is_empty() || kind.len() > 64 || value.is_empty() || value.len() > MAX_PATTERN_BYTES {
        return Err(StoreError::invalid(
            "grant target",
            "the action kind and the pattern must be non-empty and short",
            format!("keep the pattern under {MAX_PATTERN_BYTES} bytes"),
        ));
    }
    if new.created_by.is_empty() || new.created_by.len() > MAX_NAME_BYTES {
        return Err(StoreError::invalid(
            "created_by",
            "empty or too long",
            "name the approving principal",
        ));
    }
    let (scope, session_id) = match &new.scope {
        GrantScope::Session { session_id } => {
            require_active(tx, session_id)?;
            ("session", Some(session_id.as_str()))
        }
        GrantScope::Rule => ("rule", None),
    };
    let id = random_id("g")?;
    tx.execute(
        &format!(
            "INSERT INTO grants ({INSERT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, NULL)"
        ),
        params![
            id,
            scope,
            session_id,
            target,
            kind,
            value,
            new.created_by,
            now.as_unix_ms(),
            new.expires_at.as_unix_ms(),
            approval_id
        ],
    )?;
    Ok(Grant {
        id,
        scope: new.scope.clone(),
        target: new.target.clone(),
        created_by: new.created_by.clone(),
        created_at: now,
        expires_at: new.expires_at,
        approval_id: approval_id.map(str::to_string),
        revoked_at: None,
        uses: 0,
        last_used_at: None,
    })
}

impl GrantAdmin for SqliteStore {
    fn create_grant(&self, new: &NewGrant, now: Timestamp) -> Result<Grant, StoreError> {
        self.write(|tx| insert_grant(tx, new, None, now))
    }

    fn active_grants(&self, now: Timestamp) -> Result<Listing<Grant>, StoreError> {
        let listing = self.read(|tx| {
            let sql = format!("SELECT {COLUMNS} FROM grants WHERE revoked_at IS NULL AND expires_at > ?1 ORDER BY created_at, id");
            let mut stmt = tx.prepare_cached(&sql)?;
            let mut rows = stmt.query([now.as_unix_ms()])?;
            let mut listing = Listing {
                items: Vec::new(),
                corrupt: Vec::new(),
            };
            while let Some(row) = rows.next()? {
                match decode(row) {
                    Ok(g) => listing.items.push(g),
                    Err(c) => listing.corrupt.push(c),
                }
            }
            Ok(listing)
        })?;
        self.quarantine(&listing.corrupt);
        Ok(listing)
    }

    fn revoke_grant(&self, id: &str, now: Timestamp) -> Result<Option<Grant>, StoreError> {
        let r = self.write(|tx| {
            let sql = format!("SELECT {COLUMNS} FROM grants WHERE id = ?1");
            let before = {
                let mut stmt = tx.prepare_cached(&sql)?;
                let mut rows = stmt.query([id])?;
                match rows.next()? {
                    // A row that does not decode is still revoked: revoking must never
                    // depend on the row being well formed.
                    Some(row) => decode(row),
                    None => {
                        return Err(StoreError::NotFound {
                            what: "grant",
                            id: id.to_string(),
                        })
                    }
                }
            };
            let n = tx.execute(
                "UPDATE grants SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
                params![id, now.as_unix_ms()],
            )?;
            match before {
                Ok(g) if n == 1 => Ok(Ok(Some(g))),
                Ok(_) => Ok(Ok(None)),
                Err(c) => Ok(Err(c)),
            }
        })?;
        match r {
            Ok(g) => Ok(g),
            Err(c) => {
                // Revoked all the same; report the malformed row.
                self.quarantine(std::slice::from_ref(&c));
                Err(StoreError::CorruptRow(c))
            }
        }
    }

    fn revoke_all_grants(&self, now: Timestamp) -> Result<Vec<Grant>, StoreError> {
        let listing = self.write(|tx| {
            let sql = format!(
                "SELECT {COLUMNS} FROM grants WHERE revoked_at IS NULL ORDER BY created_at, id"
            );
            let mut listing = Listing {
                items: Vec::new(),
                corrupt: Vec::new(),
            };
            {
                let mut stmt = tx.prepare_cached(&sql)?;
                let mut rows = stmt.query([])?;
                while let Some(row) = rows.next()? {
                    match decode(row) {
                        Ok(g) => listing.items.push(g),
                        Err(c) => listing.corrupt.push(c),
                    }
                }
            }
            // Every unrevoked row, expired or not and well formed or not: a clock set
            // back must not bring an old grant to life after the kill switch.
            tx.execute(
                "UPDATE grants SET revoked_at = ?1 WHERE revoked_at IS NULL",
                [now.as_unix_ms()],
            )?;
            Ok::<_, StoreError>(listing)
        })?;
        self.quarantine(&listing.corrupt);
        Ok(listing.items)
    }
}

impl GrantQueries for SqliteStore {
    fn find_grant(
        &self,
        lookup: &GrantLookup<'_>,
        now: Timestamp,
    ) -> Result<Option<Grant>, StoreError> {
        let r = self.write(|tx| {
            let sql = format!(
                "SELECT {COLUMNS} FROM grants
                 WHERE action_kind = ?1
                   AND ((target = ?3 AND value = ?2)
                        -- The payload a scoped grant was approved for is covered by it,
                        -- whatever pattern the caller computed.
                        OR (?3 = 'payload' AND target = 'pattern' AND approval_id IS NOT NULL
                            AND (SELECT payload_hash FROM approvals WHERE id = grants.approval_id) = ?2))
                   AND revoked_at IS NULL AND expires_at > ?4
                   AND (scope = 'rule' OR session_id = ?5)
                   AND (session_id IS NULL OR (SELECT status FROM sessions WHERE id = grants.session_id) = 'active')
                 ORDER BY expires_at DESC, id LIMIT 1"
            );
            let mut stmt = tx.prepare_cached(&sql)?;
            let candidates = std::iter::once(("payload", lookup.action_hash))
                .chain(lookup.patterns.iter().map(|p| ("pattern", p.as_str())));
            for (target, value) in candidates {
                let found = {
                    let mut rows = stmt.query(params![lookup.action_kind, value, target, now.as_unix_ms(), lookup.session_id])?;
                    match rows.next()? {
                        Some(row) => Some(decode(row)?),
                        None => None,
                    }
                };
                if let Some(mut grant) = found {
                    // The caller lets the action through on it: count the use.
                    tx.execute(
                        "UPDATE grants SET uses = uses + 1, last_used_at = ?2 WHERE id = ?1",
                        params![grant.id, now.as_unix_ms()],
                    )?;
                    grant.uses = grant.uses.saturating_add(1);
                    grant.last_used_at = Some(now);
                    return Ok(Some(grant));
                }
            }
            Ok(None)
        });
        self.reported(r)
    }
}
