//! `airlock exec`, `run` and `chat` through the host: the client side of
//! [`super::exec_wire`].

use super::exec_wire::HostRequest;
use crate::home::Home;

/// Run `req` through the host serving `home`, with this process's descriptors 0, 1 and 2,
/// and wait for the run's end; `None` when no host serves it (the caller runs it embedded).
/// A host that is stopping is waited for, as for any call ([`super::client::through_host_or`]).
pub fn through_host(home: &Home, req: &HostRequest) -> anyhow::Result<Option<i32>> {
    let socket = super::exec::socket_path(home);
    super::client::through_host_or(
        home,
        |host| {
            let stream = std::os::unix::net::UnixStream::connect(&socket).map_err(|cause| {
                super::client::NotConnected::new(host.pid, socket.clone(), cause)
            })?;
            airlock_client::send::exchange(stream, host.pid, req).map(Some)
        },
        || Ok(None),
    )
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
    through_host(home, &HostRequest::Agent(req))
}
