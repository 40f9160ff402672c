//! One handle appends many records, and keeps what it checked at the end of the files so
//! that it need not check the same bytes again (see the crate's `seen` module). Whatever
//! is done to the files between two of its appends is still found by the next one, as a
//! new handle would find it: the last record rewritten in place (same length) or
//! removed, the last checkpoint cut, the high-water mark rolled back; and a record
//! another writer appended is chained onto, not written over.

mod common;

use std::fs;

use airlock_audit::{verify, AuditError, AuditLog, AuditOptions, CHECKPOINT_FILE, LOG_FILE};
use common::*;

fn opts() -> AuditOptions {
    AuditOptions {
        checkpoint_every: 2,
        fsync: false,
    }
}

/// A marked log with three records through one handle, still open.
fn open_with_three() -> (
    tempfile::TempDir,
    std::path::PathBuf,
    std::path::PathBuf,
    AuditLog,
) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("audit");
    let mark = tmp.path().join("audit.mark");
    let mut log = AuditLog::open_marked(&dir, &mark, test_signer(), opts()).unwrap();
    for i in 0..3 {
        log.append(event(i)).unwrap();
    }
    (tmp, dir, mark, log)
}

#[test]
fn appends_through_one_handle_keep_a_chain_that_verifies() {
    let (_tmp, dir, _mark, mut log) = open_with_three();
    for i in 3..40 {
        assert_eq!(log.append(event(i)).unwrap().seq, i as u64);
    }
    log.close().unwrap();
    let r = verify(&dir, &test_key()).unwrap();
    assert!(r.is_ok() && r.records == 40, "{r:?}");
}

#[test]
fn the_last_record_rewritten_in_place_is_found_by_the_same_handle() {
    let (_tmp, dir, _mark, mut log) = open_with_three();
    let path = dir.join(LOG_FILE);
    let mut lines = read_lines(&path);
    let last = lines.last_mut().unwrap();
    // One character of the session changed: the same length, other bytes.
    let at = last.windows(4).position(|w| w == b"sess").unwrap();
    last[at] = b'S';
    write_lines(&path, &lines);
    let err = log.append(event(3)).unwrap_err();
    assert!(matches!(err, AuditError::CorruptTail { .. }), "{err:?}");
    assert_eq!(read_lines(&path).len(), 3, "nothing was appended");
}

#[test]
fn the_last_record_removed_is_found_by_the_same_handle() {
    let (_tmp, dir, _mark, mut log) = open_with_three();
    let path = dir.join(LOG_FILE);
    let mut lines = read_lines(&path);
    lines.pop();
    write_lines(&path, &lines);
    let err = log.append(event(3)).unwrap_err();
    assert!(
        matches!(
            err,
            AuditError::Tampered { .. } | AuditError::BelowMark { .. }
        ),
        "{err:?}"
    );
}

#[test]
fn a_record_another_writer_appended_is_chained_onto_by_the_same_handle() {
    let (_tmp, dir, _mark, mut log) = open_with_three();
    let path = dir.join(LOG_FILE);
    let mut lines = read_lines(&path);
    let prev = hash_of(lines.last().unwrap());
    lines.push(fabricate_record(3, &prev, "another-writer"));
    write_lines(&path, &lines);
    assert_eq!(log.append(event(4)).unwrap().seq, 4);
    let last = read_lines(&path).pop().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&last).unwrap();
    assert_eq!(v["prev"].as_str(), Some(hash_of(&lines[3]).as_str()));
}

#[test]
fn the_last_checkpoint_cut_or_the_mark_forged_is_found_by_the_same_handle() {
    let (_tmp, dir, mark, mut log) = open_with_three();
    let cps = dir.join(CHECKPOINT_FILE);
    let before = fs::read(&cps).unwrap();
    let old_mark = fs::read(&mark).unwrap();
    // Two more records: a checkpoint is due, and the mark moves.
    log.append(event(3)).unwrap();
    log.append(event(4)).unwrap();
    let new_mark = fs::read(&mark).unwrap();
    assert_ne!(new_mark, old_mark);
    // The mark's seq raised without its key: its signature no longer holds.
    let text = String::from_utf8(new_mark.clone()).unwrap();
    let forged = text.replacen("\"seq\":4", "\"seq\":9", 1);
    assert_ne!(forged, text, "{text}");
    fs::write(&mark, forged).unwrap();
    let err = log.append(event(5)).unwrap_err();
    assert!(matches!(err, AuditError::BadMark { .. }), "{err:?}");
    fs::write(&mark, &new_mark).unwrap();
    // The checkpoints cut back to what they were before the mark moved.
    fs::write(&cps, &before).unwrap();
    let err = log.append(event(5)).unwrap_err();
    assert!(matches!(err, AuditError::BelowMark { .. }), "{err:?}");
}

#[test]
fn another_handle_appends_only_after_a_held_lock_is_let_go() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("audit");
    let mut first = AuditLog::open(&dir, test_signer(), opts()).unwrap();
    first.append(event(0)).unwrap();
    let (started, waiting) = std::sync::mpsc::channel();
    let mut second = AuditLog::open(&dir, test_signer(), opts()).unwrap();
    let held = first
        .holding_lock(|log| {
            // Another handle, in another thread, tries to append while the lock is held.
            let other = std::thread::spawn(move || {
                started.send(()).unwrap();
                second.append(event(9)).unwrap().seq
            });
            waiting.recv().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(200));
            // This handle's own appends go ahead meanwhile.
            let a = log.append(event(1)).unwrap().seq;
            let b = log.append(event(2)).unwrap().seq;
            (a, b, other)
        })
        .unwrap();
    let (a, b, other) = held;
    assert_eq!((a, b), (1, 2));
    assert_eq!(
        other.join().unwrap(),
        3,
        "the other handle's record came after both"
    );
}

#[test]
fn a_held_lock_is_let_go_when_what_held_it_panics() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("audit");
    let mut first = AuditLog::open(&dir, test_signer(), opts()).unwrap();
    let mut second = AuditLog::open(&dir, test_signer(), opts()).unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = first.holding_lock(|_| panic!("the closure failed"));
    }));
    assert!(panicked.is_err());
    // Another handle appends at once: the lock was let go.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(second.append(event(0)).map(|r| r.seq)).unwrap());
    let seq = finished
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the other handle's append waited on a lock nobody holds");
    assert_eq!(seq.unwrap(), 0);
    // And the first handle takes the lock for each append again.
    assert_eq!(first.append(event(1)).unwrap().seq, 1);
}
