//! Invariant I4 for what a rewrite of the whole audit directory can do: empty it, cut the
//! log together with its last checkpoints, drop every checkpoint, or sign with another
//! key. The high-water mark outside the directory and the chain of keys catch each one.

use std::fs;
use std::path::{Path, PathBuf};

use airlock_audit::{
    rotate_key, verify, verify_with, AuditError, AuditEvent, AuditLog, AuditOptions,
    CheckpointSigner, KeyRotation, ProblemKind, Trust, VerifyReport, VerifyingKey, CHECKPOINT_FILE,
    KEY_ROTATION_KIND, LOG_FILE,
};
use airlock_core::canonical::{canonical_json, sha256_hex};
use ed25519_dalek::{Signer, SigningKey};
use serde_json::{json, Value};

use crate::common::*;

fn opts(every: u64) -> AuditOptions {
    AuditOptions {
        checkpoint_every: every,
        fsync: false,
    }
}

/// An audit directory (the state side) and a mark (the config side) in separate trees.
struct Marked {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    mark: PathBuf,
}

impl Marked {
    fn new() -> Marked {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state").join("audit");
        fs::create_dir_all(tmp.path().join("config")).unwrap();
        let mark = tmp.path().join("config").join("audit.mark");
        Marked {
            _tmp: tmp,
            dir,
            mark,
        }
    }

    /// Ten records with checkpoints at #0, #4, #8 and (on close) #9.
    fn ten() -> Marked {
        let m = Marked::new();
        let mut log = m.open(test_signer());
        for i in 0..10 {
            log.append(event(i)).unwrap();
        }
        log.close().unwrap();
        m
    }

    fn open(&self, signer: CheckpointSigner) -> AuditLog {
        AuditLog::open_marked(&self.dir, &self.mark, signer, opts(4)).unwrap()
    }

    fn verify_by(&self, key: &VerifyingKey) -> VerifyReport {
        verify_with(
            &self.dir,
            &Trust {
                key,
                mark: Some(&self.mark),
            },
        )
        .unwrap()
    }

    fn verify(&self) -> VerifyReport {
        self.verify_by(&test_key())
    }

    fn log(&self) -> PathBuf {
        self.dir.join(LOG_FILE)
    }

    fn checkpoints(&self) -> PathBuf {
        self.dir.join(CHECKPOINT_FILE)
    }

    fn keep_lines(&self, path: &Path, n: usize) {
        let lines = read_lines(path);
        write_lines(path, &lines[..n]);
    }
}

#[track_caller]
fn problem_of(r: &VerifyReport, kind: ProblemKind) -> String {
    let p = r
        .problem
        .as_ref()
        .unwrap_or_else(|| panic!("no problem reported: {r:?}"));
    assert_eq!(p.kind, kind, "{p}");
    p.to_string()
}

#[track_caller]
fn below_mark(err: AuditError) -> String {
    let text = err.to_string();
    assert!(matches!(err, AuditError::BelowMark { .. }), "{text}");
    text
}

#[test]
fn i4_intact_marked_log_verifies_and_the_mark_covers_the_last_checkpoint() {
    let m = Marked::ten();
    let r = m.verify();
    assert!(r.is_ok(), "{r:?}");
    assert_eq!((r.mark_seq, r.last_checkpoint_seq), (Some(9), Some(9)));
}

#[test]
fn i4_emptied_log_and_checkpoints_fail_below_the_mark() {
    let m = Marked::ten();
    fs::write(m.log(), b"").unwrap();
    fs::write(m.checkpoints(), b"").unwrap();
    let text = problem_of(&m.verify(), ProblemKind::BelowMark);
    assert!(
        text.contains("the log is empty but a checkpoint at seq 9 was made; records were removed"),
        "{text}"
    );
    // Without the mark, the empty log is consistent in itself: that is why the mark exists.
    assert!(verify(&m.dir, &test_key()).unwrap().is_ok());
    // And nothing may start a new chain at #0 over it.
    let mut log = m.open(test_signer());
    let text = below_mark(log.append(event(0)).unwrap_err());
    assert!(text.contains("a checkpoint at seq 9 was made"), "{text}");
    assert_eq!(fs::metadata(m.log()).unwrap().len(), 0);
}

