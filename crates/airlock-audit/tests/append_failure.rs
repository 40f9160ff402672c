//! Invariant I1 (fail closed): when the log cannot be written, `append` returns `Err`
//! (which the Gate turns into a denial), and nothing partial is left that breaks `verify`.
//!
//! These tests run as root in CI, so they use failures that root cannot override: a path
//! replaced by a directory, a device, and the file size limit (`RLIMIT_FSIZE`).

mod common;
mod fsync_traced;

use std::fs;
use std::os::unix::fs::symlink;
use std::process::Command;

use airlock_audit::{verify, AuditError, AuditLog, AuditOptions, LOG_FILE};
use common::*;

fn opts() -> AuditOptions {
    AuditOptions {
        checkpoint_every: 0,
        fsync: true,
    }
}

#[test]
fn log_replaced_by_a_directory_fails_then_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("audit");
    let mut log = AuditLog::open(&dir, test_signer(), opts()).unwrap();
    for i in 0..3 {
        log.append(event(i)).unwrap();
    }
    let real = dir.join(LOG_FILE);
    let aside = dir.join("log.jsonl.aside");
    fs::rename(&real, &aside).unwrap();
    fs::create_dir(&real).unwrap();

    let err = log.append(event(3)).unwrap_err();
    assert!(
        matches!(&err, AuditError::NotAFile { path } if *path == real)
            || matches!(&err, AuditError::Io { path, .. } if *path == real),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("log.jsonl") && text.contains("help:"),
        "{text}"
    );
    // verify cannot read a directory as a log: an error, not a panic.
    assert!(verify(&dir, &test_key()).is_err());

    fs::remove_dir(&real).unwrap();
    fs::rename(&aside, &real).unwrap();
    let receipt = log.append(event(3)).unwrap();
    assert_eq!(receipt.seq, 3);
    log.close().unwrap();
    let r = verify(&dir, &test_key()).unwrap();
    assert!(r.is_ok() && r.records == 4 && r.unsigned_tail == 0, "{r:?}");
}

#[test]
fn deleted_log_is_not_silently_restarted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("audit");
    let mut log = AuditLog::open(&dir, test_signer(), opts()).unwrap();
    log.append(event(0)).unwrap();
    fs::remove_file(dir.join(LOG_FILE)).unwrap();
    let err = log.append(event(1)).unwrap_err();
    assert!(matches!(err, AuditError::Missing { .. }), "{err:?}");
}

#[test]
fn truncated_log_refuses_to_chain_past_its_checkpoint() {
    let f = Fixture::build(10, 4);
    let mut lines = read_lines(&f.log());
    lines.truncate(5);
    write_lines(&f.log(), &lines);
    let mut log = AuditLog::open(&f.dir, test_signer(), opts()).unwrap();
    let err = log.append(event(99)).unwrap_err();
    assert!(matches!(err, AuditError::Tampered { .. }), "{err:?}");
    assert_eq!(read_lines(&f.log()).len(), 5, "nothing was appended");
}

#[test]
fn log_pointing_at_dev_full_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("audit");
    let mut log = AuditLog::open(&dir, test_signer(), opts()).unwrap();
    fs::remove_file(dir.join(LOG_FILE)).unwrap();
    symlink("/dev/full", dir.join(LOG_FILE)).unwrap();
    let err = log.append(event(0)).unwrap_err();
    assert!(matches!(err, AuditError::NotAFile { .. }), "{err:?}");
}

#[test]
fn torn_last_line_from_a_crash_is_set_aside() {
    let f = Fixture::build(3, 0);
    let mut bytes = fs::read(f.log()).unwrap();
    bytes.extend_from_slice(b"{\"seq\":3,\"half-writ");
    fs::write(f.log(), &bytes).unwrap();
    let mut log = AuditLog::open(&f.dir, test_signer(), opts()).unwrap();
    assert_eq!(log.append(event(3)).unwrap().seq, 3);
    log.close().unwrap();
    let r = verify(&f.dir, &test_key()).unwrap();
    assert!(r.is_ok() && r.records == 4, "{r:?}");
    let torn = fs::read(f.dir.join(airlock_audit::TORN_FILE)).unwrap();
    assert!(torn.ends_with(b"half-writ"));
}

/// Env var that turns `full_disk_child` into the child half of `full_disk_*`.
const CHILD_DIR: &str = "AIRLOCK_AUDIT_TEST_FULL_DIR";

#[test]
fn file_size_limit_mid_record_leaves_no_partial_line() {
    // Re-run of this same test in a child process: do the child's half only.
    if std::env::var_os(CHILD_DIR).is_some() {
        return full_disk_child();
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("audit");
    let mut log = AuditLog::open(&dir, test_signer(), opts()).unwrap();
    for i in 0..5 {
        log.append(event(i)).unwrap();
    }
    drop(log);
    // The child runs with SIGXFSZ ignored (so the write fails with EFBIG instead of
    // killing it) and a file size limit a little above the current log size, so the
    // record that crosses the limit is written partially by the kernel.
    let out = Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; exec \"$@\"")
        .arg("sh")
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "file_size_limit_mid_record_leaves_no_partial_line",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, &dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("CHILD-SAW-EFBIG"), "{stdout}");

    // Back without a limit: the log verifies, and appending goes on from where it was.
    let r = verify(&dir, &test_key()).unwrap();
    assert!(r.is_ok(), "{r:?}");
    let mut log = AuditLog::open(&dir, test_signer(), opts()).unwrap();
    let next = log.append(event(100)).unwrap();
    assert_eq!(next.seq, r.last_seq.unwrap() + 1);
    log.close().unwrap();
    assert!(verify(&dir, &test_key()).unwrap().is_ok());
}

fn full_disk_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        // Only reached when the parent test started this process as its child.
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let log_path = dir.join(LOG_FILE);
    let limit = fs::metadata(&log_path).unwrap().len() + 1000;
    rlimit::Resource::FSIZE.set(limit, limit).unwrap();
    let mut log = AuditLog::open(&dir, test_signer(), opts()).unwrap();
    for i in 5..100 {
        let before = fs::metadata(&log_path).unwrap().len();
        match log.append(event(i)) {
            Ok(_) => continue,
            Err(err) => {
                let efbig = matches!(&err, AuditError::Io { source, .. }
                    if source.kind() == std::io::ErrorKind::FileTooLarge);
                assert!(efbig, "{err:?}");
                // The write began below the limit, so the kernel wrote part of the line.
                assert!(
                    before < limit,
                    "the failing record should start below the limit"
                );
                assert_eq!(
                    fs::metadata(&log_path).unwrap().len(),
                    before,
                    "partial line left"
                );
                assert!(verify(&dir, &test_key()).unwrap().is_ok());
                println!(
                    "CHILD-SAW-EFBIG at record {i}, {} bytes below the limit: {err}",
                    limit - before
                );
                return;
            }
        }
    }
    panic!("appends never hit the file size limit");
}
