//! A conversation with an agent session, as `airlock chat` holds it: each line the person
//! types is one turn of the loop, the model's text streams as it arrives, each tool call is
//! shown with the Gate's decision, and an *ask* is put to the person inline while the loop
//! waits for it.
//!
//! One implementation for both places a chat runs: embedded (`cmd::chat`, this process's
//! terminal) and in the host (`host::sessions`, where the session outlives its clients and
//! speaks to whichever one is attached). The exit statuses of `run` and `chat` live here
//! too, since both entry points give them.

use std::sync::Arc;

use airlock_agent::agent::{Outcome, TurnReport};
use airlock_agent::provider::StreamEvent;
use airlock_core::terminal_text::{escape_block, escape_line};

use crate::agent_host::AgentHost;
use crate::home::Home;
use crate::inline_approvals::{InlineApprovals, Lines, TerminalApprover};
use crate::service::caller::Notices;
pub use crate::service::kill::EXIT_KILLED;

/// The model finished the task.
pub const EXIT_COMPLETED: i32 = 0;
/// A budget or loop limit ended the run; the output names the key that raises it.
pub const EXIT_BUDGET_EXHAUSTED: i32 = 3;
/// The model could not be reached or answered badly; the session keeps what was done.
pub const EXIT_PROVIDER_FAILED: i32 = 4;
/// The turn ended at a held action that was not approved (a scheduled task's
/// `--on-held end`).
pub const EXIT_UNAPPROVED: i32 = 5;

/// The conversation's own channel for `airlock run` and `airlock chat`.
pub const CHANNEL: &str = "terminal";

/// What the person is told they can type.
pub const HELP: &str = "type a message and press Enter; /quit leaves (the session is kept)";

/// The exit status for an outcome.
pub fn exit_code(outcome: &Outcome) -> i32 {
    match outcome {
        Outcome::Completed { .. } => EXIT_COMPLETED,
        Outcome::BudgetExhausted { .. } => EXIT_BUDGET_EXHAUSTED,
        Outcome::Killed => EXIT_KILLED,
        Outcome::ProviderFailed(_) => EXIT_PROVIDER_FAILED,
        Outcome::Unapproved { .. } => EXIT_UNAPPROVED,
    }
}

/// What a line the person typed asks for.
pub enum Said<'a> {
    /// Nothing (an empty line).
    Nothing,
    /// To leave: `/quit`, `/exit`, `/q`.
    Leave,
    Help,
    /// A turn of the loop for this text.
    Prompt(&'a str),
}

pub fn said(line: &str) -> Said<'_> {
    match line.trim() {
        "" => Said::Nothing,
        "/quit" | "/exit" | "/q" => Said::Leave,
        "/help" => Said::Help,
        text => Said::Prompt(text),
    }
}

/// How a turn ended for the conversation.
pub enum AfterTurn {
    /// The conversation goes on; the status the chat exits with so far.
    Goes(i32),
    /// The session was killed: the conversation is over.
    Killed,
}

/// A session with the person it talks to.
pub struct Conversation {
    pub agent: AgentHost,
    pub model: String,
    /// Where the conversation's text goes.
    out: Notices,
}

impl Conversation {
    pub fn new(agent: AgentHost, model: &str, out: Notices) -> Conversation {
        Conversation {
            agent,
            model: model.to_string(),
            out,
        }
    }

    /// The first lines: which session, model and workspace, and what to type.
    pub fn greet(&self, how: &str) {
        self.out.line(&format!(
            "{how} session {} with model {} (workspace {})",
            self.agent.session_id,
            escape_line(&self.model),
            self.agent.workspace.display()
        ));
        self.out.line(HELP);
    }

    /// One turn for `text`. An ask of the turn is put to the person on `lines`, and
    /// answered as `airlock approvals` would answer it.
    pub fn turn(
        &mut self,
        home: &Home,
        text: &str,
        lines: Arc<dyn Lines>,
    ) -> anyhow::Result<AfterTurn> {
        let approvals = InlineApprovals::start(
            home,
            &self.agent.session_id,
            self.agent.shared_audit(),
            Box::new(TerminalApprover {
                lines,
                out: self.out.clone(),
            }),
        )?;
        let out = self.out.clone();
        let mut started_text = false;
        let mut on_stream = |event: StreamEvent| match event {
            StreamEvent::TextDelta(t) => {
                if !started_text {
                    out.write("model> ");
                    started_text = true;
                }
                // The model's text may span lines, but never carries a raw control.
                out.write(&escape_block(&t));
            }
            StreamEvent::ToolCallStarted { name, .. } => {
                if started_text {
                    out.write("\n");
                    started_text = false;
                }
                out.line(&format!("model> calls {}", escape_line(&name)));
            }
        };
        let report = self.agent.run_turn(text, Some(&mut on_stream));
        approvals.stop();
        if started_text {
            self.out.line("");
        }
        let report = report?;
        print_calls(&self.out, &report);
        Ok(match &report.outcome {
            Outcome::Completed { .. } => AfterTurn::Goes(0),
            Outcome::Killed => {
                self.out.line(&escape_block(&report.outcome.summary()));
                AfterTurn::Killed
            }
            other => {
                self.out.line(&escape_block(&other.summary()));
                AfterTurn::Goes(exit_code(other))
            }
        })
    }

    /// Leave the conversation: the session stays in the store.
    pub fn close(self) -> anyhow::Result<()> {
        self.agent.close()
    }
}

/// Each tool call of the turn with the Gate's decision and the first line of its result.
fn print_calls(out: &Notices, report: &TurnReport) {
    for c in &report.tool_calls {
        let decision = c.decision.map_or("refused before the Gate", |d| d.as_str());
        let ran = if c.executed { "ran" } else { "did not run" };
        let first = c.result.split('\n').next().unwrap_or("");
        out.line(&format!(
            "  [{}] {decision}, {ran}{}: {}",
            escape_line(&c.tool),
            if c.is_error { " (error)" } else { "" },
            escape_line(first)
        ));
        if let Some(id) = &c.approval_id {
            out.line(&format!("      held for approval {}", escape_line(id)));
        }
    }
}
