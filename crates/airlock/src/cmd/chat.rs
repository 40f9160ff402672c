//! `airlock chat [--session ID]`: an interactive conversation at the terminal.
//!
//! Each line the operator types is one turn of the agent loop, with the same wiring as
//! `airlock run` ([`crate::agent_host`]). The model's text streams as it arrives, each tool
//! call is shown with the Gate's decision, and an *ask* is answered inline (`y`, `n`, or
//! `d` for the exact payload) while the loop waits for it ([`crate::service::conversation`]).
//! `/quit` (or end of input) leaves; the session stays in the store and `--session`
//! resumes it. Through a host, leaving detaches: the session goes on in the host (a turn
//! in flight finishes) and `--session` attaches to it again.

use airlock_agent::provider::EnvOverrides;

use crate::agent_host::{provider_config, AgentHost, HostOptions};
use crate::config;
use crate::home::Home;
use crate::inline_approvals::StdinLines;
use crate::service::caller::Notices;
use crate::service::conversation::{
    said, AfterTurn, Conversation, Said, CHANNEL, EXIT_KILLED, HELP,
};

/// `airlock chat`'s arguments.
pub struct ChatArgs {
    pub session: Option<String>,
    pub approval_timeout: Option<u64>,
    pub profile: Option<String>,
    /// Work on this directory (`--workspace`).
    pub workspace: Option<std::path::PathBuf>,
}

pub fn run(args: ChatArgs) -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    // A host serving this state dir holds the conversation (the same code, in its own
    // process, under its session limit), with this terminal attached to it.
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
    crate::agent_host::warn_if_cost_is_not_counted(
        &cfg,
        &provider_cfg.model,
        &crate::service::caller::Notices::Stderr,
    );
    let host = AgentHost::open(
        home.clone(),
        cfg,
        &provider_cfg,
        HostOptions {
            session: args.session,
            approval_timeout: args.approval_timeout,
            profile: args.profile,
            channel: CHANNEL.into(),
            messages_to: Some(crate::service::caller::Notices::Stdout),
            notices: crate::service::caller::Notices::Stderr,
            workspace: args.workspace.clone(),
            egress: Default::default(),
            child: None,
            audit: None,
        },
    )?;
    let session_id = host.session_id.clone();
    let mut conversation = Conversation::new(host, &provider_cfg.model, Notices::Stdout);
    conversation.greet(if resuming { "resumed" } else { "new" });
    let lines = StdinLines::start();
    let mut code = 0;
    loop {
        Notices::Stdout.write("you> ");
        let Some(line) = lines.next_line() else {
            break;
        };
        match said(&line) {
            Said::Nothing => continue,
            Said::Leave => break,
            Said::Help => crate::out!("{HELP}"),
            Said::Prompt(text) => match conversation.turn(&home, text, lines.clone())? {
                AfterTurn::Goes(c) => code = c,
                AfterTurn::Killed => {
                    code = EXIT_KILLED;
                    break;
                }
            },
        }
    }
    conversation.close()?;
    crate::out!(
        "session {session_id} kept; continue it with `airlock chat --session {session_id}`"
    );
    Ok(code)
}
