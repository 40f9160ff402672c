//! Signed checkpoints: one line of `checkpoints.jsonl` vouches for the log up to a record.
//!
//! A checkpoint is the canonical JSON of `{seq, record_hash, records, time, key_id, prev,
//! signature}`. `seq`/`record_hash` name the last record covered, `records` is how many
//! records that is (`seq + 1`), `prev` is the SHA-256 of the previous checkpoint line (64
//! zeros for the first) so checkpoints cannot be dropped or reordered unnoticed, and
//! `signature` is the hex Ed25519 signature over the canonical JSON of all other fields.

use airlock_core::canonical::{canonical_json, sha256_hex};
use ed25519_dalek::{Signature, VerifyingKey};
use serde_json::{Map, Value};

use crate::record::is_hex64;
use crate::signer::{hex_decode, key_id};
use crate::{AuditError, CheckpointSigner};

const CHECKPOINT_FIELDS: [&str; 7] = [
    "key_id",
    "prev",
    "record_hash",
    "records",
    "seq",
    "signature",
    "time",
];

/// What a valid checkpoint line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CheckpointHead {
    pub seq: u64,
    pub record_hash: String,
}

/// Build and sign the checkpoint line (without newline) covering record `seq`.
pub(crate) fn build_checkpoint_line(
    signer: &CheckpointSigner,
    seq: u64,
    record_hash: &str,
    time: &str,
    prev_line_hash: &str,
) -> Result<String, AuditError> {
    let mut obj = Map::new();
    obj.insert("seq".into(), Value::from(seq));
    obj.insert("record_hash".into(), Value::from(record_hash));
    obj.insert("records".into(), Value::from(seq.saturating_add(1)));
    obj.insert("time".into(), Value::from(time));
    obj.insert("key_id".into(), Value::from(signer.key_id()));
    obj.insert("prev".into(), Value::from(prev_line_hash));
    let message = canonical_json(&Value::Object(obj.clone()))?;
    obj.insert(
        "signature".into(),
        Value::from(signer.sign_hex(message.as_bytes())),
    );
    Ok(canonical_json(&Value::Object(obj))?)
}

/// Read `seq`, `record_hash` and `key_id` from a checkpoint line, for deciding when the
/// next one is due and which key must sign it. The full check is [`check_checkpoint_line`].
pub(crate) fn parse_checkpoint_seq(line: &[u8]) -> Result<(u64, String, String), String> {
    let value: Value = std::str::from_utf8(line)
        .ok()
        .and_then(|t| serde_json::from_str(t).ok())
        .ok_or("not valid UTF-8 JSON")?;
    let seq = value
        .get("seq")
        .and_then(Value::as_u64)
        .ok_or("no unsigned integer `seq`")?;
    let hash = value
        .get("record_hash")
        .and_then(Value::as_str)
        .ok_or("no `record_hash`")?;
    let key = value
        .get("key_id")
        .and_then(Value::as_str)
        .ok_or("no `key_id`")?;
    Ok((seq, hash.to_string(), key.to_string()))
}

/// A checkpoint line that passed every check except its signature, which depends on the
/// key in use at its place in the log (see [`ParsedCheckpoint::check_signature`]).
#[derive(Debug, Clone)]
pub(crate) struct ParsedCheckpoint {
    pub head: CheckpointHead,
    pub key_id: String,
    /// SHA-256 of the line.
    pub line_hash: String,
    signature: [u8; 64],
    message: String,
}

impl ParsedCheckpoint {
    /// Whether `key` signed this checkpoint.
    pub(crate) fn check_signature(&self, key: &VerifyingKey) -> Result<(), String> {
        let expected_key = key_id(key);
        if self.key_id != expected_key {
            return Err(format!(
                "signed by key {}, but the verifying key is {expected_key}\nhelp: pass the public key that belongs to this audit log",
                self.key_id
            ));
        }
        key.verify_strict(
            self.message.as_bytes(),
            &Signature::from_bytes(&self.signature),
        )
        .map_err(|_| "the signature does not verify".to_string())
    }
}

