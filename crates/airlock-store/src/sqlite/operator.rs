//! Operator-only controls in SQLite. Each reset is logged in `budget_resets` with who did
//! it and what the counters held.

use rusqlite::params;

use super::budgets::reset_usage;
use super::decode::RowRef;
use super::sessions::session_status;
use super::SqliteStore;
use crate::budget::Usage;
use crate::error::StoreError;
use crate::time::Timestamp;
use crate::traits::{OperatorControls, QuarantinedRow};

fn log_reset(
    tx: &rusqlite::Transaction<'_>,
    scope: &str,
    target: &str,
    operator: &str,
    now: Timestamp,
    previous: &Usage,
) -> Result<(), StoreError> {
    let previous = serde_json::to_string(previous)
        .map_err(|e| StoreError::invalid("usage", e.to_string(), "report this as a bug"))?;
    tx.execute(
        "INSERT INTO budget_resets (scope, target, operator, at, previous) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![scope, target, operator, now.as_unix_ms(), previous],
    )?;
    Ok(())
}

impl OperatorControls for SqliteStore {
    fn operator_reset_session_budget(
        &self,
        session_id: &str,
        operator: &str,
        now: Timestamp,
    ) -> Result<Usage, StoreError> {
        self.write(|tx| {
            session_status(tx, session_id)?;
            let before = reset_usage(
                tx,
                "session_budget",
                "session_id",
                &session_id,
                session_id.to_string(),
            )?;
            log_reset(tx, "session", session_id, operator, now, &before)?;
            Ok(before)
        })
    }

    fn operator_reset_day_budget(
        &self,
        day: i64,
        operator: &str,
        now: Timestamp,
    ) -> Result<Usage, StoreError> {
        self.write(|tx| {
            let before = reset_usage(tx, "daily_budget", "day", &day, day.to_string())?;
            log_reset(tx, "day", &day.to_string(), operator, now, &before)?;
            Ok(before)
        })
    }

    fn quarantined_rows(&self) -> Result<Vec<QuarantinedRow>, StoreError> {
        self.read(|tx| {
            let mut stmt = tx.prepare("SELECT table_name, row_key, reason, first_seen FROM quarantine ORDER BY first_seen, table_name, row_key")?;
            let mut rows = stmt.query([])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                let r = RowRef::new("quarantine", "?");
                out.push(QuarantinedRow {
                    table: r.text(row, "table_name", 64)?,
                    row: r.text(row, "row_key", 1024)?,
                    reason: r.text(row, "reason", 64 * 1024)?,
                    first_seen: r.time(row, "first_seen")?,
                });
            }
            Ok(out)
        })
    }
}
