//! The embedded SQLite backend.
//!
//! One file, `<state>/airlock.db`, in WAL mode so a reader (the agent polling an approval)
//! never blocks a writer (the CLI approving it). Every write runs in a
//! `BEGIN IMMEDIATE` transaction, which takes the database's write lock up front: two
//! processes charging the same budget are serialized by SQLite itself, and the busy
//! timeout makes the second one wait instead of failing. By default `synchronous=FULL`
//! makes each commit durable before it returns; see [`SyncMode`] for the one relaxed mode.

mod approvals;
mod budgets;
pub(crate) mod decode;
mod grants;
mod operator;
mod schema;
mod sessions;

use std::fs::{self, DirBuilder};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, Transaction, TransactionBehavior};

use crate::error::{CorruptRow, StoreError};
use crate::memory::{MemoryClock, MemoryRetention};
use crate::time::Timestamp;

pub use schema::{APPLICATION_ID, SCHEMA_VERSION};

/// File name of the database inside the state directory.
pub const DATABASE_FILE: &str = "airlock.db";

/// How to open the store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// The state directory: holds the database (unless `database` says otherwise) and
    /// `sessions/<id>/workspace`.
    pub state_dir: PathBuf,
    /// Database file; default `<state_dir>/airlock.db`.
    pub database: Option<PathBuf>,
    /// How long a write waits for another process's write to finish.
    pub busy_timeout: Duration,
    /// When this connection's commits reach the disk.
    pub sync: SyncMode,
}

/// When a connection's commits reach the disk.
///
/// Both modes keep the database consistent after a crash of any process or of the machine
/// (WAL mode); they differ only in what a power failure may take back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// Every commit is on disk before it returns (`synchronous=FULL`). The default, and
    /// the only mode for records that outlive the process: approvals, grants, budgets,
    /// transcripts.
    #[default]
    EveryCommit,
    /// Commits reach the disk with the next checkpoint or the next `EveryCommit` commit of
    /// any process (`synchronous=NORMAL`), and closing does not checkpoint, so the
    /// write-ahead log stays and is not re-created (and its directory re-synced) by the
    /// next process. For bookkeeping that lives no longer than the process writing it,
    /// such as the session record of one `airlock exec` run: a power failure that takes
    /// the record back also ended the run it described.
    ProcessLifetime,
}

impl StoreOptions {
    /// Defaults for a state directory.
    pub fn new(state_dir: impl Into<PathBuf>) -> StoreOptions {
        StoreOptions {
            state_dir: state_dir.into(),
            database: None,
            busy_timeout: Duration::from_secs(10),
            sync: SyncMode::EveryCommit,
        }
    }
}

/// The SQLite implementation of every store trait. Cheap to share behind an `Arc`; each
/// process (or thread that wants its own connection) may open its own on the same file.
pub struct SqliteStore {
    conn: Mutex<Connection>,
    db_path: PathBuf,
    state_dir: PathBuf,
    /// How long memory records live, and the clock their expiry is read against.
    pub(crate) retention: MemoryRetention,
    pub(crate) clock: MemoryClock,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("db_path", &self.db_path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Wake the processes waiting on an approval of this state dir (see
    /// [`crate::ApprovalWatch`]).
    pub(crate) fn signal_approvals_changed(&self) {
        crate::changes::signal_approvals_changed(&self.state_dir);
    }

    /// Open (creating if needed) the store in `state_dir` with default options.
    pub fn open(state_dir: impl Into<PathBuf>) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with(StoreOptions::new(state_dir))
    }

    /// Open with explicit options. Refuses, with a `help:` line, a file that is not SQLite,
    /// another program's database, and a schema newer than this build.
    pub fn open_with(options: StoreOptions) -> Result<SqliteStore, StoreError> {
        ensure_private_dir(&options.state_dir)?;
        let db_path = options
            .database
            .clone()
            .unwrap_or_else(|| options.state_dir.join(DATABASE_FILE));
        // No pre-check of the file's header with `std::fs`: closing any descriptor of the
        // database file drops every POSIX lock this process holds on it, including the
        // shared lock of another open connection (`airlock run` opens two). Another
        // process closing its connection could then checkpoint and unlink the WAL under
        // the live one, whose writes would vanish. SQLite reports a foreign file itself
        // (SQLITE_NOTADB, mapped by `open_error`).
        // `stat` only (no descriptor, see above). SQLite takes an empty file for a new
        // database, so an emptied one would silently reset every budget, grant and
        // approval: a missing file is created below, complete, under its final name, and
        // an existing one must look like a database.
        match fs::metadata(&db_path) {
            Ok(meta) => check_database_file(&db_path, &meta)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                create_database(&db_path, options.busy_timeout)?
            }
            Err(source) => {
                return Err(StoreError::Io {
                    path: db_path.clone(),
                    source,
                })
            }
        }
        // No SQLITE_OPEN_CREATE: a file that vanished since is an error, not a new database.
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn =
            Connection::open_with_flags(&db_path, flags).map_err(|e| open_error(&db_path, e))?;
        // Opening can meet SQLITE_BUSY without SQLite's busy handler being asked: while
        // another process rebuilds the write-ahead log's index (the first opener after
        // every connection closed), readers get SQLITE_BUSY_RECOVERY at once. Retry it
        // within the same busy timeout that governs writes.
        let deadline = std::time::Instant::now() + options.busy_timeout;
        retry_while_busy(deadline, || {
            configure(&conn, options.busy_timeout, options.sync).map_err(StoreError::Sqlite)?;
            check_not_cut_short(&conn, &db_path)?;
            schema::check_and_migrate(&mut conn, &db_path)
        })
        .map_err(|e| match e {
            StoreError::Sqlite(e) => open_error(&db_path, e),
            other => other,
        })?;
        Ok(SqliteStore {
            conn: Mutex::new(conn),
            db_path,
            state_dir: options.state_dir,
            retention: MemoryRetention::default(),
            clock: Arc::new(Timestamp::now),
        })
    }

