//! The agent loop's executors on this host: `shell` in the verified sandbox behind the
//! run's own egress proxy, `fetch` as an HTTP request sent through that same proxy, and
//! `send_message` to the conversation's own channel (the terminal).
//!
//! Each call gets the authorized token the Gate minted; the proxy decides every request
//! again with the session's current taint, so a request the loop let through can still be
//! refused at the boundary.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::json;

use airlock_agent::agent::{Executors, ToolOutput};
use airlock_audit::AuditLog;
use airlock_core::action::{ExecAction, MessageSendAction, NetRequestAction};
use airlock_core::gate::{Approval, Gate, Session};
use airlock_core::Authorized;
use airlock_proxy::{ApprovalHook, ApprovalRequest as ProxyApprovalRequest, BoxFuture};
use airlock_sandbox::OutputMode;
use airlock_store::{SessionStore, SqliteStore};

use crate::cmd::exec::{self, RunEnd};
use crate::cmd::kill::KILLED_MARKER;
use crate::config::Config;
use crate::egress::{Egress, EgressSetup};
use crate::home::Home;

/// Most bytes of command output or response body handed back to the model.
pub const MAX_RESULT_BYTES: usize = 64 * 1024;

/// Runs the loop's shell, fetch and message calls for one session.
pub struct HostExecutors {
    shared: Arc<Shared>,
    /// Messages delivered to the conversation's own channel, in order.
    delivered: Mutex<Vec<String>>,
    /// Print delivered messages on stdout as they arrive (off for `--json`).
    print_messages: bool,
}

/// What the blocking sandbox and proxy work needs, shared with its worker threads.
struct Shared {
    home: Home,
    cfg: Config,
    gate: Arc<Gate>,
    audit: Arc<Mutex<AuditLog>>,
    store: SqliteStore,
    session_id: String,
    workspace: PathBuf,
    channel: String,
}

