//! The relaxed sync mode for process-lifetime bookkeeping: its commits are visible to
//! every other connection at once, it does not wait for the disk on commit, and closing it
//! keeps the write-ahead log (so the next process does not re-create it).

use airlock_store::*;

fn pragma(db: &std::path::Path, sql: &str) -> String {
    // A second, independent connection, as another process would open.
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row(sql, [], |r| r.get::<_, String>(0)).unwrap()
}

#[test]
fn process_lifetime_commits_are_shared_and_the_log_is_kept_on_close() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut options = StoreOptions::new(&state);
    options.sync = SyncMode::ProcessLifetime;
    let relaxed = SqliteStore::open_with(options).unwrap();
    let session = relaxed
        .create_session(&NewSession::owner(), Timestamp::now())
        .unwrap();
    // Another connection (the default mode) sees the commit at once.
    let full = SqliteStore::open(&state).unwrap();
    assert_eq!(
        full.get_session(&session.gate.id).unwrap().status,
        SessionStatus::Active
    );
    drop(full);
    drop(relaxed);
    let wal = state.join(format!("{DATABASE_FILE}-wal"));
    assert!(
        wal.exists(),
        "closing a process-lifetime connection must not checkpoint away the log"
    );
    // The data is still there for a fresh process, and the database is consistent.
    let db = state.join(DATABASE_FILE);
    assert_eq!(pragma(&db, "PRAGMA integrity_check"), "ok");
    let reopened = SqliteStore::open(&state).unwrap();
    assert_eq!(
        reopened.get_session(&session.gate.id).unwrap().gate.id,
        session.gate.id
    );
}

#[test]
fn the_default_mode_still_syncs_every_commit() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let store = SqliteStore::open(&state).unwrap();
    store
        .create_session(&NewSession::owner(), Timestamp::now())
        .unwrap();
    drop(store);
    // Closing the last default connection checkpoints and removes the log.
    assert!(!state.join(format!("{DATABASE_FILE}-wal")).exists());
}

/// Every process that opens the database first reads the whole write-ahead log to rebuild
/// its index, and process-lifetime connections never checkpoint on close: the log must be
/// checkpointed while it is still small, or each `airlock exec` reads more than the last.
#[test]
fn the_log_left_by_many_process_lifetime_runs_stays_small() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let wal = state.join(format!("{DATABASE_FILE}-wal"));
    let mut ids = Vec::new();
    for _ in 0..150 {
        // One run: open, record the session, finish it, close.
        let mut options = StoreOptions::new(&state);
        options.sync = SyncMode::ProcessLifetime;
        let store = SqliteStore::open_with(options).unwrap();
        let s = store
            .create_session(&NewSession::owner(), Timestamp::now())
            .unwrap();
        store.finish_session(&s.gate.id, Timestamp::now()).unwrap();
        ids.push(s.gate.id);
        drop(store);
        let len = std::fs::metadata(&wal).unwrap().len();
        assert!(
            len < 512 * 1024,
            "after {} runs the write-ahead log is {len} bytes",
            ids.len()
        );
    }
    // Nothing was lost to the checkpoints.
    let store = SqliteStore::open(&state).unwrap();
    for id in &ids {
        assert_eq!(
            store.get_session(id).unwrap().status,
            SessionStatus::Finished
        );
    }
    assert_eq!(
        pragma(&state.join(DATABASE_FILE), "PRAGMA integrity_check"),
        "ok"
    );
}
