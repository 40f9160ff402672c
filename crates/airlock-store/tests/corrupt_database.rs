//! A corrupt or hostile database: malformed rows give typed errors naming the table and
//! row, are logged in quarantine, never panic, and leave other rows working. A file that
//! is not an Airlock database is refused with a `help:` line.

mod common;

use airlock_store::*;
use common::*;
use serde_json::json;

fn two_sessions(dir: &std::path::Path) -> (SqliteStore, String, String) {
    let store = open(dir);
    let mk = |id: &str| {
        store
            .create_session(
                &NewSession {
                    id: Some(id.into()),
                    principal: "owner".into(),
                    role: "owner".into(),
                    workspace: None,
                    agent_workspace: false,
                },
                T0,
            )
            .unwrap();
    };
    mk("good");
    mk("bad");
    (store, "good".into(), "bad".into())
}

fn assert_corrupt(err: StoreError, table: &str, row: &str, column: &str) {
    match &err {
        StoreError::CorruptRow(c) => {
            assert_eq!(
                (c.table, c.row.as_str(), c.column),
                (table, row, column),
                "{err}"
            );
            assert!(err.to_string().contains("help:"), "{err}");
        }
        other => panic!("expected a corrupt-row error for {table}/{row}, got {other}"),
    }
}

#[test]
fn hostile_taint_states_are_refused_and_other_sessions_keep_working() {
    let dir = tempfile::tempdir().unwrap();
    let (store, good, bad) = two_sessions(dir.path());
    let db = raw(dir.path());
    let clean = store.get_session(&good).unwrap().gate.taint;
    let mut with_extra = serde_json::to_value(&clean).unwrap();
    // An injected field that a lax loader would ignore (or, worse, act on).
    with_extra["tainted"] = json!(false);
    with_extra["trusted_everything"] = json!(true);
    let mut wrong_type = serde_json::to_value(&clean).unwrap();
    wrong_type["tainted"] = json!("no");
    let cases = [
        ("{not json".to_string(), "taint"),
        (with_extra.to_string(), "taint"),
        (wrong_type.to_string(), "taint"),
        (format!("\"{}\"", "A".repeat(MAX_TAINT_BYTES + 10)), "taint"),
    ];
    for (value, column) in cases {
        db.execute(
            "UPDATE sessions SET taint = ?1 WHERE id = ?2",
            rusqlite::params![value, bad],
        )
        .unwrap();
        assert_corrupt(
            store.get_session(&bad).unwrap_err(),
            "sessions",
            &bad,
            column,
        );
        assert!(matches!(
            store.resume_session(&bad, T0),
            Err(StoreError::CorruptRow(_))
        ));
        // The other session is untouched and fully usable.
        store.resume_session(&good, T0).unwrap();
    }
    // A flag that contradicts the taint state (someone "untainting" a session) is caught too.
    db.execute(
        "UPDATE sessions SET taint = (SELECT taint FROM sessions WHERE id = ?1) WHERE id = ?2",
        rusqlite::params![good, bad],
    )
    .unwrap();
    store.get_session(&bad).unwrap();
    let mut gate = store.get_session(&bad).unwrap().gate;
    gate.observe_untrusted("web", "hello");
    store
        .record_turn(
            &bad,
            &TurnUpdate {
                events: &[],
                taint: Some(&gate.taint),
            },
            T0,
        )
        .unwrap();
    db.execute("UPDATE sessions SET tainted = 0 WHERE id = ?1", [&bad])
        .unwrap();
    assert_corrupt(
        store.get_session(&bad).unwrap_err(),
        "sessions",
        &bad,
        "tainted",
    );

    let q = store.quarantined_rows().unwrap();
    assert!(
        q.iter().any(|r| r.table == "sessions" && r.row == bad),
        "{q:?}"
    );
    assert!(q.iter().all(|r| r.row != good));
}

