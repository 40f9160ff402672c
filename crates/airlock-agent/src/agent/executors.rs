//! What the binary supplies to run actions this crate cannot run itself.
//!
//! Shell commands run in the sandbox, HTTP requests go through the egress proxy, and
//! messages go out through a channel; those live in other crates, which this one must not
//! depend on (DESIGN.md §3). Each method takes the [`Authorized`] token the Gate minted,
//! so nothing reaches an executor without a recorded decision.

use std::time::Duration;

use async_trait::async_trait;

use airlock_core::action::{
    AgentSpawnAction, ExecAction, FsWriteAction, MessageSendAction, NetRequestAction,
    TaskScheduleAction,
};
use airlock_core::Authorized;

/// The result of one tool call, as the model will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// Output text (stdout/stderr, response body, delivery note, or the error).
    pub text: String,
    /// True when the call failed.
    pub is_error: bool,
    /// False when the action never started (the sandbox or the proxy could not be set
    /// up): the transcript then says it did not run.
    pub ran: bool,
}

impl ToolOutput {
    /// A successful result.
    pub fn ok(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            text: text.into(),
            is_error: false,
            ran: true,
        }
    }

    /// A failed call.
    pub fn error(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            text: text.into(),
            is_error: true,
            ran: true,
        }
    }

    /// A call whose action never started (nothing of it ran).
    pub fn not_run(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            text: text.into(),
            is_error: true,
            ran: false,
        }
    }
}

/// Runs the authorized actions that need the sandbox, the proxy or a channel.
///
/// The loop may drop a returned future before it completes (the session was killed, or the
/// call ran past its timeout); implementations must then stop the work they started, for
/// example by killing the sandboxed process tree when the future is dropped.
#[async_trait]
pub trait Executors: Send + Sync {
    /// Run a shell command in the session's sandbox, for at most `timeout`.
    async fn shell(&self, auth: Authorized<ExecAction>, timeout: Duration) -> ToolOutput;

    /// Make an HTTP request through the egress proxy. `body` is the request body the model
    /// proposed; its length is bound in the authorized action.
    async fn fetch(
        &self,
        auth: Authorized<NetRequestAction>,
        body: Option<String>,
        timeout: Duration,
    ) -> ToolOutput;

    /// Deliver a message through its channel.
    async fn send_message(
        &self,
        auth: Authorized<MessageSendAction>,
        timeout: Duration,
    ) -> ToolOutput;

    /// Write a file for `write_file`/`edit_file` through the host's workspace transaction:
    /// staged, decided as a `workspace.commit`, and committed as a checkpoint. `content`
    /// is the payload whose hash `auth` binds; the host checks it again.
    ///
    /// `None` (the default): this host keeps no transactions, and the loop writes the file
    /// itself with [`super::WorkspaceFiles`].
    async fn write_file(
        &self,
        _auth: &Authorized<FsWriteAction>,
        _content: &[u8],
        _timeout: Duration,
    ) -> Option<ToolOutput> {
        None
    }

    /// Make the scheduled task the Gate (and the owner) let through. `None`-like default:
    /// this host keeps no scheduled tasks, and the tool says so.
    async fn schedule_task(&self, _auth: Authorized<TaskScheduleAction>) -> ToolOutput {
        ToolOutput::not_run("this host keeps no scheduled tasks; run the session in `airlock serve`'s host or with `airlock run`")
    }

    /// The memory of this session's namespace; `None` (the default) when the host keeps
    /// no memory, and the memory tools then answer that it is not available.
    fn memory(&self) -> Option<super::memory_exec::SessionMemory<'_>> {
        None
    }

    /// Start the sub-agent the Gate allowed: a child session under this one, which
    /// inherits its taint, runs on a budget drawn from this session's, with only the
    /// action's tools (and subfolder), and is killed with it. Returns at once with the
    /// child's id for [`Executors::wait_agent`], or the refusal (a depth or concurrency
    /// limit, no budget left). The default: this host runs no sub-agents.
    async fn spawn_agent(&self, _auth: Authorized<AgentSpawnAction>) -> ToolOutput {
        ToolOutput::not_run("this host runs no sub-agents")
    }

    /// Wait up to `timeout` for child `id` of this session to end; its final answer, or
    /// how it ended. The loop gives it to the model as untrusted content.
    async fn wait_agent(&self, id: &str, _timeout: Duration) -> ToolOutput {
        ToolOutput::not_run(format!("there is no sub-agent `{id}` on this host"))
    }
}
