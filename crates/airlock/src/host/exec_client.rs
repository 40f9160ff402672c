//! `airlock exec`, `run` and `chat` through the host: the client side of
//! [`super::exec_wire`].

use std::io::{BufRead, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

use super::exec_wire::{ExecAnswer, HostRequest, MAX_REQUEST_BYTES};
use crate::home::Home;

/// Send the request with this process's descriptors 0, 1 and 2, and wait for the run's end.
pub fn run(home: &Home, pid: u32, req: &HostRequest) -> anyhow::Result<i32> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let path = super::exec::socket_path(home);
    let stream = UnixStream::connect(&path).map_err(|e| {
        anyhow::anyhow!(
            "a host (pid {pid}) holds the state dir, but its exec socket {} cannot be reached: {e}\nhelp: check the host's log; stop it to run commands without it",
            path.display()
        )
    })?;
    let body = serde_json::to_vec(req)?;
    anyhow::ensure!(
        body.len() <= MAX_REQUEST_BYTES,
        "the request is too long to send to the host ({} bytes; the most is {MAX_REQUEST_BYTES})",
        body.len()
    );
    let mut msg = (body.len() as u32).to_be_bytes().to_vec();
    msg.extend_from_slice(&body);
    let fds = [0, 1, 2];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let first = sendmsg::<()>(
        stream.as_raw_fd(),
        &[std::io::IoSlice::new(&msg)],
        &cmsg,
        MsgFlags::empty(),
        None,
    )?;
    (&stream).write_all(&msg[first..])?;
    let mut line = String::new();
    std::io::BufReader::new(&stream).read_line(&mut line)?;
    if line.is_empty() {
        anyhow::bail!("the host (pid {pid}) closed the connection before the run ended\nhelp: check the host's log");
    }
    let answer: ExecAnswer = serde_json::from_str(&line).map_err(|e| {
        anyhow::anyhow!("the host's answer is not what this client understands: {e}")
    })?;
    match (answer.exit, answer.error) {
        (Some(code), _) => Ok(code),
        (None, Some(error)) => match answer.help.filter(|h| !h.is_empty()) {
            Some(help) => anyhow::bail!("{error}\nhelp: {help}"),
            None => anyhow::bail!("{error}"),
        },
        (None, None) => anyhow::bail!("the host answered neither a status nor an error"),
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
