//! Sessions and transcripts in SQLite.

use std::path::{Path, PathBuf};

use airlock_core::gate::Session;
use airlock_core::provenance::TaintState;
use rusqlite::{params, OptionalExtension, Row, Transaction};

use super::decode::{to_json_checked, RowRef};
use super::{ensure_private_dir, SqliteStore};
use crate::error::{CorruptRow, StoreError};
use crate::ids::{random_id, validate_id};
use crate::session::{
    KillReport, NewSession, ResumedSession, SessionRecord, SessionStatus, SessionSummary,
    TranscriptEntry, TranscriptEvent, TurnUpdate, MAX_EVENT_BYTES, MAX_NAME_BYTES, MAX_TAINT_BYTES,
};
use crate::time::Timestamp;
use crate::traits::{BudgetStore, Listing, SessionStore};

const SESSION_COLUMNS: &str =
    "id, principal, role, status, created_at, updated_at, workspace, tainted, taint, parent";

/// Longest chain of parents followed when looking for a session's family (far beyond any
/// configured sub-agent depth; it only bounds the walk over a damaged table).
const MAX_FAMILY_DEPTH: usize = 64;

fn decode_session(row: &Row<'_>) -> Result<SessionRecord, CorruptRow> {
    let key = RowRef::new("sessions", "?");
    let id = key.text(row, "id", crate::ids::MAX_ID_LEN)?;
    let r = RowRef::new("sessions", id.clone());
    let taint: TaintState = r.json_exact(row, "taint", MAX_TAINT_BYTES)?;
    if r.flag(row, "tainted")? != taint.is_tainted() {
        return Err(r.corrupt("tainted", "disagrees with the stored taint state"));
    }
    let parent: Option<String> = row
        .get("parent")
        .map_err(|e| r.corrupt("parent", e.to_string()))?;
    // A sub-agent's records name its parent: its model is `agent:<id>;parent=<parent>`.
    let actor = match &parent {
        Some(p) => Some(
            airlock_core::Principal::sub_agent(&id, p)
                .map_err(|e| r.corrupt("parent", e.to_string()))?,
        ),
        None => None,
    };
    Ok(SessionRecord {
        gate: Session {
            id,
            principal: r.text(row, "principal", MAX_NAME_BYTES)?,
            role: r.text(row, "role", MAX_NAME_BYTES)?,
            taint,
            // Sessions are started at the command line until a channel stores its own.
            via: airlock_core::Via::cli(),
            actor,
        },
        status: r.name(row, "status", SessionStatus::parse)?,
        created_at: r.time(row, "created_at")?,
        updated_at: r.time(row, "updated_at")?,
        workspace: PathBuf::from(r.text(row, "workspace", 4096)?),
    })
}

fn decode_summary(row: &Row<'_>) -> Result<SessionSummary, CorruptRow> {
    let id = RowRef::new("sessions", "?").text(row, "id", crate::ids::MAX_ID_LEN)?;
    let r = RowRef::new("sessions", id.clone());
    Ok(SessionSummary {
        principal: r.text(row, "principal", MAX_NAME_BYTES)?,
        role: r.text(row, "role", MAX_NAME_BYTES)?,
        status: r.name(row, "status", SessionStatus::parse)?,
        created_at: r.time(row, "created_at")?,
        updated_at: r.time(row, "updated_at")?,
        tainted: r.flag(row, "tainted")?,
        id,
    })
}

fn decode_entry(session_id: &str, row: &Row<'_>) -> Result<TranscriptEntry, CorruptRow> {
    let seq = RowRef::new("transcript", format!("{session_id}/?")).int(row, "seq")?;
    let r = RowRef::new("transcript", format!("{session_id}/{seq}"));
    let kind = r.text(row, "kind", 32)?;
    let event: TranscriptEvent = r.json(row, "body", MAX_EVENT_BYTES)?;
    if event.kind() != kind {
        return Err(r.corrupt(
            "kind",
            format!("says `{kind}` but the body is a `{}`", event.kind()),
        ));
    }
    Ok(TranscriptEntry {
        seq,
        at: r.time(row, "at")?,
        event,
    })
}