#[test]
fn a_listing_reports_bad_rows_beside_the_good_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (store, good, bad) = two_sessions(dir.path());
    raw(dir.path())
        .execute(
            "UPDATE sessions SET status = 'godmode' WHERE id = ?1",
            [&bad],
        )
        .unwrap();
    let listing = store.list_sessions(None).unwrap();
    assert_eq!(
        listing
            .items
            .iter()
            .map(|s| s.id.as_str())
            .collect::<Vec<_>>(),
        vec![good.as_str()]
    );
    assert_eq!(listing.corrupt.len(), 1);
    assert_eq!(
        (
            listing.corrupt[0].table,
            listing.corrupt[0].row.as_str(),
            listing.corrupt[0].column
        ),
        ("sessions", bad.as_str(), "status")
    );
}

#[test]
fn transcript_entries_with_a_foreign_shape_are_refused_never_half_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let (store, good, bad) = two_sessions(dir.path());
    let ev = [
        TranscriptEvent::Message {
            role: MessageRole::User,
            content: json!("one"),
        },
        TranscriptEvent::Result {
            call_id: "c".into(),
            text: "two".into(),
            untrusted: true,
        },
    ];
    for s in [&good, &bad] {
        store
            .record_turn(
                s,
                &TurnUpdate {
                    events: &ev,
                    taint: None,
                },
                T0,
            )
            .unwrap();
    }
    let db = raw(dir.path());
    let set_body = |body: &str| {
        db.execute(
            "UPDATE transcript SET body = ?1 WHERE session_id = ?2 AND seq = 2",
            rusqlite::params![body, bad],
        )
        .unwrap();
    };
    let row = format!("{bad}/2");
    // Unknown field.
    set_body(r#"{"type":"result","call_id":"c","text":"two","untrusted":false,"trusted":true}"#);
    assert_corrupt(
        store.transcript(&bad).unwrap_err(),
        "transcript",
        &row,
        "body",
    );
    // Wrong type for a field.
    set_body(r#"{"type":"result","call_id":"c","text":"two","untrusted":"no"}"#);
    assert_corrupt(
        store.transcript(&bad).unwrap_err(),
        "transcript",
        &row,
        "body",
    );
    // Body and kind disagree.
    set_body(r#"{"type":"message","role":"user","content":"x"}"#);
    assert_corrupt(
        store.transcript(&bad).unwrap_err(),
        "transcript",
        &row,
        "kind",
    );
    // Ten megabytes of text.
    set_body(&format!(
        r#"{{"type":"result","call_id":"c","text":"{}","untrusted":true}}"#,
        "A".repeat(10 << 20)
    ));
    assert_corrupt(
        store.transcript(&bad).unwrap_err(),
        "transcript",
        &row,
        "body",
    );
    // A deleted entry leaves a gap, which is reported rather than silently skipped.
    db.execute(
        "DELETE FROM transcript WHERE session_id = ?1 AND seq = 1",
        [&bad],
    )
    .unwrap();
    let err = store.transcript(&bad).unwrap_err();
    assert!(
        matches!(&err, StoreError::CorruptRow(c) if c.table == "transcript"),
        "{err}"
    );

    assert_eq!(store.transcript(&good).unwrap().len(), 2);
}

#[test]
fn values_of_the_wrong_sql_type_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (store, good, bad) = two_sessions(dir.path());
    drop(store);
    // STRICT tables stop wrong types written through SQL, so the attacker first rewrites
    // the table definition, as anyone holding the file can.
    let db = raw(dir.path());
    db.execute_batch(
        "PRAGMA writable_schema = ON;
         UPDATE sqlite_schema SET sql = replace(sql, ') STRICT', ')') WHERE name = 'session_budget';
         PRAGMA writable_schema = OFF;",
    )
    .unwrap();
    drop(db);
    let db = raw(dir.path());
    db.execute(
        "UPDATE session_budget SET tool_calls = 'lots' WHERE session_id = ?1",
        [&bad],
    )
    .unwrap();
    let store = open(dir.path());
    let err = store.budget_state(&bad, T0).unwrap_err();
    assert_corrupt(err, "session_budget", &bad, "tool_calls");
    db.execute(
        "UPDATE session_budget SET tool_calls = -5 WHERE session_id = ?1",
        [&bad],
    )
    .unwrap();
    assert_corrupt(
        store.budget_state(&bad, T0).unwrap_err(),
        "session_budget",
        &bad,
        "tool_calls",
    );
    // A charge on the damaged counters fails closed.
    let limits = BudgetLimits::default();
    let one = Usage {
        tool_calls: 1,
        ..Usage::default()
    };
    assert!(matches!(
        store.charge(&bad, &one, &limits, T0),
        Err(ChargeError::Store(StoreError::CorruptRow(_)))
    ));
    store.charge(&good, &one, &limits, T0).unwrap();
}

#[test]
fn approvals_with_hostile_previews_are_listed_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let (store, good, bad) = two_sessions(dir.path());
    let a = exec("ls");
    let b = exec("pwd");
    let ok = store
        .create_approval(
            &new_approval(&good, &a, at(300)),
            &ApprovalLimits::default(),
            T0,
        )
        .unwrap();
    let hostile = store
        .create_approval(
            &new_approval(&bad, &b, at(300)),
            &ApprovalLimits::default(),
            T0,
        )
        .unwrap();
    raw(dir.path())
        .execute(
            "UPDATE approvals SET preview = ?1 WHERE id = ?2",
            rusqlite::params![
                r#"{"kind":"command","command":"pwd","cwd":"","auto_approve":true}"#,
                hostile.id
            ],
        )
        .unwrap();
    let pending = store.pending_approvals(at(1)).unwrap();
    assert_eq!(
        pending
            .items
            .iter()
            .map(|r| r.id.as_str())
            .collect::<Vec<_>>(),
        vec![ok.id.as_str()]
    );
    assert_eq!(pending.corrupt.len(), 1);
    assert_eq!(
        (pending.corrupt[0].row.as_str(), pending.corrupt[0].column),
        (hostile.id.as_str(), "preview")
    );
    let err = store
        .approve(
            &hostile.id,
            &ApproveRequest {
                approver: "owner",
                payload_hash: &hostile.payload_hash,
                grant: None,
            },
            at(1),
        )
        .unwrap_err();
    assert!(
        matches!(err, ApprovalError::Store(StoreError::CorruptRow(_))),
        "{err}"
    );
    store
        .approve(
            &ok.id,
            &ApproveRequest {
                approver: "owner",
                payload_hash: &ok.payload_hash,
                grant: None,
            },
            at(1),
        )
        .unwrap();
}

