//! Invariant I10: secret values never reach the audit log, whatever field or depth of an
//! event they hide in, including object keys and the `DecisionSink` path.

mod common;

use std::fs;

use airlock_audit::{verify, AuditEvent, AuditLog, AuditOptions, Redactor, LOG_FILE};
use airlock_core::{DecisionKind, DecisionRecord, DecisionSink};
use common::*;
use serde_json::json;

const TOKEN: &str = "ghp_S3cr3tT0kenValue0123456789";
const PASSWORD: &str = "hunter2-but-longer";

fn redacted_log() -> (tempfile::TempDir, std::path::PathBuf, AuditLog) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("audit");
    let mut log = AuditLog::open(&dir, test_signer(), AuditOptions::default()).unwrap();
    let mut r = Redactor::new();
    r.add("GITHUB_TOKEN", TOKEN.into()).unwrap();
    r.add("DB_PASSWORD", PASSWORD.into()).unwrap();
    log.set_redactor(r);
    (tmp, dir, log)
}

#[test]
fn secrets_in_every_field_are_redacted_before_writing() {
    let (_tmp, dir, mut log) = redacted_log();
    let ev = AuditEvent {
        session: format!("s-{TOKEN}"),
        principal: "agent".into(),
        on_behalf_of: None,
        via: None,
        kind: "execution".into(),
        action: json!({"type": "exec", "command": format!("curl -H 'Authorization: token {TOKEN}' x")}),
        action_hash: "sha256:00".into(),
        facts: json!({ TOKEN: [1, {"deep": [format!("pw={PASSWORD};t={TOKEN}")]}] }),
        decision: Some(DecisionKind::Ask),
        policies: vec![format!("p-{PASSWORD}")],
        reasons: vec![format!("saw {TOKEN}")],
        detail: json!({"stderr": format!("login failed for {PASSWORD}\n")}),
    };
    log.append(ev).unwrap();
    log.close().unwrap();

    let raw = fs::read_to_string(dir.join(LOG_FILE)).unwrap();
    assert!(!raw.contains(TOKEN) && !raw.contains(PASSWORD), "{raw}");
    assert!(
        !raw.contains("ghp_S3cr3t"),
        "no fragment of the token either"
    );
    assert_eq!(raw.matches("[REDACTED:GITHUB_TOKEN]").count(), 5, "{raw}");
    assert_eq!(raw.matches("[REDACTED:DB_PASSWORD]").count(), 3, "{raw}");
    // The redacted record is what was hashed: the chain verifies.
    assert!(verify(&dir, &test_key()).unwrap().is_ok());
}

#[test]
fn decision_sink_path_is_redacted_too() {
    let (_tmp, dir, mut log) = redacted_log();
    let record = DecisionRecord {
        kind: "decision".into(),
        session: "s".into(),
        principal: "agent:s".into(),
        on_behalf_of: "owner".into(),
        via: "cli".into(),
        action: json!({"type": "net.request", "method": "GET", "url": format!("https://x/?k={TOKEN}")}),
        action_hash: "sha256:00".into(),
        facts: json!({}),
        decision: DecisionKind::Deny,
        reasons: vec![],
        policies: vec![],
    };
    let receipt = log.record(&record).unwrap();
    let last = airlock_audit::tail(&dir, 1).unwrap().pop().unwrap();
    assert_eq!(last["hash"], receipt.record_hash.as_str());
    assert_eq!(last["seq"], receipt.seq);
    assert_eq!(
        last["action"]["url"],
        "https://x/?k=[REDACTED:GITHUB_TOKEN]"
    );
    assert_eq!(last["decision"], "deny");
}

#[test]
fn redactor_debug_never_shows_values() {
    let (_tmp, _dir, log) = redacted_log();
    let shown = format!("{log:?}");
    assert!(
        !shown.contains(TOKEN) && !shown.contains(PASSWORD),
        "{shown}"
    );
    assert!(shown.contains("GITHUB_TOKEN"));
}
