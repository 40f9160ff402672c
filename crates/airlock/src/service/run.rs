//! `airlock run`'s one implementation: one task, start to finish, without interaction.
//!
//! Embedded (`cmd/run.rs`, no host) it speaks on the process's own streams and opens the
//! audit log for the session. In the host (`host/exec.rs` for `airlock run` through the
//! socket, `web/start.rs` for a task started from the page) it is a task of the host's
//! own process: it appends through the host's one audit writer, speaks on the client's
//! streams, and ends as a killed turn does when its client goes away (the session is not
//! marked killed and can be resumed).
//!
//! The run creates (or, with `session`, resumes) a session in the store, builds the Gate
//! for its workspace and the model from `[provider]` plus the caller's overrides, and runs
//! one turn of the agent loop with the host's executors: shell in the sandbox behind the
//! session's egress proxy, fetch through that proxy, messages to the caller. Approvals go
//! to the queue (`airlock approvals`, the page, the owner's chat); an unanswered one is
//! denied at the timeout.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use serde_json::json;

use airlock_agent::agent::{Outcome, TurnReport};
use airlock_agent::provider::{ProviderConfig, StreamEvent};
use airlock_audit::AuditLog;
use airlock_core::terminal_text::{escape_block, escape_json_text, escape_line};

use crate::agent_host::{AgentHost, HostOptions};
use crate::config::Config;
use crate::home::Home;
use crate::service::caller::Notices;
use crate::service::conversation::{exit_code, CHANNEL};
use crate::service::driven::{Claim, Driven, Driver};
use crate::service::replies::{Replies, Streaming};

/// What to run, as `airlock run`'s options give it.
#[derive(Debug, Clone)]
pub struct RunTask {
    pub session: Option<String>,
    pub approval_timeout: Option<u64>,
    pub profile: Option<String>,
    pub json: bool,
    /// With `json`: the session's id and each piece of the reply as a JSON line first.
    pub stream_events: bool,
    /// Work on this directory (`--workspace`).
    pub workspace: Option<std::path::PathBuf>,
    pub prompt: String,
}

/// Where a run speaks and what it runs with.
pub struct RunPlace {
    /// The reply, the transcript or the JSON report.
    pub out: Notices,
    /// What Airlock says to the person (a recovered commit, a cost warning).
    pub notices: Notices,
    /// The host's one writer; `None` opens the log for this run.
    pub audit: Option<Arc<Mutex<AuditLog>>>,
    /// Set when the caller went away (the host's client): the turn ends.
    pub abandoned: Option<Arc<AtomicBool>>,
    /// Additions to the session's egress proxies (in the host: the client's own).
    pub egress: crate::agent_executors::EgressExtras,
    /// The host's register of driven sessions: the run holds its session there while it
    /// runs, and is refused one that a live chat or another run holds.
    pub driven: Option<Arc<Driven>>,
    /// The host's replies as they come (for the web page): the run's reply goes there.
    pub replies: Option<Arc<Replies>>,
    /// The reply begun for the session named, before the run started (so that its page
    /// does not show the last reply meanwhile); otherwise one is begun in `replies`.
    pub reply: Option<Streaming>,
}