#[test]
fn a_file_that_is_not_a_database_is_refused_with_help() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DATABASE_FILE);
    std::fs::write(&path, b"# this is my shopping list\n- eggs\n").unwrap();
    let err = SqliteStore::open(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::NotADatabase { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("is not an Airlock database") && msg.contains("\nhelp: "),
        "{msg}"
    );
    // The file is left exactly as it was.
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b"# this is my shopping list\n- eggs\n"
    );
}

#[test]
fn a_file_with_the_sqlite_header_but_garbage_after_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = b"SQLite format 3\0".to_vec();
    bytes.extend(std::iter::repeat_n(0xA5u8, 8192));
    std::fs::write(dir.path().join(DATABASE_FILE), &bytes).unwrap();
    let err = SqliteStore::open(dir.path()).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::NotADatabase { .. } | StoreError::Damaged { .. }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("help:"), "{err}");
}

#[test]
fn a_newer_schema_version_is_refused_with_help() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path()));
    raw(dir.path())
        .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .unwrap();
    let err = SqliteStore::open(dir.path()).unwrap_err();
    match &err {
        StoreError::SchemaTooNew {
            found, supported, ..
        } => assert_eq!((*found, *supported), (SCHEMA_VERSION + 1, SCHEMA_VERSION)),
        other => panic!("expected SchemaTooNew, got {other}"),
    }
    assert!(err.to_string().contains("help: upgrade Airlock"), "{err}");
}

