//! The database schema and its versioned migrations (`PRAGMA user_version`).
//!
//! Every table is `STRICT`, so SQLite itself refuses a value of the wrong type written
//! through SQL; the row decoders still check every value, because a file edited outside
//! SQLite can hold anything.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use crate::error::StoreError;

/// `PRAGMA application_id` of an Airlock database: ASCII `ARLK`.
pub const APPLICATION_ID: i32 = 0x4152_4C4B;

/// Migrations, in order; entry `i` brings the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: sessions, transcript, budgets, approvals, grants, quarantine log.
    r#"
CREATE TABLE sessions (
    id          TEXT PRIMARY KEY,
    principal   TEXT NOT NULL,
    role        TEXT NOT NULL,
    status      TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    workspace   TEXT NOT NULL,
    tainted     INTEGER NOT NULL,
    taint       TEXT NOT NULL
) STRICT;

CREATE TABLE transcript (
    session_id  TEXT NOT NULL REFERENCES sessions(id),
    seq         INTEGER NOT NULL,
    at          INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    body        TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) STRICT;

CREATE TABLE session_budget (
    session_id    TEXT PRIMARY KEY REFERENCES sessions(id),
    turns         INTEGER NOT NULL DEFAULT 0,
    input_tokens  INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cost_micros   INTEGER NOT NULL DEFAULT 0,
    wall_ms       INTEGER NOT NULL DEFAULT 0,
    tool_calls    INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE TABLE daily_budget (
    day           INTEGER PRIMARY KEY,
    turns         INTEGER NOT NULL DEFAULT 0,
    input_tokens  INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cost_micros   INTEGER NOT NULL DEFAULT 0,
    wall_ms       INTEGER NOT NULL DEFAULT 0,
    tool_calls    INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE TABLE budget_resets (
    id        INTEGER PRIMARY KEY,
    scope     TEXT NOT NULL,
    target    TEXT NOT NULL,
    operator  TEXT NOT NULL,
    at        INTEGER NOT NULL,
    previous  TEXT NOT NULL
) STRICT;

CREATE TABLE approvals (
    id            TEXT PRIMARY KEY,
    session_id    TEXT NOT NULL REFERENCES sessions(id),
    action_kind   TEXT NOT NULL,
    payload       TEXT NOT NULL,
    payload_hash  TEXT NOT NULL,
    preview       TEXT NOT NULL,
    reasons       TEXT NOT NULL,
    policies      TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    status        TEXT NOT NULL,
    decided_by    TEXT,
    decided_at    INTEGER,
    note          TEXT
) STRICT;
CREATE INDEX approvals_by_session_status ON approvals(session_id, status);
CREATE INDEX approvals_by_session_created ON approvals(session_id, created_at);
CREATE INDEX approvals_by_status_expiry ON approvals(status, expires_at);

CREATE TABLE grants (
    id            TEXT PRIMARY KEY,
    scope         TEXT NOT NULL,
    session_id    TEXT REFERENCES sessions(id),
    target        TEXT NOT NULL,
    action_kind   TEXT NOT NULL,
    value         TEXT NOT NULL,
    created_by    TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    approval_id   TEXT REFERENCES approvals(id),
    revoked_at    INTEGER
) STRICT;
CREATE INDEX grants_by_kind_value ON grants(action_kind, value);

CREATE TABLE quarantine (
    table_name  TEXT NOT NULL,
    row_key     TEXT NOT NULL,
    reason      TEXT NOT NULL,
    first_seen  INTEGER NOT NULL,
    PRIMARY KEY (table_name, row_key)
) STRICT;
"#,
    // 2: memory records, their versions, held changes, task_state schemas, recall index.
    r#"
CREATE TABLE memory_records (
    id               TEXT PRIMARY KEY,
    namespace        TEXT NOT NULL,
    current_version  INTEGER NOT NULL,
    created_at       INTEGER NOT NULL
) STRICT;
CREATE INDEX memory_records_by_namespace ON memory_records(namespace);

CREATE TABLE memory_versions (
    record_id     TEXT NOT NULL REFERENCES memory_records(id),
    version       INTEGER NOT NULL,
    namespace     TEXT NOT NULL,
    tier          TEXT NOT NULL,
    kind          TEXT NOT NULL,
    body          TEXT,
    session_id    TEXT NOT NULL,
    principal     TEXT NOT NULL,
    tainted       INTEGER NOT NULL,
    tool_call_id  TEXT NOT NULL,
    written_at    INTEGER NOT NULL,
    origin        TEXT NOT NULL,
    actor         TEXT,
    PRIMARY KEY (record_id, version)
) STRICT;
CREATE INDEX memory_versions_by_session ON memory_versions(session_id);

CREATE TABLE memory_reviews (
    id            TEXT PRIMARY KEY,
    namespace     TEXT NOT NULL,
    record_id     TEXT NOT NULL,
    base_version  INTEGER,
    tier          TEXT NOT NULL,
    kind          TEXT NOT NULL,
    body          TEXT,
    session_id    TEXT NOT NULL,
    principal     TEXT NOT NULL,
    tainted       INTEGER NOT NULL,
    tool_call_id  TEXT NOT NULL,
    requested_at  INTEGER NOT NULL,
    reasons       TEXT NOT NULL,
    status        TEXT NOT NULL,
    decided_by    TEXT,
    decided_at    INTEGER
) STRICT;
CREATE INDEX memory_reviews_by_status ON memory_reviews(status, requested_at);

CREATE TABLE memory_schemas (
    name           TEXT PRIMARY KEY,
    schema         TEXT NOT NULL,
    registered_by  TEXT NOT NULL,
    registered_at  INTEGER NOT NULL
) STRICT;

-- Live recall records only; rowid = memory_records.rowid.
CREATE VIRTUAL TABLE memory_fts USING fts5(text, namespace UNINDEXED, tokenize = 'unicode61');
"#,
    // 3: how many indexed rows hold each term, so a search can leave out words too common
    // to change bm25's ranking. fts5vocab reads memory_fts's index; it stores nothing.
    r#"
CREATE VIRTUAL TABLE memory_fts_terms USING fts5vocab(memory_fts, 'row');
"#,
    // 4: the process waiting for each approval request (pid and start time), so a request
    // whose waiter died is marked orphaned instead of being approved for nobody.
    r#"
ALTER TABLE approvals ADD COLUMN waiter_pid INTEGER;
ALTER TABLE approvals ADD COLUMN waiter_start INTEGER;
"#,
    // 5: how often each grant let an action through, and when last, so the operator can
    // see which standing grants are in use before revoking them.
    r#"
ALTER TABLE grants ADD COLUMN uses INTEGER NOT NULL DEFAULT 0;
ALTER TABLE grants ADD COLUMN last_used_at INTEGER;
"#,
    // 6: the owner gave the session's agent this directory as its workspace
    // (`airlock run --workspace DIR`), so the session resumes there; an `airlock exec`
    // run's session, which also names the operator's directory, never does.
    r#"
ALTER TABLE sessions ADD COLUMN agent_workspace INTEGER NOT NULL DEFAULT 0;
"#,
    // 7: the session that started a sub-agent's session, so every record of the child
    // names its parent and killing the parent reaches the whole family. (That the parent
    // exists, and is active, is checked when the child is inserted.)
    r#"
ALTER TABLE sessions ADD COLUMN parent TEXT;
CREATE INDEX sessions_by_parent ON sessions(parent) WHERE parent IS NOT NULL;
"#,
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Check that `conn` is an Airlock database this build understands, and bring an older
/// (or new, empty) one up to [`SCHEMA_VERSION`]. Migrations run under a write lock, so two
/// processes opening a fresh database at once apply each migration once.
pub(crate) fn check_and_migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let app_id: i32 = conn.pragma_query_value(None, "application_id", |r| r.get(0))?;
    if app_id != 0 && app_id != APPLICATION_ID {
        return Err(StoreError::ForeignDatabase {
            path: path.to_path_buf(),
            found: app_id,
        });
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version < 0 {
        return Err(StoreError::Damaged {
            path: path.to_path_buf(),
            detail: format!("schema version {version} is negative"),
        });
    }
    if version > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            path: path.to_path_buf(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    if version == 0 && app_id == 0 {
        // A database without our id is only ours to initialize if it is empty.
        let tables: i64 = tx.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
        if tables > 0 {
            return Err(StoreError::ForeignDatabase {
                path: path.to_path_buf(),
                found: app_id,
            });
        }
        tx.pragma_update(None, "application_id", APPLICATION_ID)?;
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", i as i64 + 1)?;
    }
    tx.commit()?;
    Ok(())
}
