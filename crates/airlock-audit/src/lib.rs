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
//! [`verify`] needs only the public key.
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
mod record;
mod redact;
mod signer;
mod verify;

pub use display::{for_each_tail_record, format_record_line, tail, TailRecord};
pub use ed25519_dalek::VerifyingKey;
pub use error::AuditError;
pub use log::{
    AppendReceipt, AuditLog, AuditOptions, CHECKPOINT_FILE, LOCK_FILE, LOG_FILE, TORN_FILE,
};
pub use record::{AuditEvent, MAX_RECORD_BYTES, ZERO_HASH};
pub use redact::Redactor;
pub use secrecy::SecretString;
pub use signer::{key_id, load_verifier, public_key_path, CheckpointSigner};
pub use verify::{verify, Problem, ProblemKind, VerifyReport};