#[test]
fn another_programs_sqlite_database_is_not_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DATABASE_FILE);
    let other = rusqlite::Connection::open(&path).unwrap();
    other
        .execute_batch("CREATE TABLE recipes (name TEXT); INSERT INTO recipes VALUES ('bread');")
        .unwrap();
    drop(other);
    let err = SqliteStore::open(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::ForeignDatabase { .. }), "{err}");
    assert!(err.to_string().contains("help:"));
    let n: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1, "no tables were added to the other program's database");
}

#[test]
fn reopening_an_up_to_date_database_migrates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.create_session(&NewSession::owner(), T0).unwrap();
    drop(store);
    let store = open(dir.path());
    assert_eq!(store.list_sessions(None).unwrap().items.len(), 1);
    let db = raw(dir.path());
    let v: i64 = db
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    let app: i32 = db
        .pragma_query_value(None, "application_id", |r| r.get(0))
        .unwrap();
    let mode: String = db
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(
        (v, app, mode.as_str()),
        (SCHEMA_VERSION, APPLICATION_ID, "wal")
    );
}

/// A database that lost its content must not be replaced by an empty one: that would reset
/// budgets, grants and approvals. Each damaged form is refused, names the file, says how to
/// recover, and is left untouched.
mod lost_database {
    use super::*;
    use std::path::Path;

    #[track_caller]
    fn refused(dir: &Path) -> String {
        let path = dir.join(DATABASE_FILE);
        let before = std::fs::symlink_metadata(&path).map(|m| (m.len(), m.is_dir()));
        let err = SqliteStore::open(dir).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        assert!(
            matches!(
                err,
                StoreError::LostDatabase { .. }
                    | StoreError::NotADatabase { .. }
                    | StoreError::Damaged { .. }
            ),
            "{msg}"
        );
        let help = msg
            .split("\nhelp: ")
            .nth(1)
            .unwrap_or_else(|| panic!("{msg}"));
        assert!(help.contains("restore"), "{msg}");
        assert!(help.contains("move it aside"), "{msg}");
        let after = std::fs::symlink_metadata(&path).map(|m| (m.len(), m.is_dir()));
        assert_eq!(before.ok(), after.ok(), "the file was changed");
        msg
    }

    /// A database with a session whose budget was charged, closed cleanly.
    fn used(dir: &Path) {
        let store = open(dir);
        let s = store.create_session(&NewSession::owner(), T0).unwrap();
        let usage = Usage {
            tool_calls: 3,
            ..Usage::default()
        };
        store
            .charge(s.id(), &usage, &BudgetLimits::default(), T0)
            .unwrap();
    }

    #[test]
    fn i7_zero_length_database_is_refused_not_recreated() {
        let dir = tempfile::tempdir().unwrap();
        used(dir.path());
        std::fs::write(dir.path().join(DATABASE_FILE), b"").unwrap();
        let msg = refused(dir.path());
        assert!(msg.contains("empty (0 bytes)"), "{msg}");
    }

    #[test]
    fn i7_database_cut_to_its_first_page_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        used(dir.path());
        let path = dir.path().join(DATABASE_FILE);
        let page: u64 = raw(dir.path())
            .pragma_query_value(None, "page_size", |r| r.get(0))
            .unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() > page);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(page)
            .unwrap();
        refused(dir.path());
    }

    #[test]
    fn i7_database_shorter_than_a_header_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        used(dir.path());
        let path = dir.path().join(DATABASE_FILE);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..50]).unwrap();
        refused(dir.path());
    }

    #[test]
    fn i7_database_path_that_is_a_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(DATABASE_FILE)).unwrap();
        let msg = refused(dir.path());
        assert!(msg.contains("not a regular file"), "{msg}");
    }

    #[test]
    fn i7_a_new_state_directory_still_gets_a_new_database() {
        let dir = tempfile::tempdir().unwrap();
        used(dir.path());
        let store = open(dir.path());
        assert_eq!(store.list_sessions(None).unwrap().items.len(), 1);
    }
}
