//! Budget counters in SQLite. A charge reads and updates both counter rows inside one
//! `BEGIN IMMEDIATE` transaction, so no other connection can charge in between.

use rusqlite::{params, Transaction};

use super::decode::RowRef;
use super::sessions::{require_active, session_status};
use super::SqliteStore;
use crate::budget::{
    first_exceeded, BudgetLimits, BudgetState, ChargeError, Counter, Limits, Usage,
};
use crate::error::StoreError;
use crate::time::Timestamp;
use crate::traits::BudgetStore;

fn read_usage(
    tx: &Transaction<'_>,
    table: &'static str,
    key_col: &str,
    key: &dyn rusqlite::ToSql,
    key_text: String,
) -> Result<Usage, StoreError> {
    let sql = format!(
        "SELECT turns, input_tokens, output_tokens, cost_micros, wall_ms, tool_calls FROM {table} WHERE {key_col} = ?1"
    );
    let mut stmt = tx.prepare_cached(&sql)?;
    let mut rows = stmt.query([key])?;
    let mut usage = Usage::default();
    if let Some(row) = rows.next()? {
        let r = RowRef::new(table, key_text);
        for c in Counter::ALL {
            usage.set(c, r.counter(row, c.as_str())?);
        }
    }
    Ok(usage)
}

/// Both counter rows as they stand.
pub(super) fn read_state(
    tx: &Transaction<'_>,
    session_id: &str,
    now: Timestamp,
) -> Result<BudgetState, StoreError> {
    let day = now.utc_day();
    Ok(BudgetState {
        session: read_usage(
            tx,
            "session_budget",
            "session_id",
            &session_id,
            session_id.to_string(),
        )?,
        day,
        day_usage: read_usage(tx, "daily_budget", "day", &day, day.to_string())?,
    })
}

fn write_usage(
    tx: &Transaction<'_>,
    table: &'static str,
    key_col: &str,
    key: &dyn rusqlite::ToSql,
    u: &Usage,
) -> Result<(), StoreError> {
    let sql = format!(
        "INSERT INTO {table} ({key_col}, turns, input_tokens, output_tokens, cost_micros, wall_ms, tool_calls)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT ({key_col}) DO UPDATE SET turns = excluded.turns, input_tokens = excluded.input_tokens,
           output_tokens = excluded.output_tokens, cost_micros = excluded.cost_micros,
           wall_ms = excluded.wall_ms, tool_calls = excluded.tool_calls"
    );
    // Every value was checked to fit an i64 by `Usage::checked_add` (or is zero).
    let v = |c: Counter| u.get(c) as i64;
    tx.prepare_cached(&sql)?.execute(params![
        key,
        v(Counter::Turns),
        v(Counter::InputTokens),
        v(Counter::OutputTokens),
        v(Counter::CostMicros),
        v(Counter::WallMs),
        v(Counter::ToolCalls)
    ])?;
    Ok(())
}

/// Store `state` (already summed) for its session and day.
pub(super) fn write_state(
    tx: &Transaction<'_>,
    session_id: &str,
    state: &BudgetState,
) -> Result<(), StoreError> {
    write_usage(
        tx,
        "session_budget",
        "session_id",
        &session_id,
        &state.session,
    )?;
    write_usage(tx, "daily_budget", "day", &state.day, &state.day_usage)
}

/// Zero one counter row, returning what it held.
pub(super) fn reset_usage(
    tx: &Transaction<'_>,
    table: &'static str,
    key_col: &str,
    key: &dyn rusqlite::ToSql,
    key_text: String,
) -> Result<Usage, StoreError> {
    let before = read_usage(tx, table, key_col, key, key_text)?;
    write_usage(tx, table, key_col, key, &Usage::default())?;
    Ok(before)
}

impl BudgetStore for SqliteStore {
    fn charge(
        &self,
        session_id: &str,
        usage: &Usage,
        limits: &BudgetLimits,
        now: Timestamp,
    ) -> Result<BudgetState, ChargeError> {
        let r = self.write(|tx| {
            require_active(tx, session_id)?;
            let state = read_state(tx, session_id, now)?;
            if let Some(exhausted) = first_exceeded(&state.session, &state.day_usage, usage, limits)
            {
                return Err(ChargeError::Exhausted(exhausted));
            }
            let after = BudgetState {
                session: state.session.checked_add(usage)?,
                day: state.day,
                day_usage: state.day_usage.checked_add(usage)?,
            };
            write_state(tx, session_id, &after)?;
            Ok(after)
        });
        if let Err(ChargeError::Store(StoreError::CorruptRow(c))) = &r {
            self.quarantine(std::slice::from_ref(c));
        }
        r
    }

    fn record_spent(
        &self,
        session_id: &str,
        usage: &Usage,
        now: Timestamp,
    ) -> Result<BudgetState, StoreError> {
        let r = self.write(|tx| {
            // Spending already happened: record it even for a killed session.
            session_status(tx, session_id)?;
            let state = read_state(tx, session_id, now)?;
            let after = BudgetState {
                session: state.session.checked_add(usage)?,
                day: state.day,
                day_usage: state.day_usage.checked_add(usage)?,
            };
            write_state(tx, session_id, &after)?;
            Ok(after)
        });
        self.reported(r)
    }

    fn budget_state(&self, session_id: &str, now: Timestamp) -> Result<BudgetState, StoreError> {
        let r = self.read(|tx| {
            session_status(tx, session_id)?;
            read_state(tx, session_id, now)
        });
        self.reported(r)
    }

    fn draw_for_child(
        &self,
        parent: &str,
        cap: &Usage,
        limits: &Limits,
        now: Timestamp,
    ) -> Result<BudgetState, ChargeError> {
        let session_only = BudgetLimits {
            per_session: *limits,
            per_day: Limits::default(),
        };
        let r = self.write(|tx| {
            require_active(tx, parent)?;
            let state = read_state(tx, parent, now)?;
            if let Some(exhausted) =
                first_exceeded(&state.session, &state.day_usage, cap, &session_only)
            {
                return Err(ChargeError::Exhausted(exhausted));
            }
            let after = BudgetState {
                session: state.session.checked_add(cap)?,
                ..state
            };
            write_state(tx, parent, &after)?;
            Ok(after)
        });
        if let Err(ChargeError::Store(StoreError::CorruptRow(c))) = &r {
            self.quarantine(std::slice::from_ref(c));
        }
        r
    }

    fn day_usage(&self, now: Timestamp) -> Result<Usage, StoreError> {
        let day = now.utc_day();
        let r = self.read(|tx| read_usage(tx, "daily_budget", "day", &day, day.to_string()));
        self.reported(r)
    }
}
