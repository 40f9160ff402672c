//! The agent loop's executors on this host: `shell` in the verified sandbox behind the
//! run's own egress proxy, `fetch` as an HTTP(S) request sent through that same proxy
//! ([`crate::proxy_fetch`]), and
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
use serde_json::json;

use airlock_agent::agent::{Executors, ToolOutput};
use airlock_audit::AuditLog;
use airlock_core::action::{
    AgentSpawnAction, ExecAction, FsWriteAction, MessageSendAction, NetRequestAction,
    TaskScheduleAction,
};
use airlock_core::gate::{Approval, Session};
use airlock_core::Authorized;
use airlock_proxy::{
    ApprovalHook, ApprovalRequest as ProxyApprovalRequest, BoxFuture, Resolver, CA_CERT_FILE,
};
use airlock_sandbox::OutputMode;
use airlock_store::{SessionStore, SqliteStore};

use crate::config::Config;
use crate::egress::{Egress, EgressSetup};
use crate::home::Home;
use crate::service::exec::{self, RunEnd};
use crate::service::kill::KILLED_MARKER;

/// Most bytes of command output or response body handed back to the model.
pub const MAX_RESULT_BYTES: usize = 64 * 1024;

/// What an in-process caller may add to every egress proxy of the session: `airlock demo`
/// serves its pages on loopback under made-up names with its own CA. Nothing reads these
/// from the environment or from anything the agent can write.
#[derive(Clone, Default)]
pub struct EgressExtras {
    /// Resolver for the proxy's upstream names (default: the system's).
    pub resolver: Option<Arc<dyn Resolver>>,
    /// Extra PEM roots the proxy trusts for upstream TLS, beside the webpki roots.
    pub extra_roots_pem: Vec<String>,
}

/// Debug builds only: `AIRLOCK_DEBUG_UPSTREAM_ROOTS=<file.pem>` adds the file's
/// certificates to the roots the egress proxy trusts **upstream**, so tests can stand up a
/// loopback HTTPS server with a test CA and fetch from it through the real binary.
///
/// It cannot weaken a release build: the code below is compiled only with
/// `debug_assertions`, so a release binary has no such variable. Even in a debug build it
/// is read from the operator's environment on the host (never the sandbox's, which gets a
/// fixed environment), it adds trust only to the proxy's upstream connections, and every
/// request is still decided by the Gate with the operator's net rules.
#[cfg(debug_assertions)]
pub const DEBUG_UPSTREAM_ROOTS_VAR: &str = "AIRLOCK_DEBUG_UPSTREAM_ROOTS";

#[cfg(debug_assertions)]
pub(crate) fn debug_upstream_roots() -> anyhow::Result<Vec<String>> {
    roots_in(std::env::var_os(DEBUG_UPSTREAM_ROOTS_VAR).as_deref())
}

/// The certificates of the PEM file at `path` (none for no path, or an empty one).
#[cfg(debug_assertions)]
fn roots_in(path: Option<&std::ffi::OsStr>) -> anyhow::Result<Vec<String>> {
    match path.filter(|v| !v.is_empty()) {
        None => Ok(Vec::new()),
        Some(path) => {
            let pem = crate::operator_file::read_text(
                std::path::Path::new(path),
                crate::operator_file::CERTIFICATE,
            )
            .map_err(|e| anyhow::anyhow!("{DEBUG_UPSTREAM_ROOTS_VAR}: {e}"))?;
            Ok(vec![pem])
        }
    }
}

#[cfg(not(debug_assertions))]
pub(crate) fn debug_upstream_roots() -> anyhow::Result<Vec<String>> {
    Ok(Vec::new())
}

