//! `airlock exec`, `run` and `chat` through the host: the client side of
//! [`super::exec_wire`].

use super::exec_wire::HostRequest;
use crate::home::Home;

/// Send the request with this process's descriptors 0, 1 and 2, and wait for the run's end.
pub fn run(home: &Home, pid: u32, req: &HostRequest) -> anyhow::Result<i32> {
    let stream = airlock_client::send::connect(&super::exec::socket_path(home), pid)?;
    airlock_client::send::exchange(stream, pid, req)
}

/// What `airlock run` or `airlock chat` was asked, as the host is sent it.
pub struct AgentCall {
    pub chat: bool,
    pub session: Option<String>,
    pub approval_timeout: Option<u64>,
    pub profile: Option<String>,
    pub json: bool,
    /// `--workspace`, as given (made absolute here).
    pub workspace: Option<std::path::PathBuf>,
    pub prompt: Option<String>,
}

/// `airlock run` or `airlock chat` through the host serving `home`, if one does: `Some`
/// with the session's exit status.
/// The request carries the client's working directory and its values of the variables
/// the front ends read ([`super::exec_wire::AGENT_ENV`]); call this before those
/// variables are taken out of the environment.
pub fn agent_through_host(home: &Home, call: AgentCall) -> anyhow::Result<Option<i32>> {
    let Some(host) = super::client::find(home) else {
        return Ok(None);
    };
    let env = super::exec_wire::AGENT_ENV
        .iter()
        .filter_map(|name| Some((name.to_string(), std::env::var(name).ok()?)))
        .collect();
    let req = super::exec_wire::AgentRequest {
        chat: call.chat,
        session: call.session,
        approval_timeout: call.approval_timeout,
        profile: call.profile,
        json: call.json,
        stream_events: false,
        workspace: call
            .workspace
            .as_deref()
            .map(std::path::absolute)
            .transpose()?,
        prompt: call.prompt,
        cwd: std::env::current_dir()?,
        env,
    };
    run(home, host.pid, &HostRequest::Agent(req)).map(Some)
}
