//! Many writers, one chain: threads and separate processes append to the same audit
//! directory at once, and the result is one valid, fully signed chain holding every record.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;

use airlock_audit::{tail, verify, AuditEvent, AuditLog, AuditOptions, CHECKPOINT_FILE};
use common::*;
use serde_json::json;

const CHILD_DIR: &str = "AIRLOCK_AUDIT_TEST_CONCURRENT_DIR";
const CHILD_NAME: &str = "AIRLOCK_AUDIT_TEST_CONCURRENT_NAME";
const PER_WRITER: usize = 40;

fn opts() -> AuditOptions {
    AuditOptions {
        checkpoint_every: 16,
        fsync: true,
    }
}

/// Append `PER_WRITER` records as `name`, each holding its own index, and close.
fn write_as(dir: &Path, name: &str) {
    let mut log = AuditLog::open(dir, test_signer(), opts()).unwrap();
    for i in 0..PER_WRITER {
        let ev = AuditEvent::new("execution", "s", name).with_detail(json!({ "i": i }));
        log.append(ev).unwrap();
    }
    log.close().unwrap();
}

/// Every writer's records are all there, each exactly once.
fn assert_complete(dir: &Path, writers: &[String]) {
    let report = verify(dir, &test_key()).unwrap();
    assert!(report.is_ok(), "{report:?}");
    let total = writers.len() * PER_WRITER;
    assert_eq!(report.records as usize, total);
    assert_eq!(report.unsigned_tail, 0, "every writer closed: {report:?}");
    let mut seen: HashMap<String, Vec<u64>> = HashMap::new();
    for rec in tail(dir, total + 10).unwrap() {
        let who = rec["principal"].as_str().unwrap().to_string();
        seen.entry(who)
            .or_default()
            .push(rec["detail"]["i"].as_u64().unwrap());
    }
    for w in writers {
        let got = seen.get(w).map(Vec::as_slice).unwrap_or_default();
        let want: Vec<u64> = (0..PER_WRITER as u64).collect();
        assert_eq!(got, want.as_slice(), "records of {w}, in the order written");
    }
}

#[test]
fn threads_with_their_own_handles_keep_one_chain() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("audit");
    let names: Vec<String> = (0..8).map(|t| format!("thread-{t}")).collect();
    thread::scope(|s| {
        for name in &names {
            let dir = &dir;
            s.spawn(move || write_as(dir, name));
        }
    });
    assert_complete(&dir, &names);
}

#[test]
fn processes_and_threads_together_keep_one_chain() {
    // Re-run of this same test in a child process: do the child's half only.
    if std::env::var_os(CHILD_DIR).is_some() {
        return concurrent_child();
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("audit");
    AuditLog::open(&dir, test_signer(), opts())
        .unwrap()
        .close()
        .unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut names: Vec<String> = Vec::new();
    let children: Vec<_> = (0..6)
        .map(|p| {
            let name = format!("process-{p}");
            names.push(name.clone());
            Command::new(&exe)
                .args([
                    "--exact",
                    "processes_and_threads_together_keep_one_chain",
                    "--test-threads=1",
                ])
                .env(CHILD_DIR, &dir)
                .env(CHILD_NAME, name)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let thread_names: Vec<String> = (0..2).map(|t| format!("thread-{t}")).collect();
    thread::scope(|s| {
        for name in &thread_names {
            let dir = &dir;
            s.spawn(move || write_as(dir, name));
        }
    });
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("1 passed"),
            "the child really ran: {stdout}"
        );
    }
    names.extend(thread_names);
    assert_complete(&dir, &names);
}

fn concurrent_child() {
    let (Some(dir), Some(name)) = (std::env::var_os(CHILD_DIR), std::env::var(CHILD_NAME).ok())
    else {
        // Only reached when the parent test started this process as its child.
        return;
    };
    write_as(&PathBuf::from(dir), &name);
}

/// A writer that must sign while others still hold the log (a host stopping with a run
/// in flight): `checkpoint` covers the last record on disk, whichever handle wrote it,
/// and both handles append on after it.
#[test]
fn a_checkpoint_signed_while_the_log_stays_open_covers_the_last_record_on_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("audit");
    let opts = AuditOptions {
        checkpoint_every: 0,
        fsync: true,
    };
    let mut signing = AuditLog::open(&dir, test_signer(), opts).unwrap();
    let mut other = AuditLog::open(&dir, test_signer(), opts).unwrap();
    signing.append(event(0)).unwrap();
    other.append(event(1)).unwrap();
    signing.checkpoint().unwrap();
    let report = verify(&dir, &test_key()).unwrap();
    assert!(
        report.is_ok() && report.records == 2 && report.unsigned_tail == 0,
        "{report:?}"
    );
    // Nothing new: no second checkpoint over the same record.
    let signed = std::fs::read_to_string(dir.join(CHECKPOINT_FILE)).unwrap();
    signing.checkpoint().unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join(CHECKPOINT_FILE)).unwrap(),
        signed
    );
    other.append(event(2)).unwrap();
    signing.append(event(3)).unwrap();
    drop(other);
    signing.close().unwrap();
    let report = verify(&dir, &test_key()).unwrap();
    assert!(
        report.is_ok() && report.records == 4 && report.unsigned_tail == 0,
        "{report:?}"
    );
}