/// The egress additions a client of the host asks for with its environment `env` (see
/// [`crate::host::exec_wire::AGENT_ENV`]): in debug builds, the upstream roots of its
/// `AIRLOCK_DEBUG_UPSTREAM_ROOTS`, as embedded it would have had them; nothing otherwise.
pub fn client_egress(env: &[(String, String)]) -> anyhow::Result<EgressExtras> {
    #[cfg(debug_assertions)]
    let extra_roots_pem = roots_in(
        env.iter()
            .find(|(n, _)| n == DEBUG_UPSTREAM_ROOTS_VAR)
            .map(|(_, v)| std::ffi::OsStr::new(v.as_str())),
    )?;
    #[cfg(not(debug_assertions))]
    let extra_roots_pem = {
        let _ = env;
        Vec::new()
    };
    Ok(EgressExtras {
        resolver: None,
        extra_roots_pem,
    })
}

/// Runs the loop's shell, fetch and message calls for one session.
pub struct HostExecutors {
    shared: Arc<Shared>,
    /// Messages delivered to the conversation's own channel, in order.
    delivered: Mutex<Vec<String>>,
    /// Workspace files the Gate let a message carry, for the channel to send.
    files: Mutex<Vec<SentFile>>,
    /// Where delivered messages are shown as they arrive (`None` for `--json`).
    messages_to: Option<crate::service::caller::Notices>,
    /// The session's memory, when the host keeps it.
    memory: Option<crate::memory_executor::HostMemory>,
    /// The third party the conversation is with, if not the owner: messages to it are
    /// delivered to the conversation (once the Gate allowed them).
    conversation_with: Option<String>,
    /// The session's sub-agents, when it may start them.
    subagents: Option<crate::subagents::SubAgents>,
}

/// What the blocking sandbox and proxy work needs, shared with its worker threads.
struct Shared {
    home: Home,
    cfg: Config,
    /// The session's Gate, reloaded when the operator changes the policy.
    gate: Arc<crate::live_gate::LiveGate>,
    audit: Arc<Mutex<AuditLog>>,
    store: SqliteStore,
    session_id: String,
    workspace: PathBuf,
    channel: String,
    extras: EgressExtras,
    /// How long a held commit of a shell call's changes waits for an answer.
    commit_approval_timeout: Duration,
    /// Where a held commit and the like are said (the conversation's stderr).
    notices: crate::service::caller::Notices,
    /// The session's egress proxy between calls: started at the first call that needs
    /// one, renewed for each next call ([`Egress::renew`]), finished with the session.
    /// Empty while a call uses it (the loop makes one call at a time) and after a call
    /// that was abandoned or left it busy (the next call starts a new one).
    egress: Mutex<Option<Egress>>,
}

impl Shared {
    /// Store the task `a` describes, proposed by this session, with its record.
    fn schedule_task(&self, a: &TaskScheduleAction) -> anyhow::Result<String> {
        use crate::tasks::{new_task, store};
        let session = self
            .store
            .get_session(&self.session_id)
            .map_err(|e| anyhow::anyhow!("cannot read session {}: {e}", self.session_id))?;
        let taint = &session.gate.taint;
        let budget = match &a.budget {
            Some(b) => store::parse_budget(b)?,
            None => Default::default(),
        };
        let budget_per_day = match &a.budget_per_day {
            Some(b) => store::parse_budget(b)?,
            None => Default::default(),
        };
        let now = crate::tasks::clock::now();
        let task = new_task::make(
            &self.cfg,
            new_task::NewTask {
                schedule: a.schedule.clone(),
                time_zone: a.time_zone.clone(),
                prompt: a.prompt.clone(),
                deliver_to: a.deliver_to.clone(),
                budget,
                created_by: format!("agent:{}", self.session_id),
                tainted: taint.is_tainted(),
                taint_sources: taint
                    .first_untrusted_source()
                    .map(str::to_string)
                    .into_iter()
                    .collect(),
                approval_timeout_secs: None,
                missed: None,
                budget_per_day,
                // What the agent may propose stops short of what only the owner sets: a
                // command run before every run, and how the run treats what is held.
                on_held: Default::default(),
                check: None,
            },
            now,
        )?;
        store::update(&self.home, |all| {
            all.tasks.insert(task.id.clone(), task.clone());
            Ok(())
        })?;
        let who = session.gate.attribution()?;
        exec::lock(&self.audit)
            .append(
                airlock_audit::AuditEvent::by("task-added", &self.session_id, &who).with_detail(
                    json!({"task": task.id, "schedule": task.schedule, "time_zone": task.time_zone,
                           "prompt": task.prompt, "deliver_to": task.deliver_to,
                           "created_by": task.created_by, "tainted": task.tainted,
                           "taint_sources": task.taint_sources}),
                ),
            )
            .map_err(|e| anyhow::anyhow!("the task was stored, but its record failed: {e}"))?;
        let schedule = task.parsed()?;
        Ok(format!(
            "scheduled task {}: {}; next run {}",
            task.id,
            schedule.describe(),
            task.state
                .next_due
                .map_or_else(|| "none".into(), |t| schedule.local(t))
        ))
    }
}