#[test]
fn i4_log_cut_with_its_last_checkpoints_fails_and_no_seq_is_reused() {
    let m = Marked::ten();
    m.keep_lines(&m.log(), 6); // records #0..#5
    m.keep_lines(&m.checkpoints(), 2); // checkpoints at #0 and #4
    let text = problem_of(&m.verify(), ProblemKind::BelowMark);
    assert!(
        text.contains(
            "the log ends at seq 5 but a checkpoint at seq 9 was made; records were removed"
        ),
        "{text}"
    );
    let before = fs::read(m.log()).unwrap();
    let mut log = m.open(test_signer());
    below_mark(log.append(event(6)).unwrap_err());
    below_mark(log.close().unwrap_err());
    assert_eq!(
        fs::read(m.log()).unwrap(),
        before,
        "seq #6 must not be written again"
    );
}

#[test]
fn i4_removed_audit_directory_is_not_restarted_under_the_mark() {
    let m = Marked::ten();
    fs::remove_dir_all(&m.dir).unwrap();
    problem_of(&m.verify(), ProblemKind::Truncated);
    let mut log = m.open(test_signer());
    below_mark(log.append(event(0)).unwrap_err());
    problem_of(&m.verify(), ProblemKind::BelowMark);
}

#[test]
fn i4_removed_final_checkpoint_is_caught_by_the_mark() {
    let m = Marked::ten();
    m.keep_lines(&m.checkpoints(), 3);
    let text = problem_of(&m.verify(), ProblemKind::BelowMark);
    assert!(text.contains("no checkpoint covers seq 9"), "{text}");
    let mut log = m.open(test_signer());
    below_mark(log.append(event(10)).unwrap_err());
}

#[test]
fn i4_forged_or_foreign_mark_is_refused() {
    let m = Marked::ten();
    let text = fs::read_to_string(&m.mark).unwrap();
    fs::write(&m.mark, text.replace("\"seq\":9", "\"seq\":3")).unwrap();
    let report = problem_of(&m.verify(), ProblemKind::BelowMark);
    assert!(report.contains("signature"), "{report}");
    fs::write(&m.mark, b"not a mark\n").unwrap();
    problem_of(&m.verify(), ProblemKind::BelowMark);
}

#[test]
fn i4_crash_between_checkpoint_and_mark_leaves_a_good_log() {
    // The mark is written after its checkpoint; a crash in between leaves it one
    // checkpoint behind. That log must verify and accept appends, now and later.
    let m = Marked::new();
    let mut log = m.open(test_signer());
    for i in 0..6 {
        log.append(event(i)).unwrap();
    }
    let older_mark = fs::read(&m.mark).unwrap(); // covers #4
    for i in 6..9 {
        log.append(event(i)).unwrap(); // checkpoint at #8 moves the mark
    }
    drop(log);
    fs::write(&m.mark, &older_mark).unwrap();
    let r = m.verify();
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(r.mark_seq, Some(4));
    let mut log = m.open(test_signer());
    log.append(event(9)).unwrap();
    log.close().unwrap();
    let r = m.verify();
    assert!(r.is_ok() && r.mark_seq == r.last_checkpoint_seq, "{r:?}");
}

#[test]
fn i4_mark_inside_the_audit_directory_is_refused() {
    let m = Marked::new();
    fs::create_dir_all(&m.dir).unwrap();
    let err =
        AuditLog::open_marked(&m.dir, &m.dir.join("mark"), test_signer(), opts(4)).unwrap_err();
    assert!(matches!(err, AuditError::BadMark { .. }), "{err}");
}

#[test]
fn i4_all_checkpoints_removed_is_not_a_crash() {
    let f = Fixture::build(10, 4);
    fs::write(f.checkpoints(), b"").unwrap();
    let r = verify(&f.dir, &test_key()).unwrap();
    let text = problem_of(&r, ProblemKind::BadCheckpoint);
    assert!(text.contains("checkpoints were removed"), "{text}");
    // Two records are enough to tell: the first record is always signed at once.
    let two = Fixture::build(2, 0);
    fs::write(two.checkpoints(), b"").unwrap();
    problem_of(
        &verify(&two.dir, &test_key()).unwrap(),
        ProblemKind::BadCheckpoint,
    );
    // One unsigned record is what a writer dying right after it leaves.
    let one = Fixture::build(1, 0);
    fs::write(one.checkpoints(), b"").unwrap();
    let r = verify(&one.dir, &test_key()).unwrap();
    assert!(r.is_ok() && r.unsigned_tail == 1, "{r:?}");
}

// --- time ----------------------------------------------------------------------------

/// A hand-made record with `time`, chained onto `prev`.
fn record_at(seq: u64, prev: &str, time: &str) -> Vec<u8> {
    let mut rec = json!({
        "seq": seq, "time": time, "session": "s", "principal": "agent", "kind": "decision",
        "action": null, "action_hash": "", "facts": null, "decision": null,
        "policies": [], "reasons": [], "detail": null, "prev": prev,
    });
    let hash = sha256_hex(canonical_json(&rec).unwrap().as_bytes());
    rec["hash"] = Value::from(hash);
    let mut line = canonical_json(&rec).unwrap().into_bytes();
    line.push(b'\n');
    line
}

