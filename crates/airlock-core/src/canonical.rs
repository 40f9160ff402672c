//! Canonical JSON (RFC 8785, JCS) and content hashes.
//!
//! Approvals, audit records and grants all refer to an action by the SHA-256 of its
//! canonical form, so two parties that hold the same action always agree on its hash,
//! whatever key order or number formatting their JSON libraries use.

use serde::Serialize;
use sha2::{Digest, Sha256};

/// Error raised when a value cannot be put into canonical form (for example a
/// non-finite float, which JSON cannot carry).
#[derive(Debug, thiserror::Error)]
#[error("cannot canonicalize value: {0}")]
pub struct CanonicalError(String);

/// The RFC 8785 canonical JSON text of `value`.
pub fn canonical_json<T: Serialize>(value: &T) -> Result<String, CanonicalError> {
    serde_json_canonicalizer::to_string(value).map_err(|e| CanonicalError(e.to_string()))
}

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// `sha256:<hex>` of the canonical JSON of `value`.
pub fn content_hash<T: Serialize>(value: &T) -> Result<String, CanonicalError> {
    Ok(format!(
        "sha256:{}",
        sha256_hex(canonical_json(value)?.as_bytes())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_does_not_change_the_hash() {
        let a = json!({"b": 1, "a": [1, 2, {"y": true, "x": null}]});
        let b: serde_json::Value =
            serde_json::from_str(r#"{"a":[1,2,{"x":null,"y":true}],"b":1}"#).unwrap();
        assert_eq!(content_hash(&a).unwrap(), content_hash(&b).unwrap());
        assert_eq!(
            canonical_json(&a).unwrap(),
            r#"{"a":[1,2,{"x":null,"y":true}],"b":1}"#
        );
    }

    #[test]
    fn different_values_hash_differently() {
        assert_ne!(
            content_hash(&json!({"a": 1})).unwrap(),
            content_hash(&json!({"a": 2})).unwrap()
        );
    }
}