/// Load one session inside a transaction.
pub(super) fn load_session(tx: &Transaction<'_>, id: &str) -> Result<SessionRecord, StoreError> {
    let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1");
    let mut stmt = tx.prepare_cached(&sql)?;
    let mut rows = stmt.query([id])?;
    match rows.next()? {
        Some(row) => Ok(decode_session(row)?),
        None => Err(StoreError::NotFound {
            what: "session",
            id: id.to_string(),
        }),
    }
}

/// The session's status, refusing unknown sessions.
pub(super) fn session_status(tx: &Transaction<'_>, id: &str) -> Result<SessionStatus, StoreError> {
    let status: Option<String> = tx
        .query_row("SELECT status FROM sessions WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .optional()?;
    let status = status.ok_or_else(|| StoreError::NotFound {
        what: "session",
        id: id.to_string(),
    })?;
    SessionStatus::parse(&status).ok_or_else(|| {
        RowRef::new("sessions", id)
            .corrupt(
                "status",
                format!("unknown value `{}`", status.escape_debug()),
            )
            .into()
    })
}

/// Refuse work for a session that is not active.
pub(super) fn require_active(tx: &Transaction<'_>, id: &str) -> Result<(), StoreError> {
    match session_status(tx, id)? {
        SessionStatus::Active => Ok(()),
        SessionStatus::Killed => Err(StoreError::SessionKilled { id: id.to_string() }),
        SessionStatus::Finished => Err(StoreError::SessionFinished { id: id.to_string() }),
    }
}

fn check_name(field: &'static str, value: &str) -> Result<(), StoreError> {
    if value.is_empty() || value.len() > MAX_NAME_BYTES || value.chars().any(char::is_control) {
        return Err(StoreError::invalid(
            field,
            format!(
                "`{}` is empty, too long or holds control characters",
                value.escape_debug()
            ),
            format!("use 1 to {MAX_NAME_BYTES} printable characters"),
        ));
    }
    Ok(())
}

fn read_transcript(tx: &Transaction<'_>, id: &str) -> Result<Vec<TranscriptEntry>, StoreError> {
    let mut stmt = tx.prepare_cached(
        "SELECT seq, at, kind, body FROM transcript WHERE session_id = ?1 ORDER BY seq",
    )?;
    let mut rows = stmt.query([id])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let entry = decode_entry(id, row)?;
        let expected = out.len() as i64 + 1;
        if entry.seq != expected {
            return Err(RowRef::new("transcript", format!("{id}/{}", entry.seq))
                .corrupt(
                    "seq",
                    format!("expected entry {expected}: the transcript has a gap"),
                )
                .into());
        }
        out.push(entry);
    }
    Ok(out)
}

