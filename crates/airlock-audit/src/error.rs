//! [`AuditError`]: every way the audit log can fail, each with the file it concerns and a
//! `help:` line that tells the operator what to do.

use std::io;
use std::path::{Path, PathBuf};

/// Failure to open, append to, sign, read or verify the audit log.
///
/// An append that returns any of these did **not** durably record the event: the Gate
/// treats it as a denial (invariant I1).
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// A file-system call failed.
    #[error("cannot {op} {path}: {source}\nhelp: {help}", path = path.display())]
    Io {
        /// What was being done (`"write to"`, `"fsync"`, …).
        op: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
        /// How to fix it.
        help: String,
    },
    /// A path that must be a plain file is something else (a directory, a device, …).
    #[error("{path} is not a regular file\nhelp: move it away; the audit files must be plain files written only by Airlock", path = path.display())]
    NotAFile {
        /// The offending path.
        path: PathBuf,
    },
    /// A file the log needs has disappeared since the log was created.
    #[error("{path} is missing, but the audit directory exists\nhelp: the file was deleted or moved; restore it from a backup, or run `airlock audit verify` to see what is left; Airlock will not start a new chain over a deleted one", path = path.display())]
    Missing {
        /// The missing file.
        path: PathBuf,
    },
    /// The last record (or checkpoint) cannot be parsed, so a new one cannot be chained on.
    #[error("the last line of {path} is damaged: {detail}\nhelp: run `airlock audit verify` to locate the damage; Airlock will not chain new records onto a damaged log", path = path.display())]
    CorruptTail {
        /// The damaged file.
        path: PathBuf,
        /// What is wrong with its last line.
        detail: String,
    },
    /// The log ends before (or differs from) what its last signed checkpoint covers.
    #[error("{path} does not match its last signed checkpoint: {detail}\nhelp: records were removed or rewritten; run `airlock audit verify` and keep the directory as evidence", path = path.display())]
    Tampered {
        /// The log file.
        path: PathBuf,
        /// The mismatch found.
        detail: String,
    },
    /// One event would make a record larger than [`crate::MAX_RECORD_BYTES`].
    #[error("audit record would be {size} bytes, over the {limit}-byte limit\nhelp: keep large payloads out of audit events; record their hash and size instead")]
    RecordTooLarge {
        /// Size of the record line.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The event names a principal or client that does not parse strictly.
    #[error("audit record has a malformed attribution: {0}")]
    Attribution(String),
    /// The event holds a value that has no canonical JSON form.
    #[error("cannot put the audit record into canonical JSON: {0}\nhelp: audit events must hold plain JSON (no NaN or infinite numbers)")]
    Canonical(String),
    /// The sequence number space is exhausted (2^64 records).
    #[error("{path} has reached the largest sequence number\nhelp: archive the audit directory and start a new one", path = path.display())]
    SeqOverflow {
        /// The log file.
        path: PathBuf,
    },
    /// A signing or verifying key file is unusable.
    #[error("key file {path}: {detail}\nhelp: {help}", path = path.display())]
    Key {
        /// The key file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
        /// How to fix it.
        help: String,
    },
    /// The signing key file does not exist.
    #[error("the audit signing key {path} is missing\nhelp: restore it from your backup of the config directory; to sign with a new key from now on, run `airlock audit rotate-key` (the log records the change and `airlock audit verify` reports it); a new key is never created silently, as the log's earlier checkpoints would then no longer verify", path = path.display())]
    KeyMissing {
        /// Where the key should be.
        path: PathBuf,
    },
    /// This handle signs with another key than the log's last checkpoint.
    #[error("{path} is signed by key {log_key} since its last checkpoint, but this process signs with key {own_key}\nhelp: the audit key was rotated since this process started (restart it), or the key file was replaced: restore the original key, or replace it with `airlock audit rotate-key`", path = path.display())]
    KeyChanged {
        /// The checkpoint file.
        path: PathBuf,
        /// Key id of the last checkpoint.
        log_key: String,
        /// Key id of this handle's signer.
        own_key: String,
    },
    /// The high-water mark kept outside the audit directory says the log once reached
    /// further than it does now.
    #[error("{detail}\nhelp: records or checkpoints were removed from {dir}; keep the directory as evidence and restore it from a backup. The mark is {mark}; only if the log is knowingly lost for good, move the mark aside to start a new log", dir = dir.display(), mark = mark.display())]
    BelowMark {
        /// The audit directory.
        dir: PathBuf,
        /// The mark file.
        mark: PathBuf,
        /// What was found.
        detail: String,
    },
    /// The high-water mark file is damaged or not signed by a known key.
    #[error("the audit high-water mark {path} is unusable: {detail}\nhelp: the mark lives in the operator's config directory and only Airlock writes it; restore it from a backup of that directory", path = path.display())]
    BadMark {
        /// The mark file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// An event of a kind only the key rotation may write.
    #[error(
        "audit events of kind {0:?} are written only by the key rotation\nhelp: use another kind"
    )]
    ReservedKind(String),
    /// The operating system could not provide randomness for a new key.
    #[error("cannot generate a signing key: no randomness available ({0})\nhelp: check that /dev/urandom or getrandom(2) works on this system")]
    Randomness(String),
    /// A secret registered for redaction has an empty value.
    #[error("secret {name:?} has an empty value\nhelp: an empty value would match everywhere; give the secret a value or leave it out")]
    EmptySecret {
        /// Name of the secret.
        name: String,
    },
    /// The redaction patterns could not be compiled.
    #[error("cannot build the secret redactor: {0}\nhelp: reduce the number or size of registered secrets")]
    Redactor(String),
    /// `verify` or `tail` was pointed at a directory with no audit log.
    #[error("no audit log in {dir}\nhelp: check the state directory (AIRLOCK_HOME); `AuditLog::open` creates log.jsonl and checkpoints.jsonl there", dir = dir.display())]
    NoLog {
        /// The directory looked at.
        dir: PathBuf,
    },
    /// The lock file keeps being replaced under us.
    #[error("cannot hold a stable lock on {path}\nhelp: something keeps replacing the lock file; make sure only Airlock writes to the audit directory", path = path.display())]
    LockUnstable {
        /// The lock file.
        path: PathBuf,
    },
}

impl AuditError {
    /// Wrap an I/O error with the path it concerns and a hint chosen from the error kind.
    pub(crate) fn io(op: &'static str, path: &Path, source: io::Error) -> AuditError {
        let help = match source.kind() {
            io::ErrorKind::StorageFull => {
                "the file system is full; free space on it (the audit log must be able to grow)"
                    .to_string()
            }
            io::ErrorKind::ReadOnlyFilesystem => {
                "the file system is read-only; remount it read-write or move the state directory"
                    .to_string()
            }
            io::ErrorKind::PermissionDenied => {
                "make the audit directory and its files owned by and writable for the user running Airlock (modes 0700/0600)".to_string()
            }
            io::ErrorKind::IsADirectory => {
                "this path must be a plain file; move the directory away".to_string()
            }
            io::ErrorKind::FileTooLarge => {
                "the file size limit was reached (see `ulimit -f`); raise it or archive the audit directory".to_string()
            }
            io::ErrorKind::NotFound => {
                "check that the state directory exists and was not moved".to_string()
            }
            _ => "check the file system that holds the audit directory".to_string(),
        };
        AuditError::Io {
            op,
            path: path.to_path_buf(),
            source,
            help,
        }
    }
}

impl From<airlock_core::canonical::CanonicalError> for AuditError {
    fn from(e: airlock_core::canonical::CanonicalError) -> Self {
        AuditError::Canonical(e.to_string())
    }
}
