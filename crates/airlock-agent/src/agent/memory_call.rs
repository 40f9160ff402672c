//! One memory tool call in the loop: Gate (which audits) → write, held change, or read →
//! result as a data block.
//!
//! A `memory.write` the Gate asks about does not wait in the approvals queue: it becomes
//! a held change in the memory store, which the owner reviews with `airlock memory
//! review`, and the model is told so at once. What a read returns taints the session only
//! when it holds content written by a tainted session that no operator vouched for.

use serde_json::json;

use airlock_audit::AuditEvent;
use airlock_core::gate::Verdict;
use airlock_core::{DecisionKind, IntoAction};
use airlock_store::{StoreError, TranscriptEvent, WriteProvenance};

use crate::provider::{Message, ToolCall};

use super::executors::ToolOutput;
use super::memory_context::{data_block, pinned_block};
use super::memory_exec::{MemoryReadResult, SessionMemory};
use super::memory_tools::{forget_call, MemoryPlan};
use super::outcome::{AgentError, Outcome};
use super::run::{Agent, RunState};

/// How a memory call ended, before it is recorded.
struct Finished {
    decision: Option<DecisionKind>,
    output: ToolOutput,
    executed: bool,
    untrusted: bool,
}

impl Finished {
    fn refused(decision: Option<DecisionKind>, text: String) -> Finished {
        Finished {
            decision,
            output: ToolOutput::error(text),
            executed: false,
            untrusted: false,
        }
    }
}

