//! `airlock exec`, `run` and `chat` through the host: the client side of
//! [`super::exec_wire`].

use super::exec_wire::HostRequest;
use crate::home::Home;
use airlock_client::send::HostStopping;

/// Run `req` through the host serving `home`, with this process's descriptors 0, 1 and 2,
/// and wait for the run's end; `None` when no host serves it (the caller runs it embedded).
///
/// A host that is stopping takes no new request, and says so before it reads any: nothing
/// ran. So, as when its socket is gone between finding and connecting, this waits (as
/// [`super::client::find`] does) until the lock is free, or a host serves again, and sends
/// the request where it then belongs.
pub fn through_host(home: &Home, req: &HostRequest) -> anyhow::Result<Option<i32>> {
    let socket = super::exec::socket_path(home);
    let started = std::time::Instant::now();
    loop {
        let Some(host) = super::client::find(home) else {
            return Ok(None);
        };
        let settling = started.elapsed() < super::client::SETTLE_WAIT;
        let stream = match airlock_client::send::connect(&socket, host.pid) {
            Ok(stream) => stream,
            Err(_) if settling && !socket.exists() => continue,
            Err(e) => return Err(e),
        };
        match airlock_client::send::exchange(stream, host.pid, req) {
            Err(e) if settling && e.downcast_ref::<HostStopping>().is_some() => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other.map(Some),
        }
    }
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
