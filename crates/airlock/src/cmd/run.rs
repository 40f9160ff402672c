//! `airlock run "<prompt>"`: one task, start to finish, without interaction. A host
//! serving the state dir runs it as a task of its own process; with none it runs here.
//! Both are [`crate::service::run`].
//!
//! Exit status: [`EXIT_COMPLETED`], [`EXIT_BUDGET_EXHAUSTED`], [`EXIT_KILLED`] (as for a
//! killed `airlock exec`), [`EXIT_PROVIDER_FAILED`], and 1 when the host itself failed.

use airlock_agent::provider::EnvOverrides;

use crate::agent_host::provider_config;
use crate::config;
use crate::home::Home;
use crate::service::caller::Notices;
pub use crate::service::conversation::{
    exit_code, CHANNEL, EXIT_BUDGET_EXHAUSTED, EXIT_COMPLETED, EXIT_KILLED, EXIT_PROVIDER_FAILED,
};
use crate::service::run::RunPlace;

/// `airlock run`'s arguments: the task as the service takes it.
pub use crate::service::run::RunTask as RunArgs;

pub fn run(args: RunArgs) -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    // A host serving this state dir runs the session (the same code, as a task of its
    // own process, under its session limit), with this terminal.
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
    crate::service::run::run(
        &home,
        cfg,
        &provider_cfg,
        &args,
        RunPlace {
            out: Notices::Stdout,
            notices: Notices::Stderr,
            audit: None,
            abandoned: None,
            egress: Default::default(),
            driven: None,
            replies: None,
            reply: None,
        },
    )
}
