//! Errors of the store. Each says what went wrong in the operator's terms and, where an
//! operator can act, ends with a `help:` line.

use std::path::PathBuf;

/// A stored row whose shape is not what this build wrote: bad JSON, unknown fields, a
/// value over its size limit, a wrong SQL type, or an out-of-range number.
///
/// The row is never half-loaded: the operation that met it fails (or, in a listing, the
/// row is reported beside the good ones) and the row is recorded in the quarantine log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("row `{row}` of table `{table}` is malformed ({column}): {reason}\nhelp: the row was left as it is and listed in the quarantine log; restore the database from a backup or remove that row")]
pub struct CorruptRow {
    /// Table the row is in.
    pub table: &'static str,
    /// The row's key (id, or `session/seq` for transcript entries).
    pub row: String,
    /// The column that failed.
    pub column: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

/// Everything that can go wrong in the store itself.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file exists but is not a SQLite database (or is encrypted or truncated).
    #[error("{} is not an Airlock database: {detail}\nhelp: check that the state directory is the right one; restore the file from a backup, or, if it is not needed, move it aside and Airlock will create a new database", path.display())]
    NotADatabase { path: PathBuf, detail: String },

    /// The database file lost its content (emptied, cut short) or is not a file at all.
    /// Never replaced by a new database: that would reset budgets, grants and approvals.
    #[error("{} cannot be used: {detail}\nhelp: restore it from a backup; or, to start over knowingly with no budgets spent, no grants and no approvals, move it aside (with any {}-wal file) and Airlock will create a new, empty database", path.display(), path.display())]
    LostDatabase { path: PathBuf, detail: String },

    /// A SQLite database, but another program's.
    #[error("{} is a SQLite database of another program (application_id {found:#010x})\nhelp: point Airlock at its own state directory (AIRLOCK_HOME or the `state_dir` setting)", path.display())]
    ForeignDatabase { path: PathBuf, found: i32 },

    /// Written by a newer Airlock: this build does not know its schema.
    #[error("{} has schema version {found}, but this build of Airlock understands versions up to {supported}\nhelp: upgrade Airlock to the version that wrote this database; do not edit the file by hand", path.display())]
    SchemaTooNew {
        path: PathBuf,
        found: i64,
        supported: i64,
    },

    /// SQLite reports the file's structure as damaged.
    #[error("{} is damaged: {detail}\nhelp: restore it from a backup, or salvage what is readable with `sqlite3 {} .recover`; or, to start over knowingly with no budgets spent, no grants and no approvals, move it aside", path.display(), path.display())]
    Damaged { path: PathBuf, detail: String },

    /// A row could not be read into its declared type.
    #[error(transparent)]
    CorruptRow(#[from] CorruptRow),

    /// No record with that id.
    #[error("no {what} with id `{id}`\nhelp: check the id for typos; ids are shown by the commands that list {what}s")]
    NotFound { what: &'static str, id: String },

    /// A caller passed a value the store refuses to write.
    #[error("invalid {field}: {reason}\nhelp: {help}")]
    InvalidInput {
        field: &'static str,
        reason: String,
        help: String,
    },

    /// The session was killed; nothing more may be recorded or charged for it.
    #[error("session `{id}` was killed and accepts no more work\nhelp: start a new session")]
    SessionKilled { id: String },

    /// The session finished; it must be resumed before it takes new turns.
    #[error("session `{id}` is finished\nhelp: resume it first (`airlock chat --session {id}`)")]
    SessionFinished { id: String },

    /// A session with that id already exists.
    #[error("a session with id `{id}` already exists\nhelp: resume it, or choose another id")]
    SessionExists { id: String },

    /// The state directory or a workspace could not be prepared.
    #[error("{}: {source}\nhelp: check that the state directory exists, is owned by you and is writable", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The operating system could not provide random bytes for a new id.
    #[error("could not generate a random id: {0}")]
    Random(String),

    /// Any other database failure.
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

impl StoreError {
    pub(crate) fn invalid(
        field: &'static str,
        reason: impl Into<String>,
        help: impl Into<String>,
    ) -> Self {
        StoreError::InvalidInput {
            field,
            reason: reason.into(),
            help: help.into(),
        }
    }
}
