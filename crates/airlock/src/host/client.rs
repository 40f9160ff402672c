//! The command line's side of the API: find the host through its lock, send one request
//! over its socket, and turn an error answer into an error that says what the host said.
//! Before anything is sent, the socket's listener must be of this process's own uid
//! ([`airlock_client::peer`]); a listener of another uid gets nothing, and the command
//! fails saying whose it is (it does not fall back to running embedded: the state dir
//! is held).

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::home::Home;

pub struct HostClient {
    socket: std::path::PathBuf,
    pub pid: u32,
}

/// How long a command waits for a host that holds the state dir but has no socket (it is
/// starting, or stopping and finishing its runs) before it gives up on it.
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// How long a command waits for the host's answer to a request that is answered at once
/// (status, lists, approvals, memory, tasks, a check). A host that is stopped (SIGSTOP)
/// or stuck still takes connections, as the kernel queues them; without a bound the
/// command would wait for it for ever. Streams (a run, a chat, `audit tail`) wait as
/// long as their work lasts and are not bound by this.
const REQUEST_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// The host serving `home`, if one holds its state dir. A host holds the lock a moment
/// before its socket exists, and after it has removed it (finishing the runs in flight):
/// then this waits until the socket is there, or the lock is free (and the command runs
/// embedded), saying so if it takes a while.
pub fn find(home: &Home) -> Option<HostClient> {
    let socket = super::socket::socket_path(home);
    let started = std::time::Instant::now();
    let mut said = false;
    loop {
        let pid = super::lock::running_host(home)?;
        if socket.exists() || started.elapsed() > SETTLE_WAIT {
            return Some(HostClient { socket, pid });
        }
        if !said && started.elapsed() > std::time::Duration::from_millis(500) {
            eprintln!("airlock: the host (pid {pid}) is starting or stopping; waiting for it");
            said = true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The host serving `home`, only if it holds the state dir and its socket is there now:
/// for a command that must not wait for a host that is starting or stopping (the kill
/// switch), and runs embedded instead.
pub fn find_now(home: &Home) -> Option<HostClient> {
    let socket = super::socket::socket_path(home);
    let pid = super::lock::running_host(home)?;
    socket.exists().then_some(HostClient { socket, pid })
}

/// The host's socket did not take the connection: nothing was sent. The host is stopping
/// (or has stopped), or something is wrong with it.
#[derive(Debug)]
pub struct NotConnected {
    pid: u32,
    socket: std::path::PathBuf,
    cause: std::io::Error,
}

impl std::fmt::Display for NotConnected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a host (pid {}) holds the state dir, but its socket {} cannot be reached: {}\nhelp: check the host's log; stop it to run commands without it",
            self.pid,
            self.socket.display(),
            self.cause
        )
    }
}

impl std::error::Error for NotConnected {}

impl NotConnected {
    pub fn new(pid: u32, socket: std::path::PathBuf, cause: std::io::Error) -> NotConnected {
        NotConnected { pid, socket, cause }
    }
}

/// Whether `e` says nothing reached the host (it took no connection, or refused the
/// request before reading it because it is stopping): the call may go elsewhere.
fn nothing_sent(e: &anyhow::Error) -> bool {
    e.downcast_ref::<NotConnected>().is_some()
        || e.downcast_ref::<airlock_client::send::HostStopping>()
            .is_some()
}

