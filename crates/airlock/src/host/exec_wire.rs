//! The wire format of `exec` through the host, on `<state>/host/exec.sock`.
//!
//! HTTP cannot carry descriptors, and `exec` hands the host its very standard input, output
//! and error (so a command run through the host writes to the terminal, pipe or file the
//! caller has, as it does embedded). So `exec` has a socket of its own, beside the API's,
//! behind the same two walls (see [`super::socket`]):
//!
//! 1. the client sends a 4-byte big-endian length and that many bytes of [`ExecRequest`]
//!    JSON, with its descriptors 0, 1 and 2 attached to the first bytes (`SCM_RIGHTS`);
//! 2. the host answers one JSON line, [`ExecAnswer`], when the run is over. A client that
//!    goes away before that ends its run (the run's process tree is killed).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The most request bytes the host reads: the largest command and room for the rest.
pub const MAX_REQUEST_BYTES: usize = airlock_core::action::MAX_ACTION_JSON_BYTES + 64 * 1024;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecRequest {
    /// The one command string the Gate parses (never an argument vector: the client has
    /// already quoted several words into one line).
    pub command: String,
    /// `--workspace`, absolute; the client's working directory when absent.
    pub workspace: Option<PathBuf>,
    /// The client's working directory, absolute.
    pub cwd: PathBuf,
    pub timeout: Option<u64>,
    pub profile: Option<String>,
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
}
