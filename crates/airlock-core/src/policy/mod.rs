//! The operator's policy: Cedar policies validated against Airlock's schema.
//!
//! Deny is the default and `forbid` beats `permit` (Cedar's own semantics). A permit
//! annotated `@ask("…")` turns an allow into *ask*: if the only permits that matched carry
//! `@ask`, a human must approve. Every decision names the deciding policies by their
//! `@id` and gives their human reasons.

mod bounds;
mod compiled;
mod errors;
mod profiles;

pub use compiled::{sources_key, CompiledPolicy};
pub use errors::PolicyError;
pub use profiles::{builtin_sources, Profile, SCHEMA_JSON, SCHEMA_SRC};

use cedar_policy::{
    Authorizer, Context, Decision, Entities, EntityUid, PolicyId, PolicySet, Request, Schema,
    ValidationMode, Validator,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::str::FromStr;

use crate::sink::DecisionKind;

/// One policy file: its name (shown in errors) and text.
#[derive(Debug, Clone)]
pub struct PolicySource {
    pub name: String,
    pub text: String,
}

/// What one deciding policy said.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyMeta {
    reason: String,
    ask: Option<String>,
    help: Option<String>,
    forbid: bool,
    /// `@approvers("admin")` on an `@ask` permit: a channel's admins may answer what it
    /// holds, besides the owner (who always may).
    admins_approve: bool,
}

/// The outcome of evaluating the policy for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyOutcome {
    pub decision: DecisionKind,
    /// Human reasons, one per deciding policy.
    pub reasons: Vec<String>,
    /// Ids of the deciding policies.
    pub policies: Vec<String>,
}

/// A loaded, validated policy set.
pub struct PolicyEngine {
    schema: Schema,
    policies: PolicySet,
    meta: BTreeMap<String, PolicyMeta>,
    authorizer: Authorizer,
}

/// Summary for `airlock policy check`.
#[derive(Debug, Clone)]
pub struct PolicySummary {
    pub files: Vec<String>,
    pub permits: usize,
    pub asks: usize,
    pub forbids: usize,
    pub ids: Vec<String>,
}