/// A checkpoint line signed by `key`, in the documented format.
fn checkpoint_line(
    key: &SigningKey,
    seq: u64,
    record_hash: &str,
    prev_line: Option<&[u8]>,
) -> Vec<u8> {
    let prev = prev_line.map_or_else(
        || "0".repeat(64),
        |l| sha256_hex(l.strip_suffix(b"\n").unwrap()),
    );
    let mut cp = json!({
        "seq": seq, "record_hash": record_hash, "records": seq + 1,
        "time": "2030-01-01T00:00:00Z", "key_id": airlock_audit::key_id(&key.verifying_key()),
        "prev": prev,
    });
    let message = canonical_json(&cp).unwrap();
    let sig: String = key
        .sign(message.as_bytes())
        .to_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    cp["signature"] = Value::from(sig);
    let mut line = canonical_json(&cp).unwrap().into_bytes();
    line.push(b'\n');
    line
}

/// A log whose records carry `times`, fully signed by the test key.
fn log_with_times(times: &[&str]) -> Fixture {
    let f = Fixture::build(0, 0);
    let key = SigningKey::from_bytes(&[42; 32]);
    let mut prev = "0".repeat(64);
    let mut records = Vec::new();
    let mut cps: Vec<Vec<u8>> = Vec::new();
    for (seq, time) in times.iter().enumerate() {
        let line = record_at(seq as u64, &prev, time);
        prev = hash_of(&line);
        let cp = checkpoint_line(&key, seq as u64, &prev, cps.last().map(Vec::as_slice));
        records.push(line);
        cps.push(cp);
    }
    write_lines(&f.log(), &records);
    write_lines(&f.checkpoints(), &cps);
    f
}

#[test]
fn i4_time_going_backwards_is_reported_with_its_records() {
    let f = log_with_times(&[
        "2030-01-01T10:00:00.000000Z",
        "2030-01-01T10:05:00.000000Z",
        "2030-01-01T09:00:00.000000Z",
        "2030-01-01T09:00:00.000000Z",
        "2030-01-01T11:00:00.000000Z",
        "2030-01-01T10:59:59.999999Z",
    ]);
    let r = verify(&f.dir, &test_key()).unwrap();
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(r.time_regressions_total, 2, "{:?}", r.time_regressions);
    let first = &r.time_regressions[0];
    assert_eq!((first.seq, first.line, first.previous_seq), (2, 3, 1));
    assert_eq!(first.previous_time, "2030-01-01T10:05:00.000000Z");
    assert_eq!(
        (
            r.time_regressions[1].seq,
            r.time_regressions[1].previous_seq
        ),
        (5, 4)
    );

    let steady = log_with_times(&["2030-01-01T10:00:00Z", "2030-01-01T10:00:00Z"]);
    let r = verify(&steady.dir, &test_key()).unwrap();
    assert!(r.is_ok() && r.time_regressions_total == 0, "{r:?}");
}

// --- keys ----------------------------------------------------------------------------

fn other_signer(seed: u8) -> CheckpointSigner {
    CheckpointSigner::from_signing_key(SigningKey::from_bytes(&[seed; 32]))
}

fn rotate(
    m: &Marked,
    old: Option<CheckpointSigner>,
    old_public: Option<VerifyingKey>,
    new: &CheckpointSigner,
) {
    rotate_key(
        &m.dir,
        Some(&m.mark),
        opts(4),
        KeyRotation {
            old,
            old_public,
            new: new.clone(),
            principal: "operator".into(),
        },
    )
    .unwrap();
}

#[test]
fn i4_rotation_is_signed_by_the_old_key_and_verify_follows_the_keys() {
    let m = Marked::ten();
    let stale = m.open(test_signer());
    let new = other_signer(9);
    rotate(&m, Some(test_signer()), None, &new);
    let mut log = m.open(new.clone());
    for i in 12..20 {
        log.append(event(i)).unwrap();
    }
    log.close().unwrap();

    let r = m.verify_by(&new.verifying_key());
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(r.key_changes.len(), 1);
    let change = &r.key_changes[0];
    assert!(change.signed_by_old_key, "{change:?}");
    assert_eq!(change.seq, 10);
    assert_eq!(change.new_key_id, new.key_id());
    assert_eq!(change.old_key_id.as_deref(), Some(test_signer().key_id()));

    // The old key is no longer the log's key.
    problem_of(&m.verify_by(&test_key()), ProblemKind::KeyChain);
    // A process still holding the old key stops instead of signing in its name.
    let mut stale = stale;
    let err = stale.append(event(99)).unwrap_err();
    assert!(matches!(err, AuditError::KeyChanged { .. }), "{err}");
    std::mem::forget(stale);
    assert!(m.verify_by(&new.verifying_key()).is_ok());
}