    /// Memory records expire by these limits instead of the defaults.
    pub fn with_memory_retention(mut self, retention: MemoryRetention) -> SqliteStore {
        self.retention = retention;
        self
    }

    /// Read memory expiry against `clock` instead of the wall clock (tests).
    pub fn with_memory_clock(mut self, clock: MemoryClock) -> SqliteStore {
        self.clock = clock;
        self
    }

    /// The memory limits in force.
    pub fn memory_retention(&self) -> &MemoryRetention {
        &self.retention
    }

    /// The database file.
    pub fn database_path(&self) -> &Path {
        &self.db_path
    }

    /// The state directory.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// The connection, for one call. A panic in another thread while it held the lock
    /// leaves the connection usable (its transaction rolled back on drop), so a poisoned
    /// lock is simply taken over.
    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Run `f` in a `BEGIN IMMEDIATE` transaction, committing if it returns `Ok`.
    pub(crate) fn write<T, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| E::from(StoreError::Sqlite(e)))?;
        let out = f(&tx)?;
        tx.commit().map_err(|e| E::from(StoreError::Sqlite(e)))?;
        Ok(out)
    }

    /// Run `f` in a read transaction (one consistent snapshot).
    pub(crate) fn read<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Deferred)?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    /// Record malformed rows in the quarantine log. Best effort: failing to log must not
    /// hide the original error, which the caller returns anyway.
    pub(crate) fn quarantine(&self, rows: &[CorruptRow]) {
        if rows.is_empty() {
            return;
        }
        let now = Timestamp::now().as_unix_ms();
        let conn = self.conn();
        for r in rows {
            let _ = conn.execute(
                "INSERT INTO quarantine (table_name, row_key, reason, first_seen) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (table_name, row_key) DO UPDATE SET reason = excluded.reason",
                rusqlite::params![r.table, r.row, format!("{}: {}", r.column, r.reason), now],
            );
        }
    }

    /// Pass a result through, logging a malformed row it reports.
    pub(crate) fn reported<T>(&self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(StoreError::CorruptRow(c)) = &r {
            self.quarantine(std::slice::from_ref(c));
        }
        r
    }
}

/// The smallest SQLite file: its header alone is 100 bytes.
const SQLITE_HEADER_BYTES: u64 = 100;

/// Refuse an existing database path that cannot hold a database: not a regular file,
/// empty, or shorter than SQLite's header.
fn check_database_file(path: &Path, meta: &fs::Metadata) -> Result<(), StoreError> {
    let lost = |detail: String| StoreError::LostDatabase {
        path: path.to_path_buf(),
        detail,
    };
    if !meta.is_file() {
        return Err(lost("it is not a regular file".into()));
    }
    match meta.len() {
        0 => Err(lost("it is empty (0 bytes): its content was lost".into())),
        n if n < SQLITE_HEADER_BYTES => Err(StoreError::NotADatabase {
            path: path.to_path_buf(),
            detail: format!("it is {n} bytes long, shorter than a SQLite header"),
        }),
        _ => Ok(()),
    }
}

/// Refuse a database whose file holds fewer pages than its header says, and whose
/// write-ahead log cannot hold the rest: it was cut short.
fn check_not_cut_short(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let pages: u64 = conn.pragma_query_value(None, "page_count", |r| r.get(0))?;
    let page_size: u64 = conn.pragma_query_value(None, "page_size", |r| r.get(0))?;
    let size = |p: &Path| fs::metadata(p).map_or(0, |m| m.len());
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let have = size(path).saturating_add(size(Path::new(&wal)));
    let need = pages.saturating_mul(page_size);
    if have < need {
        return Err(StoreError::LostDatabase {
            path: path.to_path_buf(),
            detail: format!(
                "it holds {have} bytes (with its write-ahead log), but its header says {pages} pages of {page_size} bytes: it was cut short"
            ),
        });
    }
    Ok(())
}