impl HostExecutors {
    /// Executors for `session_id`, whose workspace is `workspace` and whose Gate is `gate`.
    /// `audit` is this process's handle on the audit log for execution and proxy records.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        home: Home,
        cfg: Config,
        gate: Arc<Gate>,
        audit: Arc<Mutex<AuditLog>>,
        store: SqliteStore,
        session_id: String,
        workspace: PathBuf,
        channel: String,
        print_messages: bool,
    ) -> HostExecutors {
        HostExecutors {
            shared: Arc::new(Shared {
                home,
                cfg,
                gate,
                audit,
                store,
                session_id,
                workspace,
                channel,
            }),
            delivered: Mutex::new(Vec::new()),
            print_messages,
        }
    }

    /// The messages delivered to the conversation so far.
    pub fn delivered(&self) -> Vec<String> {
        self.delivered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[async_trait]
impl Executors for HostExecutors {
    async fn shell(&self, auth: Authorized<ExecAction>, timeout: Duration) -> ToolOutput {
        let cancel = CancelOnDrop::new(self.shared.run_dir());
        let flag = cancel.flag.clone();
        let shared = self.shared.clone();
        let result = tokio::task::spawn_blocking(move || shared.run_shell(&auth, timeout, &flag))
            .await
            .map_err(|e| anyhow::anyhow!("the sandbox worker failed: {e}"))
            .and_then(|r| r);
        cancel.disarm();
        result.unwrap_or_else(|e| ToolOutput::error(format!("{e:#}")))
    }

    async fn fetch(
        &self,
        auth: Authorized<NetRequestAction>,
        body: Option<String>,
        timeout: Duration,
    ) -> ToolOutput {
        // The proxy decides again; a request the Gate asked about and the operator approved
        // would be asked about again there. The run's answer: exactly the payload the
        // Gate authorized, byte for byte by its hash, and nothing else.
        let hook: Arc<dyn ApprovalHook> = Arc::new(AuthorizedPayload {
            action_hash: auth.action_hash().to_string(),
            expires_at: crate::runtime::now_unix() + timeout.as_secs() + 1,
        });
        let shared = self.shared.clone();
        let started = tokio::task::spawn_blocking(move || shared.start_egress(Some(hook))).await;
        let egress = match started {
            Ok(Ok(e)) => FinishOnDrop(Some(e)),
            Ok(Err(e)) => return ToolOutput::error(format!("{e:#}")),
            Err(e) => return ToolOutput::error(format!("the proxy worker failed: {e}")),
        };
        let Some(socket) = egress.0.as_ref().map(|e| e.socket_path().to_path_buf()) else {
            return ToolOutput::error("the egress proxy is not running");
        };
        let action = auth.action().clone();
        let sent = tokio::time::timeout(timeout, send_via_proxy(&socket, &action, body)).await;
        // Wait for the proxy's audit records before the result goes back to the loop.
        let mut egress = egress;
        if let Some(e) = egress.0.take() {
            let _ = tokio::task::spawn_blocking(move || e.finish()).await;
        }
        match sent {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => ToolOutput::error(format!("{} {}: {e:#}", action.method, action.url)),
            Err(_) => ToolOutput::error(format!(
                "{} {} did not finish within {} s",
                action.method,
                action.url,
                timeout.as_secs()
            )),
        }
    }

    async fn send_message(
        &self,
        auth: Authorized<MessageSendAction>,
        _timeout: Duration,
    ) -> ToolOutput {
        let m = auth.action();
        let own = m.destination.is_empty()
            || m.destination == "owner"
            || m.destination == self.shared.channel;
        if !own {
            return ToolOutput::error(format!(
                "no channel is configured for destination `{}`\nhelp: this conversation can only reply to its own channel ({})",
                m.destination, self.shared.channel
            ));
        }
        if self.print_messages {
            println!("message: {}", m.text);
        }
        self.delivered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(m.text.clone());
        ToolOutput::ok(format!("delivered to {}", self.shared.channel))
    }
}

impl Shared {
    /// The run dir the egress proxy and the kill switch use for this session.
    fn run_dir(&self) -> PathBuf {
        self.home.state.join("run").join(&self.session_id)
    }

    /// The Gate's current view of the session (its taint), for the proxy's decisions.
    fn session(&self) -> anyhow::Result<Session> {
        Ok(self
            .store
            .get_session(&self.session_id)
            .map_err(|e| anyhow::anyhow!("cannot read session `{}`: {e}", self.session_id))?
            .gate)
    }

    fn start_egress(&self, approvals: Option<Arc<dyn ApprovalHook>>) -> anyhow::Result<Egress> {
        let mut setup = EgressSetup::load(&self.home, &[])?;
        setup.approvals = approvals;
        let session = self.session()?;
        Ok(Egress::start(
            setup,
            &self.home,
            &session,
            self.gate.clone(),
            self.audit.clone(),
            self.cfg.sandbox.uid,
        )?)
    }

    /// When Airlock runs as root the sandbox runs as `sandbox.uid`, which must reach and
    /// write the session workspace. The store keeps the state dir private (0700) and
    /// resets it when opened, so before each command: let the sandbox uid pass through the
    /// directories above the workspace (search only, 0711: it can list none of them) and
    /// give it the workspace. Runs as an ordinary user need nothing.
    fn open_workspace_to_sandbox(&self) -> anyhow::Result<()> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        if !nix::unistd::geteuid().is_root() {
            return Ok(());
        }
        let fail = |p: &Path, e: std::io::Error| {
            anyhow::anyhow!(
                "cannot open the session workspace to the sandbox uid {} at {}: {e}",
                self.cfg.sandbox.uid,
                p.display()
            )
        };
        let mut dir = self.workspace.parent();
        while let Some(d) = dir.filter(|d| d.starts_with(&self.home.state)) {
            let meta = std::fs::symlink_metadata(d).map_err(|e| fail(d, e))?;
            let mode = meta.mode() & 0o7777;
            if mode & 0o011 != 0o011 {
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode | 0o011))
                    .map_err(|e| fail(d, e))?;
            }
            dir = d.parent();
        }
        let meta =
            std::fs::symlink_metadata(&self.workspace).map_err(|e| fail(&self.workspace, e))?;
        if meta.uid() != self.cfg.sandbox.uid {
            std::os::unix::fs::chown(
                &self.workspace,
                Some(self.cfg.sandbox.uid),
                Some(self.cfg.sandbox.uid),
            )
            .map_err(|e| fail(&self.workspace, e))?;
        }
        Ok(())
    }

    /// The working directory of a command: the workspace, or a directory inside it.
    fn command_cwd(&self, cwd: &str) -> anyhow::Result<PathBuf> {
        if cwd.is_empty() {
            return Ok(self.workspace.clone());
        }
        let joined = self.workspace.join(cwd);
        let resolved = joined
            .canonicalize()
            .map_err(|e| anyhow::anyhow!("working directory {cwd:?}: {e}"))?;
        if !resolved.starts_with(&self.workspace) {
            anyhow::bail!(
                "working directory {cwd:?} is outside the session workspace\nhelp: give a directory inside the workspace, or none"
            );
        }
        Ok(resolved)
    }

    /// Run an authorized command in the sandbox with this session's egress proxy.
    fn run_shell(
        &self,
        token: &Authorized<ExecAction>,
        timeout: Duration,
        cancel: &AtomicBool,
    ) -> anyhow::Result<ToolOutput> {
        let session = self.session()?;
        let refuse = |e: anyhow::Error| {
            exec::record_execution(
                token,
                &session,
                &self.audit,
                json!({"refused": e.to_string()}),
            );
            e
        };
        self.open_workspace_to_sandbox().map_err(refuse)?;
        let cwd = self.command_cwd(&token.action().cwd).map_err(refuse)?;
        let mut profile = exec::sandbox_profile(
            &self.cfg,
            self.workspace.clone(),
            cwd,
            timeout.as_secs().max(1),
        );
        let egress = self
            .start_egress(None)
            .and_then(|e| e.configure(&mut profile).map(|()| e).map_err(Into::into))
            .map_err(refuse)?;
        let guard = match exec::register_run(&egress, &self.store, &session.id) {
            Ok(g) => g,
            Err(e) => return Err(refuse(e)),
        };
        if cancel.load(Ordering::Acquire) {
            guard.mark_killed();
        }
        let end = exec::run_authorized(
            token,
            &profile,
            &session,
            &self.audit,
            &egress,
            &guard,
            OutputMode::Capture,
        );
        drop(guard);
        egress.finish();
        Ok(match end? {
            RunEnd::Killed => ToolOutput::error("the command was stopped: the session was killed"),
            RunEnd::Finished(o) => {
                let mut text = String::new();
                text.push_str(&String::from_utf8_lossy(&o.stdout));
                if !o.stderr.is_empty() {
                    text.push_str(&String::from_utf8_lossy(&o.stderr));
                }
                let mut text = cut(text);
                if o.timed_out {
                    text.push_str(&format!(
                        "\n[timed out after {} s; the process tree was killed]",
                        profile.timeout_secs
                    ));
                }
                text.push_str(&format!("\n[exit status {}]", o.status));
                ToolOutput {
                    text,
                    is_error: o.status != 0,
                }
            }
        })
    }
}