impl PolicyEngine {
    /// Parse and validate `sources` against the schema. Any error names the file and line.
    pub fn load(sources: &[PolicySource]) -> Result<PolicyEngine, PolicyError> {
        let schema = Schema::from_json_str(SCHEMA_JSON).map_err(|e| {
            PolicyError::Schema(errors::render(&e, "airlock.cedarschema.json", SCHEMA_JSON))
        })?;
        let validator = Validator::new(schema.clone());
        let mut all = PolicySet::new();
        let mut meta = BTreeMap::new();
        for src in sources {
            bounds::check(&src.name, &src.text)?;
            let parsed = PolicySet::from_str(&src.text)
                .map_err(|e| PolicyError::Parse(errors::render(&e, &src.name, &src.text)))?;
            let result = validator.validate(&parsed, ValidationMode::Strict);
            if let Some(err) = result.validation_errors().next() {
                return Err(PolicyError::Invalid(errors::render(
                    err, &src.name, &src.text,
                )));
            }
            for policy in parsed.policies() {
                let line = errors::policy_line(policy, &src.text);
                let id = policy
                    .annotation("id")
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("{}:{line}", src.name));
                if meta.contains_key(&id) {
                    return Err(PolicyError::DuplicateId {
                        id,
                        file: src.name.clone(),
                        line,
                    });
                }
                let forbid = policy.effect() == cedar_policy::Effect::Forbid;
                let ask = policy.annotation("ask").map(str::to_string);
                if forbid && ask.is_some() {
                    return Err(PolicyError::AskOnForbid {
                        id,
                        file: src.name.clone(),
                        line,
                    });
                }
                let admins_approve = match policy.annotation("approvers") {
                    None => false,
                    Some(_) if ask.is_none() => {
                        return Err(PolicyError::ApproversWithoutAsk {
                            id,
                            file: src.name.clone(),
                            line,
                        })
                    }
                    Some(value) => {
                        parse_approvers(value).ok_or_else(|| PolicyError::BadApprovers {
                            id: id.clone(),
                            file: src.name.clone(),
                            line,
                            value: value.to_string(),
                        })?
                    }
                };
                let reason = policy
                    .annotation("reason")
                    .or(ask.as_deref())
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("policy {id}"));
                meta.insert(
                    id.clone(),
                    PolicyMeta {
                        reason,
                        ask,
                        help: policy.annotation("help").map(str::to_string),
                        forbid,
                        admins_approve,
                    },
                );
                all.add(policy.new_id(PolicyId::new(&id)))
                    .map_err(|e| PolicyError::Parse(e.to_string()))?;
            }
        }
        Ok(PolicyEngine::assemble(schema, all, meta))
    }

    fn assemble(
        schema: Schema,
        policies: PolicySet,
        meta: BTreeMap<String, PolicyMeta>,
    ) -> PolicyEngine {
        PolicyEngine {
            schema,
            policies,
            meta,
            authorizer: Authorizer::new(),
        }
    }

    /// Whether a channel's admins may answer an ask decided by `policies` (the ids an ask
    /// names): only when at least one of them is an `@ask` permit and every `@ask` permit
    /// among them says `@approvers("admin")`. Otherwise only the owner may.
    pub fn admins_may_approve(&self, policies: &[String]) -> bool {
        let mut asking = policies
            .iter()
            .filter_map(|id| self.meta.get(id))
            .filter(|m| m.ask.is_some())
            .peekable();
        asking.peek().is_some() && asking.all(|m| m.admins_approve)
    }

    /// Load a built-in profile.
    pub fn builtin(profile: Profile) -> Result<PolicyEngine, PolicyError> {
        Self::load(&builtin_sources(profile))
    }

    pub fn summary(&self, files: Vec<String>) -> PolicySummary {
        let mut s = PolicySummary {
            files,
            permits: 0,
            asks: 0,
            forbids: 0,
            ids: Vec::new(),
        };
        for (id, m) in &self.meta {
            if m.forbid {
                s.forbids += 1;
            } else if m.ask.is_some() {
                s.asks += 1;
            } else {
                s.permits += 1;
            }
            s.ids.push(id.clone());
        }
        s
    }

    /// Evaluate one request. `kind` is the action kind (`exec`, `tool.call`, …),
    /// `context` the facts JSON matching the schema's context type for that action.
    pub fn evaluate(
        &self,
        session_id: &str,
        role: &str,
        kind: &str,
        resource: &str,
        context: Value,
    ) -> Result<PolicyOutcome, PolicyError> {
        let action = uid("Action", kind)?;
        let principal = uid("Session", session_id)?;
        let target = uid("Target", resource)?;
        let entities = Entities::from_json_value(
            json!([
                {"uid": {"type": "Airlock::User", "id": "principal"}, "attrs": {"role": role}, "parents": []},
                {"uid": {"type": "Airlock::Agent", "id": "agent"}, "attrs": {}, "parents": []},
                {"uid": {"type": "Airlock::Session", "id": session_id},
                 "attrs": {"owner": {"__entity": {"type": "Airlock::User", "id": "principal"}},
                           "agent": {"__entity": {"type": "Airlock::Agent", "id": "agent"}}},
                 "parents": [{"type": "Airlock::Agent", "id": "agent"}]},
                {"uid": {"type": "Airlock::Target", "id": resource}, "attrs": {}, "parents": []}
            ]),
            Some(&self.schema),
        )
        .map_err(|e| PolicyError::Request(format!("entities: {e}")))?;
        let context = Context::from_json_value(context, Some((&self.schema, &action)))
            .map_err(|e| PolicyError::Request(format!("context for {kind}: {e}")))?;
        let request = Request::new(principal, action, target, context, Some(&self.schema))
            .map_err(|e| PolicyError::Request(e.to_string()))?;
        let response = self
            .authorizer
            .is_authorized(&request, &self.policies, &entities);
        // Cedar reports its determining policies and errors as hash sets, whose order
        // differs from process to process: sorted, the same request gives the same
        // decision record in every process (the CLI and the host must agree byte for byte).
        let mut errors: Vec<String> = response
            .diagnostics()
            .errors()
            .map(|e| e.to_string())
            .collect();
        errors.sort();
        if let Some(err) = errors.first() {
            // An erroring policy is skipped by Cedar; an operator must hear about it, and
            // the safe reading of a broken forbid is "deny".
            return Ok(PolicyOutcome {
                decision: DecisionKind::Deny,
                reasons: vec![format!("policy evaluation error: {err}")],
                policies: vec![],
            });
        }
        let mut ids: Vec<String> = response
            .diagnostics()
            .reason()
            .map(|p| p.to_string())
            .collect();
        ids.sort();
        Ok(self.outcome(response.decision(), ids, kind))
    }

    fn outcome(&self, decision: Decision, ids: Vec<String>, kind: &str) -> PolicyOutcome {
        let metas: Vec<(&String, &PolicyMeta)> = ids
            .iter()
            .filter_map(|id| self.meta.get_key_value(id))
            .collect();
        match decision {
            Decision::Deny if metas.is_empty() => PolicyOutcome {
                decision: DecisionKind::Deny,
                reasons: vec![format!(
                    "no policy permits this {kind} action (deny by default)\nhelp: {}",
                    default_deny_help(kind)
                )],
                policies: vec![],
            },
            Decision::Deny => PolicyOutcome {
                decision: DecisionKind::Deny,
                reasons: metas
                    .iter()
                    .map(|(_, m)| match &m.help {
                        Some(h) => format!("{}\nhelp: {h}", m.reason),
                        None => m.reason.clone(),
                    })
                    .collect(),
                policies: metas.iter().map(|(id, _)| id.to_string()).collect(),
            },
            Decision::Allow => {
                let allowing: Vec<_> = metas.iter().filter(|(_, m)| m.ask.is_none()).collect();
                if allowing.is_empty() {
                    PolicyOutcome {
                        decision: DecisionKind::Ask,
                        reasons: metas.iter().filter_map(|(_, m)| m.ask.clone()).collect(),
                        policies: metas.iter().map(|(id, _)| id.to_string()).collect(),
                    }
                } else {
                    PolicyOutcome {
                        decision: DecisionKind::Allow,
                        reasons: allowing.iter().map(|(_, m)| m.reason.clone()).collect(),
                        policies: allowing.iter().map(|(id, _)| id.to_string()).collect(),
                    }
                }
            }
        }
    }
}

fn default_deny_help(kind: &str) -> &'static str {
    match kind {
        "net.request" => "allow the host with `airlock net allow <host> [--methods GET] [--path-prefix /p]`",
        "exec" => "add a permit for this command to a policy file in the config dir's policy/local/",
        _ => "add a permit for this action to a policy file in the config dir's policy/local/ and run `airlock policy check`",
    }
}

fn uid(ty: &str, id: &str) -> Result<EntityUid, PolicyError> {
    let type_name = cedar_policy::EntityTypeName::from_str(&format!("Airlock::{ty}"))
        .map_err(|e| PolicyError::Request(e.to_string()))?;
    Ok(EntityUid::from_type_name_and_id(
        type_name,
        cedar_policy::EntityId::new(id),
    ))
}

/// `@approvers`' value: roles separated by commas, each `owner` or `admin`; whether
/// admins are among them. `None` for any other word (or none at all).
fn parse_approvers(value: &str) -> Option<bool> {
    let mut admins = false;
    let mut any = false;
    for role in value.split(',').map(str::trim) {
        match role {
            "owner" => {}
            "admin" => admins = true,
            _ => return None,
        }
        any = true;
    }
    any.then_some(admins)
}

#[cfg(test)]
mod tests;