/// Create a new database at `path`: built and migrated under a temporary name, then linked
/// into place, so that `path` never exists empty (a crash while creating leaves only the
/// temporary file). If another process created it meanwhile, theirs is kept.
fn create_database(path: &Path, busy_timeout: Duration) -> Result<(), StoreError> {
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| StoreError::Io { path: p, source }
    };
    let tmp = {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".new-{}-{nanos}", std::process::id()));
        PathBuf::from(name)
    };
    let remove_tmp = |tmp: &Path| {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut name = tmp.as_os_str().to_owned();
            name.push(suffix);
            let _ = fs::remove_file(PathBuf::from(name));
        }
    };
    let built = (|| {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(&tmp, flags)?;
        // The database holds approvals and budgets: only the operator may read it.
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o600)).map_err(io(&tmp))?;
        configure(&conn, busy_timeout, SyncMode::EveryCommit)?;
        schema::check_and_migrate(&mut conn, &tmp)?;
        // Closing the only connection checkpoints the write-ahead log into the file.
        conn.close().map_err(|(_, e)| StoreError::Sqlite(e))?;
        fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(io(&tmp))
    })();
    if let Err(e) = built {
        remove_tmp(&tmp);
        return Err(e);
    }
    let linked = fs::hard_link(&tmp, path);
    remove_tmp(&tmp);
    match linked {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(io(path)(e)),
    }
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
    let dir = dir.unwrap_or(Path::new("."));
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))
}

/// Write-ahead log pages after which a [`SyncMode::ProcessLifetime`] commit checkpoints.
const PROCESS_LIFETIME_CHECKPOINT_PAGES: u32 = 64;

fn configure(conn: &Connection, busy_timeout: Duration, sync: SyncMode) -> rusqlite::Result<()> {
    conn.busy_timeout(busy_timeout)?;
    // Reading the header page here turns "file is not a database" into an open error.
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(rusqlite::Error::InvalidParameterName(format!(
            "journal_mode is {mode}, WAL could not be enabled"
        )));
    }
    match sync {
        SyncMode::EveryCommit => conn.pragma_update(None, "synchronous", "FULL")?,
        SyncMode::ProcessLifetime => {
            conn.pragma_update(None, "synchronous", "NORMAL")?;
            conn.set_db_config(
                rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
                true,
            )?;
            // The log then lives on between processes, and every process that opens the
            // database first re-reads all of it to rebuild its index: at the default
            // limit (1,000 pages, 4 MiB) that cost an `airlock exec` up to 1.5 ms. A low
            // limit keeps what the next process reads small, for one checkpoint every
            // few runs.
            conn.pragma_update(
                None,
                "wal_autocheckpoint",
                PROCESS_LIFETIME_CHECKPOINT_PAGES,
            )?;
        }
    }
    conn.pragma_update(None, "foreign_keys", true)?;
    // A schema edited by someone else must not get to run functions with side effects
    // from its views or triggers.
    conn.pragma_update(None, "trusted_schema", false)?;
    Ok(())
}

/// Run `step` again while SQLite answers busy, until `deadline`.
fn retry_while_busy<T>(
    deadline: std::time::Instant,
    mut step: impl FnMut() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    loop {
        match step() {
            Err(StoreError::Sqlite(e))
                if matches!(
                    e.sqlite_error_code(),
                    Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
                ) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other,
        }
    }
}

fn open_error(path: &Path, e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => StoreError::NotADatabase {
            path: path.to_path_buf(),
            detail: e.to_string(),
        },
        Some(ErrorCode::DatabaseCorrupt) => StoreError::Damaged {
            path: path.to_path_buf(),
            detail: e.to_string(),
        },
        _ => StoreError::Sqlite(e),
    }
}

/// Create `dir` (and parents) with mode 0700, or check that an existing one is a real
/// directory (not a symlink) and make it 0700.
pub(crate) fn ensure_private_dir(dir: &Path) -> Result<(), StoreError> {
    let io = |source| StoreError::Io {
        path: dir.to_path_buf(),
        source,
    };
    match fs::symlink_metadata(dir) {
        Ok(meta) if meta.file_type().is_dir() => {}
        Ok(_) => {
            return Err(StoreError::Io {
                path: dir.to_path_buf(),
                source: std::io::Error::other(
                    "exists but is not a directory (or is a symbolic link)",
                ),
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io)?;
        }
        Err(e) => return Err(io(e)),
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io)
}
