//! `airlock run "<prompt>"`: one task, start to finish, without interaction.
//!
//! The run creates (or, with `--session`, resumes) a session in the store, builds the Gate
//! for its workspace and the model from `[provider]` plus the environment overrides, and
//! runs one turn of the agent loop with this host's executors: shell in the sandbox behind
//! the run's egress proxy, fetch through that proxy, messages to the terminal. Approvals go
//! to the queue (`airlock approvals`); an unanswered one is denied at the timeout.
//!
//! Exit status: [`EXIT_COMPLETED`], [`EXIT_BUDGET_EXHAUSTED`], [`EXIT_KILLED`] (as for a
//! killed `airlock exec`), [`EXIT_PROVIDER_FAILED`], and 1 when the host itself failed.

use std::io::Write;

use serde_json::json;

use airlock_agent::agent::{Outcome, TurnReport};
use airlock_agent::provider::{EnvOverrides, StreamEvent};

use airlock_core::terminal_text::{escape_block, escape_json_text, escape_line};

use crate::agent_host::{provider_config, AgentHost, HostOptions};
use crate::config;
use crate::home::Home;
pub use crate::service::conversation::{
    exit_code, CHANNEL, EXIT_BUDGET_EXHAUSTED, EXIT_COMPLETED, EXIT_KILLED, EXIT_PROVIDER_FAILED,
};

/// `airlock run`'s arguments.
pub struct RunArgs {
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

pub fn run(args: RunArgs) -> anyhow::Result<i32> {
    if args.prompt.trim().is_empty() {
        anyhow::bail!("the prompt is empty\nhelp: airlock run \"<what to do>\"");
    }
    let home = Home::from_env()?;
    // A host serving this state dir runs the session (the same code, in a child of its
    // own, under its session limit), with this terminal.
    let via_host = crate::host::exec_client::agent_through_host(
        &home,
        crate::host::exec_client::AgentCall {
            chat: false,
            session: args.session.clone(),
            approval_timeout: args.approval_timeout,
            profile: args.profile.clone(),
            json: args.json,
            workspace: args.workspace.clone(),
            prompt: Some(args.prompt.clone()),
        },
    )?;
    if let Some(code) = via_host {
        return Ok(code);
    }
    // Read once, before any thread starts; the key leaves the environment here.
    let env = EnvOverrides::take_from_process();
    let cfg = config::load(&home.config_file())?;
    let provider_cfg = provider_config(&home, &cfg, env)?;
    crate::agent_host::warn_if_cost_is_not_counted(
        &cfg,
        &provider_cfg.model,
        &crate::service::caller::Notices::Stderr,
    );
    let mut host = AgentHost::open(
        home,
        cfg,
        &provider_cfg,
        HostOptions {
            session: args.session.clone(),
            approval_timeout: args.approval_timeout,
            profile: args.profile.clone(),
            channel: CHANNEL.into(),
            messages_to: (!args.json).then_some(crate::service::caller::Notices::Stdout),
            notices: crate::service::caller::Notices::Stderr,
            workspace: args.workspace.clone(),
            egress: Default::default(),
            child: None,
            audit: None,
        },
    )?;
    let session_id = host.session_id.clone();
    if !args.json {
        println!(
            "session {session_id} (workspace {})",
            escape_line(&host.workspace.display().to_string())
        );
        println!("> {}", escape_block(&args.prompt));
    }
    let mut print_stream = |event: StreamEvent| {
        if let StreamEvent::TextDelta(t) = event {
            let mut out = std::io::stdout().lock();
            // The model's text may span lines, but never carries a raw control.
            let _ = out.write_all(escape_block(&t).as_bytes());
            let _ = out.flush();
        }
    };
    // One JSON object a line: its text is escaped by JSON, so no line can end early.
    let mut event_stream = |event: StreamEvent| {
        if let StreamEvent::TextDelta(t) = event {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", serde_json::json!({ "delta": t }));
            let _ = out.flush();
        }
    };
    if args.stream_events {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", serde_json::json!({ "session": session_id }))?;
        out.flush()?;
    }
    let report = host.run_turn(
        &args.prompt,
        if args.stream_events {
            Some(&mut event_stream)
        } else if args.json {
            None
        } else {
            Some(&mut print_stream)
        },
    );
    let messages = host.delivered();
    host.close()?;
    let report = report?;
    if args.json {
        crate::out!(
            "{}",
            escape_json_text(&serde_json::to_string(&report_json(
                &session_id,
                &report,
                &messages
            ))?)
        );
    } else {
        print_transcript(&report)?;
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
pub fn print_transcript(report: &TurnReport) -> anyhow::Result<()> {
    crate::out!("");
    for c in &report.tool_calls {
        let decision = c.decision.map_or("refused before the Gate", |d| d.as_str());
        let ran = if c.executed { "ran" } else { "did not run" };
        crate::out!("[{}] {decision}, {ran}", escape_line(&c.tool));
        if let Some(id) = &c.approval_id {
            crate::out!("  approval request: {}", escape_line(id));
        }
        let marker = if c.is_error { "error" } else { "result" };
        // Split on `\n` only: a CR inside a line of tool output is shown, not obeyed.
        for line in c.result.split('\n').take(20) {
            crate::out!("  {marker}: {}", escape_line(line));
        }
    }
    match &report.outcome {
        Outcome::Completed { .. } => crate::out!("completed ({} model calls)", report.model_calls),
        other => crate::out!("{}", escape_block(&other.summary())),
    }
    Ok(())
}
