//! `airlock chat [--session ID]`: an interactive conversation at the terminal.
//!
//! Each line the operator types is one turn of the agent loop, with the same wiring as
//! `airlock run` ([`crate::agent_host`]). The model's text streams as it arrives, each tool
//! call is shown with the Gate's decision, and an *ask* is answered inline (`y`, `n`, or
//! `d` for the exact payload) while the loop waits for it. `/quit` (or end of input)
//! leaves; the session stays in the store and `--session` resumes it.

use std::io::Write;

use airlock_agent::agent::{Outcome, TurnReport};
use airlock_agent::provider::{EnvOverrides, StreamEvent};

use airlock_core::terminal_text::{escape_block, escape_line};

use crate::agent_host::{provider_config, AgentHost, HostOptions};
use crate::cmd::run::{exit_code, CHANNEL, EXIT_KILLED};
use crate::config;
use crate::home::Home;
use crate::inline_approvals::{InlineApprovals, StdinLines, TerminalApprover};

/// `airlock chat`'s arguments.
pub struct ChatArgs {
    pub session: Option<String>,
    pub approval_timeout: Option<u64>,
    pub profile: Option<String>,
    /// Work on this directory (`--workspace`).
    pub workspace: Option<std::path::PathBuf>,
}

const HELP: &str = "type a message and press Enter; /quit leaves (the session is kept)";

pub fn run(args: ChatArgs) -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    // A host serving this state dir runs the conversation (the same code, in a child of
    // its own, under its session limit), with this terminal.
    let via_host = crate::host::exec_client::agent_through_host(
        &home,
        crate::host::exec_client::AgentCall {
            chat: true,
            session: args.session.clone(),
            approval_timeout: args.approval_timeout,
            profile: args.profile.clone(),
            json: false,
            workspace: args.workspace.clone(),
            prompt: None,
        },
    )?;
    if let Some(code) = via_host {
        return Ok(code);
    }
    // Read once, before any thread starts; the key leaves the environment here.
    let env = EnvOverrides::take_from_process();
    let cfg = config::load(&home.config_file())?;
    let provider_cfg = provider_config(&home, &cfg, env)?;
    let resuming = args.session.is_some();
    let mut host = AgentHost::open(
        home.clone(),
        cfg,
        &provider_cfg,
        HostOptions {
            session: args.session,
            approval_timeout: args.approval_timeout,
            profile: args.profile,
            channel: CHANNEL.into(),
            print_messages: true,
            workspace: args.workspace.clone(),
            egress: Default::default(),
        },
    )?;
    let session_id = host.session_id.clone();
    crate::out!(
        "{} session {session_id} with model {} (workspace {})",
        if resuming { "resumed" } else { "new" },
        escape_line(&provider_cfg.model),
        host.workspace.display()
    );
    crate::out!("{HELP}");
    let lines = StdinLines::start();
    let mut code = 0;
    loop {
        print!("you> ");
        std::io::stdout().flush()?;
        let Some(line) = lines.next_line() else {
            break;
        };
        let text = line.trim();
        match text {
            "" => continue,
            "/quit" | "/exit" | "/q" => break,
            "/help" => {
                crate::out!("{HELP}");
                continue;
            }
            _ => {}
        }
        let approvals = InlineApprovals::start(
            &home,
            &session_id,
            host.shared_audit(),
            Box::new(TerminalApprover {
                lines: lines.clone(),
            }),
        )?;
        let mut started_text = false;
        let mut on_stream = |event: StreamEvent| {
            let mut out = std::io::stdout().lock();
            match event {
                StreamEvent::TextDelta(t) => {
                    if !started_text {
                        let _ = out.write_all(b"model> ");
                        started_text = true;
                    }
                    // The model's text may span lines, but never carries a raw control.
                    let _ = out.write_all(escape_block(&t).as_bytes());
                }
                StreamEvent::ToolCallStarted { name, .. } => {
                    if started_text {
                        let _ = out.write_all(b"\n");
                        started_text = false;
                    }
                    let _ = writeln!(out, "model> calls {}", escape_line(&name));
                }
            }
            let _ = out.flush();
        };
        let report = host.run_turn(text, Some(&mut on_stream));
        approvals.stop();
        if started_text {
            crate::out!("");
        }
        let report = report?;
        print_calls(&report)?;
        match &report.outcome {
            Outcome::Completed { .. } => {}
            Outcome::Killed => {
                crate::out!("{}", escape_block(&report.outcome.summary()));
                code = EXIT_KILLED;
                break;
            }
            other => {
                crate::out!("{}", escape_block(&other.summary()));
                code = exit_code(other);
            }
        }
    }
    host.close()?;
    crate::out!(
        "session {session_id} kept; continue it with `airlock chat --session {session_id}`"
    );
    Ok(code)
}

/// Each tool call of the turn with the Gate's decision and the first line of its result.
fn print_calls(report: &TurnReport) -> anyhow::Result<()> {
    for c in &report.tool_calls {
        let decision = c.decision.map_or("refused before the Gate", |d| d.as_str());
        let ran = if c.executed { "ran" } else { "did not run" };
        let first = c.result.split('\n').next().unwrap_or("");
        crate::out!(
            "  [{}] {decision}, {ran}{}: {}",
            escape_line(&c.tool),
            if c.is_error { " (error)" } else { "" },
            escape_line(first)
        );
        if let Some(id) = &c.approval_id {
            crate::out!("      held for approval {}", escape_line(id));
        }
    }
    Ok(())
}
