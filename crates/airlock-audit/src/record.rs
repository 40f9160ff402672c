//! The audit record: what an [`AuditEvent`] becomes on disk, and how one line is checked.
//!
//! A record is one line of `log.jsonl`: the RFC 8785 canonical JSON of an object with
//! exactly these fields: `seq`, `time`, `session`, `principal`, `kind`, `action`,
//! `action_hash`, `facts`, `decision`, `policies`, `reasons`, `detail`, `prev` and `hash`,
//! and, in records written since attribution was added, `on_behalf_of` and `via`.
//! `hash` is the lower-case hex SHA-256 of the canonical JSON of the object without `hash`;
//! `prev` is the `hash` of the record before (64 zeros for the first).
//!
//! The two attribution fields are part of the hashed object only when present, so logs
//! written before them still verify unchanged. A record that carries them must name its
//! principals in their strict form ([`airlock_core::Principal`]).

use airlock_core::canonical::{canonical_json, sha256_hex};
use airlock_core::{Attribution, DecisionKind, DecisionRecord, Principal, Via};
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

/// The fields an attributed record carries beyond [`RECORD_FIELDS`].
pub(crate) const ATTRIBUTION_FIELDS: [&str; 2] = ["on_behalf_of", "via"];

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
    /// Whose authority it ran under; `None` only for events built without attribution
    /// (their record has the older field set).
    pub on_behalf_of: Option<String>,
    /// The client or channel it came through; set together with `on_behalf_of`.
    pub via: Option<String>,
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
            on_behalf_of: None,
            via: None,
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

    /// An event of `kind` by `who`: names the principal, whose authority and which client.
    ///
    /// ```
    /// use airlock_audit::AuditEvent;
    /// use airlock_core::Attribution;
    /// let ev = AuditEvent::by("net-allow", "cli", &Attribution::owner_cli());
    /// assert_eq!(ev.via.as_deref(), Some("cli"));
    /// ```
    pub fn by(
        kind: impl Into<String>,
        session: impl Into<String>,
        who: &Attribution,
    ) -> AuditEvent {
        AuditEvent::new(kind, session, who.principal.to_string()).with_attribution(who)
    }

    /// Name who did it, under whose authority and through which client.
    pub fn with_attribution(mut self, who: &Attribution) -> AuditEvent {
        self.principal = who.principal.to_string();
        self.on_behalf_of = Some(who.on_behalf_of.to_string());
        self.via = Some(who.via.to_string());
        self
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
            on_behalf_of: Some(r.on_behalf_of.clone()),
            via: Some(r.via.clone()),
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
    match (&ev.on_behalf_of, &ev.via) {
        (Some(on_behalf_of), Some(via)) => {
            // Refuse to write what verify would refuse to read.
            check_attribution(&ev.principal, on_behalf_of, via).map_err(AuditError::Attribution)?;
            obj.insert("on_behalf_of".into(), Value::from(on_behalf_of.as_str()));
            obj.insert("via".into(), Value::from(via.as_str()));
        }
        (None, None) => {}
        _ => {
            return Err(AuditError::Attribution(
                "`on_behalf_of` and `via` must be set together".into(),
            ))
        }
    }
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

/// The attribution of a record that carries one: every principal and the client in strict
/// form.
fn check_attribution(principal: &str, on_behalf_of: &str, via: &str) -> Result<(), String> {
    principal
        .parse::<Principal>()
        .map_err(|e| format!("`principal`: {e}"))?;
    on_behalf_of
        .parse::<Principal>()
        .map_err(|e| format!("`on_behalf_of`: {e}"))?;
    via.parse::<Via>().map_err(|e| format!("`via`: {e}"))?;
    Ok(())
}

/// Check one record line completely: UTF-8, JSON, exact field set and types, canonical
/// form byte for byte, and `hash`. Returns why it fails, in words.
pub(crate) fn check_record_line(line: &[u8]) -> Result<RecordHead, String> {
    let text = std::str::from_utf8(line).map_err(|e| format!("not UTF-8 ({e})"))?;
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let Value::Object(obj) = &value else {
        return Err("not a JSON object".into());
    };
    let attributed = ATTRIBUTION_FIELDS.iter().any(|f| obj.contains_key(*f));
    let expected = RECORD_FIELDS.len()
        + if attributed {
            ATTRIBUTION_FIELDS.len()
        } else {
            0
        };
    if obj.len() != expected
        || !RECORD_FIELDS.iter().all(|f| obj.contains_key(*f))
        || (attributed && !ATTRIBUTION_FIELDS.iter().all(|f| obj.contains_key(*f)))
    {
        let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        return Err(format!(
            "fields are [{}], expected [{}] (and [{}] in an attributed record)",
            keys.join(","),
            RECORD_FIELDS.join(","),
            ATTRIBUTION_FIELDS.join(",")
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
    if attributed {
        let text = |f: &str| obj[f].as_str().ok_or(format!("`{f}` is not a string"));
        check_attribution(text("principal")?, text("on_behalf_of")?, text("via")?)?;
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

/// `seq` and `hash` of the last line of the log, for chaining the next record. The line
/// passes every check of [`check_record_line`] first (canonical form, and content that
/// hashes to its `hash`): a last record rewritten with its hash left as it was is never
/// chained onto, so no action is recorded, and none runs, on top of it. Records further
/// back are `verify`'s to check; reading the whole log on every append would make each
/// decision cost as much as the log is long.
pub(crate) fn parse_chain_head(line: &[u8]) -> Result<(u64, String), String> {
    check_record_line(line).map(|head| (head.seq, head.hash))
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

    /// Records written before attribution existed have no `on_behalf_of`/`via`; they must
    /// still pass the check byte for byte, next to attributed ones.
    #[test]
    fn i1_records_without_attribution_still_verify() {
        let legacy = AuditEvent::new("execution", "s", "owner");
        let (line, _) = build_record_line(&legacy, 0, "t", ZERO_HASH).unwrap();
        assert!(!line.contains("on_behalf_of"), "{line}");
        check_record_line(line.as_bytes()).unwrap();

        let who = Attribution {
            principal: Principal::agent("s").unwrap(),
            on_behalf_of: Principal::Owner,
            via: Via::cli(),
        };
        let ev = AuditEvent::by("decision", "s", &who);
        let (line, _) = build_record_line(&ev, 1, "t", ZERO_HASH).unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["principal"], "agent:s");
        assert_eq!(v["on_behalf_of"], "owner");
        assert_eq!(v["via"], "cli");
        check_record_line(line.as_bytes()).unwrap();
    }

    /// Re-hash `obj` as a record line, as a forger with the right hash function would.
    fn rehashed(mut obj: Map<String, Value>) -> String {
        obj.remove("hash");
        let hash = sha256_hex(
            canonical_json(&Value::Object(obj.clone()))
                .unwrap()
                .as_bytes(),
        );
        obj.insert("hash".into(), Value::from(hash));
        canonical_json(&Value::Object(obj)).unwrap()
    }

    /// A record that carries attribution names its principals strictly: a free-form or
    /// half-present attribution is refused when written and when verified, even with a
    /// correct hash.
    #[test]
    fn i1_malformed_attribution_is_refused_on_write_and_verify() {
        let mut ev = AuditEvent::by("decision", "s", &Attribution::owner_cli());
        ev.principal = "owner (terminal)".into();
        let e = build_record_line(&ev, 0, "t", ZERO_HASH).unwrap_err();
        assert!(matches!(e, AuditError::Attribution(_)), "{e}");
        let mut half = AuditEvent::new("decision", "s", "owner");
        half.via = Some("cli".into());
        assert!(matches!(
            build_record_line(&half, 0, "t", ZERO_HASH).unwrap_err(),
            AuditError::Attribution(_)
        ));

        let good = AuditEvent::by("decision", "s", &Attribution::owner_cli());
        let (line, _) = build_record_line(&good, 0, "t", ZERO_HASH).unwrap();
        let obj: Map<String, Value> = serde_json::from_str(&line).unwrap();
        for (field, bad) in [
            ("principal", json!("Owner")),
            ("on_behalf_of", json!("agent:")),
            ("via", json!("Command Line")),
            ("on_behalf_of", json!(7)),
        ] {
            let mut o = obj.clone();
            o.insert(field.into(), bad.clone());
            let why = check_record_line(rehashed(o).as_bytes()).unwrap_err();
            assert!(why.contains(field), "{field}={bad}: {why}");
        }
        let mut o = obj.clone();
        o.remove("via");
        let why = check_record_line(rehashed(o).as_bytes()).unwrap_err();
        assert!(why.contains("fields are"), "{why}");
    }
}
