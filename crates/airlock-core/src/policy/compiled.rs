//! A validated policy set kept in Cedar's JSON form, so that a process can load the
//! operator's policies without parsing and validating their text again.
//!
//! Parsing the Cedar text (its parser builds a lexer on first use) and validating it
//! against the schema cost about 1.5 ms of every `airlock exec`; reading the same policies
//! back from their JSON form costs about a quarter of that. The compiled form is keyed by
//! [`sources_key`], a hash of everything it was built from (this build's version, the
//! schema and every source's name and text): a key that does not match is never used,
//! so an edited policy file is always parsed and validated again.
//!
//! The compiled form is as trusted as the policy files themselves: keep it in the
//! operator's config directory, never anywhere a sandbox can write.

use std::collections::BTreeMap;

use cedar_policy::{PolicySet, Schema};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{PolicyEngine, PolicyError, PolicyMeta, PolicySource, SCHEMA_JSON};

/// Format version of [`CompiledPolicy`]; part of the key.
const FORMAT: &str = "airlock-compiled-policy-1";

/// A validated policy set with its metadata, and the key of the sources it came from.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompiledPolicy {
    /// [`sources_key`] of the sources this was compiled from.
    pub key: String,
    /// The policy set in Cedar's JSON form, with Airlock's policy ids.
    policies: serde_json::Value,
    /// Per policy id: its reason, ask text, help and effect.
    meta: BTreeMap<String, PolicyMeta>,
}

/// The key of a compiled policy: SHA-256 over this build's version, the schema and every
/// source's name and text, each length-prefixed so that no two inputs share a key.
pub fn sources_key(sources: &[PolicySource]) -> String {
    let mut h = Sha256::new();
    let mut part = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    part(FORMAT.as_bytes());
    part(env!("CARGO_PKG_VERSION").as_bytes());
    part(SCHEMA_JSON.as_bytes());
    for s in sources {
        part(s.name.as_bytes());
        part(s.text.as_bytes());
    }
    hex::encode(h.finalize())
}

impl PolicyEngine {
    /// Parse and validate `sources` (as [`PolicyEngine::load`]) and also return their
    /// compiled form.
    pub fn compile(
        sources: &[PolicySource],
    ) -> Result<(PolicyEngine, CompiledPolicy), PolicyError> {
        let engine = PolicyEngine::load(sources)?;
        let policies = engine
            .policies
            .clone()
            .to_json()
            .map_err(|e| PolicyError::Parse(format!("policy set to JSON: {e}")))?;
        let compiled = CompiledPolicy {
            key: sources_key(sources),
            policies,
            meta: engine.meta.clone(),
        };
        Ok((engine, compiled))
    }

    /// The engine for `sources` from their compiled form, without parsing or validating
    /// the text again. `None` when `compiled` was not made from exactly these sources (or
    /// by another version), or does not hold together: the caller then compiles.
    pub fn from_compiled(
        sources: &[PolicySource],
        compiled: CompiledPolicy,
    ) -> Option<PolicyEngine> {
        if compiled.key != sources_key(sources) {
            return None;
        }
        let policies = PolicySet::from_json_value(compiled.policies).ok()?;
        // Every policy has its metadata and nothing else is there.
        let ids: Vec<String> = policies.policies().map(|p| p.id().to_string()).collect();
        if ids.len() != compiled.meta.len()
            || ids.iter().any(|id| !compiled.meta.contains_key(id))
            || policies.templates().next().is_some()
        {
            return None;
        }
        let schema = Schema::from_json_str(SCHEMA_JSON).ok()?;
        Some(PolicyEngine::assemble(schema, policies, compiled.meta))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Profile;
    use crate::sink::DecisionKind;
    use serde_json::json;

    const TEXT: &str = r#"
@id("p") @reason("ok") permit (principal, action == Airlock::Action::"memory.read", resource);
@id("q") @ask("ask me") permit (principal, action == Airlock::Action::"memory.write", resource);
@id("r") @reason("blocked") @help("don't") forbid (principal, action == Airlock::Action::"memory.read", resource)
  when { context.memory.key == "secret" };
"#;

    fn sources(text: &str) -> Vec<PolicySource> {
        vec![PolicySource {
            name: "local/t.cedar".into(),
            text: text.into(),
        }]
    }

    /// Through its serialized form, as a later process reads it.
    fn round_trip(c: &CompiledPolicy) -> CompiledPolicy {
        serde_json::from_slice(&serde_json::to_vec(c).unwrap()).unwrap()
    }

    fn ctx(key: &str, kind: &str) -> serde_json::Value {
        json!({"session": {"tainted": false, "principal_role": "owner"},
               "provenance": {"security_args": [], "untraced": [], "contested": []},
               "memory": {"scope": "recall", "key": key, "kind": kind}})
    }

    #[test]
    fn the_compiled_engine_decides_as_the_parsed_one() {
        let srcs = sources(TEXT);
        let (parsed, compiled) = PolicyEngine::compile(&srcs).unwrap();
        let loaded = PolicyEngine::from_compiled(&srcs, round_trip(&compiled))
            .expect("same sources: the compiled form is used");
        for (action, key) in [
            ("memory.read", "k"),
            ("memory.read", "secret"),
            ("memory.write", "k"),
            ("memory.delete", "k"),
        ] {
            let a = parsed.evaluate("s", "owner", action, "m", ctx(key, "note"));
            let b = loaded.evaluate("s", "owner", action, "m", ctx(key, "note"));
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "{action} {key}");
        }
        let forbid = loaded
            .evaluate("s", "owner", "memory.read", "m", ctx("secret", "note"))
            .unwrap();
        assert_eq!(forbid.decision, DecisionKind::Deny);
        assert_eq!(forbid.policies, vec!["r"]);
        assert!(forbid.reasons[0].contains("help: don't"));
    }