impl HostExecutors {
    /// Executors for `session_id`, whose workspace is `workspace` and whose Gate is `gate`.
    /// `audit` is this process's handle on the audit log for execution and proxy records.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        home: Home,
        cfg: Config,
        gate: Arc<crate::live_gate::LiveGate>,
        audit: Arc<Mutex<AuditLog>>,
        store: SqliteStore,
        session_id: String,
        workspace: PathBuf,
        channel: String,
        messages_to: Option<crate::service::caller::Notices>,
        notices: crate::service::caller::Notices,
    ) -> HostExecutors {
        let cfg_approval_timeout = cfg.agent.approval_timeout_secs;
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
                extras: EgressExtras::default(),
                commit_approval_timeout: Duration::from_secs(cfg_approval_timeout),
                notices,
                egress: Mutex::new(None),
            }),
            delivered: Mutex::new(Vec::new()),
            files: Mutex::new(Vec::new()),
            messages_to,
            memory: None,
            conversation_with: None,
            subagents: None,
        }
    }

    /// Stop the session's egress proxy, once its last records are written (the session
    /// is closing).
    pub fn finish_egress(&self) {
        self.shared.finish_egress();
    }

    /// Deliver messages to `destination` (the third party the conversation is with) to
    /// the conversation.
    pub fn with_conversation(mut self, destination: String) -> HostExecutors {
        self.conversation_with = Some(destination);
        self
    }

    /// Let the session start sub-agents.
    pub fn with_subagents(mut self, subagents: crate::subagents::SubAgents) -> HostExecutors {
        self.subagents = Some(subagents);
        self
    }

    /// Kill every sub-agent still running and wait for it (the turn that started it ended).
    pub fn end_subagents(&self) {
        if let Some(s) = &self.subagents {
            s.end_all();
        }
    }

    /// Give the loop's memory tools the session's memory.
    pub fn with_memory(mut self, memory: crate::memory_executor::HostMemory) -> HostExecutors {
        self.memory = Some(memory);
        self
    }

    /// Wait this long for an answer to a held commit (`airlock run --approval-timeout`).
    pub fn with_commit_approval_timeout(mut self, timeout: Duration) -> HostExecutors {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.commit_approval_timeout = timeout;
        }
        self
    }

    /// Add `extras` to every egress proxy these executors start.
    pub fn with_egress_extras(mut self, extras: EgressExtras) -> HostExecutors {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.extras = extras;
        }
        self
    }

    /// The files delivered to the conversation since the last call (taken: each is sent
    /// once).
    pub fn take_files(&self) -> Vec<SentFile> {
        std::mem::take(&mut *self.files.lock().unwrap_or_else(|p| p.into_inner()))
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
    async fn spawn_agent(&self, auth: Authorized<AgentSpawnAction>) -> ToolOutput {
        match &self.subagents {
            // Opening a child's session, Gate and workspace is blocking work.
            Some(s) => tokio::task::block_in_place(|| s.spawn(auth)),
            None => ToolOutput::not_run("this session cannot start sub-agents"),
        }
    }

    async fn wait_agent(&self, id: &str, timeout: Duration) -> ToolOutput {
        match &self.subagents {
            Some(s) => s.wait(id, timeout).await,
            None => ToolOutput::not_run(format!("there is no sub-agent `{id}` of this session")),
        }
    }

    /// An allowed `task.schedule` becomes a task in the store. The session's taint at
    /// this moment travels with it: a task proposed after untrusted content reads its
    /// prompt as untrusted content in every run.
    async fn schedule_task(&self, auth: Authorized<TaskScheduleAction>) -> ToolOutput {
        let shared = self.shared.clone();
        let made = tokio::task::spawn_blocking(move || shared.schedule_task(auth.action()))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))
            .and_then(|r| r);
        match made {
            Ok(text) => ToolOutput::ok(text),
            Err(e) => ToolOutput::error(format!("the task was not scheduled: {e:#}")),
        }
    }

    fn memory(&self) -> Option<airlock_agent::agent::SessionMemory<'_>> {
        self.memory
            .as_ref()
            .map(crate::memory_executor::HostMemory::session_memory)
    }

    async fn shell(&self, auth: Authorized<ExecAction>, timeout: Duration) -> ToolOutput {
        let cancel = CancelOnDrop::new(self.shared.run_dir());
        let flag = cancel.flag.clone();
        let shared = self.shared.clone();
        let result = tokio::task::spawn_blocking(move || shared.run_shell(&auth, timeout, &flag))
            .await
            .map_err(|e| anyhow::anyhow!("the sandbox worker failed: {e}"))
            .and_then(|r| r);
        cancel.disarm();
        // An error here means the sandbox did not run the command (it refused, or could
        // not be built): the transcript must not say it ran.
        result.unwrap_or_else(|e| ToolOutput::not_run(format!("{e:#}")))
    }

    async fn fetch(
        &self,
        auth: Authorized<NetRequestAction>,
        body: Option<String>,
        timeout: Duration,
    ) -> ToolOutput {
        // The proxy decides again; a request the Gate asked about and the operator approved
        // would be asked about again there. The run's answer: yes for exactly the request
        // the Gate authorized (see `AuthorizedPayload`), once, and no for anything else.
        let hook: Arc<dyn ApprovalHook> = Arc::new(AuthorizedPayload {
            action_hash: auth.action_hash().to_string(),
            action: auth.action().clone(),
            answered: AtomicBool::new(false),
            expires_at: crate::runtime::now_unix() + timeout.as_secs() + 1,
        });
        let shared = self.shared.clone();
        let started = tokio::task::spawn_blocking(move || shared.take_egress(Some(hook))).await;
        let egress = match started {
            Ok(Ok(e)) => FinishOnDrop(Some(e)),
            Ok(Err(e)) => return ToolOutput::error(format!("{e:#}")),
            Err(e) => return ToolOutput::error(format!("the proxy worker failed: {e}")),
        };
        let Some(socket) = egress.0.as_ref().map(|e| e.socket_path().to_path_buf()) else {
            return ToolOutput::error("the egress proxy is not running");
        };
        let action = auth.action().clone();
        let ca_pem = match crate::operator_file::read_text(
            &self.shared.home.config.join(CA_CERT_FILE),
            crate::operator_file::CERTIFICATE,
        ) {
            Ok(p) => p,
            Err(e) => {
                return ToolOutput::error(format!(
                    "cannot read Airlock's CA certificate: {e}\nhelp: run `airlock init` again"
                ))
            }
        };
        let sent = tokio::time::timeout(
            timeout,
            crate::proxy_fetch::send(&socket, &ca_pem, &action, body),
        )
        .await;
        // Wait for the proxy's audit records before the result goes back to the loop.
        let mut egress = egress;
        if let Some(e) = egress.0.take() {
            let shared = self.shared.clone();
            let _ = tokio::task::spawn_blocking(move || shared.keep_egress(e)).await;
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

    async fn write_file(
        &self,
        auth: &Authorized<FsWriteAction>,
        content: &[u8],
        _timeout: Duration,
    ) -> Option<ToolOutput> {
        let (shared, action, content) =
            (self.shared.clone(), auth.action().clone(), content.to_vec());
        // Set when the loop drops this future (kill, timeout): a held commit withdraws.
        let cancel = CancelFlag::default();
        let flag = cancel.0.clone();
        let result =
            tokio::task::spawn_blocking(move || shared.stage_write(&action, &content, &flag))
                .await
                .unwrap_or_else(|e| Err(format!("the file worker failed: {e}")));
        cancel.disarm();
        Some(result.map_or_else(ToolOutput::error, ToolOutput::ok))
    }

    async fn send_message(
        &self,
        auth: Authorized<MessageSendAction>,
        _timeout: Duration,
    ) -> ToolOutput {
        let m = auth.action();
        let own = m.destination.is_empty()
            || m.destination == "owner"
            || m.destination == self.shared.channel
            || self.conversation_with.as_deref() == Some(m.destination.as_str());
        if !own {
            return ToolOutput::error(format!(
                "no channel is configured for destination `{}`\nhelp: this conversation can only reply to its own channel ({})",
                m.destination, self.shared.channel
            ));
        }
        let file = match &m.attachment {
            Some(a) => match self.attached_file(a) {
                Ok(f) => Some(f),
                Err(e) => return ToolOutput::error(e),
            },
            None => None,
        };
        if let Some(to) = &self.messages_to {
            to.line(&format!(
                "message: {}",
                airlock_core::terminal_text::escape_block(&m.text)
            ));
            if let Some(f) = &file {
                to.line(&format!(
                    "file: {} ({} bytes)",
                    airlock_core::terminal_text::escape_line(&f.name),
                    f.bytes.len()
                ));
            }
        }
        if let Some(f) = file {
            self.files.lock().unwrap_or_else(|p| p.into_inner()).push(f);
        }
        self.delivered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(m.text.clone());
        ToolOutput::ok(format!("delivered to {}", self.shared.channel))
    }
}

/// A workspace file a message carries out, read again after the Gate's decision.
#[derive(Debug, Clone)]
pub struct SentFile {
    /// The file's name (its last path component, with anything but letters, digits, `.`,
    /// `-` and `_` replaced), for the platform to show.
    pub name: String,
    pub bytes: Vec<u8>,
}

/// Files one conversation may send before the host's channel has sent them (a turn's).
const MAX_PENDING_FILES: usize = 10;

impl HostExecutors {
    /// Read the authorized attachment again, beneath the workspace root, and check it
    /// is the content whose hash the Gate (and any approver) saw.
    fn attached_file(
        &self,
        a: &airlock_core::action::MessageAttachment,
    ) -> Result<SentFile, String> {
        use airlock_agent::agent::MAX_ATTACHMENT_BYTES;
        if self.files.lock().unwrap_or_else(|p| p.into_inner()).len() >= MAX_PENDING_FILES {
            return Err(format!(
                "at most {MAX_PENDING_FILES} files are sent in one turn\nhelp: put them in one archive and send that"
            ));
        }
        let files = airlock_agent::agent::WorkspaceFiles::open(&self.shared.workspace)
            .map_err(|e| e.to_string())?;
        let bytes = files
            .attachment_bytes(&a.path, MAX_ATTACHMENT_BYTES)
            .map_err(|e| e.to_string())?;
        let actual = airlock_core::canonical::sha256_hex(&bytes);
        if actual != a.sha256 {
            return Err(format!(
                "`{}` changed after the Gate decided on it (sha256 {} was decided, the file is now {actual}); nothing was sent\nhelp: send it again",
                a.path, a.sha256
            ));
        }
        let name: String = std::path::Path::new(&a.path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "file".into())
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .take(100)
            .collect();
        Ok(SentFile { name, bytes })
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

    /// The session's proxy for one call, answering asks with `approvals`: the one kept
    /// from the last call, renewed, or a new one.
    fn take_egress(&self, approvals: Option<Arc<dyn ApprovalHook>>) -> anyhow::Result<Egress> {
        let kept = self.egress.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(mut egress) = kept {
            egress.renew(&self.home, approvals, &self.session()?)?;
            return Ok(egress);
        }
        self.start_egress(approvals)
    }

    /// Keep the proxy for the session's next call, once everything the call did through
    /// it is recorded; a proxy still busy at the bound is finished instead.
    fn keep_egress(&self, egress: Egress) {
        if !egress.drain() {
            egress.finish();
            return;
        }
        let mut slot = self.egress.lock().unwrap_or_else(|p| p.into_inner());
        match slot.as_ref() {
            None => *slot = Some(egress),
            Some(_) => {
                drop(slot);
                egress.finish();
            }
        }
    }

    /// Finish the session's kept proxy, waiting for its last records.
    fn finish_egress(&self) {
        let kept = self.egress.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(e) = kept else { return };
        if tokio::runtime::Handle::try_current().is_ok() {
            // Called from an async context, where the proxy's runtime cannot be shut
            // down: on a plain thread, still waited for.
            let _ = std::thread::spawn(move || e.finish()).join();
        } else {
            e.finish();
        }
    }

    fn start_egress(&self, approvals: Option<Arc<dyn ApprovalHook>>) -> anyhow::Result<Egress> {
        let mut setup = EgressSetup::load(&self.home, &[])?;
        setup.approvals = approvals;
        setup.resolver = self.extras.resolver.clone();
        setup.extra_roots_pem = self.extras.extra_roots_pem.clone();
        setup.extra_roots_pem.extend(debug_upstream_roots()?);
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

    /// When Airlock runs as root the sandbox runs as `sandbox.uid`, which must write the
    /// session workspace: give it the workspace directory. The state dir above stays
    /// private (0700). Runs as an ordinary user need nothing.
    fn open_workspace_to_sandbox(&self) -> anyhow::Result<()> {
        use std::os::unix::fs::MetadataExt;
        if !nix::unistd::geteuid().is_root() {
            return Ok(());
        }
        // The owner's own directory (`--workspace DIR`) never changes hands: the run
        // writes only into its overlay layer, which belongs to the sandbox uid.
        if !self.workspace.starts_with(&self.home.state) {
            return Ok(());
        }
        // Only the workspace itself changes hands. The directories above it stay root's
        // alone: the sandbox library hands the helper the workspace as a mount, so the
        // sandbox uid never walks that path.
        let fail = |p: &Path, e: std::io::Error| {
            anyhow::anyhow!(
                "cannot give the session workspace to the sandbox uid {} at {}: {e}",
                self.cfg.sandbox.uid,
                p.display()
            )
        };
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

    /// Stage an authorized file write and settle it as a `workspace.commit`, like a
    /// sandboxed run's changes: nothing reaches the workspace but a commit the Gate
    /// allowed (or the owner approved).
    fn stage_write(
        &self,
        action: &FsWriteAction,
        content: &[u8],
        cancel: &AtomicBool,
    ) -> Result<String, String> {
        use airlock_agent::agent::MAX_WRITE_BYTES;
        if content.len() > MAX_WRITE_BYTES {
            return Err(format!(
                "content is {} bytes, over the {MAX_WRITE_BYTES}-byte limit for file writes\nhelp: write the file in smaller parts",
                content.len()
            ));
        }
        let actual = airlock_agent::agent::content_hash(content);
        if action.content_sha256.as_deref() != Some(actual.as_str()) {
            return Err(format!(
                "the content does not match the approved hash (got {actual}); nothing was written"
            ));
        }
        let path = std::path::Path::new(&action.path);
        let rel = if path.is_absolute() {
            path.strip_prefix(&self.workspace).map_err(|_| {
                format!(
                    "`{}` is outside the session workspace\nhelp: use a path relative to the workspace root",
                    action.path
                )
            })?
        } else {
            path
        };
        let rel =
            airlock_workspace::RelPath::new(rel).map_err(|e| format!("`{}`: {e}", action.path))?;
        let dir = self
            .home
            .state
            .join(crate::transaction::RUNS_DIR)
            .join(format!("{}-write-{}", self.session_id, next_run_number()));
        if let Some(parent) = dir.parent() {
            crate::home::create_private_dir(parent).map_err(|e| e.to_string())?;
        }
        let staged = airlock_workspace::Staging::new(&dir, &self.workspace)
            .and_then(|st| st.write_file(&rel, content, 0o644).map(|()| st))
            .map_err(|e| e.to_string());
        let settled = staged.and_then(|st| {
            let session = self.session().map_err(|e| e.to_string())?;
            let txn = crate::transaction::Transaction {
                home: &self.home,
                cfg: &self.cfg,
                gate: &*self.gate,
                log: &self.audit,
                approval_timeout: self.commit_approval_timeout,
                cancelled: Some(cancel),
                notices: &self.notices,
            };
            Ok(txn.settle(
                &session,
                &self.workspace,
                st.path(),
                None,
                &format!("write_file {}", action.path),
            ))
        });
        // The staging directory is the host's own (nothing sandboxed wrote it).
        let _ = std::fs::remove_dir_all(&dir);
        match settled? {
            crate::transaction::Settled::Committed { checkpoint, .. } => Ok(format!(
                "wrote {} bytes to {} (checkpoint {checkpoint})",
                content.len(),
                action.path
            )),
            crate::transaction::Settled::Unchanged => Ok(format!(
                "{} already has this content; nothing changed",
                action.path
            )),
            other => Err(other.note()),
        }
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
        // In the host, the sandbox takes a slot of `[host] max_sandboxes` before anything
        // is built for it, and gives it back when it has run, before its commit is
        // settled (a held commit waits for a person, not for a sandbox). Nothing else
        // holds a slot for the session, so a sub-agent's call never waits on its parent.
        let run_dir = self.run_dir();
        let given_up = || cancel.load(Ordering::Acquire) || run_dir.join(KILLED_MARKER).exists();
        let slot = crate::host::sandbox_slots::enter_for(&self.home, &given_up)
            .map_err(|e| refuse(e.into()))?;
        self.open_workspace_to_sandbox().map_err(refuse)?;
        let cwd = self.command_cwd(&token.action().cwd).map_err(refuse)?;
        let mut profile = exec::sandbox_profile(
            &self.home,
            &self.cfg,
            self.workspace.clone(),
            cwd,
            timeout.as_secs().max(1),
        );
        // The command writes into its own layer; its change set is decided after it ends.
        let run_id = format!("{}-{}", session.id, next_run_number());
        let layers =
            crate::transaction::create_overlay(&self.home, &self.cfg, &run_id).map_err(refuse)?;
        profile.workspace_overlay = Some(layers.clone());
        let layers = crate::transaction::RunLayers::new(layers);
        let egress = self
            .take_egress(None)
            .and_then(|e| e.configure(&mut profile).map(|()| e).map_err(Into::into))
            .map_err(refuse)?;
        let guard = match exec::register_run(&egress, &self.store, &session.id) {
            Ok(g) => g,
            Err(e) => return Err(refuse(e)),
        };
        if cancel.load(Ordering::Acquire) {
            guard.mark_killed();
        }
        let started = std::time::SystemTime::now();
        let end = exec::run_authorized(
            (&self.home, &self.cfg),
            token,
            &profile,
            &session,
            &self.audit,
            &egress,
            &guard,
            OutputMode::Capture,
        );
        // A killed session's proxy socket is cut (`airlock kill`): it serves no next call.
        let killed = guard.was_killed();
        drop(guard);
        drop(slot);
        if killed {
            egress.finish();
        } else {
            self.keep_egress(egress);
        }
        // The change set is decided in the session as it is now: the same taint the
        // command was decided with (its output is not observed yet).
        let settled = match &end {
            Ok(RunEnd::Finished(_)) => {
                let txn = crate::transaction::Transaction {
                    home: &self.home,
                    cfg: &self.cfg,
                    gate: &*self.gate,
                    log: &self.audit,
                    approval_timeout: self.commit_approval_timeout,
                    cancelled: Some(cancel),
                    notices: &self.notices,
                };
                let session = self.session()?;
                Some(txn.settle(
                    &session,
                    &self.workspace,
                    &layers.upper(),
                    Some(started),
                    &token.action().command,
                ))
            }
            _ => None,
        };
        drop(layers);
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
                if let Some(s) = settled.filter(|s| *s != crate::transaction::Settled::Unchanged) {
                    text.push_str(&format!("\n[{}]", s.note()));
                }
                ToolOutput {
                    text,
                    is_error: o.status != 0,
                    ran: true,
                }
            }
        })
    }
}

/// A number unique within this process, for the names of a session's run layers.
fn next_run_number() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Answers the proxy's *ask* for the one request the Gate already authorized, once.
///
/// The proxy sees the request as sent on the wire, with the header names the fetch client
/// added (`host`, `content-length`), so its hash differs from the loop's. The binding is
/// therefore what the loop authorized and the client sends verbatim: the method, the URL
/// (normalized the same way on both sides), the body's size and its SHA-256; and it
/// answers one request only, on a proxy that serves this fetch alone.
struct AuthorizedPayload {
    action_hash: String,
    action: NetRequestAction,
    answered: AtomicBool,
    expires_at: u64,
}

/// `url` as the URL parser normalizes it (host case, default port, empty path).
fn normalized_url(url: &str) -> Option<String> {
    url::Url::parse(url).ok().map(|u| u.to_string())
}

impl AuthorizedPayload {
    fn matches(&self, seen: &NetRequestAction) -> bool {
        seen.method.eq_ignore_ascii_case(&self.action.method)
            && seen.body_bytes == self.action.body_bytes
            && seen.body_sha256 == self.action.body_sha256
            && normalized_url(&seen.url).is_some()
            && normalized_url(&seen.url) == normalized_url(&self.action.url)
    }
}

impl ApprovalHook for AuthorizedPayload {
    fn request(&self, req: ProxyApprovalRequest) -> BoxFuture<'static, Option<Approval>> {
        let fits = req.action_hash == self.action_hash || self.matches(&req.action);
        let first = fits && !self.answered.swap(true, Ordering::AcqRel);
        let answer = first.then(|| Approval {
            // The agent loop already had this payload approved (or allowed) and recorded
            // that; the proxy's own record names the owner at the command line.
            approver: airlock_core::Principal::Owner,
            via: airlock_core::Via::cli(),
            payload_hash: req.action_hash.clone(),
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

/// A flag set when dropped armed: the loop abandoned the call.
#[derive(Default)]
struct CancelFlag(Arc<AtomicBool>, bool);

impl CancelFlag {
    fn disarm(mut self) {
        self.1 = true;
    }
}

impl Drop for CancelFlag {
    fn drop(&mut self) {
        if !self.1 {
            self.0.store(true, Ordering::Release);
        }
    }
}

impl Drop for Shared {
    /// A session dropped without [`HostExecutors::finish_egress`] (a panic, an error on
    /// the way out) still stops its proxy, on a plain thread: the proxy's runtime cannot
    /// be shut down from an async context, where the last share may be dropped.
    fn drop(&mut self) {
        let kept = self
            .egress
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        drop(FinishOnDrop(kept));
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

/// Keep at most [`MAX_RESULT_BYTES`] of `text`, on a character boundary.
fn cut(text: String) -> String {
    crate::proxy_fetch::cut(text, MAX_RESULT_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(url: &str, body: &str) -> NetRequestAction {
        NetRequestAction {
            method: "POST".into(),
            url: url.into(),
            headers: vec!["content-length".into(), "host".into()],
            body_bytes: body.len() as u64,
            body_sha256: Some(airlock_core::canonical::sha256_hex(body.as_bytes())),
        }
    }

    #[test]
    fn only_the_authorized_request_is_answered_yes() {
        let authorized = AuthorizedPayload {
            action_hash: "sha256:authorized".into(),
            action: post("https://API.example.com/collect", "amount=100"),
            answered: AtomicBool::new(false),
            expires_at: u64::MAX,
        };
        // What the client sends verbatim, the host spelled differently: the same request.
        assert!(authorized.matches(&post("https://api.example.com:443/collect", "amount=100")));
        // Same method, URL and length, other bytes: not what was authorized.
        assert!(!authorized.matches(&post("https://api.example.com/collect", "amount=999")));
        assert!(!authorized.matches(&post("https://api.example.com/other", "amount=100")));
    }
}
