//! The Gate: the single decision point for every action (DESIGN.md §1).
//!
//! `decide` normalizes the action into facts, evaluates the policy, appends the decision
//! to the audit sink (fsynced), and only then mints an [`Authorized`] token. If the append
//! fails, the action is denied (invariant I1).
//!
//! ```
//! use airlock_core::{gate::{Gate, Session}, facts::GateConfig, policy::{PolicyEngine, Profile}, Action};
//! let gate = Gate::new(PolicyEngine::builtin(Profile::Default).unwrap(), GateConfig::new("/w"));
//! let session = Session::new("s1", "owner");
//! let eval = gate.evaluate(&session, &Action::from_json(r#"{"type":"net.request","method":"GET","url":"https://example.com/"}"#).unwrap());
//! assert_eq!(eval.decision, airlock_core::DecisionKind::Deny);
//! ```

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::action::{Action, IntoAction};
use crate::authorized::Authorized;
use crate::facts::{self, GateConfig};
use crate::policy::PolicyEngine;
use crate::principal::{Attribution, Principal, PrincipalError, Via};
use crate::provenance::TaintState;
use crate::sink::{DecisionKind, DecisionRecord, DecisionSink};

/// One conversation: who it acts for, and its taint state.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Session {
    pub id: String,
    /// Principal the session acts for (`owner`, or another user's id).
    pub principal: String,
    /// `owner` or `user`.
    pub role: String,
    pub taint: TaintState,
    /// The client or channel the session came through (`cli` unless set).
    #[serde(default = "Via::cli")]
    pub via: Via,
    /// Who proposes this session's actions when it is not the session's model: the owner
    /// for `airlock exec`, where the operator typed the command. `None`: the model
    /// (`agent:<session-id>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<Principal>,
}

impl Session {
    /// A fresh, untainted session acting for the owner.
    pub fn new(id: impl Into<String>, principal: impl Into<String>) -> Self {
        Session {
            id: id.into(),
            principal: principal.into(),
            role: "owner".into(),
            taint: TaintState::new(),
            via: Via::cli(),
            actor: None,
        }
    }

    /// Who proposed, under whose authority, through which client: the attribution of the
    /// session's decision records. Refuses a stored principal that does not parse.
    pub fn attribution(&self) -> Result<Attribution, PrincipalError> {
        let principal = match &self.actor {
            Some(p) => p.clone(),
            None => Principal::agent(&self.id)?,
        };
        Ok(Attribution {
            principal,
            on_behalf_of: self.principal.parse()?,
            via: self.via.clone(),
        })
    }

    /// The principal's own message: trusted input.
    pub fn observe_trusted(&mut self, text: &str) {
        self.taint.observe_trusted(text);
    }

    /// A tool result, fetched page, other user's message, or extension description.
    pub fn observe_untrusted(&mut self, source: &str, text: &str) {
        self.taint.observe_untrusted(source, text);
    }

    /// A tool's result, with the arguments of the call that produced it: untrusted. A
    /// source the owner named may vouch for the addresses it lists (`docs/provenance.md`).
    pub fn observe_tool_result(&mut self, source: &str, arguments: &Value, text: &str) {
        self.taint.observe_tool_result(source, arguments, text);
    }

    /// An extension's description of its tools: untrusted, but not a request to act.
    pub fn observe_tool_description(&mut self, source: &str, text: &str) {
        self.taint.observe_tool_description(source, text);
    }
}

/// The Gate's answer about one action, before it is recorded.
#[derive(Debug, Clone)]
pub struct Evaluation {
    pub decision: DecisionKind,
    pub reasons: Vec<String>,
    pub policies: Vec<String>,
    /// Facts the policy saw (see [`facts::ActionFacts::to_json`]).
    pub facts: Value,
    /// `sha256:` hash of the canonical action.
    pub action_hash: String,
    /// The canonical action as JSON.
    pub action_json: Value,
}