impl SqliteStore {
    /// A new session, under `parent` when it is a sub-agent's.
    fn insert_session(
        &self,
        new: &NewSession,
        parent: Option<&str>,
        now: Timestamp,
    ) -> Result<SessionRecord, StoreError> {
        let id = match &new.id {
            Some(id) => {
                validate_id("session id", id)?;
                id.clone()
            }
            None => random_id("s")?,
        };
        check_name("principal", &new.principal)?;
        check_name("role", &new.role)?;
        let session_dir = self.state_dir.join("sessions").join(&id);
        let workspace = match &new.workspace {
            Some(dir) if dir.is_absolute() => dir.clone(),
            Some(dir) => {
                return Err(StoreError::invalid(
                    "session workspace",
                    format!("{} is not an absolute path", dir.display()),
                    "give the workspace as an absolute path",
                ))
            }
            None => session_dir.join("workspace"),
        };
        let workspace_text = workspace.to_str().ok_or_else(|| match &new.workspace {
            Some(_) => StoreError::invalid(
                "session workspace",
                "path is not valid UTF-8",
                "use a workspace directory whose path is valid UTF-8",
            ),
            None => StoreError::invalid(
                "state directory",
                "path is not valid UTF-8",
                "use a UTF-8 path for the state directory",
            ),
        })?;
        let gate = Session {
            id: id.clone(),
            principal: new.principal.clone(),
            role: new.role.clone(),
            taint: TaintState::new(),
            via: airlock_core::Via::cli(),
            actor: match parent {
                Some(p) => Some(airlock_core::Principal::sub_agent(&id, p).map_err(|e| {
                    StoreError::invalid(
                        "parent session",
                        e.to_string(),
                        "name an existing session other than the new one",
                    )
                })?),
                None => None,
            },
        };
        let taint = to_json_checked("taint", &gate.taint, MAX_TAINT_BYTES)?;
        self.write(|tx| {
            // A sub-agent starts only under a parent that is still at work.
            if let Some(p) = parent {
                require_active(tx, p)?;
            }
            let exists: bool = tx.query_row("SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1)", [&id], |r| r.get(0))?;
            if exists {
                return Err(StoreError::SessionExists { id: id.clone() });
            }
            tx.execute(
                "INSERT INTO sessions (id, principal, role, status, created_at, updated_at, workspace, tainted, taint, agent_workspace, parent)
                 VALUES (?1, ?2, ?3, 'active', ?4, ?4, ?5, 0, ?6, ?7, ?8)",
                params![
                    id,
                    new.principal,
                    new.role,
                    now.as_unix_ms(),
                    workspace_text,
                    taint,
                    // Only a directory the caller named can be given to the agent.
                    (new.agent_workspace && new.workspace.is_some()) as i64,
                    parent
                ],
            )?;
            tx.execute("INSERT INTO session_budget (session_id) VALUES (?1)", [&id])?;
            // Directories last: if they cannot be made, the insert rolls back. A workspace
            // the caller named is theirs: nothing is created or changed there.
            if new.workspace.is_none() {
                ensure_private_dir(&self.state_dir.join("sessions"))?;
                ensure_private_dir(&session_dir)?;
                ensure_private_dir(&workspace)?;
            }
            Ok(())
        })?;
        Ok(SessionRecord {
            gate,
            status: SessionStatus::Active,
            created_at: now,
            updated_at: now,
            workspace,
        })
    }
}

/// Every session below `id` (children, their children, …), parents before children.
pub(super) fn descendants_of(tx: &Transaction<'_>, id: &str) -> Result<Vec<String>, StoreError> {
    let mut stmt = tx.prepare_cached(
        "WITH RECURSIVE family(id, depth) AS (
             SELECT id, 1 FROM sessions WHERE parent = ?1
             UNION ALL
             SELECT s.id, f.depth + 1 FROM sessions s JOIN family f ON s.parent = f.id
             WHERE f.depth < ?2
         )
         SELECT id FROM family ORDER BY depth, id",
    )?;
    let ids = stmt
        .query_map(params![id, MAX_FAMILY_DEPTH as i64], |r| {
            r.get::<_, String>(0)
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ids)
}

impl SessionStore for SqliteStore {
    fn create_session(
        &self,
        new: &NewSession,
        now: Timestamp,
    ) -> Result<SessionRecord, StoreError> {
        self.insert_session(new, None, now)
    }

    fn create_child_session(
        &self,
        parent: &str,
        new: &NewSession,
        now: Timestamp,
    ) -> Result<SessionRecord, StoreError> {
        self.insert_session(new, Some(parent), now)
    }

