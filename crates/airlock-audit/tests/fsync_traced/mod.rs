//! I1 durability: with the default options, `append` fsyncs the log (and a checkpoint it
//! writes) after writing the line and before it returns. Nothing else would notice if
//! fsync were switched off: the file reads the same from the page cache. So the append of
//! a child process is traced with `strace`, and the order of its system calls is checked.

use std::path::Path;
use std::process::Command;

use airlock_audit::{AuditLog, AuditOptions, CHECKPOINT_FILE, LOG_FILE};

use crate::common::{event, test_signer};

/// Env var that turns the test into the traced child: the audit dir to append to.
const CHILD_DIR: &str = "AIRLOCK_AUDIT_TEST_FSYNC_DIR";
const BEGIN: &str = "AIRLOCK-APPEND-BEGIN";
const END: &str = "AIRLOCK-APPEND-END";
const TEST_NAME: &str = "fsync_traced::i1_append_fsyncs_the_log_before_it_returns_by_default";

#[test]
fn i1_append_fsyncs_the_log_before_it_returns_by_default() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        return traced_child(Path::new(&dir));
    }
    let strace = Command::new("strace").arg("-V").output();
    assert!(
        strace.is_ok_and(|o| o.status.success()),
        "strace is needed to check that appends are fsynced\nhelp: install it (scripts/test-env does)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap().join("audit");
    let trace = tmp.path().join("trace.txt");
    let out = Command::new("strace")
        .args(["-f", "-y", "-qq", "-e", "signal=none", "-s", "64"])
        .args([
            "-e",
            "trace=write,writev,pwrite64,fsync,fdatasync,sync_file_range,sync",
        ])
        .arg("-o")
        .arg(&trace)
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, &dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "traced child failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let trace = std::fs::read_to_string(&trace).unwrap();
    let log = dir.join(LOG_FILE);
    let cps = dir.join(CHECKPOINT_FILE);
    // The child appends twice. Every append writes a record; the first also writes a
    // checkpoint (the first record is always checkpointed, so removing every checkpoint
    // cannot pass for a crash), and any append that writes one must sync it too.
    let appends = marked_spans(&trace);
    assert_eq!(appends.len(), 2, "{trace}");
    let cps_fd = format!("<{}>", cps.display());
    for (i, calls) in appends.iter().enumerate() {
        assert_written_then_synced(calls, &log, &trace);
        if i == 0 || calls.iter().any(|l| l.contains(&cps_fd)) {
            assert_written_then_synced(calls, &cps, &trace);
        }
    }
}

/// Appends two records with the default options (and a checkpoint every second record),
/// each between a begin and an end marker written to stderr.
fn traced_child(dir: &Path) {
    let opts = AuditOptions {
        checkpoint_every: 2,
        ..AuditOptions::default()
    };
    let mut log = AuditLog::open(dir, test_signer(), opts).unwrap();
    for i in 0..2 {
        mark(BEGIN);
        log.append(event(i)).unwrap();
        mark(END);
    }
    log.close().unwrap();
}

/// One `write` system call the trace can find.
fn mark(what: &str) {
    use std::io::Write;
    std::io::stderr()
        .lock()
        .write_all(format!("{what}\n").as_bytes())
        .unwrap();
}

/// The traced calls between each begin marker and the end marker after it.
fn marked_spans(trace: &str) -> Vec<Vec<&str>> {
    let mut spans = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in trace.lines() {
        if line.contains(BEGIN) {
            current = Some(Vec::new());
        } else if line.contains(END) {
            spans.extend(current.take());
        } else if let Some(c) = current.as_mut() {
            c.push(line);
        }
    }
    spans
}

/// Within `calls`, a successful write to `file` is followed by a successful fsync or
/// fdatasync of the same file (strace `-y` names the file behind each descriptor).
fn assert_written_then_synced(calls: &[&str], file: &Path, trace: &str) {
    let fd = format!("<{}>", file.display());
    let is_call = |line: &str, names: &[&str]| {
        names
            .iter()
            .any(|n| line.contains(&format!(" {n}(")) && line.contains(&fd))
            && line.trim_end().ends_with(" = 0")
    };
    let wrote = calls.iter().position(|l| {
        ["write", "writev", "pwrite64"]
            .iter()
            .any(|n| l.contains(&format!(" {n}(")) && l.contains(&fd))
    });
    let Some(wrote) = wrote else {
        panic!("no write to {} inside the append:\n{trace}", file.display());
    };
    assert!(
        calls[wrote..]
            .iter()
            .any(|l| is_call(l, &["fsync", "fdatasync"])),
        "{} is written but not fsynced before append returns:\n{trace}",
        file.display()
    );
}