#[test]
fn i4_rotation_after_the_old_key_was_lost_is_reported_as_a_break() {
    let new = other_signer(9);
    // The old public key is still known: its checkpoints are checked, the handover is not
    // signed by it.
    let m = Marked::ten();
    rotate(&m, None, Some(test_key()), &new);
    let r = m.verify_by(&new.verifying_key());
    assert!(r.is_ok(), "{r:?}");
    assert!(!r.key_changes[0].signed_by_old_key, "{:?}", r.key_changes);
    assert_eq!(r.key_changes[0].unchecked_checkpoints, 0);

    // Nothing of the old key is left: its checkpoints cannot be checked, and verify says so.
    let m = Marked::ten();
    rotate(&m, None, None, &new);
    let r = m.verify_by(&new.verifying_key());
    assert!(r.is_ok(), "{r:?}");
    assert!(!r.key_changes[0].signed_by_old_key);
    assert_eq!(r.key_changes[0].unchecked_checkpoints, 4);
}

#[test]
fn i4_a_replaced_key_is_refused_without_a_rotation() {
    let m = Marked::ten();
    // The key file was regenerated: the new key may not continue the log.
    let mut log = m.open(other_signer(9));
    let err = log.append(event(10)).unwrap_err();
    assert!(matches!(err, AuditError::KeyChanged { .. }), "{err}");
    std::mem::forget(log);
    // And checkpoints signed by the old key do not verify under the new one.
    let text = problem_of(
        &m.verify_by(&other_signer(9).verifying_key()),
        ProblemKind::BadCheckpoint,
    );
    assert!(text.contains("no key rotation record names"), "{text}");
}

#[test]
fn i4_forged_rotation_without_the_configured_key_fails() {
    // Whoever writes the state directory rewrites the log with a key of their own and adds
    // a rotation record handing over to the configured key. Without that key's signature
    // on a checkpoint after it, the chain does not end at the configured key.
    let f = Fixture::build(0, 0);
    let attacker = SigningKey::from_bytes(&[66; 32]);
    let hex = |k: &VerifyingKey| {
        k.as_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let r0 = record_at(0, &"0".repeat(64), "2030-01-01T10:00:00Z");
    let mut rot = json!({
        "seq": 1, "time": "2030-01-01T10:00:01Z", "session": "", "principal": "operator",
        "kind": KEY_ROTATION_KIND, "action": null, "action_hash": "", "facts": null,
        "decision": null, "policies": [], "reasons": [],
        "detail": {"old_key": hex(&attacker.verifying_key()), "new_key": hex(&test_key()),
                   "old_key_signs": true},
        "prev": hash_of(&r0),
    });
    rot["hash"] = Value::from(sha256_hex(canonical_json(&rot).unwrap().as_bytes()));
    let mut r1 = canonical_json(&rot).unwrap().into_bytes();
    r1.push(b'\n');
    let c0 = checkpoint_line(&attacker, 0, &hash_of(&r0), None);
    let c1 = checkpoint_line(&attacker, 1, &hash_of(&r1), Some(&c0));
    write_lines(&f.log(), &[r0, r1]);
    write_lines(&f.checkpoints(), &[c0, c1]);
    let text = problem_of(&verify(&f.dir, &test_key()).unwrap(), ProblemKind::KeyChain);
    assert!(
        text.contains("the last checkpoint is signed by key"),
        "{text}"
    );
}

#[test]
fn i4_only_the_rotation_writes_key_records() {
    let f = Fixture::build(1, 0);
    let mut log = AuditLog::open(&f.dir, test_signer(), opts(0)).unwrap();
    for kind in [KEY_ROTATION_KIND, airlock_audit::KEY_IN_USE_KIND] {
        let err = log.append(AuditEvent::new(kind, "s", "agent")).unwrap_err();
        assert!(matches!(err, AuditError::ReservedKind(_)), "{err}");
    }
}

#[test]
fn i4_missing_key_file_is_an_error_not_a_new_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.key");
    let err = CheckpointSigner::load(&path).unwrap_err();
    assert!(matches!(err, AuditError::KeyMissing { .. }), "{err}");
    assert!(err.to_string().contains("rotate-key"), "{err}");
    assert!(!path.exists(), "load must not create a key");
}