/// The outcome of [`Gate::decide`].
#[derive(Debug)]
pub enum Verdict<A: IntoAction> {
    /// Allowed and recorded: the token executors require.
    Allow(Authorized<A>),
    /// A human must approve this exact payload.
    Ask(AskTicket<A>),
    /// Refused; the reasons say by which policy and how an operator could allow it.
    Deny(Denial),
}

/// A held action waiting for approval. Carries the exact payload and its hash.
#[derive(Debug)]
pub struct AskTicket<A: IntoAction> {
    action: A,
    pub action_hash: String,
    pub session: String,
    pub reasons: Vec<String>,
    pub policies: Vec<String>,
    pub facts: Value,
}

impl<A: IntoAction> AskTicket<A> {
    /// The payload an approver is shown. What runs after approval is exactly this.
    pub fn action(&self) -> &A {
        &self.action
    }
}

/// A refusal.
#[derive(Debug, Clone)]
pub struct Denial {
    pub reasons: Vec<String>,
    pub policies: Vec<String>,
    pub facts: Value,
    pub action_hash: String,
    /// The audit log refused the decision record. Nothing more can be recorded either, so
    /// a caller that would go on proposing actions (an agent loop) stops instead of
    /// carrying on with every action denied.
    pub unrecorded: bool,
}

/// A human's approval of one payload.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Approval {
    /// Authenticated principal who approved; only one that [`Principal::may_approve`].
    pub approver: Principal,
    /// The client or channel the approval came through.
    pub via: Via,
    /// Hash of the payload that was shown and approved.
    pub payload_hash: String,
    /// Unix time after which the approval is void.
    pub expires_at: u64,
}

/// Why an approval could not be turned into a token.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    #[error("approval is for payload {approved}, but the held action is {held}\nhelp: approve the exact payload that is shown")]
    HashMismatch { approved: String, held: String },
    #[error("approval by {approver} is not allowed: only the owner may approve (and a channel's admin where the holding policy says @approvers(\"admin\"))\nhelp: approve as the owner")]
    NotOwner { approver: Principal },
    #[error("approval expired")]
    Expired,
    #[error("recording the approval failed, so the action does not run: {0}")]
    Record(String),
}

/// The single decision point.
pub struct Gate {
    // Shared so that a long-running host loads a policy set once and judges each request
    // against its own workspace ([`Gate::with_config`]).
    engine: std::sync::Arc<PolicyEngine>,
    config: GateConfig,
}

impl Gate {
    pub fn new(engine: PolicyEngine, config: GateConfig) -> Gate {
        Gate {
            engine: std::sync::Arc::new(engine),
            config,
        }
    }

    /// The same loaded policy set with another configuration (another workspace, say).
    pub fn with_config(&self, config: GateConfig) -> Gate {
        Gate {
            engine: self.engine.clone(),
            config,
        }
    }

    pub fn config(&self) -> &GateConfig {
        &self.config
    }