    fn family_depth(&self, id: &str) -> Result<usize, StoreError> {
        let r = self.read(|tx| {
            let mut depth = 0;
            let mut at = id.to_string();
            loop {
                let parent: Option<String> = tx
                    .query_row("SELECT parent FROM sessions WHERE id = ?1", [&at], |r| {
                        r.get(0)
                    })
                    .optional()?
                    .ok_or_else(|| StoreError::NotFound {
                        what: "session",
                        id: at.clone(),
                    })?;
                match parent {
                    None => return Ok(depth),
                    Some(p) if depth < MAX_FAMILY_DEPTH => {
                        depth += 1;
                        at = p;
                    }
                    Some(_) => {
                        return Err(RowRef::new("sessions", at)
                            .corrupt("parent", "the chain of parents does not end")
                            .into())
                    }
                }
            }
        });
        self.reported(r)
    }

    fn descendants(&self, id: &str) -> Result<Vec<String>, StoreError> {
        let r = self.read(|tx| descendants_of(tx, id));
        self.reported(r)
    }

    fn get_session(&self, id: &str) -> Result<SessionRecord, StoreError> {
        let r = self.read(|tx| load_session(tx, id));
        self.reported(r)
    }

    fn list_sessions(
        &self,
        status: Option<SessionStatus>,
    ) -> Result<Listing<SessionSummary>, StoreError> {
        let listing = self.read(|tx| {
            let mut stmt = tx.prepare_cached(
                "SELECT id, principal, role, status, created_at, updated_at, tainted FROM sessions
                 WHERE ?1 IS NULL OR status = ?1 ORDER BY created_at DESC, id",
            )?;
            let mut rows = stmt.query([status.map(SessionStatus::as_str)])?;
            let mut listing = Listing {
                items: Vec::new(),
                corrupt: Vec::new(),
            };
            while let Some(row) = rows.next()? {
                match decode_summary(row) {
                    Ok(s) => listing.items.push(s),
                    Err(c) => listing.corrupt.push(c),
                }
            }
            Ok(listing)
        })?;
        self.quarantine(&listing.corrupt);
        Ok(listing)
    }

    fn resume_session(&self, id: &str, now: Timestamp) -> Result<ResumedSession, StoreError> {
        // Compared by its last components, so that a state dir reached by another path
        // (moved, or through a link) still resumes its sessions.
        let own_workspace = Path::new("sessions").join(id).join("workspace");
        let r = self.write(|tx| {
            let mut record = load_session(tx, id)?;
            let granted: i64 = tx.query_row(
                "SELECT agent_workspace FROM sessions WHERE id = ?1",
                [id],
                |r| r.get(0),
            )?;
            // A session recorded with the caller's workspace (an `airlock exec` run) worked
            // in the operator's own directory; an agent resuming it would get tools on that
            // directory, which no one granted. Only a session's private workspace resumes,
            // or a directory the owner gave the agent (`airlock run --workspace DIR`).
            if !record.workspace.ends_with(&own_workspace) && granted != 1 {
                return Err(StoreError::invalid(
                    "session",
                    format!(
                        "`{id}` worked in {}, not in a workspace of its own (it was an `airlock exec` run), so it cannot be resumed",
                        record.workspace.display()
                    ),
                    "start a new session instead",
                ));
            }
            match record.status {
                SessionStatus::Killed => {
                    return Err(StoreError::SessionKilled { id: id.to_string() })
                }
                SessionStatus::Finished => {
                    tx.execute(
                        "UPDATE sessions SET status = 'active', updated_at = ?2 WHERE id = ?1",
                        params![id, now.as_unix_ms()],
                    )?;
                    record.status = SessionStatus::Active;
                    record.updated_at = now;
                }
                SessionStatus::Active => {}
            }
            let transcript = read_transcript(tx, id)?;
            Ok((record, transcript))
        });
        let (record, transcript) = self.reported(r)?;
        let budget = self.budget_state(id, now)?;
        Ok(ResumedSession {
            record,
            transcript,
            budget,
        })
    }

