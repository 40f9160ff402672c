//! The wire format of `exec`, `run` and `chat` through the host, on `<state>/host/exec.sock`.
//!
//! HTTP cannot carry descriptors, and `exec` hands the host its very standard input, output
//! and error (so a command run through the host writes to the terminal, pipe or file the
//! caller has, as it does embedded). So `exec` has a socket of its own, beside the API's,
//! behind the same two walls (the socket's dir is private to the host's owner, and the host
//! checks each peer's uid):
//!
//! 1. the client sends a 4-byte big-endian length and that many bytes of [`ExecRequest`]
//!    JSON, with its descriptors 0, 1 and 2 attached to the first bytes (`SCM_RIGHTS`);
//! 2. the host answers one JSON line, [`ExecAnswer`], when the run is over. A client that
//!    goes away before that ends its run (the run's process tree is killed).
//!
//! The request is a [`HostRequest`]: an `exec`, or an agent front end (`run`, `chat`),
//! which needs the caller's terminal for the same reason.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The most request bytes the host reads: the largest command and room for the rest.
pub const MAX_REQUEST_BYTES: usize = airlock_core::action::MAX_ACTION_JSON_BYTES + 64 * 1024;

/// What the client asks the host to run with its descriptors.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum HostRequest {
    Exec(ExecRequest),
    Agent(AgentRequest),
}

/// One command to run, as the command line parsed it (embedded) or the host received it
/// (the host's exec socket).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecRequest {
    /// The one command string the Gate parses (never an argument vector: the command line
    /// has already quoted several words into one line).
    pub command: String,
    /// `--workspace`, absolute; the caller's working directory when absent.
    pub workspace: Option<PathBuf>,
    /// The caller's working directory, absolute.
    pub cwd: PathBuf,
    pub timeout: Option<u64>,
    pub profile: Option<String>,
    /// Secrets whose placeholders the run gets (`--secret NAME`, repeatable).
    #[serde(default)]
    pub secrets: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecAnswer {
    /// The exit status, as `airlock exec` embedded would have exited.
    pub exit: Option<i32>,
    /// Why the host did not run the command; `limit` names the setting when a limit did.
    pub error: Option<String>,
    pub help: Option<String>,
    pub limit: Option<String>,
    /// The host refused the request because it is stopping, before it read any of it:
    /// nothing ran, so the client may run it another way (once the host is gone, embedded).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopping: bool,
}

/// `airlock run` or `airlock chat` through the host: the options as the client parsed them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentRequest {
    /// `chat` when true, else `run`.
    pub chat: bool,
    pub session: Option<String>,
    pub approval_timeout: Option<u64>,
    pub profile: Option<String>,
    /// `run --json`.
    #[serde(default)]
    pub json: bool,
    /// `run --json --stream-events` (the web page's runs).
    #[serde(default)]
    pub stream_events: bool,
    /// `--workspace`, absolute.
    pub workspace: Option<PathBuf>,
    /// `run`'s prompt; absent for `chat`.
    pub prompt: Option<String>,
    /// The client's working directory, absolute.
    pub cwd: PathBuf,
    /// The client's values of the variables the front ends read ([`AGENT_ENV`] only): the
    /// model's overrides, which the client's shell set for this one command.
    #[serde(default)]
    pub env: Vec<(String, String)>,
}

/// The variables an agent front end takes from its caller's environment, and so the only
/// ones the host passes on from a client: the model's overrides (`AIRLOCK_API_KEY`
/// included: the socket is the operator's alone), the terminal's kind and the language.
pub const AGENT_ENV: &[&str] = &[
    "AIRLOCK_PROVIDER",
    "AIRLOCK_MODEL",
    "AIRLOCK_BASE_URL",
    "AIRLOCK_API_KEY",
    "AIRLOCK_DEBUG_UPSTREAM_ROOTS",
    "TERM",
    "NO_COLOR",
    "LANG",
    "LC_ALL",
];
