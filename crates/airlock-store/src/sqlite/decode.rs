//! Strict reading of stored values.
//!
//! Each column is read as exactly the SQL type this build wrote, size-checked *before* it
//! is copied, and JSON columns go through serde into declared types that refuse unknown
//! fields. Nothing is ever converted by guessing ("auto-casting") its type.

use rusqlite::types::ValueRef;
use rusqlite::Row;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::CorruptRow;
use crate::time::Timestamp;

/// Identifies the row being decoded, for error messages.
pub(crate) struct RowRef {
    pub table: &'static str,
    pub key: String,
}

impl RowRef {
    pub fn new(table: &'static str, key: impl Into<String>) -> RowRef {
        RowRef {
            table,
            key: key.into(),
        }
    }

    pub fn corrupt(&self, column: &'static str, reason: impl Into<String>) -> CorruptRow {
        CorruptRow {
            table: self.table,
            row: self.key.clone(),
            column,
            reason: reason.into(),
        }
    }

    fn value<'r>(
        &self,
        row: &'r Row<'_>,
        column: &'static str,
    ) -> Result<ValueRef<'r>, CorruptRow> {
        row.get_ref(column)
            .map_err(|e| self.corrupt(column, format!("cannot read column: {e}")))
    }

    /// A TEXT value of at most `max` bytes of valid UTF-8.
    pub fn text(
        &self,
        row: &Row<'_>,
        column: &'static str,
        max: usize,
    ) -> Result<String, CorruptRow> {
        match self.value(row, column)? {
            ValueRef::Text(bytes) => self.text_bytes(column, bytes, max),
            other => Err(self.corrupt(
                column,
                format!("expected text, found {}", type_name(&other)),
            )),
        }
    }

    /// A TEXT value, or NULL.
    pub fn opt_text(
        &self,
        row: &Row<'_>,
        column: &'static str,
        max: usize,
    ) -> Result<Option<String>, CorruptRow> {
        match self.value(row, column)? {
            ValueRef::Null => Ok(None),
            ValueRef::Text(bytes) => self.text_bytes(column, bytes, max).map(Some),
            other => Err(self.corrupt(
                column,
                format!("expected text or null, found {}", type_name(&other)),
            )),
        }
    }

    fn text_bytes(
        &self,
        column: &'static str,
        bytes: &[u8],
        max: usize,
    ) -> Result<String, CorruptRow> {
        if bytes.len() > max {
            return Err(self.corrupt(
                column,
                format!("{} bytes, over the {max}-byte limit", bytes.len()),
            ));
        }
        String::from_utf8(bytes.to_vec()).map_err(|_| self.corrupt(column, "not valid UTF-8"))
    }

    /// An INTEGER value.
    pub fn int(&self, row: &Row<'_>, column: &'static str) -> Result<i64, CorruptRow> {
        match self.value(row, column)? {
            ValueRef::Integer(i) => Ok(i),
            other => Err(self.corrupt(
                column,
                format!("expected integer, found {}", type_name(&other)),
            )),
        }
    }

    /// An INTEGER counter, which must not be negative.
    pub fn counter(&self, row: &Row<'_>, column: &'static str) -> Result<u64, CorruptRow> {
        let i = self.int(row, column)?;
        u64::try_from(i).map_err(|_| self.corrupt(column, format!("counter is negative ({i})")))
    }

    /// An INTEGER holding 0 or 1.
    pub fn flag(&self, row: &Row<'_>, column: &'static str) -> Result<bool, CorruptRow> {
        match self.int(row, column)? {
            0 => Ok(false),
            1 => Ok(true),
            i => Err(self.corrupt(column, format!("expected 0 or 1, found {i}"))),
        }
    }

    pub fn time(&self, row: &Row<'_>, column: &'static str) -> Result<Timestamp, CorruptRow> {
        self.int(row, column).map(Timestamp::from_unix_ms)
    }

    pub fn opt_time(
        &self,
        row: &Row<'_>,
        column: &'static str,
    ) -> Result<Option<Timestamp>, CorruptRow> {
        match self.value(row, column)? {
            ValueRef::Null => Ok(None),
            ValueRef::Integer(i) => Ok(Some(Timestamp::from_unix_ms(i))),
            other => Err(self.corrupt(
                column,
                format!("expected integer or null, found {}", type_name(&other)),
            )),
        }
    }

    /// A TEXT column parsed as JSON into `T` (whose serde derive refuses unknown fields).
    pub fn json<T: DeserializeOwned>(
        &self,
        row: &Row<'_>,
        column: &'static str,
        max: usize,
    ) -> Result<T, CorruptRow> {
        let text = self.text(row, column, max)?;
        serde_json::from_str(&text)
            .map_err(|e| self.corrupt(column, format!("invalid JSON for its type: {e}")))
    }

    /// Like [`RowRef::json`] for a type that does not itself refuse unknown fields: the
    /// value must serialize back to exactly what was stored, so no field is silently
    /// dropped or defaulted.
    pub fn json_exact<T: DeserializeOwned + Serialize>(
        &self,
        row: &Row<'_>,
        column: &'static str,
        max: usize,
    ) -> Result<T, CorruptRow> {
        let text = self.text(row, column, max)?;
        let stored: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| self.corrupt(column, format!("invalid JSON: {e}")))?;
        let value: T = serde_json::from_value(stored.clone())
            .map_err(|e| self.corrupt(column, format!("invalid JSON for its type: {e}")))?;
        let back = serde_json::to_value(&value)
            .map_err(|e| self.corrupt(column, format!("cannot re-serialize: {e}")))?;
        if back != stored {
            return Err(self.corrupt(
                column,
                "holds fields this build does not know, or is missing fields it requires",
            ));
        }
        Ok(value)
    }

    /// A TEXT column that must be one of a fixed set of names.
    pub fn name<T>(
        &self,
        row: &Row<'_>,
        column: &'static str,
        parse: fn(&str) -> Option<T>,
    ) -> Result<T, CorruptRow> {
        let s = self.text(row, column, 64)?;
        parse(&s)
            .ok_or_else(|| self.corrupt(column, format!("unknown value `{}`", s.escape_debug())))
    }
}

fn type_name(v: &ValueRef<'_>) -> &'static str {
    match v {
        ValueRef::Null => "null",
        ValueRef::Integer(_) => "integer",
        ValueRef::Real(_) => "real",
        ValueRef::Text(_) => "text",
        ValueRef::Blob(_) => "blob",
    }
}

/// Serialize a value for a JSON column, refusing one over `max` bytes, so that everything
/// written can be read back under the same limit.
pub(crate) fn to_json_checked<T: Serialize>(
    field: &'static str,
    value: &T,
    max: usize,
) -> Result<String, crate::error::StoreError> {
    let text = serde_json::to_string(value).map_err(|e| {
        crate::error::StoreError::invalid(
            field,
            format!("cannot serialize: {e}"),
            "report this as a bug",
        )
    })?;
    if text.len() > max {
        return Err(crate::error::StoreError::invalid(
            field,
            format!("{} bytes, over the {max}-byte limit", text.len()),
            "shorten it; large content belongs in a workspace file",
        ));
    }
    Ok(text)
}
