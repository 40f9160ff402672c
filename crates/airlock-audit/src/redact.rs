//! Secret redaction for audit events (invariant I10): every occurrence of a registered
//! secret value in any string of an event, object keys included, becomes
//! `[REDACTED:<name>]` before the record is hashed and written.

use aho_corasick::{AhoCorasick, MatchKind};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Map, Value};

use crate::{AuditError, AuditEvent};

/// Secret values by name. Its `Debug` lists names only; values are never printed.
///
/// ```
/// use airlock_audit::Redactor;
/// let mut r = Redactor::new();
/// r.add("GITHUB_TOKEN", "ghp_abc123".into()).unwrap();
/// assert_eq!(r.redact_str("token=ghp_abc123"), "token=[REDACTED:GITHUB_TOKEN]");
/// ```
#[derive(Default)]
pub struct Redactor {
    /// How many secrets are registered (each may bring several forms).
    secrets: usize,
    /// The secret's name for each pattern in `values`.
    names: Vec<String>,
    /// Every form of every secret looked for: the value, then its encodings.
    values: Vec<SecretString>,
    /// Matches every value at once; leftmost-longest, so a secret that contains another
    /// is redacted whole.
    matcher: Option<AhoCorasick>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

impl Redactor {
    /// A redactor with no secrets.
    pub fn new() -> Redactor {
        Redactor::default()
    }

    /// Register secret `name` with `value`. An empty value is refused.
    pub fn add(&mut self, name: impl Into<String>, value: SecretString) -> Result<(), AuditError> {
        self.add_with_forms(name, value, Vec::new())
    }

    /// Register secret `name` with `value` and other forms the same value takes in text
    /// (its base64, hex or percent encodings, as the caller's encoder produces them), each
    /// redacted as `[REDACTED:<name>]` too. An empty value is refused; empty forms are
    /// skipped.
    ///
    /// ```
    /// use airlock_audit::Redactor;
    /// let mut r = Redactor::new();
    /// r.add_with_forms("T", "s3cr3t-value".into(), vec!["73336372337420".into()]).unwrap();
    /// assert_eq!(r.redact_str("hex=73336372337420"), "hex=[REDACTED:T]");
    /// assert_eq!(r.len(), 1);
    /// ```
    pub fn add_with_forms(
        &mut self,
        name: impl Into<String>,
        value: SecretString,
        forms: Vec<SecretString>,
    ) -> Result<(), AuditError> {
        let name = name.into();
        if value.expose_secret().is_empty() {
            return Err(AuditError::EmptySecret { name });
        }
        self.secrets += 1;
        for form in std::iter::once(value).chain(forms) {
            let text = form.expose_secret();
            if text.is_empty() || self.values.iter().any(|v| v.expose_secret() == text) {
                continue;
            }
            self.names.push(name.clone());
            self.values.push(form);
        }
        let matcher = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(self.values.iter().map(|v| v.expose_secret()))
            .map_err(|e| AuditError::Redactor(e.to_string()))?;
        self.matcher = Some(matcher);
        Ok(())
    }

    /// Number of registered secrets.
    pub fn len(&self) -> usize {
        self.secrets
    }

    /// Whether no secret is registered.
    pub fn is_empty(&self) -> bool {
        self.secrets == 0
    }

    /// `s` with every secret value replaced by `[REDACTED:<name>]`.
    pub fn redact_str(&self, s: &str) -> String {
        let Some(matcher) = &self.matcher else {
            return s.to_string();
        };
        let replacements: Vec<String> = self
            .names
            .iter()
            .map(|n| format!("[REDACTED:{n}]"))
            .collect();
        matcher.replace_all(s, &replacements)
    }

    /// `value` with every string (and object key) redacted, recursively.
    pub fn redact_value(&self, value: &Value) -> Value {
        match value {
            Value::String(s) => Value::String(self.redact_str(s)),
            Value::Array(items) => {
                Value::Array(items.iter().map(|v| self.redact_value(v)).collect())
            }
            Value::Object(obj) => {
                let mut out = Map::new();
                for (k, v) in obj {
                    out.insert(self.redact_str(k), self.redact_value(v));
                }
                Value::Object(out)
            }
            other => other.clone(),
        }
    }

    /// `ev` with every string field and every string inside its JSON redacted.
    pub fn redact_event(&self, ev: AuditEvent) -> AuditEvent {
        if self.is_empty() {
            return ev;
        }
        let strings = |v: Vec<String>| v.iter().map(|s| self.redact_str(s)).collect();
        AuditEvent {
            session: self.redact_str(&ev.session),
            principal: self.redact_str(&ev.principal),
            // Strict-form names (see `airlock_core::Principal`), not free text: redacting
            // them could only break the form the log checks.
            on_behalf_of: ev.on_behalf_of,
            via: ev.via,
            kind: self.redact_str(&ev.kind),
            action: self.redact_value(&ev.action),
            action_hash: self.redact_str(&ev.action_hash),
            facts: self.redact_value(&ev.facts),
            decision: ev.decision,
            policies: strings(ev.policies),
            reasons: strings(ev.reasons),
            detail: self.redact_value(&ev.detail),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn longest_secret_wins_and_keys_are_redacted() {
        let mut r = Redactor::new();
        r.add("SHORT", "abc".into()).unwrap();
        r.add("LONG", "abcdef".into()).unwrap();
        assert_eq!(
            r.redact_str("xabcdefx abc"),
            "x[REDACTED:LONG]x [REDACTED:SHORT]"
        );
        let v = r.redact_value(&json!({"abc": ["1abc2", {"k": "abcdef"}], "n": 5}));
        assert_eq!(
            v,
            json!({"[REDACTED:SHORT]": ["1[REDACTED:SHORT]2", {"k": "[REDACTED:LONG]"}], "n": 5})
        );
        assert!(!format!("{r:?}").contains("abc"));
        assert!(matches!(
            r.add("EMPTY", "".into()),
            Err(AuditError::EmptySecret { .. })
        ));
    }
}
