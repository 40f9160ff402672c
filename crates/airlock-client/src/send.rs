//! The client's side of [`crate::wire`]: send one request with this process's descriptors
//! 0, 1 and 2, and wait for the run's end.

use std::io::{BufRead, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;

use crate::wire::{ExecAnswer, HostRequest, MAX_REQUEST_BYTES};

/// Connect to the exec socket of the host `pid`. Nothing is sent yet, so a caller may still
/// do the work another way when this fails.
pub fn connect(socket: &Path, pid: u32) -> anyhow::Result<UnixStream> {
    UnixStream::connect(socket).map_err(|e| {
        anyhow::anyhow!(
            "a host (pid {pid}) holds the state dir, but its exec socket {} cannot be reached: {e}\nhelp: check the host's log; stop it to run commands without it",
            socket.display()
        )
    })
}

/// The host refused the request because it is stopping, before it read any of it. Nothing
/// ran and nothing was taken from this process's descriptors, so the caller may run the
/// request another way: wait for the host to be gone, then run it embedded.
#[derive(Debug)]
pub struct HostStopping {
    pub pid: u32,
}

impl std::fmt::Display for HostStopping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the host (pid {}) is stopping\nhelp: run the command again once it is back, or without it",
            self.pid
        )
    }
}

impl std::error::Error for HostStopping {}

/// Send `req` on `stream` and wait for the run's exit status, or the error the host gave.
/// A refusal because the host is stopping is a [`HostStopping`] error. Nothing is sent
/// unless the listener is of this process's uid ([`crate::peer`]): otherwise the error is
/// a [`crate::peer::NotOwnHost`].
pub fn exchange(stream: UnixStream, pid: u32, req: &HostRequest) -> anyhow::Result<i32> {
    let socket = stream
        .peer_addr()
        .ok()
        .and_then(|a| a.as_pathname().map(Path::to_path_buf))
        .unwrap_or_else(|| format!("the exec socket of the host (pid {pid})").into());
    crate::peer::check(&stream, &socket)?;
    let body = serde_json::to_vec(req)?;
    anyhow::ensure!(
        body.len() <= MAX_REQUEST_BYTES,
        "the request is too long to send to the host ({} bytes; the most is {MAX_REQUEST_BYTES})",
        body.len()
    );
    // A host that refuses at once (it is stopping, or the caller is not its operator)
    // answers and hangs up without reading: sending then fails, but its answer is still
    // there to read, and says more than the broken pipe does.
    let sent = send_request(&stream, &body);
    let answer = match read_answer(&stream) {
        Ok(Some(answer)) => answer,
        Ok(None) => {
            sent?;
            anyhow::bail!("the host (pid {pid}) closed the connection before the run ended\nhelp: check the host's log");
        }
        Err(e) => {
            sent?;
            return Err(e);
        }
    };
    if answer.stopping {
        return Err(HostStopping { pid }.into());
    }
    match (answer.exit, answer.error) {
        (Some(code), _) => Ok(code),
        (None, Some(error)) => match answer.help.filter(|h| !h.is_empty()) {
            Some(help) => anyhow::bail!("{error}\nhelp: {help}"),
            None => anyhow::bail!("{error}"),
        },
        (None, None) => anyhow::bail!("the host answered neither a status nor an error"),
    }
}

/// The length, then the request, with descriptors 0, 1 and 2 attached to the first bytes.
fn send_request(stream: &UnixStream, body: &[u8]) -> anyhow::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let mut msg = (body.len() as u32).to_be_bytes().to_vec();
    msg.extend_from_slice(body);
    let fds = [0, 1, 2];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let first = sendmsg::<()>(
        stream.as_raw_fd(),
        &[std::io::IoSlice::new(&msg)],
        &cmsg,
        MsgFlags::empty(),
        None,
    )?;
    (&mut &*stream).write_all(&msg[first..])?;
    Ok(())
}

/// The host's one answer line; `None` when it hung up without one.
fn read_answer(stream: &UnixStream) -> anyhow::Result<Option<ExecAnswer>> {
    let mut line = String::new();
    std::io::BufReader::new(stream).read_line(&mut line)?;
    if line.is_empty() {
        return Ok(None);
    }
    serde_json::from_str(&line)
        .map(Some)
        .map_err(|e| anyhow::anyhow!("the host's answer is not what this client understands: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ExecRequest;

    fn request() -> HostRequest {
        HostRequest::Exec(ExecRequest {
            command: "true".into(),
            workspace: None,
            cwd: "/".into(),
            timeout: None,
            profile: None,
            secrets: vec![],
        })
    }

    /// What `exchange` gives against a host that writes `answer` and hangs up before
    /// the request is sent (the send then fails with a broken pipe).
    fn against_a_host_that_says(answer: &[u8]) -> anyhow::Error {
        let (client, host) = UnixStream::pair().unwrap();
        (&host).write_all(answer).unwrap();
        drop(host);
        exchange(client, 7, &request()).unwrap_err()
    }

    /// What the host said is what the caller gets, not the broken pipe.
    #[test]
    fn an_answer_given_before_the_request_is_read_is_the_result() {
        let e = against_a_host_that_says(
            b"{\"exit\":null,\"error\":\"the host is stopping\",\"help\":\"h\",\"limit\":null,\"stopping\":true}\n",
        );
        assert!(e.downcast_ref::<HostStopping>().is_some(), "{e:#}");
        assert!(format!("{e:#}").contains("pid 7"), "{e:#}");
    }

    /// Any other refusal is the host's own words, and not taken for a stop.
    #[test]
    fn a_refusal_that_is_not_a_stop_is_the_hosts_error() {
        let e = against_a_host_that_says(
            b"{\"exit\":null,\"error\":\"uid 5 is not this host's operator\",\"help\":\"only the operator\",\"limit\":null}\n",
        );
        assert!(e.downcast_ref::<HostStopping>().is_none(), "{e:#}");
        assert_eq!(
            format!("{e:#}"),
            "uid 5 is not this host's operator\nhelp: only the operator"
        );
    }

    /// A host that hangs up without a word: the send's own failure is reported.
    #[test]
    fn a_host_that_hangs_up_silently_is_reported_as_such() {
        let e = against_a_host_that_says(b"");
        assert!(e.downcast_ref::<HostStopping>().is_none(), "{e:#}");
        assert!(format!("{e:#}").to_lowercase().contains("pipe"), "{e:#}");
    }
}
