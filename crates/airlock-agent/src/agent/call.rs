//! One tool call: plan → limits → Gate (which audits) → approval if asked → execute →
//! record the result as untrusted content.

use std::time::{Duration, Instant};

use airlock_core::canonical::sha256_hex;
use serde_json::json;

use airlock_audit::AuditEvent;
use airlock_core::gate::Verdict;
use airlock_core::{Authorized, DecisionKind, IntoAction};
use airlock_store::{TranscriptEvent, Usage};

use crate::provider::{Message, ToolArguments, ToolCall};

use super::executors::ToolOutput;
use super::outcome::{AgentError, LimitKind, LimitScope, Outcome, ToolCallReport};

/// Time beyond a call's work and its commit's approval wait for computing, deciding and
/// writing the commit (see [`Agent::with_commit_wait`]).
const COMMIT_MARGIN: Duration = Duration::from_secs(5);
use super::run::{Agent, Guarded, RunState};
use super::tools::{self, PlannedCall};

/// Length of the rate-limit window for `tool_calls_per_minute`.
const RATE_WINDOW: Duration = Duration::from_secs(60);

/// How the Gate (and perhaps an approver) answered for one call.
pub(crate) enum Authorization<A: IntoAction> {
    Granted(Authorized<A>),
    /// Refused: the text the model gets.
    Refused(String),
    /// The turn ends.
    Stop(Outcome),
}

