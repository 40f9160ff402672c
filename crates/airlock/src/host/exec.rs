//! `exec`, `run` and `chat` through the host: the server side of [`super::exec_wire`].
//!
//! An `exec` runs in the host's own process: the same service as embedded
//! ([`crate::service::exec`]) with the host's warm config and Gate, for the client's own
//! descriptors ([`Caller::client`]): its output, its messages and an inline approval go to
//! the client's terminal, pipe or file, as they would embedded. It takes a sandbox slot
//! of the host's one limit ([`super::sandbox_slots`]): at most `[host] max_sandboxes`
//! at once, then a queue of `max_queued`, then a refusal that names the limit. A client
//! that hangs up ends its run as `airlock kill` would (its process tree is killed, and
//! the record says the client went away), or leaves the queue if it was waiting.
//!
//! A `chat` is a session that lives in the host's process and outlasts its clients
//! ([`super::sessions`]). A `run` is a session too, for one task, and a task of the host's
//! process as well ([`super::run`]): the same service as embedded ([`crate::service::run`])
//! with the host's one audit writer, speaking on the client's descriptors; a client that
//! goes away ends its turn as a kill would (the session stays resumable). Live chats and
//! runs together are at most `[host] max_sessions`, and past that a refusal names it (a
//! session does not queue).
//!
//! No run outlives the host. A sandbox's helper ends its sandbox when its control socket
//! to the process that started it closes, which the kernel does when the host dies.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::exec_wire::{AgentRequest, ExecAnswer, ExecRequest, HostRequest, MAX_REQUEST_BYTES};
use crate::service::caller::{Caller, HangUp};

pub fn socket_path(home: &crate::home::Home) -> PathBuf {
    airlock_client::host::exec_socket(&home.state)
}

/// Agent sessions (`run`, `chat`) the host serves at once (`[host] max_sessions`).
pub struct SessionSlots {
    running: Mutex<usize>,
    pub max: usize,
}

/// One session's place; freed when dropped.
pub struct SessionSlot(Arc<SessionSlots>);

impl Drop for SessionSlot {
    fn drop(&mut self) {
        *self.0.running.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
    }
}

impl SessionSlots {
    pub fn new(max: usize) -> SessionSlots {
        SessionSlots {
            running: Mutex::new(0),
            max,
        }
    }

    /// A place for one more session, or `None` at the limit.
    pub fn enter(self: &Arc<Self>) -> Option<SessionSlot> {
        let mut n = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(SessionSlot(self.clone()))
    }

