//! The agent loop: the model proposes, the Gate decides, Airlock runs and records.
//!
//! [`Agent::run_turn`] takes one user message for a stored session and works until the
//! model stops calling tools. Each tool call becomes a typed action (`shell` → `exec`,
//! `read_file`/`list_dir` → `fs.read`, `write_file`/`edit_file` → `fs.write` bound to the
//! content hash, `fetch` → `net.request`, `send_message` → `message.send`, `memory_save`/
//! `memory_forget` → `memory.write`, `memory_search`/`memory_get` → `memory.read`) and goes
//! to the Gate, which records the decision in the audit log before anything runs:
//! - **allow**: the action runs with the token the Gate minted — file tools here
//!   ([`WorkspaceFiles`]), shell, fetch and messages through the binary's [`Executors`];
//! - **ask**: a request with a human preview goes to the approvals queue and the loop waits
//!   for it; an approval runs exactly the held payload, anything else is a refusal;
//! - **deny**: the reason goes back to the model as a tool error, so it can adapt.
//!
//! Memory is the exception to waiting: a `memory.write` the Gate asks about becomes a held
//! change for `airlock memory review` at once, and memory reaches the model only inside
//! `<memory-data>` blocks carrying provenance (pinned memory at the top of each turn).
//!
//! Every result is untrusted content: it taints the session and is stored in the transcript.
//! Budgets (turns, tokens, cost, wall time, tool calls) are charged in the store, where the
//! model cannot lower them; a per-tool rate limit and a repeated-action breaker stop loops.
//! A limit, a kill or a provider failure ends the turn with a typed [`Outcome`], and
//! everything committed before it stays committed.

mod approval;
mod call;
mod config;
mod executors;
mod grant_pattern;
mod history;
mod memory_call;
mod memory_context;
mod memory_exec;
mod memory_tools;
mod outcome;
mod preview;
mod run;
mod subagent_tools;
mod tools;
mod workspace;

pub use airlock_core::gate_source::{CurrentGate, GateSource};
pub use config::{AgentConfig, PriceTable};
pub use executors::{Executors, ToolOutput};
pub use grant_pattern::{grant_pattern, GrantPattern, NotScopable};
pub use memory_context::{data_block, pinned_block, PINNED_PREAMBLE};
pub use memory_exec::{MemoryReadResult, SessionMemory};
pub use memory_tools::{
    forget_call, MemoryLookup, MemoryPlan, MemoryReadCall, MemoryWriteCall, MEMORY_TOOL_NAMES,
};
pub use outcome::{AgentError, LimitKind, LimitScope, Outcome, ToolCallReport, TurnReport};
pub use preview::preview;
pub use run::{Agent, TurnInput};
pub use subagent_tools::{known_tools, MAX_INSTRUCTIONS_BYTES, SUBAGENT_TOOL_NAMES};
pub use tools::{
    content_hash, definitions, plan, ListDir, PlannedCall, ReadFile, MAX_ATTACHMENT_BYTES,
    TOOL_NAMES,
};
pub use workspace::{
    FileToolError, WorkspaceFiles, MAX_LIST_ENTRIES, MAX_READ_BYTES, MAX_WRITE_BYTES,
};
