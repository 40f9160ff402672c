//! The high-water mark: how far the log had reached at its last checkpoint, kept outside
//! the audit directory.
//!
//! Whoever can write the audit directory can empty both files, or cut the log together
//! with its last checkpoints, and what is left is a shorter log that is consistent in
//! itself. The mark lives where that writer cannot reach (the operator's config
//! directory) and records the `seq`, record hash and checkpoint-line hash of the last
//! checkpoint, signed by the key that signed the checkpoint. The log may never fall below
//! it, and appends never reuse a sequence number it covers.
//!
//! Crash safety: the checkpoint is made durable before the mark is replaced (temporary file,
//! fsync, rename, fsync of the directory), so the mark never claims more than the log holds;
//! after a crash between the two it is one checkpoint behind, which is still a valid mark.
//!
//! The file is one line of canonical JSON: `{checkpoint_hash, key_id, record_hash, seq,
//! signature, time, type}`, with `type` = `"audit-high-water-mark"` so that the signature
//! can never be taken for a checkpoint's.

use std::path::Path;

use airlock_core::canonical::canonical_json;
use ed25519_dalek::{Signature, VerifyingKey};
use serde_json::{Map, Value};

use crate::record::is_hex64;
use crate::signer::{hex_decode, key_id, write_atomic};
use crate::{AuditError, CheckpointSigner};

const MARK_TYPE: &str = "audit-high-water-mark";
const MARK_FIELDS: [&str; 7] = [
    "checkpoint_hash",
    "key_id",
    "record_hash",
    "seq",
    "signature",
    "time",
    "type",
];
/// A mark is about 400 bytes; anything much larger is not one.
const MAX_MARK_BYTES: u64 = 4096;

/// What a mark says: the last checkpoint made when it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HighWaterMark {
    /// `seq` of the last record that checkpoint covers.
    pub seq: u64,
    /// That record's hash.
    pub record_hash: String,
    /// SHA-256 of the checkpoint line.
    pub checkpoint_hash: String,
    /// Id of the key that signed the checkpoint and the mark.
    pub key_id: String,
    signature: [u8; 64],
    message: String,
}

impl HighWaterMark {
    /// Check the mark's signature with `key`, whose id must be the mark's.
    pub(crate) fn check_signature(&self, key: &VerifyingKey) -> Result<(), String> {
        if key_id(key) != self.key_id {
            return Err(format!(
                "it is signed by key {}, not by key {}",
                self.key_id,
                key_id(key)
            ));
        }
        key.verify_strict(
            self.message.as_bytes(),
            &Signature::from_bytes(&self.signature),
        )
        .map_err(|_| "its signature does not verify".to_string())
    }
}

/// Read the mark at `path`: `None` if there is none yet (no checkpoint was marked).
/// Checks its form, not its signature (see [`HighWaterMark::check_signature`]).
pub(crate) fn read_mark(path: &Path) -> Result<Option<HighWaterMark>, AuditError> {
    let Some(bytes) = read_mark_bytes(path)? else {
        return Ok(None);
    };
    parse_mark(&bytes)
        .map(Some)
        .map_err(|detail| AuditError::BadMark {
            path: path.to_path_buf(),
            detail,
        })
}

/// The mark file's bytes, unparsed (`None` when there is none), after the same checks
/// of what the file is as [`read_mark`].
pub(crate) fn read_mark_bytes(path: &Path) -> Result<Option<Vec<u8>>, AuditError> {
    let bad = |detail: String| AuditError::BadMark {
        path: path.to_path_buf(),
        detail,
    };
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(AuditError::io("inspect", path, e)),
    };
    if !meta.is_file() {
        return Err(bad("it is not a regular file".into()));
    }
    if meta.len() > MAX_MARK_BYTES {
        return Err(bad(format!("it is larger than {MAX_MARK_BYTES} bytes")));
    }
    std::fs::read(path)
        .map(Some)
        .map_err(|e| AuditError::io("read", path, e))
}