/// Run `task` to its end and give its exit status ([`exit_code`]).
pub fn run(
    home: &Home,
    cfg: Config,
    provider_cfg: &ProviderConfig,
    task: &RunTask,
    place: RunPlace,
) -> anyhow::Result<i32> {
    if task.prompt.trim().is_empty() {
        anyhow::bail!("the prompt is empty\nhelp: airlock run \"<what to do>\"");
    }
    // A session resumed is held before it is opened (opening it may settle its
    // workspace); a new one as soon as it has its id, before anyone can know it.
    let claim = |id: &str| -> anyhow::Result<Option<Claim>> {
        place
            .driven
            .as_ref()
            .map(|d| d.claim(id, Driver::Run))
            .transpose()
    };
    let mut held = match &task.session {
        Some(id) => claim(id)?,
        None => None,
    };
    crate::agent_host::warn_if_cost_is_not_counted(&cfg, &provider_cfg.model, &place.notices);
    let out = place.out;
    let mut host = AgentHost::open(
        home.clone(),
        cfg,
        provider_cfg,
        HostOptions {
            session: task.session.clone(),
            approval_timeout: task.approval_timeout,
            profile: task.profile.clone(),
            channel: CHANNEL.into(),
            messages_to: (!task.json).then(|| out.clone()),
            notices: place.notices,
            workspace: task.workspace.clone(),
            egress: place.egress,
            child: None,
            audit: place.audit,
        },
    )?;
    if let Some(flag) = place.abandoned {
        host = host.abandoned_when(flag);
    }
    let session_id = host.session_id.clone();
    if held.is_none() {
        held = claim(&session_id)?;
    }
    if !task.json {
        out.line(&format!(
            "session {session_id} (workspace {})",
            escape_line(&host.workspace.display().to_string())
        ));
        out.line(&format!("> {}", escape_block(&task.prompt)));
    }
    let streaming = place
        .reply
        .or_else(|| place.replies.map(|r| r.begin(&session_id)));
    if task.stream_events {
        out.line(&json!({ "session": session_id }).to_string());
    }
    let mut on_stream = |event: StreamEvent| {
        let StreamEvent::TextDelta(t) = event else {
            return;
        };
        if let Some(s) = &streaming {
            s.push(&t);
        }
        if task.stream_events {
            // One JSON object a line: its text is escaped by JSON, so no line can end early.
            out.line(&json!({ "delta": t }).to_string());
        } else if !task.json {
            // The model's text may span lines, but never carries a raw control.
            out.write(&escape_block(&t));
        }
    };
    let report = host.run_turn(&task.prompt, Some(&mut on_stream));
    drop(streaming);
    let messages = host.delivered();
    host.close()?;
    drop(held);
    let report = report?;
    if task.json {
        out.line(&escape_json_text(&serde_json::to_string(&report_json(
            &session_id,
            &report,
            &messages,
        ))?));
    } else {
        out.write(&transcript(&report));
    }
    Ok(exit_code(&report.outcome))
}

/// The outcome's name in `--json` output.
pub fn outcome_name(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Completed { .. } => "completed",
        Outcome::BudgetExhausted { .. } => "budget_exhausted",
        Outcome::Killed => "killed",
        Outcome::ProviderFailed(_) => "provider_failed",
        Outcome::Unapproved { .. } => "unapproved",
    }
}

/// The machine-readable form of a run (`--json`).
fn report_json(session: &str, report: &TurnReport, messages: &[String]) -> serde_json::Value {
    let calls: Vec<_> = report
        .tool_calls
        .iter()
        .map(|c| {
            json!({
                "call_id": c.call_id, "tool": c.tool,
                "decision": c.decision.map(|d| d.as_str()),
                "approval_id": c.approval_id, "executed": c.executed,
                "result": c.result, "is_error": c.is_error,
            })
        })
        .collect();
    let mut v = json!({
        "session": session,
        "outcome": outcome_name(&report.outcome),
        "summary": report.outcome.summary(),
        "tool_calls": calls,
        "model_calls": report.model_calls,
        "messages": messages,
        "exit_code": exit_code(&report.outcome),
    });
    if let Outcome::Completed { text } = &report.outcome {
        v["text"] = json!(text);
    }
    v
}

/// The human transcript: each tool call with its decision and result, then the outcome.
pub fn transcript(report: &TurnReport) -> String {
    let mut t = String::from("\n");
    let mut line = |s: String| {
        t.push_str(&s);
        t.push('\n');
    };
    for c in &report.tool_calls {
        let decision = c.decision.map_or("refused before the Gate", |d| d.as_str());
        let ran = if c.executed { "ran" } else { "did not run" };
        line(format!("[{}] {decision}, {ran}", escape_line(&c.tool)));
        if let Some(id) = &c.approval_id {
            line(format!("  approval request: {}", escape_line(id)));
        }
        let marker = if c.is_error { "error" } else { "result" };
        // Split on `\n` only: a CR inside a line of tool output is shown, not obeyed.
        for l in c.result.split('\n').take(20) {
            line(format!("  {marker}: {}", escape_line(l)));
        }
    }
    match &report.outcome {
        Outcome::Completed { .. } => {
            line(format!("completed ({} model calls)", report.model_calls))
        }
        other => line(escape_block(&other.summary())),
    }
    t
}
