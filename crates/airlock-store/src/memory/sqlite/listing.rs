//! Reading many versions at once: each row is decoded on its own, so a malformed one is
//! reported (and quarantined by the caller) while the others keep working.

use rusqlite::{Params, Row, Transaction};

use crate::error::{CorruptRow, StoreError};
use crate::memory::types::MemoryVersion;
use crate::sqlite::decode::RowRef;
use crate::traits::Listing;

use super::decode::{check_task_state, decode_version};

/// Run `sql` (which selects the version columns and `r.namespace AS record_namespace`) and
/// decode each row, with `extra` reading any further columns.
pub(crate) fn versions<T, P: Params>(
    tx: &Transaction<'_>,
    sql: &str,
    params: P,
    mut extra: impl FnMut(&Row<'_>, MemoryVersion) -> Result<T, CorruptRow>,
) -> Result<(Vec<T>, Vec<CorruptRow>), StoreError> {
    let mut stmt = tx.prepare_cached(sql)?;
    let mut rows = stmt.query(params)?;
    let mut decoded = Vec::new();
    let mut corrupt = Vec::new();
    while let Some(row) = rows.next()? {
        match decode_in_namespace(row) {
            Ok(v) => match extra(row, v) {
                Ok(t) => decoded.push(t),
                Err(c) => corrupt.push(c),
            },
            Err(c) => corrupt.push(c),
        }
    }
    // Task states are checked against their schemas by [`checked`], after the scan.
    Ok((decoded, corrupt))
}

fn decode_in_namespace(row: &Row<'_>) -> Result<MemoryVersion, CorruptRow> {
    let v = decode_version(row)?;
    if let Ok(record_ns) = row.get::<_, String>("record_namespace") {
        if v.namespace.key() != record_ns {
            return Err(
                RowRef::new("memory_versions", format!("{}@{}", v.record_id, v.version))
                    .corrupt("namespace", "differs from its record's namespace"),
            );
        }
    }
    Ok(v)
}

/// Keep the items whose task state still matches its schema; report the others.
pub(crate) fn checked<T>(
    tx: &Transaction<'_>,
    items: Vec<T>,
    mut corrupt: Vec<CorruptRow>,
    version_of: impl Fn(&T) -> &MemoryVersion,
) -> Result<Listing<T>, StoreError> {
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        match check_task_state(tx, version_of(&item)) {
            Ok(()) => out.push(item),
            Err(StoreError::CorruptRow(c)) => corrupt.push(c),
            Err(e) => return Err(e),
        }
    }
    Ok(Listing {
        items: out,
        corrupt,
    })
}