impl Agent<'_> {
    /// Show the namespace's pinned memory to the model for this turn: one data block at
    /// the top of the conversation (in the first user message, never the system prompt).
    /// It is not stored in the transcript, so each turn shows the memory as it is then.
    /// A pinned record written by a tainted session without review taints the session.
    pub(crate) fn load_pinned_memory(&mut self, run: &mut RunState) -> Result<(), AgentError> {
        let Some(memory) = self.executors.memory() else {
            return Ok(());
        };
        let listing = match memory.pinned() {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("pinned memory could not be loaded: {e}");
                return Ok(());
            }
        };
        if !listing.corrupt.is_empty() {
            self.record(
                AuditEvent::by("memory_quarantined", &run.session.id, &run.session.attribution()?)
                    .with_detail(json!({
                        "rows": listing.corrupt.iter().map(|c| format!("{}:{}", c.table, c.row)).collect::<Vec<_>>(),
                    })),
            )?;
        }
        let Some(block) = pinned_block(&listing.items) else {
            return Ok(());
        };
        let block = self.redact(&block);
        if listing.items.iter().any(|e| e.untrusted()) {
            run.session.observe_untrusted("memory:pinned", &block);
        }
        match run.messages.first_mut() {
            Some(Message::User { text }) => *text = format!("{block}\n\n{text}"),
            _ => run.messages.insert(0, Message::User { text: block }),
        }
        Ok(())
    }

    /// Handle a planned memory call. `Some(outcome)` ends the turn.
    pub(crate) fn memory_call(
        &mut self,
        run: &mut RunState,
        call: &ToolCall,
        plan: MemoryPlan,
    ) -> Result<Option<Outcome>, AgentError> {
        let Some(memory) = self.executors.memory() else {
            return self.finish(
                run,
                call,
                None,
                None,
                ToolOutput::error("memory is not available on this host"),
                false,
            );
        };
        let done = match self.memory_step(run, call, memory, plan)? {
            Ok(f) => f,
            Err(stop) => return Ok(Some(stop)),
        };
        self.finish_as(
            run,
            call,
            done.decision,
            None,
            done.output,
            done.executed,
            done.untrusted,
        )
    }

    fn memory_step(
        &mut self,
        run: &mut RunState,
        call: &ToolCall,
        memory: SessionMemory<'_>,
        plan: MemoryPlan,
    ) -> Result<Result<Finished, Outcome>, AgentError> {
        let provenance = WriteProvenance {
            session_id: run.session.id.clone(),
            principal: run.session.principal.clone(),
            tainted: run.session.taint.is_tainted(),
            tool_call_id: call.id.clone(),
        };
        let write = match plan {
            MemoryPlan::Save(w) => w,
            MemoryPlan::Forget { id } => match memory.locate(&id) {
                Ok(entry) => forget_call(&id, entry.tier),
                Err(e) => return Ok(Ok(Finished::refused(None, store_error(&e)))),
            },
            MemoryPlan::Read(r) => {
                let verdict = self
                    .gate
                    .current()
                    .decide(&run.session, r, &mut *self.audit_log());
                let auth = match verdict {
                    Verdict::Allow(t) => t,
                    Verdict::Deny(d) if d.unrecorded => {
                        return Err(AgentError::Unrecorded(d.reasons.join("\n")))
                    }
                    Verdict::Deny(d) => return self.refused(run, call, d.policies, d.reasons),
                    // No shipped policy asks about a read; an operator's that does is
                    // answered with a refusal rather than a wait.
                    Verdict::Ask(t) => return self.refused(run, call, t.policies, t.reasons),
                };
                if let Some(k) =
                    self.record_decision(run, call, DecisionKind::Allow, vec![], vec![])?
                {
                    return Ok(Err(k));
                }
                return Ok(Ok(match memory.read(auth) {
                    Ok(result) => read_output(result),
                    Err(e) => Finished {
                        decision: Some(DecisionKind::Allow),
                        output: ToolOutput::error(store_error(&e)),
                        executed: true,
                        untrusted: false,
                    },
                }));
            }
        };
        let verdict = self
            .gate
            .current()
            .decide(&run.session, write, &mut *self.audit_log());
        match verdict {
            Verdict::Allow(auth) => {
                if let Some(k) =
                    self.record_decision(run, call, DecisionKind::Allow, vec![], vec![])?
                {
                    return Ok(Err(k));
                }
                let output = match memory.write(auth, &provenance) {
                    Ok(v) => ToolOutput::ok(format!(
                        "{} memory record {} version {}{}",
                        if v.record.is_some() {
                            "saved"
                        } else {
                            "forgot"
                        },
                        v.record_id,
                        v.version,
                        if v.untrusted() {
                            " (stored as untrusted: this session has seen untrusted content)"
                        } else {
                            ""
                        }
                    )),
                    Err(e) => ToolOutput::error(store_error(&e)),
                };
                Ok(Ok(Finished {
                    decision: Some(DecisionKind::Allow),
                    output,
                    executed: true,
                    untrusted: false,
                }))
            }
            Verdict::Deny(d) if d.unrecorded => Err(AgentError::Unrecorded(d.reasons.join("\n"))),
            Verdict::Deny(d) => self.refused(run, call, d.policies, d.reasons),
            Verdict::Ask(ticket) => {
                if let Some(k) = self.record_decision(
                    run,
                    call,
                    DecisionKind::Ask,
                    ticket.reasons.clone(),
                    ticket.policies.clone(),
                )? {
                    return Ok(Err(k));
                }
                let held = match memory.hold(&ticket, &provenance) {
                    Ok(c) => c,
                    Err(e) => {
                        return Ok(Ok(Finished::refused(
                            Some(DecisionKind::Ask),
                            format!(
                            "this change needs the owner's review, but it could not be held: {}",
                            store_error(&e)
                        ),
                        )))
                    }
                };
                self.record(
                    AuditEvent::by(
                        "memory_review_requested",
                        &run.session.id,
                        &run.session.attribution()?,
                    )
                    .with_action(
                        serde_json::to_value(ticket.action().to_action()).unwrap_or_default(),
                        &ticket.action_hash,
                    )
                    .with_detail(json!({
                        "change": held.id,
                        "record": held.record_id,
                        "tier": held.tier.as_str(),
                        "namespace": held.namespace.key(),
                        "reasons": held.reasons,
                    })),
                )?;
                Ok(Ok(Finished::refused(
                    Some(DecisionKind::Ask),
                    format!(
                        "not saved yet: this change to {} memory is held as change {} for the owner's review, and takes effect only if approved",
                        held.tier.as_str(),
                        held.id
                    ),
                )))
            }
        }
    }

    fn refused(
        &mut self,
        run: &mut RunState,
        call: &ToolCall,
        policies: Vec<String>,
        reasons: Vec<String>,
    ) -> Result<Result<Finished, Outcome>, AgentError> {
        let text = format!(
            "denied by policy{}: {}",
            if policies.is_empty() {
                String::new()
            } else {
                format!(" ({})", policies.join(", "))
            },
            reasons.join("; ")
        );
        if let Some(k) = self.record_decision(run, call, DecisionKind::Deny, reasons, policies)? {
            return Ok(Err(k));
        }
        Ok(Ok(Finished::refused(Some(DecisionKind::Deny), text)))
    }

    fn record_decision(
        &mut self,
        run: &mut RunState,
        call: &ToolCall,
        decision: DecisionKind,
        reasons: Vec<String>,
        policies: Vec<String>,
    ) -> Result<Option<Outcome>, AgentError> {
        self.commit(
            run,
            &[TranscriptEvent::Decision {
                call_id: call.id.clone(),
                decision,
                reasons,
                policies,
            }],
        )
    }
}

/// A read's records as data blocks; untrusted if any record is.
fn read_output(result: MemoryReadResult) -> Finished {
    let (text, untrusted) = match result {
        MemoryReadResult::Entry(e) => (data_block("memory:recall", &e), e.untrusted()),
        MemoryReadResult::Hits(l) => {
            let mut parts: Vec<String> = l
                .items
                .iter()
                .map(|h| data_block("memory:recall", &h.entry))
                .collect();
            if parts.is_empty() {
                parts.push("no memory records matched".into());
            }
            if !l.corrupt.is_empty() {
                parts.push(format!(
                    "{} matching records could not be read and were quarantined for the operator",
                    l.corrupt.len()
                ));
            }
            (
                parts.join("\n"),
                l.items.iter().any(|h| h.entry.untrusted()),
            )
        }
    };
    Finished {
        decision: Some(DecisionKind::Allow),
        output: ToolOutput::ok(text),
        executed: true,
        untrusted,
    }
}

/// A store error as the model sees it: no row contents, no paths.
fn store_error(e: &StoreError) -> String {
    match e {
        StoreError::CorruptRow(c) => format!(
            "memory record `{}` could not be read and was quarantined for the operator",
            c.row
        ),
        StoreError::NotFound { id, .. } => format!(
            "there is no memory record `{id}` in this session's memory\nhelp: find ids with memory_search"
        ),
        other => other.to_string(),
    }
}