    #[test]
    fn builtin_profiles_round_trip() {
        for p in Profile::all() {
            let srcs = crate::policy::builtin_sources(p);
            let (parsed, compiled) = PolicyEngine::compile(&srcs).unwrap();
            let loaded = PolicyEngine::from_compiled(&srcs, round_trip(&compiled))
                .unwrap_or_else(|| panic!("{}: compiled form refused", p.name()));
            let (a, b) = (parsed.summary(vec![]), loaded.summary(vec![]));
            assert_eq!(
                (a.ids, a.permits, a.asks, a.forbids),
                (b.ids, b.permits, b.asks, b.forbids)
            );
        }
    }

    #[test]
    fn any_change_to_the_sources_refuses_the_compiled_form() {
        let srcs = sources(TEXT);
        let (_, compiled) = PolicyEngine::compile(&srcs).unwrap();
        // One byte of text: the forbid no longer applies to "secret".
        let edited = sources(&TEXT.replace("\"secret\"", "\"secreT\""));
        assert!(PolicyEngine::from_compiled(&edited, compiled.clone()).is_none());
        // The same text under another name.
        let mut renamed = sources(TEXT);
        renamed[0].name = "local/u.cedar".into();
        assert!(PolicyEngine::from_compiled(&renamed, compiled.clone()).is_none());
        // One more file.
        let mut more = sources(TEXT);
        more.push(PolicySource {
            name: "local/v.cedar".into(),
            text: String::new(),
        });
        assert!(PolicyEngine::from_compiled(&more, compiled.clone()).is_none());
        // Name and text boundaries are part of the key.
        let a = sources_key(&[PolicySource {
            name: "ab".into(),
            text: "c".into(),
        }]);
        let b = sources_key(&[PolicySource {
            name: "a".into(),
            text: "bc".into(),
        }]);
        assert_ne!(a, b);
    }

    #[test]
    fn a_compiled_form_that_does_not_hold_together_is_refused() {
        let srcs = sources(TEXT);
        let (_, compiled) = PolicyEngine::compile(&srcs).unwrap();
        // Metadata missing for one policy.
        let mut missing = compiled.clone();
        missing.meta.remove("r");
        assert!(PolicyEngine::from_compiled(&srcs, missing).is_none());
        // Policies that are not Cedar JSON.
        let mut garbage = compiled.clone();
        garbage.policies = json!({"staticPolicies": 7});
        assert!(PolicyEngine::from_compiled(&srcs, garbage).is_none());
        // Unknown fields are refused when read.
        let mut value = serde_json::to_value(&compiled).unwrap();
        value["extra"] = json!(1);
        assert!(serde_json::from_value::<CompiledPolicy>(value).is_err());
    }
}