/// `through` the host serving `home`, or `embedded` when none does.
///
/// A host found a moment before it began to stop no longer takes connections, or refuses
/// what it takes before reading it; nothing reached it. That is waited for as [`find`]
/// waits: the call then goes to the host that serves, or runs embedded once the lock is
/// free. Only such a call is tried again, never a request the host read: whether it
/// acted on that is not known.
pub fn through_host_or<T>(
    home: &Home,
    mut through: impl FnMut(&HostClient) -> anyhow::Result<T>,
    embedded: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let started = std::time::Instant::now();
    let mut said = false;
    loop {
        let Some(host) = find(home) else {
            return embedded();
        };
        match through(&host) {
            Err(e) if nothing_sent(&e) && started.elapsed() < SETTLE_WAIT => {
                if !said && started.elapsed() > std::time::Duration::from_millis(500) {
                    eprintln!(
                        "airlock: the host (pid {}) does not take connections; waiting for it to stop",
                        host.pid
                    );
                    said = true;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// Why a call within a deadline did not give an answer to use.
#[derive(Debug)]
pub enum CallError {
    /// The host answered, with an error: its word stands.
    Answered(anyhow::Error),
    /// The host could not be reached, or did not answer in time.
    Unreachable(anyhow::Error),
}

impl HostClient {
    /// `post`, giving up after `wait`; tells a refusal from an unreachable host.
    pub fn post_within<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        wait: std::time::Duration,
    ) -> Result<T, CallError> {
        let body = serde_json::to_vec(body).map_err(|e| CallError::Unreachable(e.into()))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| CallError::Unreachable(e.into()))?;
        let sent = runtime.block_on(async {
            tokio::time::timeout(wait, self.send("POST", path, Some(body))).await
        });
        match sent {
            Err(_) => Err(CallError::Unreachable(anyhow::anyhow!(
                "no answer within {} s",
                wait.as_secs()
            ))),
            Ok(Err(e)) => Err(CallError::Unreachable(e)),
            Ok(Ok((status, bytes))) => {
                Self::answer(path, status, &bytes).map_err(CallError::Answered)
            }
        }
    }

    pub fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        self.request("GET", path, None)
    }

    pub fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> anyhow::Result<T> {
        self.request("POST", path, Some(serde_json::to_vec(body)?))
    }

    fn request<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> anyhow::Result<T> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let answered = runtime.block_on(async {
            tokio::time::timeout(REQUEST_WAIT, self.send(method, path, body)).await
        });
        let Ok(sent) = answered else {
            anyhow::bail!(
                "the host (pid {}) took {method} {path} but gave no answer within {} s; whether it acted on it is not known\nhelp: the host may be stopped (`ps -o stat= -p {}` shows T) or stuck: look at its log, and stop it (`airlock kill` works without it) to run commands embedded",
                self.pid,
                REQUEST_WAIT.as_secs(),
                self.pid
            );
        };
        let (status, bytes) = sent?;
        Self::answer(path, status, &bytes)
    }

    /// The answer's body, or the error the host gave.
    fn answer<T: DeserializeOwned>(
        path: &str,
        status: hyper::StatusCode,
        bytes: &[u8],
    ) -> anyhow::Result<T> {
        if status.is_success() {
            return serde_json::from_slice(bytes).map_err(|e| {
                anyhow::anyhow!("the host's answer to {path} is not what this client understands: {e}\nhelp: the host and this command may be of different versions; restart the host")
            });
        }
        let (error, help) = match serde_json::from_slice::<serde_json::Value>(bytes) {
            Ok(v) => (
                v["error"].as_str().unwrap_or("").to_string(),
                v["help"].as_str().unwrap_or("").to_string(),
            ),
            Err(_) => (String::from_utf8_lossy(bytes).into_owned(), String::new()),
        };
        if help.is_empty() {
            anyhow::bail!("{error}")
        }
        anyhow::bail!("{error}\nhelp: {help}")
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> anyhow::Result<(hyper::StatusCode, Bytes)> {
        let (response, driving) = self.open(method, path, body).await?;
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        let _ = driving.await;
        Ok((status, bytes))
    }

    /// `post`, with a streamed answer of JSON lines: `each` gets every line as it comes
    /// (without its newline), and an error of `each` ends the read.
    pub fn post_lines<B: Serialize>(
        &self,
        path: &str,
        body: &B,
        mut each: impl FnMut(&str) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let body = serde_json::to_vec(body)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let (response, driving) = self.open("POST", path, Some(body)).await?;
            let status = response.status();
            let mut body = response.into_body();
            if !status.is_success() {
                let bytes = body.collect().await?.to_bytes();
                return Self::answer::<serde_json::Value>(path, status, &bytes).map(|_| ());
            }
            let mut pending: Vec<u8> = Vec::new();
            while let Some(frame) = body.frame().await {
                if let Some(data) = frame?.data_ref() {
                    pending.extend_from_slice(data);
                }
                while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    each(std::str::from_utf8(&line[..end]).map_err(|e| {
                        anyhow::anyhow!("the host's answer to {path} is not text: {e}")
                    })?)?;
                }
            }
            anyhow::ensure!(
                pending.is_empty(),
                "the host's answer to {path} ended in the middle of a line"
            );
            let _ = driving.await;
            Ok(())
        })
    }

    /// Connect, send one request and return its response as it starts, with the task
    /// that drives the connection.
    async fn open(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> anyhow::Result<(
        hyper::Response<hyper::body::Incoming>,
        tokio::task::JoinHandle<Result<(), hyper::Error>>,
    )> {
        let stream = tokio::net::UnixStream::connect(&self.socket)
            .await
            .map_err(|cause| NotConnected {
                pid: self.pid,
                socket: self.socket.clone(),
                cause,
            })?;
        // Nothing (a request, an approval, a kill) goes to a listener of another uid.
        airlock_client::peer::check(&stream, &self.socket)?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        let driving = tokio::spawn(conn);
        let request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "airlock")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.unwrap_or_default())))?;
        let response = sender.send_request(request).await?;
        Ok((response, driving))
    }
}