    fn record_turn(
        &self,
        id: &str,
        turn: &TurnUpdate<'_>,
        now: Timestamp,
    ) -> Result<i64, StoreError> {
        let bodies = turn
            .events
            .iter()
            .map(|e| to_json_checked("transcript event", e, MAX_EVENT_BYTES).map(|b| (e.kind(), b)))
            .collect::<Result<Vec<_>, _>>()?;
        let taint = match turn.taint {
            Some(t) => Some((
                to_json_checked("taint", t, MAX_TAINT_BYTES)?,
                t.is_tainted(),
            )),
            None => None,
        };
        self.write(|tx| {
            require_active(tx, id)?;
            let mut seq: i64 = tx.query_row(
                "SELECT coalesce(max(seq), 0) FROM transcript WHERE session_id = ?1",
                [id],
                |r| r.get(0),
            )?;
            {
                let mut insert = tx.prepare_cached(
                    "INSERT INTO transcript (session_id, seq, at, kind, body) VALUES (?1, ?2, ?3, ?4, ?5)",
                )?;
                for (kind, body) in &bodies {
                    seq += 1;
                    insert.execute(params![id, seq, now.as_unix_ms(), kind, body])?;
                }
            }
            match &taint {
                Some((json, tainted)) => tx.execute(
                    "UPDATE sessions SET taint = ?2, tainted = ?3, updated_at = ?4 WHERE id = ?1",
                    params![id, json, *tainted as i64, now.as_unix_ms()],
                )?,
                None => tx.execute(
                    "UPDATE sessions SET updated_at = ?2 WHERE id = ?1",
                    params![id, now.as_unix_ms()],
                )?,
            };
            Ok(seq)
        })
    }

    fn transcript(&self, id: &str) -> Result<Vec<TranscriptEntry>, StoreError> {
        let r = self.read(|tx| {
            session_status(tx, id)?;
            read_transcript(tx, id)
        });
        self.reported(r)
    }

    fn finish_session(&self, id: &str, now: Timestamp) -> Result<(), StoreError> {
        self.write(|tx| {
            require_active(tx, id)?;
            tx.execute(
                "UPDATE sessions SET status = 'finished', updated_at = ?2 WHERE id = ?1",
                params![id, now.as_unix_ms()],
            )?;
            Ok(())
        })
    }

    fn kill_session(&self, id: &str, by: &str, now: Timestamp) -> Result<KillReport, StoreError> {
        let report: KillReport = self.write(|tx| {
            // Killing twice is fine: the second kill finds nothing left to cancel.
            let already_killed = session_status(tx, id)? == SessionStatus::Killed;
            tx.execute(
                "UPDATE sessions SET status = 'killed', updated_at = ?2 WHERE id = ?1",
                params![id, now.as_unix_ms()],
            )?;
            let cancelled_approvals =
                super::approvals::cancel_pending(tx, id, by, "session killed", now)?;
            let revoked_grants = tx.execute(
                "UPDATE grants SET revoked_at = ?2 WHERE session_id = ?1 AND revoked_at IS NULL",
                params![id, now.as_unix_ms()],
            )?;
            // Its sub-agents die with it, in the same transaction: no child of a killed
            // session takes another step. (Their counts stay out of the report, which is
            // about the session named; the caller lists the family to report each one.)
            for child in descendants_of(tx, id)? {
                tx.execute(
                    "UPDATE sessions SET status = 'killed', updated_at = ?2 WHERE id = ?1",
                    params![child, now.as_unix_ms()],
                )?;
                super::approvals::cancel_pending(tx, &child, by, "parent session killed", now)?;
                tx.execute(
                    "UPDATE grants SET revoked_at = ?2 WHERE session_id = ?1 AND revoked_at IS NULL",
                    params![child, now.as_unix_ms()],
                )?;
            }
            Ok::<_, StoreError>(KillReport {
                cancelled_approvals,
                revoked_grants,
                already_killed,
            })
        })?;
        // Waiters of the session's approvals wake and see the kill.
        self.signal_approvals_changed();
        Ok(report)
    }
}