pub(crate) fn parse_mark(bytes: &[u8]) -> Result<HighWaterMark, String> {
    let line = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let text = std::str::from_utf8(line).map_err(|_| "it is not UTF-8".to_string())?;
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let Value::Object(obj) = &value else {
        return Err("not a JSON object".into());
    };
    if obj.len() != MARK_FIELDS.len() || !MARK_FIELDS.iter().all(|f| obj.contains_key(*f)) {
        return Err(format!(
            "fields are not exactly [{}]",
            MARK_FIELDS.join(",")
        ));
    }
    if obj["type"].as_str() != Some(MARK_TYPE) {
        return Err(format!("`type` is not {MARK_TYPE:?}"));
    }
    let seq = obj["seq"]
        .as_u64()
        .ok_or("`seq` is not an unsigned integer")?;
    let hex64 = |f: &str| {
        obj[f]
            .as_str()
            .filter(|h| is_hex64(h))
            .map(str::to_string)
            .ok_or(format!("`{f}` is not 64 hex digits"))
    };
    let record_hash = hex64("record_hash")?;
    let checkpoint_hash = hex64("checkpoint_hash")?;
    let key_id = obj["key_id"]
        .as_str()
        .ok_or("`key_id` is not a string")?
        .to_string();
    let signature = obj["signature"]
        .as_str()
        .and_then(hex_decode::<64>)
        .ok_or("`signature` is not 128 hex digits")?;
    let mut unsigned = obj.clone();
    unsigned.remove("signature");
    let message = canonical_json(&Value::Object(unsigned)).map_err(|e| e.to_string())?;
    Ok(HighWaterMark {
        seq,
        record_hash,
        checkpoint_hash,
        key_id,
        signature,
        message,
    })
}

/// Replace the mark at `path` atomically with one for the checkpoint just written.
pub(crate) fn write_mark(
    path: &Path,
    signer: &CheckpointSigner,
    seq: u64,
    record_hash: &str,
    checkpoint_hash: &str,
    time: &str,
) -> Result<(), AuditError> {
    let mut obj = Map::new();
    obj.insert("type".into(), Value::from(MARK_TYPE));
    obj.insert("seq".into(), Value::from(seq));
    obj.insert("record_hash".into(), Value::from(record_hash));
    obj.insert("checkpoint_hash".into(), Value::from(checkpoint_hash));
    obj.insert("key_id".into(), Value::from(signer.key_id()));
    obj.insert("time".into(), Value::from(time));
    let message = canonical_json(&Value::Object(obj.clone()))?;
    obj.insert(
        "signature".into(),
        Value::from(signer.sign_hex(message.as_bytes())),
    );
    let mut line = canonical_json(&Value::Object(obj))?.into_bytes();
    line.push(b'\n');
    write_atomic(path, &line, 0o600)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::SigningKey;

    #[test]
    fn written_mark_reads_back_and_verifies_only_with_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mark");
        assert!(read_mark(&path).unwrap().is_none());
        let signer = CheckpointSigner::from_signing_key(SigningKey::from_bytes(&[3; 32]));
        let h = "cd".repeat(32);
        write_mark(&path, &signer, 9, &h, &h, "t").unwrap();
        let mark = read_mark(&path).unwrap().unwrap();
        assert_eq!((mark.seq, mark.record_hash.as_str()), (9, h.as_str()));
        mark.check_signature(&signer.verifying_key()).unwrap();
        let other = SigningKey::from_bytes(&[4; 32]).verifying_key();
        assert!(mark.check_signature(&other).is_err());
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("\"seq\":9", "\"seq\":99")).unwrap();
        let forged = read_mark(&path).unwrap().unwrap();
        assert!(forged
            .check_signature(&signer.verifying_key())
            .unwrap_err()
            .contains("signature"));
        std::fs::write(&path, b"{}").unwrap();
        assert!(matches!(read_mark(&path), Err(AuditError::BadMark { .. })));
    }
}