    pub fn running(&self) -> usize {
        *self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The descriptors a request comes with: stdin, stdout and stderr.
const FDS_TAKEN: usize = 3;

/// The first bytes of a request and the descriptors the kernel installed with them.
struct Received {
    bytes: usize,
    /// Every descriptor installed in this process, owned: each is closed when dropped.
    fds: Vec<OwnedFd>,
    /// The client sent more than there was room for. The kernel installed as many as fit
    /// (they are in `fds`) and released the rest itself.
    truncated: bool,
}

/// Receive into `head`, with room for [`FDS_TAKEN`] descriptors. The control messages
/// are walked here rather than with nix's iterator, which refuses a truncated buffer and
/// would leave the descriptors the kernel did install open in the host, one lot per
/// connection.
fn receive_with_fds(stream: &UnixStream, head: &mut [u8]) -> std::io::Result<Received> {
    use nix::libc;
    use std::mem::size_of;
    // Room for one SCM_RIGHTS message of three, in u64 words: aligned for `cmsghdr`.
    const ROOM: usize = nix::sys::socket::cmsg_space::<[RawFd; FDS_TAKEN]>();
    let mut control = [0u64; ROOM.div_ceil(size_of::<u64>())];
    let mut iov = libc::iovec {
        iov_base: head.as_mut_ptr().cast(),
        iov_len: head.len(),
    };
    // SAFETY: an all-zero `msghdr` is a valid value (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = ROOM as _;
    let bytes = loop {
        // SAFETY: `msg` points at `iov` (over `head`) and `control`, both alive across
        // the call, with their true lengths (`ROOM` is within `control`).
        let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if let Ok(n) = usize::try_from(n) {
            break n;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fds = Vec::new();
    let end = msg.msg_control as usize + msg.msg_controllen as usize;
    // SAFETY: the kernel wrote `msg_controllen` bytes of control messages into `control`;
    // CMSG_FIRSTHDR and CMSG_NXTHDR return only headers that lie within them, and the
    // descriptors read are those a header says it holds (a truncated SCM_RIGHTS message
    // says how many the kernel installed), never past `end`. Each was installed in this
    // process for this call and is owned by nothing else, so taking ownership is sound.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let said = ((*c).cmsg_len as usize).saturating_sub(data as usize - c as usize);
                let len = said.min(end.saturating_sub(data as usize));
                for i in 0..len / size_of::<RawFd>() {
                    let fd = data.cast::<RawFd>().add(i).read_unaligned();
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(Received {
        bytes,
        fds,
        truncated: msg.msg_flags & libc::MSG_CTRUNC != 0,
    })
}

/// Read the request and the three descriptors sent with it. A request with any other
/// number is refused, and every descriptor that came with it is closed.
fn receive(stream: &UnixStream) -> anyhow::Result<(HostRequest, [OwnedFd; FDS_TAKEN])> {
    let mut head = [0u8; 4096];
    let Received {
        bytes: n,
        fds,
        truncated,
    } = receive_with_fds(stream, &mut head)?;
    anyhow::ensure!(
        !truncated,
        "the request came with more than {FDS_TAKEN} descriptors (stdin, stdout, stderr); they were closed"
    );
    let fds: [OwnedFd; FDS_TAKEN] = fds.try_into().map_err(|v: Vec<OwnedFd>| {
        anyhow::anyhow!(
            "the request came with {} descriptors, not {FDS_TAKEN} (stdin, stdout, stderr)",
            v.len()
        )
    })?;
    anyhow::ensure!(n > 0, "the client hung up before sending its request");
    // The descriptors came with the first bytes; the rest of the length, if it was
    // split, follows as plain data.
    let mut n = n;
    if n < 4 {
        (&*stream).read_exact(&mut head[n..4])?;
        n = 4;
    }
    let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
    anyhow::ensure!(
        len <= MAX_REQUEST_BYTES,
        "the request is {len} bytes; the most is {MAX_REQUEST_BYTES}"
    );
    let mut body = head[4..n].to_vec();
    anyhow::ensure!(
        body.len() <= len,
        "the request is longer than its length says"
    );
    let mut rest = vec![0u8; len - body.len()];
    (&*stream).read_exact(&mut rest)?;
    body.extend_from_slice(&rest);
    let req: HostRequest = serde_json::from_slice(&body).map_err(|e| {
        anyhow::anyhow!("the request is not a valid exec, run or chat request: {e}")
    })?;
    Ok((req, fds))
}

/// Do `work` while watching `client`: if it hangs up first, `on_hang_up` runs (once) and
/// `work` goes on to its end, which `on_hang_up` is to hasten. The client sends nothing
/// after its request, so readable means it hung up. `work` is given a way to stop the
/// watch early: call it before answering the client, whose leaving is then no hang-up.
pub(super) fn while_connected<T>(
    client: &UnixStream,
    on_hang_up: impl Fn() + Sync,
    work: impl FnOnce(&dyn Fn()) -> T,
) -> std::io::Result<T> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let (stop_r, stop_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    Ok(std::thread::scope(|s| {
        s.spawn(|| loop {
            let mut fds = [
                PollFd::new(client.as_fd(), PollFlags::POLLIN),
                PollFd::new(stop_r.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return,
                Ok(_) => {}
            }
            // Stopped (checked first: a client that leaves once it has its answer is
            // no hang-up).
            if fds[1].any().unwrap_or(true) {
                return;
            }
            if fds[0].any().unwrap_or(false) {
                tracing::info!("a client went away; killing its run");
                on_hang_up();
                return;
            }
        });
        let stop = || {
            let _ = nix::unistd::write(&stop_w, b"x");
        };
        let out = work(&stop);
        stop();
        out
    }))
}

fn answer(stream: &UnixStream, a: &ExecAnswer) {
    let mut line = serde_json::to_vec(a).unwrap_or_default();
    line.push(b'\n');
    let _ = (&*stream).write_all(&line);
}

pub(super) fn refuse(stream: &UnixStream, error: String, help: &str, limit: Option<&str>) {
    answer(
        stream,
        &ExecAnswer {
            exit: None,
            error: Some(error),
            help: Some(help.to_string()),
            limit: limit.map(str::to_string),
            stopping: false,
        },
    );
}

/// Serve one connection to its end (on its own thread: a run can take minutes).
pub fn serve_connection(host: Arc<super::Host>, stream: UnixStream) {
    let peer = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials);
    match peer {
        Ok(cred) if cred.uid() == host.operator_uid => {}
        other => {
            let who = other
                .map(|c| format!("uid {}", c.uid()))
                .unwrap_or_else(|_| "a caller without credentials".into());
            tracing::warn!(%who, "refused an exec caller that is not the operator");
            refuse(
                &stream,
                format!(
                    "{who} is not this host's operator (uid {})",
                    host.operator_uid
                ),
                "only the user the host runs as may use it",
                None,
            );
            return;
        }
    }
    if !host.rate.take("owner") {
        let (error, help) = host.rate.refusal("owner");
        refuse(&stream, error, help, Some("host.requests_per_minute"));
        return;
    }
    if host.stopping.load(std::sync::atomic::Ordering::SeqCst) {
        // Said before a byte of the request is read, and marked so: the client knows
        // nothing ran, waits for this host to be gone and runs the request embedded.
        answer(
            &stream,
            &ExecAnswer {
                exit: None,
                error: Some("the host is stopping".into()),
                help: Some("run the command again once it is back, or without it".into()),
                limit: None,
                stopping: true,
            },
        );
        return;
    }
    // The request comes at once; a client that sends nothing is let go.
    let _ = stream.set_read_timeout(Some(REQUEST_WITHIN));
    let received = receive(&stream);
    let _ = stream.set_read_timeout(None);
    let (req, fds) = match received {
        Ok(r) => r,
        Err(e) => {
            let late = e.downcast_ref::<std::io::Error>().is_some_and(|io| {
                matches!(
                    io.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                )
            });
            let error = match late {
                true => format!(
                    "no request came within {} s of connecting",
                    REQUEST_WITHIN.as_secs()
                ),
                false => format!("{e:#}"),
            };
            refuse(
                &stream,
                error,
                "see docs/api.md for the exec socket's format",
                None,
            );
            return;
        }
    };
    match req {
        HostRequest::Exec(req) => serve_exec(&host, &req, fds, &stream),
        HostRequest::Agent(req) if req.chat => {
            super::sessions::serve_chat(&host, &req, fds, &stream)
        }
        HostRequest::Agent(req) => serve_session(&host, &req, fds, &stream),
    }
}

/// Run an `airlock run` session in the host's process, if the session limit allows one
/// more (and nothing else drives its session: see [`crate::service::driven`]).
fn serve_session(host: &super::Host, req: &AgentRequest, fds: [OwnedFd; 3], stream: &UnixStream) {
    let Some(slot) = host.sessions.enter() else {
        refuse(
            stream,
            format!(
                "too many sessions: {} are running (host.max_sessions = {})",
                host.sessions.running(),
                host.sessions.max
            ),
            "try again when a session has ended, or raise the limit in [host] of airlock.toml",
            Some("host.max_sessions"),
        );
        return;
    };
    tracing::info!(
        sessions = host.sessions.running(),
        "an agent session through the host"
    );
    let result = super::run::serve_run(host, req, fds, stream);
    drop(slot);
    finish(stream, result);
}

/// Run an `exec` in the host's process. The service takes its sandbox slot
/// ([`super::sandbox_slots`]) first, waiting in the queue while the client stays; the
/// client hears the result as soon as it is known (see [`crate::service::exec::exec`]);
/// the run's tidying goes on after that, still holding its slot.
fn serve_exec(host: &super::Host, req: &ExecRequest, fds: [OwnedFd; 3], stream: &UnixStream) {
    let answered = std::sync::atomic::AtomicBool::new(false);
    let answer_once = |result: &anyhow::Result<i32>| {
        if !answered.swap(true, std::sync::atomic::Ordering::AcqRel) {
            finish_with(stream, result);
        }
    };
    let result = run_here(host, req, fds, stream, &answer_once);
    answer_once(&result);
}

/// The exec service for the client on `stream`, with a watcher that fires the run's
/// hang-up switch if the client goes away first. `answer` is called with the result once
/// it is known, after the client's descriptors are let go (a reader of the command's
/// output waits for every copy of them to close) and the watch is stopped.
fn run_here(
    host: &super::Host,
    req: &ExecRequest,
    fds: [OwnedFd; 3],
    stream: &UnixStream,
    answer: &(dyn Fn(&anyhow::Result<i32>) + Sync),
) -> anyhow::Result<i32> {
    let hang_up = HangUp::new()?;
    let caller = Caller::client(fds, hang_up.clone());
    let result = while_connected(
        stream,
        || hang_up.fire(),
        |stop_watching| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                crate::service::exec::exec(
                    &host.home,
                    crate::service::exec::Loaded::Warm {
                        warm: &host.warm,
                        store: &host.run_store,
                        audit: &host.audit,
                        pool: Some(&host.pool),
                    },
                    req,
                    caller,
                    |result| {
                        stop_watching();
                        answer(result);
                    },
                )
            }))
        },
    )?;
    result.unwrap_or_else(|_| {
        Err(anyhow::anyhow!(
            "the run failed unexpectedly (see the host's log)"
        ))
    })
}

/// Answer the run's exit status, or why it did not run.
pub(super) fn finish(stream: &UnixStream, result: anyhow::Result<i32>) {
    finish_with(stream, &result)
}

fn finish_with(stream: &UnixStream, result: &anyhow::Result<i32>) {
    match result {
        Ok(code) => answer(
            stream,
            &ExecAnswer {
                exit: Some(*code),
                error: None,
                help: None,
                limit: None,
                stopping: false,
            },
        ),
        // No sandbox slot: the limit's name goes in its own field, for the client.
        Err(e) => match e.downcast_ref::<super::sandbox_slots::NoSlot>() {
            Some(no) => refuse(stream, no.error(), no.help(), no.limit()),
            None => refuse(stream, format!("{e:#}"), "", None),
        },
    }
}

/// Connections the exec socket serves at once beyond those its limits let run or wait:
/// room for the ones being read, and refused, at the same time.
const SPARE_CONNECTIONS: usize = 16;

/// How long a client has, once connected, to send its request: a connection that sends
/// nothing must not keep its thread, and its place, for ever.
const REQUEST_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// The exec socket's connections being served, each on its own thread.
struct Connections {
    open: std::sync::atomic::AtomicUsize,
    /// What the limits can keep busy at once (every sandbox running or queued, every
    /// session) and [`SPARE_CONNECTIONS`]: past it a client is opening connections
    /// that nothing will serve, and is refused before a thread is started for it.
    max: usize,
}

/// One connection's place; given back when its thread ends.
struct Connection(Arc<Connections>);

impl Drop for Connection {
    fn drop(&mut self) {
        self.0
            .open
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Connections {
    fn new(max: usize) -> Arc<Connections> {
        Arc::new(Connections {
            open: std::sync::atomic::AtomicUsize::new(0),
            max,
        })
    }

    /// A place for one more connection, or `Err` with how many are open.
    fn enter(self: &Arc<Self>) -> Result<Connection, usize> {
        use std::sync::atomic::Ordering;
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .map(|_| Connection(self.clone()))
    }
}

/// Refuse a connection past [`Connections::max`], on the accepting thread: the answer is
/// one short line into an empty socket buffer, and is never waited on.
fn refuse_connection(stream: &UnixStream, open: usize, max: usize) {
    let _ = stream.set_nonblocking(true);
    refuse(
        stream,
        format!(
            "too many connections to the exec socket: {open} are open, the most is {max} (host.max_sandboxes + host.max_queued + host.max_sessions + {SPARE_CONNECTIONS})"
        ),
        "a client is opening connections and not ending them; stop it, or raise those limits in [host] of airlock.toml",
        None,
    );
}

/// Accept connections on the exec socket until the host stops. Each is served on a
/// thread of its own (a run can take minutes), at most [`Connections::max`] at once.
pub fn listen(host: Arc<super::Host>, listener: std::os::unix::net::UnixListener) {
    let connections = Connections::new(
        host.admission.max_running
            + host.admission.max_queued
            + host.sessions.max
            + SPARE_CONNECTIONS,
    );
    for stream in listener.incoming() {
        match stream {
            Ok(s) => {
                let place = match connections.enter() {
                    Ok(place) => place,
                    Err(open) => {
                        tracing::warn!(
                            open,
                            "refused an exec connection past the most served at once"
                        );
                        refuse_connection(&s, open, connections.max);
                        continue;
                    }
                };
                let host = host.clone();
                let spawned = std::thread::Builder::new()
                    .name("airlock-exec".into())
                    .spawn(move || {
                        let _place = place;
                        serve_connection(host, s)
                    });
                if let Err(e) = spawned {
                    // The connection (and its place) went with the closure: the client
                    // hears the host hang up.
                    tracing::error!(error = %e, "cannot start a thread for an exec connection");
                }
            }
            Err(e) => {
                // Out of descriptors (EMFILE, ENFILE) or memory, the same error comes back
                // at once: wait a moment for runs to give some back rather than spin.
                tracing::error!(error = %e, "accepting an exec connection");
                std::thread::sleep(ACCEPT_BACKOFF);
            }
        }
    }
}

/// How long the exec socket's listener waits after a failed accept.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);