/// Check one checkpoint line completely except its signature: format, canonical bytes,
/// `records`, and that `prev` is the hash of `prev_line` (the line before, if any).
pub(crate) fn parse_checkpoint_line(
    line: &[u8],
    prev_line: Option<&[u8]>,
) -> Result<ParsedCheckpoint, String> {
    let text = std::str::from_utf8(line).map_err(|e| format!("not UTF-8 ({e})"))?;
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let Value::Object(obj) = &value else {
        return Err("not a JSON object".into());
    };
    if obj.len() != CHECKPOINT_FIELDS.len()
        || !CHECKPOINT_FIELDS.iter().all(|f| obj.contains_key(*f))
    {
        return Err(format!(
            "fields are not exactly [{}]",
            CHECKPOINT_FIELDS.join(",")
        ));
    }
    let seq = obj["seq"]
        .as_u64()
        .ok_or("`seq` is not an unsigned integer")?;
    let records = obj["records"]
        .as_u64()
        .ok_or("`records` is not an unsigned integer")?;
    let record_hash = obj["record_hash"]
        .as_str()
        .filter(|h| is_hex64(h))
        .ok_or("`record_hash` is not 64 hex digits")?;
    let prev = obj["prev"]
        .as_str()
        .filter(|h| is_hex64(h))
        .ok_or("`prev` is not 64 hex digits")?;
    let claimed_key = obj["key_id"].as_str().ok_or("`key_id` is not a string")?;
    if !obj["time"].is_string() {
        return Err("`time` is not a string".into());
    }
    let signature = obj["signature"]
        .as_str()
        .and_then(hex_decode::<64>)
        .ok_or("`signature` is not 128 hex digits")?;
    if canonical_json(&value)
        .map_err(|e| e.to_string())?
        .as_bytes()
        != line
    {
        return Err("the line is not in canonical JSON form (bytes were changed)".into());
    }
    let mut unsigned = obj.clone();
    unsigned.remove("signature");
    let message = canonical_json(&Value::Object(unsigned)).map_err(|e| e.to_string())?;
    if records != seq.saturating_add(1) {
        return Err(format!("`records` is {records}, expected {}", seq + 1));
    }
    let expected_prev = prev_line.map_or_else(|| crate::ZERO_HASH.to_string(), sha256_hex);
    if prev != expected_prev {
        return Err(match prev_line {
            None => "it claims a previous checkpoint, but it is the first line: checkpoints before it were removed".into(),
            Some(_) => "it does not chain onto the checkpoint line before it: checkpoints were removed, inserted or reordered".into(),
        });
    }
    Ok(ParsedCheckpoint {
        head: CheckpointHead {
            seq,
            record_hash: record_hash.to_string(),
        },
        key_id: claimed_key.to_string(),
        line_hash: sha256_hex(line),
        signature,
        message,
    })
}

/// Check one checkpoint line completely, signature by `key` included.
#[cfg(test)]
pub(crate) fn check_checkpoint_line(
    line: &[u8],
    key: &VerifyingKey,
    prev_line: Option<&[u8]>,
) -> Result<CheckpointHead, String> {
    let parsed = parse_checkpoint_line(line, prev_line)?;
    parsed.check_signature(key)?;
    Ok(parsed.head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::SigningKey;

    #[test]
    fn signed_line_verifies_only_with_its_key_and_prev() {
        let signer = CheckpointSigner::from_signing_key(SigningKey::from_bytes(&[7; 32]));
        let other = SigningKey::from_bytes(&[8; 32]).verifying_key();
        let h = "ab".repeat(32);
        let first = build_checkpoint_line(&signer, 3, &h, "t", crate::ZERO_HASH).unwrap();
        let key = signer.verifying_key();
        assert_eq!(
            check_checkpoint_line(first.as_bytes(), &key, None).unwrap(),
            CheckpointHead {
                seq: 3,
                record_hash: h.clone()
            }
        );
        assert!(check_checkpoint_line(first.as_bytes(), &other, None)
            .unwrap_err()
            .contains("key"));
        let second =
            build_checkpoint_line(&signer, 7, &h, "t", &sha256_hex(first.as_bytes())).unwrap();
        assert!(check_checkpoint_line(second.as_bytes(), &key, Some(first.as_bytes())).is_ok());
        assert!(check_checkpoint_line(second.as_bytes(), &key, None).is_err());
        let forged = first.replace("\"time\":\"t\"", "\"time\":\"u\"");
        assert!(check_checkpoint_line(forged.as_bytes(), &key, None)
            .unwrap_err()
            .contains("signature"));
    }
}