impl Agent<'_> {
    /// Handle one tool call. `Some(outcome)` ends the turn.
    pub(crate) async fn tool_call(
        &mut self,
        run: &mut RunState,
        call: &ToolCall,
    ) -> Result<Option<Outcome>, AgentError> {
        let id = run.session.id.clone();
        if let Some(o) = self.charge(
            &id,
            &Usage {
                tool_calls: 1,
                ..Usage::default()
            },
        )? {
            return Ok(Some(o));
        }
        if let Some(o) = self.rate_limit(run, &call.name) {
            return Ok(Some(o));
        }
        let arguments = call
            .arguments
            .as_json()
            .cloned()
            .unwrap_or_else(|| json!({"invalid": call.arguments.to_wire_string()}));
        if call.name == "wait_agent"
            && super::subagent_tools::is_allowed(self.config.tools.as_deref(), &call.name)
        {
            return self.wait_call(run, call, arguments).await;
        }
        let planned = match tools::plan(call, &run.files, self.config) {
            Ok(p) => p,
            Err(text) => {
                let events = [TranscriptEvent::ToolCall {
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    arguments,
                    action_hash: String::new(),
                }];
                if let Some(k) = self.commit(run, &events)? {
                    return Ok(Some(k));
                }
                return self.finish(run, call, None, None, ToolOutput::error(text), false);
            }
        };
        let action = planned.action();
        let action_hash = match action.hash() {
            Ok(h) => h,
            Err(e) => {
                return self.finish(
                    run,
                    call,
                    None,
                    None,
                    ToolOutput::error(e.to_string()),
                    false,
                )
            }
        };
        let events = [TranscriptEvent::ToolCall {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            arguments,
            action_hash: action_hash.clone(),
        }];
        if let Some(k) = self.commit(run, &events)? {
            return Ok(Some(k));
        }
        if let Some(o) = self.repeat_breaker(run, &action_hash) {
            return Ok(Some(o));
        }

        let timeout = self.config.call_timeout;
        let mut approval_id = None;
        // Decide on the typed payload, so the token an executor receives is for exactly the
        // action the Gate saw. A refusal goes back to the model; a stop ends the turn.
        macro_rules! authorized {
            ($payload:expr) => {
                match self
                    .authorize(run, call, $payload, &planned, &mut approval_id)
                    .await?
                {
                    Authorization::Granted(t) => t,
                    Authorization::Refused(text) => {
                        return self.finish(
                            run,
                            call,
                            Some(DecisionKind::Deny),
                            approval_id,
                            ToolOutput::error(text),
                            false,
                        )
                    }
                    Authorization::Stop(o) => return Ok(Some(o)),
                }
            };
        }
        let file_result = |r: Result<String, super::workspace::FileToolError>| {
            Some(r.map_or_else(|e| ToolOutput::error(e.to_string()), ToolOutput::ok))
        };
        let output = match planned.clone() {
            PlannedCall::Shell(a) => {
                let t = authorized!(a);
                // The executor bounds the command by `timeout` itself; what follows may be a
                // commit held for the owner, which has the approval timeout of its own.
                self.execute(
                    &id,
                    self.executors.shell(t, timeout),
                    self.with_commit_wait(timeout),
                )
                .await?
            }
            PlannedCall::ReadFile(a) => {
                let t = authorized!(a);
                file_result(run.files.read_file(&t))
            }
            PlannedCall::ListDir(a) => {
                let t = authorized!(a);
                file_result(run.files.list_dir(&t))
            }
            PlannedCall::Write {
                action, content, ..
            } => {
                let t = authorized!(action);
                let staged = self.guard(
                    &id,
                    self.executors.write_file(&t, content.as_bytes(), timeout),
                    Some(self.with_commit_wait(timeout)),
                );
                match staged.await? {
                    Guarded::Done(Some(o)) => Some(o),
                    Guarded::Done(None) => {
                        file_result(run.files.write_file(&t, content.as_bytes()))
                    }
                    Guarded::TimedOut => Some(ToolOutput::error(format!(
                        "the write was not committed within the {}s call timeout and the {}s approval timeout",
                        timeout.as_secs_f64(),
                        self.config.approval_timeout.as_secs_f64()
                    ))),
                    Guarded::Killed => None,
                }
            }
            PlannedCall::Fetch { action, body } => {
                let t = authorized!(action);
                self.execute(&id, self.executors.fetch(t, body, timeout), timeout)
                    .await?
            }
            PlannedCall::SendMessage(a) => {
                let t = authorized!(a);
                self.execute(&id, self.executors.send_message(t, timeout), timeout)
                    .await?
            }
            PlannedCall::Memory(plan) => return self.memory_call(run, call, plan),
            PlannedCall::SpawnAgent(a) => {
                let t = authorized!(a);
                // What comes back is the host's own word (the child's id, or why it could
                // not start), not outside content: it does not taint. The child's answer
                // does, through `wait_agent`.
                return match self
                    .execute(&id, self.executors.spawn_agent(t), timeout)
                    .await?
                {
                    Some(o) => {
                        let ran = o.ran;
                        self.finish_as(
                            run,
                            call,
                            Some(DecisionKind::Allow),
                            approval_id,
                            o,
                            ran,
                            false,
                        )
                    }
                    None => Ok(Some(Outcome::Killed)),
                };
            }
            PlannedCall::ScheduleTask(a) => {
                let t = authorized!(a);
                self.execute(&id, self.executors.schedule_task(t), timeout)
                    .await?
            }
        };
        match output {
            Some(o) => {
                let ran = o.ran;
                self.finish(run, call, Some(DecisionKind::Allow), approval_id, o, ran)
            }
            // Killed while running: the stored call has no result, and a resume marks it
            // interrupted.
            None => Ok(Some(Outcome::Killed)),
        }
    }

    /// `wait_agent`: no action for the Gate (the child's start was decided, and everything
    /// it does is decided in its own session); the child's answer comes back as untrusted
    /// content, which taints this session.
    async fn wait_call(
        &mut self,
        run: &mut RunState,
        call: &ToolCall,
        arguments: serde_json::Value,
    ) -> Result<Option<Outcome>, AgentError> {
        let events = [TranscriptEvent::ToolCall {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            arguments: arguments.clone(),
            action_hash: String::new(),
        }];
        if let Some(k) = self.commit(run, &events)? {
            return Ok(Some(k));
        }
        let child = match super::subagent_tools::plan_wait(arguments) {
            Ok(c) => c,
            Err(text) => return self.finish(run, call, None, None, ToolOutput::error(text), false),
        };
        let id = run.session.id.clone();
        let timeout = self.config.call_timeout;
        match self
            .execute(&id, self.executors.wait_agent(&child, timeout), timeout)
            .await?
        {
            Some(o) => {
                let ran = o.ran;
                self.finish(run, call, None, None, o, ran)
            }
            None => Ok(Some(Outcome::Killed)),
        }
    }

    /// Send the turn's final `text` to `destination`, the third party the conversation is
    /// with ([`super::AgentConfig::conversation_with`]): a `message.send` decided,
    /// recorded and perhaps held for the owner like any the model proposes, and delivered
    /// only when allowed. The transcript keeps its decision under a call id of its own and
    /// no tool result (the model called no tool). `Some(outcome)` ends the turn otherwise
    /// (a kill, a limit); `Ok(None)` whether it was sent or refused.
    pub(crate) async fn send_reply(
        &mut self,
        run: &mut RunState,
        destination: &str,
        text: &str,
    ) -> Result<Option<Outcome>, AgentError> {
        let action = airlock_core::action::MessageSendAction {
            channel: self.config.channel.clone(),
            destination: destination.to_string(),
            text: text.to_string(),
            attachment: None,
        };
        let arguments = json!({"destination": destination, "text": text});
        let call = ToolCall {
            id: format!("reply-{}", airlock_store::Timestamp::now().as_unix_ms()),
            name: "send_message".into(),
            arguments: crate::provider::ToolArguments::Json {
                value: arguments.clone(),
            },
        };
        let action_hash = match action.to_action().hash() {
            Ok(h) => h,
            Err(e) => return Err(AgentError::Unrecorded(e.to_string())),
        };
        let events = [TranscriptEvent::ToolCall {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            arguments,
            action_hash,
        }];
        if let Some(k) = self.commit(run, &events)? {
            return Ok(Some(k));
        }
        let planned = PlannedCall::SendMessage(action.clone());
        let mut approval_id = None;
        match self
            .authorize(run, &call, action, &planned, &mut approval_id)
            .await?
        {
            Authorization::Granted(t) => {
                let id = run.session.id.clone();
                let timeout = self.config.call_timeout;
                match self
                    .execute(&id, self.executors.send_message(t, timeout), timeout)
                    .await?
                {
                    Some(_) => Ok(None),
                    None => Ok(Some(Outcome::Killed)),
                }
            }
            Authorization::Refused(_) => Ok(None),
            Authorization::Stop(o) => Ok(Some(o)),
        }
    }

    /// The limit for a call whose change set may be held for the owner after the work
    /// itself (a shell command, a file write): the call's own timeout, which the executor
    /// applies to the work, plus the approval timeout the held commit waits under, plus a
    /// little for computing and writing the commit. Without the approval's share, an
    /// owner who answers within the time the request shows would find the call stopped.
    fn with_commit_wait(&self, timeout: Duration) -> Duration {
        timeout + self.config.approval_timeout + COMMIT_MARGIN
    }

    /// Run an executor future under the call timeout, watching for a kill. `None`: killed.
    async fn execute(
        &self,
        id: &str,
        fut: impl std::future::Future<Output = ToolOutput>,
        timeout: Duration,
    ) -> Result<Option<ToolOutput>, AgentError> {
        Ok(match self.guard(id, fut, Some(timeout)).await? {
            Guarded::Done(o) => Some(o),
            Guarded::TimedOut => Some(ToolOutput::error(format!(
                "the call ran past its {}s timeout and was stopped\nhelp: the operator can raise `call_timeout_secs` in airlock.toml",
                timeout.as_secs_f64()
            ))),
            Guarded::Killed => None,
        })
    }

    /// Ask the Gate; on `ask`, wait for a human. Records the decision in the transcript.
    async fn authorize<A: IntoAction>(
        &mut self,
        run: &mut RunState,
        call: &ToolCall,
        payload: A,
        planned: &PlannedCall,
        approval_id: &mut Option<String>,
    ) -> Result<Authorization<A>, AgentError> {
        let verdict = self
            .gate
            .current()
            .decide(&run.session, payload, &mut *self.audit_log());
        let (decision, reasons, policies, result) = match verdict {
            Verdict::Allow(t) => (
                DecisionKind::Allow,
                vec![],
                vec![],
                Authorization::Granted(t),
            ),
            Verdict::Deny(d) if d.unrecorded => {
                return Err(AgentError::Unrecorded(d.reasons.join("\n")))
            }
            Verdict::Deny(d) => {
                let text = format!(
                    "denied by policy{}: {}",
                    if d.policies.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", d.policies.join(", "))
                    },
                    d.reasons.join("; ")
                );
                (
                    DecisionKind::Deny,
                    d.reasons,
                    d.policies,
                    Authorization::Refused(text),
                )
            }
            Verdict::Ask(ticket) => {
                let events = [TranscriptEvent::Decision {
                    call_id: call.id.clone(),
                    decision: DecisionKind::Ask,
                    reasons: ticket.reasons.clone(),
                    policies: ticket.policies.clone(),
                }];
                if let Some(k) = self.commit(run, &events)? {
                    return Ok(Authorization::Stop(k));
                }
                let answer = self.await_approval(run, ticket, planned).await?;
                if let Some(id) = &answer.request_id {
                    *approval_id = Some(id.clone());
                }
                match answer.result {
                    Authorization::Stop(o) => return Ok(Authorization::Stop(o)),
                    Authorization::Granted(t) => (
                        DecisionKind::Allow,
                        answer.reasons,
                        vec![],
                        Authorization::Granted(t),
                    ),
                    Authorization::Refused(text) => (
                        DecisionKind::Deny,
                        answer.reasons,
                        vec![],
                        Authorization::Refused(text),
                    ),
                }
            }
        };
        let events = [TranscriptEvent::Decision {
            call_id: call.id.clone(),
            decision,
            reasons,
            policies,
        }];
        if let Some(k) = self.commit(run, &events)? {
            return Ok(Authorization::Stop(k));
        }
        Ok(result)
    }

    /// Record the result, feed it to the model, and mark the session's taint.
    pub(crate) fn finish(
        &mut self,
        run: &mut RunState,
        call: &ToolCall,
        decision: Option<DecisionKind>,
        approval_id: Option<String>,
        output: ToolOutput,
        executed: bool,
    ) -> Result<Option<Outcome>, AgentError> {
        // What an action returns comes from outside: it taints the session. Refusals and
        // argument errors are the host's own words.
        self.finish_as(run, call, decision, approval_id, output, executed, executed)
    }

    /// [`Self::finish`] for a result whose trust the caller knows: memory the session reads
    /// back taints it only if a tainted session wrote it and no operator vouched for it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn finish_as(
        &mut self,
        run: &mut RunState,
        call: &ToolCall,
        decision: Option<DecisionKind>,
        approval_id: Option<String>,
        output: ToolOutput,
        executed: bool,
        untrusted: bool,
    ) -> Result<Option<Outcome>, AgentError> {
        // A tool result enters the session here: a stored secret it shows (a `cat` of a
        // file holding one, an echoing server) is replaced before the model, the
        // transcript, the taint tracker or the report sees it.
        let output = ToolOutput {
            text: self.redact(&output.text),
            ..output
        };
        if untrusted {
            let source = format!("tool:{}", call.name);
            match &call.arguments {
                // The call's arguments say which source the result came from; one the
                // owner named may vouch for the addresses it lists.
                ToolArguments::Json { value } => {
                    run.session
                        .observe_tool_result(&source, value, &output.text)
                }
                ToolArguments::Invalid { .. } => {
                    run.session.observe_untrusted(&source, &output.text)
                }
            }
        }
        if executed {
            self.record(
                AuditEvent::by("execution", &run.session.id, &run.session.attribution()?)
                    .with_detail(json!({
                        "call_id": call.id,
                        "tool": call.name,
                        "is_error": output.is_error,
                        "result_bytes": output.text.len(),
                        "result_sha256": sha256_hex(output.text.as_bytes()),
                    })),
            )?;
        }
        let events = [TranscriptEvent::Result {
            call_id: call.id.clone(),
            text: output.text.clone(),
            untrusted,
        }];
        if let Some(k) = self.commit(run, &events)? {
            return Ok(Some(k));
        }
        run.messages.push(Message::ToolResult {
            call_id: call.id.clone(),
            text: output.text.clone(),
            is_error: output.is_error || !executed,
        });
        run.report.push(ToolCallReport {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            decision,
            approval_id,
            executed,
            result: output.text,
            is_error: output.is_error || !executed,
        });
        Ok(None)
    }

    fn rate_limit(&self, run: &mut RunState, tool: &str) -> Option<Outcome> {
        let limit = self.config.tool_calls_per_minute?;
        let now = Instant::now();
        let times = run.tool_times.entry(tool.to_string()).or_default();
        while times
            .front()
            .is_some_and(|t| now.duration_since(*t) >= RATE_WINDOW)
        {
            times.pop_front();
        }
        if times.len() as u64 >= u64::from(limit) {
            return Some(Outcome::BudgetExhausted {
                which: LimitKind::ToolRate {
                    tool: tool.to_string(),
                },
                scope: LimitScope::Run,
                limit: u64::from(limit),
                used: times.len() as u64,
                help: format!(
                    "`{tool}` was called {} times within a minute (limit {limit}); the operator can raise `tool_calls_per_minute` under `[agent]` in airlock.toml",
                    times.len()
                ),
            });
        }
        times.push_back(now);
        None
    }

    fn repeat_breaker(&self, run: &mut RunState, action_hash: &str) -> Option<Outcome> {
        if run.last_action.as_deref() == Some(action_hash) {
            run.repeat_count += 1;
        } else {
            run.last_action = Some(action_hash.to_string());
            run.repeat_count = 1;
        }
        let limit = self.config.max_identical_actions;
        if limit > 0 && run.repeat_count >= limit {
            return Some(Outcome::BudgetExhausted {
                which: LimitKind::RepeatedAction {
                    action_hash: action_hash.to_string(),
                },
                scope: LimitScope::Run,
                limit: u64::from(limit),
                used: u64::from(run.repeat_count),
                help: format!(
                    "the model proposed the same action {} times in a row, which looks like a loop; the operator can raise `max_identical_actions` under `[agent]` in airlock.toml",
                    run.repeat_count
                ),
            });
        }
        None
    }
}