    /// Decide without recording. Used by `airlock check` and `replay`; executors must use
    /// [`Gate::decide`]. Never fails: any internal error becomes a denial.
    pub fn evaluate(&self, session: &Session, action: &Action) -> Evaluation {
        let action_json = serde_json::to_value(action).unwrap_or(Value::Null);
        let action_hash = match action.validate().and_then(|_| action.hash()) {
            Ok(h) => h,
            Err(e) => {
                return deny_error(
                    format!("invalid action: {e}"),
                    action_json,
                    String::new(),
                    Value::Null,
                )
            }
        };
        let f = facts::build(action, &session.taint, &session.role, &self.config);
        let facts_json = f.to_json();
        match self.engine.evaluate(
            &session.id,
            &session.role,
            action.kind(),
            &f.resource,
            f.context,
        ) {
            Ok(mut o) => {
                // No rule, shipped or written by an operator, may pass a command whose
                // effects the parser could not see: an allow becomes an ask.
                let unparsed = facts_json["context"]["shell"]["parsed"] == false;
                let unparsed_reason = facts_json["context"]["shell"]["unparsed_reason"]
                    .as_str()
                    .unwrap_or("unknown syntax");
                if o.decision == DecisionKind::Allow && unparsed {
                    o.decision = DecisionKind::Ask;
                    o.reasons = vec![format!(
                        "the command could not be parsed ({unparsed_reason}), so no allow rule applies to it"
                    )];
                } else if unparsed && !o.reasons.iter().any(|r| r.contains("could not be parsed")) {
                    // The operator must learn that the Gate could not read the command,
                    // whichever rule asked or denied. The first reason is prefixed (not
                    // preceded), so reasons stay paired with the rules that gave them.
                    let why = format!("the command could not be parsed ({unparsed_reason})");
                    match o.reasons.first_mut() {
                        Some(first) => *first = format!("{why}; {first}"),
                        None => o.reasons.push(why),
                    }
                }
                // Operator rules decide where requests may go; taint decides whether
                // their content may leave. After untrusted content, a URL part that
                // neither traces to trusted input nor came in a URL the session received
                // holds the request, whatever rule allowed it (I5).
                if o.decision == DecisionKind::Allow && session.taint.is_tainted() {
                    let data_out = string_list(&facts_json["detail"]["data_out"]);
                    if !data_out.is_empty() {
                        o.decision = DecisionKind::Ask;
                        // Header values are checked too; name the part that carries it.
                        let what = if data_out.iter().all(|d| d.starts_with("url")) {
                            "this URL"
                        } else {
                            "this request"
                        };
                        o.reasons = vec![format!(
                            "after untrusted content, {what} would carry data that does not trace to your input: {}",
                            data_out.join(", ")
                        )];
                    }
                }
                if o.decision != DecisionKind::Allow && session.taint.is_tainted() {
                    o.reasons.extend(provenance_reasons(&facts_json));
                }
                // A held commit says which of its files triggered the hold.
                if o.decision != DecisionKind::Allow {
                    o.reasons
                        .extend(string_list(&facts_json["detail"]["triggers"]));
                }
                Evaluation {
                    decision: o.decision,
                    reasons: o.reasons,
                    policies: o.policies,
                    facts: facts_json,
                    action_hash,
                    action_json,
                }
            }
            Err(e) => deny_error(
                format!("policy evaluation failed: {e}"),
                action_json,
                action_hash,
                facts_json,
            ),
        }
    }

    /// Decide, record durably, and only then authorize.
    pub fn decide<A: IntoAction>(
        &self,
        session: &Session,
        action: A,
        sink: &mut dyn DecisionSink,
    ) -> Verdict<A> {
        let eval = self.evaluate(session, &action.to_action());
        let who = match session.attribution() {
            Ok(who) => who,
            Err(e) => {
                return Verdict::Deny(Denial {
                    reasons: vec![format!(
                        "the decision cannot name who proposed it, so the action does not run: {e}"
                    )],
                    policies: vec![],
                    facts: eval.facts,
                    action_hash: eval.action_hash,
                    unrecorded: false,
                })
            }
        };
        let record = DecisionRecord {
            kind: "decision".into(),
            session: session.id.clone(),
            principal: who.principal.to_string(),
            on_behalf_of: who.on_behalf_of.to_string(),
            via: who.via.to_string(),
            action: eval.action_json.clone(),
            action_hash: eval.action_hash.clone(),
            facts: eval.facts.clone(),
            decision: eval.decision,
            reasons: eval.reasons.clone(),
            policies: eval.policies.clone(),
        };
        let receipt = match sink.record(&record) {
            Ok(r) => r,
            Err(e) => {
                return Verdict::Deny(Denial {
                    reasons: vec![format!(
                        "the decision could not be recorded, so the action does not run: {e}\nhelp: check that the audit directory is writable and the disk is not full"
                    )],
                    policies: vec![],
                    facts: eval.facts,
                    action_hash: eval.action_hash,
                    unrecorded: true,
                })
            }
        };
        match eval.decision {
            DecisionKind::Allow => Verdict::Allow(Authorized::mint(
                action,
                eval.action_hash,
                session.id.clone(),
                receipt,
            )),
            DecisionKind::Ask => Verdict::Ask(AskTicket {
                action,
                action_hash: eval.action_hash,
                session: session.id.clone(),
                reasons: eval.reasons,
                policies: eval.policies,
                facts: eval.facts,
            }),
            DecisionKind::Deny => Verdict::Deny(Denial {
                reasons: eval.reasons,
                policies: eval.policies,
                facts: eval.facts,
                action_hash: eval.action_hash,
                unrecorded: false,
            }),
        }
    }

