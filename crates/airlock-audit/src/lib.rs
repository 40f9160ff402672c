//! # airlock-audit — the tamper-evident audit log
//!
//! An append-only, hash-chained, fsynced log of everything the Gate decided and every
//! executor did, with Ed25519-signed checkpoints. Plain blocking I/O: no async runtime, no
//! database, so any program can read or verify it.
//!
//! Files in the audit directory (`<state>/audit/`, never mounted into a sandbox):
//! - `log.jsonl`: one record per line, RFC 8785 canonical JSON, each holding the hash of
//!   the one before (`prev`) and its own (`hash`). See [`AuditEvent`].
//! - `checkpoints.jsonl`: signed checkpoints, every [`AuditOptions::checkpoint_every`]
//!   records and on [`AuditLog::close`].
//! - `lock`: the `flock` that serializes appends across processes.
//! - `torn.bin`: bytes of a record whose write a crash interrupted (created only then).
//!
//! The signing key lives in the operator's config directory ([`CheckpointSigner`]);
//! [`verify`] needs only the public key. So does the high-water mark
//! ([`AuditLog::open_marked`], [`HighWaterMark`]): how far the log had reached at its last
//! checkpoint, out of reach of whoever can write the audit directory, so that emptying the
//! log or cutting it together with its last checkpoints is detected. A key is replaced only
//! by [`rotate_key`], which leaves signed records that [`verify_with`] follows.
//!
//! ## Architecture invariant
//! An append returns `Ok` only after the record is on disk and chained onto the record that
//! is really last in the file; on any failure it returns `Err` and leaves no partial line.

mod checkpoint;
mod display;
mod error;
mod lines;
mod lock;
mod log;
mod mark;
mod record;
mod redact;
mod seen;
mod signer;
mod verify;

pub use display::{for_each_tail_record, format_record_line, tail, TailRecord};
pub use ed25519_dalek::VerifyingKey;
pub use error::AuditError;
pub use log::{
    rotate_key, AppendReceipt, AuditLog, AuditOptions, KeyRotation, RotationReceipt,
    CHECKPOINT_FILE, KEY_IN_USE_KIND, KEY_ROTATION_KIND, LOCK_FILE, LOG_FILE, TORN_FILE,
};
pub use mark::HighWaterMark;
pub use record::{AuditEvent, MAX_RECORD_BYTES, ZERO_HASH};
pub use redact::Redactor;
pub use secrecy::SecretString;
pub use signer::{key_id, load_verifier, public_key_path, CheckpointSigner};
pub use verify::{
    verify, verify_with, KeyChange, Problem, ProblemKind, TimeRegression, Trust, VerifyReport,
};
