//! Helpers shared by the store's integration tests: a real SQLite file in a tempdir.

#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use airlock_core::Action;
use airlock_store::*;

/// A fixed "now" so expiry and rate-limit tests need no sleeping.
pub const T0: Timestamp = Timestamp::from_unix_ms(1_800_000_000_000);

pub fn at(secs_after_t0: u64) -> Timestamp {
    T0.plus(Duration::from_secs(secs_after_t0))
}

/// The store, with memory expiry read against [`T0`] rather than the wall clock, so a
/// record written at `at(…)` never expires under a test as the years pass.
pub fn open(dir: &Path) -> SqliteStore {
    SqliteStore::open(dir)
        .expect("open store")
        .with_memory_clock(std::sync::Arc::new(|| T0))
}

pub fn exec(command: &str) -> Action {
    Action::from_json(
        &serde_json::json!({"type": "exec", "command": command, "cwd": ""}).to_string(),
    )
    .unwrap()
}

pub fn new_approval<'a>(
    session: &'a str,
    action: &'a Action,
    expires_at: Timestamp,
) -> NewApproval<'a> {
    let command = match action {
        Action::Exec(e) => e.command.clone(),
        _ => String::new(),
    };
    NewApproval {
        session_id: session,
        action,
        preview: ApprovalPreview::Command {
            command,
            cwd: String::new(),
        },
        reasons: vec!["sends data to a host not named by you".into()],
        policies: vec!["ask-untraced-egress".into()],
        expires_at,
    }
}

/// A raw connection to the store's file, to play the attacker who edits it directly.
pub fn raw(dir: &Path) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(dir.join(DATABASE_FILE)).unwrap();
    c.busy_timeout(Duration::from_secs(10)).unwrap();
    c
}
