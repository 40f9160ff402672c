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

/// Send `req` on `stream` and wait for the run's exit status, or the error the host gave.
pub fn exchange(stream: UnixStream, pid: u32, req: &HostRequest) -> anyhow::Result<i32> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
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