/// Answers the proxy's *ask* for the one request the Gate already authorized.
struct AuthorizedPayload {
    action_hash: String,
    expires_at: u64,
}

impl ApprovalHook for AuthorizedPayload {
    fn request(&self, req: ProxyApprovalRequest) -> BoxFuture<'static, Option<Approval>> {
        let answer = (req.action_hash == self.action_hash).then(|| Approval {
            approver: "owner (authorized by the agent loop)".into(),
            approver_role: "owner".into(),
            payload_hash: self.action_hash.clone(),
            expires_at: self.expires_at,
        });
        Box::pin(async move { answer })
    }
}

/// Stops a sandboxed run when the loop drops the shell future (kill or call timeout): the
/// run's guard sees the marker and kills the helper's process tree.
struct CancelOnDrop {
    flag: Arc<AtomicBool>,
    run_dir: PathBuf,
    armed: bool,
}

impl CancelOnDrop {
    fn new(run_dir: PathBuf) -> CancelOnDrop {
        CancelOnDrop {
            flag: Arc::new(AtomicBool::new(false)),
            run_dir,
            armed: true,
        }
    }

    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.flag.store(true, Ordering::Release);
            if self.run_dir.is_dir() {
                let _ = std::fs::write(self.run_dir.join(KILLED_MARKER), b"cancelled\n");
            }
        }
    }
}

/// Finishes an egress proxy on a plain thread when the fetch is abandoned (kill, timeout):
/// its runtime cannot be shut down from inside the loop's async context.
struct FinishOnDrop(Option<Egress>);

impl Drop for FinishOnDrop {
    fn drop(&mut self) {
        if let Some(e) = self.0.take() {
            let _ = std::thread::Builder::new()
                .name("airlock-egress-finish".into())
                .spawn(move || {
                    e.finish();
                });
        }
    }
}

/// Send one HTTP request through the proxy listening on `socket` (absolute-form, as a
/// client with `HTTP_PROXY` set would) and turn the response into the tool result.
async fn send_via_proxy(
    socket: &Path,
    action: &NetRequestAction,
    body: Option<String>,
) -> anyhow::Result<ToolOutput> {
    let url = url::Url::parse(&action.url)
        .map_err(|e| anyhow::anyhow!("not a valid URL: {e}\nhelp: give an absolute http:// URL"))?;
    if url.scheme() != "http" {
        anyhow::bail!(
            "fetch supports http:// URLs here; `{}` is not one\nhelp: use the shell tool (curl goes through the same proxy) for https",
            url.scheme()
        );
    }
    let host = url
        .host_str()
        .ok_or_else(|| anyhow::anyhow!("the URL has no host"))?;
    let host_header = match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    };
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach the egress proxy: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let driver = tokio::spawn(conn);
    let req = hyper::Request::builder()
        .method(action.method.as_str())
        .uri(action.url.as_str())
        .header(hyper::header::HOST, host_header)
        .body(Full::new(Bytes::from(body.unwrap_or_default())))?;
    let resp = sender.send_request(req).await?;
    let status = resp.status();
    let bytes = resp.into_body().collect().await?.to_bytes();
    driver.abort();
    let text = cut(String::from_utf8_lossy(&bytes).into_owned());
    let text = format!("HTTP {}\n{text}", status.as_u16());
    Ok(ToolOutput {
        text,
        is_error: !status.is_success(),
    })
}

/// Keep at most [`MAX_RESULT_BYTES`] of `text`, on a character boundary.
fn cut(mut text: String) -> String {
    if text.len() > MAX_RESULT_BYTES {
        let mut end = MAX_RESULT_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("\n[output cut]");
    }
    text
}
