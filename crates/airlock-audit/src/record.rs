//! The audit record: what an [`AuditEvent`] becomes on disk, and how one line is checked.
//!
//! A record is one line of `log.jsonl`: the RFC 8785 canonical JSON of an object with
//! exactly these fields: `seq`, `time`, `session`, `principal`, `kind`, `action`,
//! `action_hash`, `facts`, `decision`, `policies`, `reasons`, `detail`, `prev` and `hash`.
//! `hash` is the lower-case hex SHA-256 of the canonical JSON of the object without `hash`;
//! `prev` is the `hash` of the record before (64 zeros for the first).

use airlock_core::canonical::{canonical_json, sha256_hex};
use airlock_core::{DecisionKind, DecisionRecord};
use serde_json::{Map, Value};

use crate::AuditError;

/// `prev` of the first record, and of the first checkpoint.
pub const ZERO_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Largest record line (without its newline) the log writes or accepts when verifying.
pub const MAX_RECORD_BYTES: usize = 16 * 1024 * 1024;

/// The field names of a record, in canonical (sorted) order.
pub(crate) const RECORD_FIELDS: [&str; 14] = [
    "action",
    "action_hash",
    "decision",
    "detail",
    "facts",
    "hash",
    "kind",
    "policies",
    "prev",
    "principal",
    "reasons",
    "seq",
    "session",
    "time",
];

/// One thing worth recording: a decision, an approval, an execution and its result, …
///
/// ```
/// use airlock_audit::AuditEvent;
/// let ev = AuditEvent::new("execution", "s-1", "owner")
///     .with_detail(serde_json::json!({"exit": 0}));
/// assert_eq!(ev.kind, "execution");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEvent {
    /// Session the event belongs to.
    pub session: String,
    /// Who proposed or did it (agent, operator, approver).
    pub principal: String,
    /// Record kind: `decision`, `approval`, `execution`, …
    pub kind: String,
    /// The canonical action (JSON) the event is about, or `null`.
    pub action: Value,
    /// `sha256:` hash of the canonical action, or empty.
    pub action_hash: String,
    /// Normalized facts the policy saw, or `null`.
    pub facts: Value,
    /// The Gate's answer, when the event is a decision.
    pub decision: Option<DecisionKind>,
    /// Ids of the deciding policies.
    pub policies: Vec<String>,
    /// Human reasons.
    pub reasons: Vec<String>,
    /// Free JSON for executors: confinement attestation, exit status, byte counts, …
    pub detail: Value,
}

impl AuditEvent {
    /// An event of `kind` with no action, facts, decision or detail.
    pub fn new(
        kind: impl Into<String>,
        session: impl Into<String>,
        principal: impl Into<String>,
    ) -> AuditEvent {
        AuditEvent {
            session: session.into(),
            principal: principal.into(),
            kind: kind.into(),
            action: Value::Null,
            action_hash: String::new(),
            facts: Value::Null,
            decision: None,
            policies: Vec::new(),
            reasons: Vec::new(),
            detail: Value::Null,
        }
    }

    /// Set the action and its hash.
    pub fn with_action(mut self, action: Value, action_hash: impl Into<String>) -> AuditEvent {
        self.action = action;
        self.action_hash = action_hash.into();
        self
    }

    /// Set the free-form detail.
    pub fn with_detail(mut self, detail: Value) -> AuditEvent {
        self.detail = detail;
        self
    }

    /// Set the decision.
    pub fn with_decision(mut self, decision: DecisionKind) -> AuditEvent {
        self.decision = Some(decision);
        self
    }
}

impl From<&DecisionRecord> for AuditEvent {
    fn from(r: &DecisionRecord) -> AuditEvent {
        AuditEvent {
            session: r.session.clone(),
            principal: r.principal.clone(),
            kind: r.kind.clone(),
            action: r.action.clone(),
            action_hash: r.action_hash.clone(),
            facts: r.facts.clone(),
            decision: Some(r.decision),
            policies: r.policies.clone(),
            reasons: r.reasons.clone(),
            detail: Value::Null,
        }
    }
}

/// Build the record line (without newline) for `ev` at `seq`, and its hash.
pub(crate) fn build_record_line(
    ev: &AuditEvent,
    seq: u64,
    time: &str,
    prev: &str,
) -> Result<(String, String), AuditError> {
    let strings = |v: &[String]| Value::Array(v.iter().cloned().map(Value::String).collect());
    let mut obj = Map::new();
    obj.insert("seq".into(), Value::from(seq));
    obj.insert("time".into(), Value::from(time));
    obj.insert("session".into(), Value::from(ev.session.as_str()));
    obj.insert("principal".into(), Value::from(ev.principal.as_str()));
    obj.insert("kind".into(), Value::from(ev.kind.as_str()));
    obj.insert("action".into(), ev.action.clone());
    obj.insert("action_hash".into(), Value::from(ev.action_hash.as_str()));
    obj.insert("facts".into(), ev.facts.clone());
    obj.insert(
        "decision".into(),
        ev.decision
            .map(|d| Value::from(d.as_str()))
            .unwrap_or(Value::Null),
    );
    obj.insert("policies".into(), strings(&ev.policies));
    obj.insert("reasons".into(), strings(&ev.reasons));
    obj.insert("detail".into(), ev.detail.clone());
    obj.insert("prev".into(), Value::from(prev));
    let mut value = Value::Object(obj);
    let hash = sha256_hex(canonical_json(&value)?.as_bytes());
    if let Value::Object(obj) = &mut value {
        obj.insert("hash".into(), Value::from(hash.as_str()));
    }
    let line = canonical_json(&value)?;
    if line.len() > MAX_RECORD_BYTES {
        return Err(AuditError::RecordTooLarge {
            size: line.len(),
            limit: MAX_RECORD_BYTES,
        });
    }
    Ok((line, hash))
}