    /// An approval releases a held action; it never overrides a forbid that came while the
    /// action waited (a policy edit, `net revoke`). Every approval path asks this of the
    /// Gate in force when the approval arrives: `Err` says which policy now forbids it.
    pub fn still_permits(&self, session: &Session, action: &Action) -> Result<(), String> {
        let now = self.evaluate(session, action);
        if now.decision == DecisionKind::Deny {
            return Err(format!(
                "the policy now forbids it ({})",
                now.policies.join(", ")
            ));
        }
        Ok(())
    }

    /// Whether `approver` may answer an ask decided by `policies`: the owner always; a
    /// channel's admin only where every `@ask` policy that held it says
    /// `@approvers("admin")`; nobody else.
    pub fn may_approve(&self, approver: &Principal, policies: &[String]) -> bool {
        approver.may_approve()
            || (matches!(approver, Principal::Admin { .. })
                && self.engine.admins_may_approve(policies))
    }

    /// Turn an approved ticket into a token: the approval must name the held payload's
    /// hash, come from the owner (or an admin, where the holding policies let admins
    /// approve), be unexpired at `now` (unix seconds), and be recorded.
    pub fn approve<A: IntoAction>(
        &self,
        ticket: AskTicket<A>,
        approval: &Approval,
        now: u64,
        sink: &mut dyn DecisionSink,
    ) -> Result<Authorized<A>, ApprovalError> {
        if approval.payload_hash != ticket.action_hash {
            return Err(ApprovalError::HashMismatch {
                approved: approval.payload_hash.clone(),
                held: ticket.action_hash,
            });
        }
        if !self.may_approve(&approval.approver, &ticket.policies) {
            return Err(ApprovalError::NotOwner {
                approver: approval.approver.clone(),
            });
        }
        if now >= approval.expires_at {
            return Err(ApprovalError::Expired);
        }
        let record = DecisionRecord {
            kind: "approval".into(),
            session: ticket.session.clone(),
            principal: approval.approver.to_string(),
            // An approver acts on their own authority.
            on_behalf_of: approval.approver.to_string(),
            via: approval.via.to_string(),
            action: serde_json::to_value(ticket.action.to_action()).unwrap_or(Value::Null),
            action_hash: ticket.action_hash.clone(),
            facts: json!({"approved_by": approval.approver.to_string(), "via": approval.via.as_str(), "expires_at": approval.expires_at}),
            decision: DecisionKind::Allow,
            reasons: vec![format!("approved by {}", approval.approver)],
            policies: ticket.policies.clone(),
        };
        let receipt = sink
            .record(&record)
            .map_err(|e| ApprovalError::Record(e.to_string()))?;
        Ok(Authorized::mint(
            ticket.action,
            ticket.action_hash,
            ticket.session,
            receipt,
        ))
    }
}

/// Name the arguments that made provenance fail, so the approver and the model see which
/// value did not trace.
fn provenance_reasons(facts: &Value) -> Vec<String> {
    let prov = &facts["context"]["provenance"];
    let list = |k: &str| -> Vec<String> { string_list(&prov[k]) };
    let mut out = Vec::new();
    let untraced = list("untraced");
    if !untraced.is_empty() {
        out.push(format!(
            "not traced to trusted input: {}",
            untraced.join(", ")
        ));
    }
    let contested = list("contested");
    if !contested.is_empty() {
        out.push(format!(
            "named by you but also talked about in untrusted content: {}",
            contested.join(", ")
        ));
    }
    out
}

fn string_list(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn deny_error(reason: String, action_json: Value, action_hash: String, facts: Value) -> Evaluation {
    Evaluation {
        decision: DecisionKind::Deny,
        reasons: vec![reason],
        policies: vec![],
        facts,
        action_hash,
        action_json,
    }
}
