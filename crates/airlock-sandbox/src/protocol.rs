//! Messages between the host and `airlock-sandbox-init`: one JSON object per line over two
//! UNIX socket pairs the host passes as file descriptors.
//!
//! * fd 3, the **control** channel, host <-> the helper's first stage: the request, a kill
//!   command, and the final exit status (or a setup failure of the first stage).
//! * fd 4, the **handshake** channel, host <-> the payload process: the attestation (or a
//!   setup failure inside the sandbox), then the host's verdict, which carries the command
//!   ([`ExecOrder`]). The payload closes it on `execve`.

use std::io::{self, BufRead, Read, Write};
use std::path::PathBuf;

use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::attestation::{Attestation, CgroupReport};
use crate::mount_plan::MountPlan;
use crate::profile::SandboxProfile;

/// File descriptor of the control channel in the helper.
pub const CONTROL_FD: i32 = 3;
/// File descriptor of the handshake channel in the helper.
pub const HANDSHAKE_FD: i32 = 4;
/// File descriptor of the egress proxy's socket (an `O_PATH` descriptor) in the helper,
/// present only when the profile has a relay.
pub const RELAY_FD: i32 = 5;
/// File descriptor of the sealed memory file holding the contents of the mount plan's
/// [`crate::mount_plan::MountStep::File`], present only when the plan has one.
pub const FILE_FD: i32 = 6;
/// File descriptor of the workspace as a detached mount (`open_tree` clone) that a root
/// host made for the helper, present only when [`InitRequest::workspace_tree`] says so.
/// A root host's session workspaces lie below directories the sandbox uid cannot
/// traverse; with this descriptor the helper never walks that path, and no host directory
/// needs loosening.
pub const WORKSPACE_FD: i32 = 7;
/// File descriptor of the workspace overlay's run directory (the parent of its upper and
/// work layers) as a detached mount that a root host made for the helper, present only
/// when [`InitRequest::layers_tree`] says so: like the workspace, it lies below root's
/// private state dir.
pub const OVERLAY_FD: i32 = 8;
/// The largest message either side accepts.
pub const MAX_MESSAGE: usize = 16 << 20;

/// What the host asks the helper to build and run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InitRequest {
    pub profile: SandboxProfile,
    pub plan: MountPlan,
    /// The canonical workspace (mounted at the same path).
    pub workspace: PathBuf,
    /// Working directory inside the sandbox.
    pub cwd: PathBuf,
    /// Whether cgroup limits apply (decided and applied by the host).
    pub cgroup: CgroupReport,
    /// The host passed the workspace as a detached mount on [`WORKSPACE_FD`].
    #[serde(default)]
    pub workspace_tree: bool,
    /// The host passed the overlay's run directory as a detached mount on [`OVERLAY_FD`].
    #[serde(default)]
    pub layers_tree: bool,
    /// A pooled sandbox's base ([`InitRequest::base`]): the helper builds it as far as
    /// nothing depends on a run, says [`PayloadMessage::Staged`], and waits for the run's
    /// own request ([`Attach`]), whose base must equal this one.
    #[serde(default)]
    pub pooled: bool,
}

impl InitRequest {
    /// What of this request a pooled sandbox is built from, when the first `base_len` steps
    /// of its plan are the ones that do not depend on the run
    /// ([`MountPlan::base_for_profile`]): everything but the workspace (its steps, its
    /// overlay, its descriptors), the working directory, the environment, the proxy
    /// socket, and what only the host reads (timeout, output cap). Two requests with equal
    /// bases get the same sandbox up to what [`Attach`] brings.
    pub fn base(&self, base_len: usize) -> InitRequest {
        let mut base = self.clone();
        base.profile = self.profile.base();
        base.plan.steps.truncate(base_len);
        base.workspace = "/".into();
        base.cwd = "/".into();
        base.workspace_tree = false;
        base.layers_tree = false;
        base.pooled = true;
        base
    }
}

/// Host -> a pooled sandbox's PID 1, on the handshake channel: the run's whole request.
/// It comes right after one byte sent with the run's descriptors (`SCM_RIGHTS`), in this
/// order and only those the request needs: the proxy socket (for a relay), the workspace
/// tree, the overlay's layers tree.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attach {
    pub request: InitRequest,
}

/// What the payload executes, sent with the go-ahead: the sandbox is built and attested
/// before the command is known, so the host can build it while the Gate decides.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecOrder {
    /// Program and arguments; `argv[0]` is the absolute path executed unless `program`
    /// says otherwise.
    pub argv: Vec<String>,
    /// Absolute path executed, when `argv[0]` is the name as typed: a command run without
    /// the shell (see [`crate::direct_exec`]), which also gets the `PWD` the shell would
    /// have set.
    #[serde(default)]
    pub program: Option<String>,
}

/// Host -> first stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostCommand {
    /// Kill the sandbox's PID 1 (and so every process in it).
    Kill,
}

/// First stage -> host.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageMessage {
    /// The first stage could not create the sandbox.
    Failed { stage: String, message: String },
    /// The sandbox's PID 1 is gone (with every process in it). `status` is the payload's
    /// exit code, or 128 + signal.
    Exited { status: i32 },
}

/// Sandbox (PID 1 or the payload) -> host.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PayloadMessage {
    /// A pooled sandbox is built as far as its base goes and waits for [`Attach`].
    Staged,
    Attestation(Box<Attestation>),
    Failed {
        stage: String,
        message: String,
    },
}

/// Host -> payload.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Go(Box<ExecOrder>),
    Abort,
}

/// Write one message as a JSON line.
pub fn send<T: Serialize>(w: &mut impl Write, msg: &T) -> io::Result<()> {
    let mut line = serde_json::to_vec(msg).map_err(io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line)?;
    w.flush()
}

/// Read one JSON line; `Ok(None)` at end of stream.
pub fn recv<T: DeserializeOwned>(r: &mut impl BufRead) -> io::Result<Option<T>> {
    let mut line = Vec::new();
    let n = r
        .by_ref()
        .take(MAX_MESSAGE as u64)
        .read_until(b'\n', &mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if line.last() != Some(&b'\n') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "message truncated or too large",
        ));
    }
    serde_json::from_slice(&line)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}