/// The chaining fields of a record that passed every check of [`check_record_line`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecordHead {
    pub seq: u64,
    pub prev: String,
    pub hash: String,
    /// The record's `time`, as written.
    pub time: String,
    /// The `detail` of a key-rotation record ([`crate::KEY_ROTATION_KIND`]); `None` for
    /// every other kind.
    pub rotation: Option<Value>,
}

/// Whether `s` is 64 lower-case hex digits.
pub(crate) fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Check one record line completely: UTF-8, JSON, exact field set and types, canonical
/// form byte for byte, and `hash`. Returns why it fails, in words.
pub(crate) fn check_record_line(line: &[u8]) -> Result<RecordHead, String> {
    let text = std::str::from_utf8(line).map_err(|e| format!("not UTF-8 ({e})"))?;
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let Value::Object(obj) = &value else {
        return Err("not a JSON object".into());
    };
    if obj.len() != RECORD_FIELDS.len() || !RECORD_FIELDS.iter().all(|f| obj.contains_key(*f)) {
        let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        return Err(format!(
            "fields are [{}], expected [{}]",
            keys.join(","),
            RECORD_FIELDS.join(",")
        ));
    }
    let seq = obj["seq"]
        .as_u64()
        .ok_or("`seq` is not an unsigned integer")?;
    for f in ["time", "session", "principal", "kind", "action_hash"] {
        if !obj[f].is_string() {
            return Err(format!("`{f}` is not a string"));
        }
    }
    match &obj["decision"] {
        Value::Null => {}
        Value::String(s) if matches!(s.as_str(), "allow" | "ask" | "deny") => {}
        _ => return Err("`decision` is not null, \"allow\", \"ask\" or \"deny\"".into()),
    }
    for f in ["policies", "reasons"] {
        let ok = obj[f]
            .as_array()
            .is_some_and(|a| a.iter().all(Value::is_string));
        if !ok {
            return Err(format!("`{f}` is not an array of strings"));
        }
    }
    let prev = match obj["prev"].as_str() {
        Some(p) if is_hex64(p) => p.to_string(),
        _ => return Err("`prev` is not 64 lower-case hex digits".into()),
    };
    let hash = match obj["hash"].as_str() {
        Some(h) if is_hex64(h) => h.to_string(),
        _ => return Err("`hash` is not 64 lower-case hex digits".into()),
    };
    let canonical = canonical_json(&value).map_err(|e| e.to_string())?;
    if canonical.as_bytes() != line {
        return Err("the line is not in canonical JSON form (bytes were changed)".into());
    }
    let mut without_hash = obj.clone();
    without_hash.remove("hash");
    let computed = sha256_hex(
        canonical_json(&Value::Object(without_hash))
            .map_err(|e| e.to_string())?
            .as_bytes(),
    );
    if computed != hash {
        return Err(format!(
            "content does not match its hash (stored {hash}, computed {computed})"
        ));
    }
    let rotation =
        (obj["kind"].as_str() == Some(crate::KEY_ROTATION_KIND)).then(|| obj["detail"].clone());
    Ok(RecordHead {
        seq,
        prev,
        hash,
        time: obj["time"].as_str().unwrap_or_default().to_string(),
        rotation,
    })
}

/// Read just `seq` and `hash` from the last line of the log, for chaining the next record.
/// The full check is `verify`'s job; this only refuses what cannot be chained onto.
pub(crate) fn parse_chain_head(line: &[u8]) -> Result<(u64, String), String> {
    let value: Value = std::str::from_utf8(line)
        .ok()
        .and_then(|t| serde_json::from_str(t).ok())
        .ok_or("not valid UTF-8 JSON")?;
    let seq = value
        .get("seq")
        .and_then(Value::as_u64)
        .ok_or("no unsigned integer `seq`")?;
    let hash = value
        .get("hash")
        .and_then(Value::as_str)
        .filter(|h| is_hex64(h))
        .ok_or("no 64-hex-digit `hash`")?;
    Ok((seq, hash.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn built_line_passes_the_full_check() {
        let ev = AuditEvent::new("decision", "s", "agent")
            .with_action(json!({"type": "exec", "command": "ls"}), "sha256:ab")
            .with_decision(DecisionKind::Allow);
        let (line, hash) = build_record_line(&ev, 7, "2024-01-01T00:00:00Z", ZERO_HASH).unwrap();
        let head = check_record_line(line.as_bytes()).unwrap();
        assert_eq!(head.seq, 7);
        assert_eq!(head.hash, hash);
        assert_eq!(head.prev, ZERO_HASH);
    }

    #[test]
    fn changed_or_extra_fields_fail() {
        let ev = AuditEvent::new("decision", "s", "agent");
        let (line, _) = build_record_line(&ev, 0, "t", ZERO_HASH).unwrap();
        let changed = line.replace("\"agent\"", "\"agenT\"");
        assert!(check_record_line(changed.as_bytes())
            .unwrap_err()
            .contains("does not match its hash"));
        let spaced = line.replacen(':', ": ", 1);
        assert!(check_record_line(spaced.as_bytes())
            .unwrap_err()
            .contains("canonical"));
        assert!(check_record_line(b"\xff\xfe")
            .unwrap_err()
            .contains("UTF-8"));
        assert!(check_record_line(b"{}").unwrap_err().contains("fields"));
    }
}
