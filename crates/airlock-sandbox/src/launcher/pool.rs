//! A sandbox built ahead of any run, as far as nothing depends on the run
//! ([`crate::Sandbox::build_pooled`]), and given one run ([`PooledSandbox::attach`]).
//!
//! Built ahead: the helper and its namespaces, PID 1, loopback, the plan's fixed steps
//! ([`MountPlan::base_for_profile`]: the read-only system binds, `/etc` copies, `/dev`,
//! `/proc`, `/tmp`, the proxy's CA). Attached with the run, before anything of it runs:
//! the workspace (its descriptors and per-run overlay), the working directory, the
//! environment and the proxy socket. From the attach on, the sandbox's PID 1 does what a
//! sandbox built for the run does (workspace steps, capabilities dropped, relay, payload,
//! confinement), and the payload's attestation is checked against the run's whole
//! profile and plan, the attached parts included ([`crate::attestation::AttachedReport`]).
//!
//! A pooled sandbox serves one run: [`PooledSandbox::attach`] consumes it, and dropping
//! an unused one kills it. It dies with the process that built it, as any sandbox does:
//! stage 0 kills PID 1 when its control channel closes.

use std::io::BufReader;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

use super::spawn::SpawnedChild;
use super::{setup_error, RunParts};
use crate::cgroup::RunCgroup;
use crate::error::SandboxError;
use crate::output::{OutputCap, OutputMode};
use crate::profile::SandboxProfile;
use crate::protocol::{self, Attach, HostCommand, InitRequest, PayloadMessage};
use crate::running::{PreparedRun, Running};

/// How long a pooled sandbox may take to build its base.
const STAGE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A sandbox built up to its base, waiting for one run (see the module documentation).
pub struct PooledSandbox {
    /// The started helper; taken by the one run the sandbox serves.
    helper: Option<Helper>,
    /// The base it was built from (`InitRequest::base`).
    base: InitRequest,
    /// SHA-256 of the plan's file contents (the proxy's CA), which the request leaves out.
    file_digest: String,
}

impl std::fmt::Debug for PooledSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledSandbox")
            .field("pid", &self.pid())
            .finish_non_exhaustive()
    }
}

/// The started helper of a pooled sandbox and its channels.
struct Helper {
    child: SpawnedChild,
    control: UnixStream,
    handshake: UnixStream,
    cgroup: Option<RunCgroup>,
}

impl Helper {
    /// The helper as a run holds it, its output going to `output` under `cap` bytes.
    fn into_running(mut self, output: OutputMode, cap: u64) -> Running {
        let (out, err) = (self.child.stdout.take(), self.child.stderr.take());
        let mut running = Running {
            child: self.child,
            control: self.control,
            handshake: self.handshake,
            pumps: [None, None],
            cap: OutputCap::new(cap),
            cgroup: self.cgroup,
            status: None,
            deferred: None,
        };
        running.start_pumps(out, err, output);
        running
    }
}

/// SHA-256 (hex) of the plan's file contents, or of nothing.
pub(crate) fn file_digest(contents: Option<&[u8]>) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(contents.unwrap_or_default());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    match contents {
        Some(_) => hex,
        None => "none".into(),
    }
}

/// What a sandbox for `profile` is built from before any run: two profiles with the same
/// key are served by the same pooled sandboxes. A profile whose key changed (another
/// config, another CA, another `/etc`) no longer fits the sandboxes pooled for the old one.
pub fn pool_key(profile: &SandboxProfile) -> Result<String, SandboxError> {
    let mut plan = crate::MountPlan::base_for_profile(profile)?;
    let digest = file_digest(plan.file_contents.take().as_deref());
    let base = InitRequest {
        profile: profile.base(),
        plan,
        workspace: "/".into(),
        cwd: "/".into(),
        cgroup: crate::CgroupReport::Unavailable {
            reason: String::new(),
        },
        workspace_tree: false,
        layers_tree: false,
        pooled: true,
    };
    key_of(&base, &digest)
}

/// The key of a base request, leaving out its cgroup (each sandbox has its own).
fn key_of(base: &InitRequest, file_digest: &str) -> Result<String, SandboxError> {
    let mut keyed = base.clone();
    keyed.cgroup = crate::CgroupReport::Unavailable {
        reason: String::new(),
    };
    let json = serde_json::to_string(&keyed)
        .map_err(|e| SandboxError::Protocol(format!("describing the pooled base: {e}")))?;
    Ok(format!("{}:{json}", file_digest))
}

impl PooledSandbox {
    /// Send the base request and wait until PID 1 reports the base built.
    pub(crate) fn staged(
        child: SpawnedChild,
        control: UnixStream,
        handshake: UnixStream,
        cgroup: Option<RunCgroup>,
        base: InitRequest,
        file_digest: String,
    ) -> Result<PooledSandbox, SandboxError> {
        let mut helper = Helper {
            child,
            control,
            handshake,
            cgroup,
        };
        protocol::send(&mut helper.control, &base)
            .map_err(|e| SandboxError::Protocol(format!("sending the pooled base: {e}")))?;
        helper.handshake.set_read_timeout(Some(STAGE_TIMEOUT))?;
        // Only one line is ever sent before the attach: nothing is left in the reader.
        let staged =
            protocol::recv::<PayloadMessage>(&mut BufReader::new(helper.handshake.try_clone()?));
        helper.handshake.set_read_timeout(None)?;
        let failed = match staged {
            Ok(Some(PayloadMessage::Staged)) => {
                return Ok(PooledSandbox {
                    helper: Some(helper),
                    base,
                    file_digest,
                })
            }
            Ok(Some(PayloadMessage::Failed { stage, message })) => setup_error(stage, message),
            Ok(Some(_)) => SandboxError::Protocol(
                "a pooled sandbox answered its base with something else than `staged`".into(),
            ),
            Ok(None) => {
                let mut running = helper.into_running(OutputMode::Capture, 0);
                let e = running.stage_failure();
                running.abandon();
                return Err(e);
            }
            Err(e) => SandboxError::Protocol(format!("waiting for the pooled sandbox: {e}")),
        };
        helper.into_running(OutputMode::Capture, 0).abandon();
        Err(failed)
    }

    /// The host pid of the sandbox's helper (stage 0): SIGKILL to it ends the sandbox.
    pub fn pid(&self) -> u32 {
        self.helper.as_ref().map(|h| h.child.id()).unwrap_or(0)
    }

    /// What the sandbox was built from, as [`pool_key`] gives it for a profile.
    pub fn key(&self) -> Result<String, SandboxError> {
        key_of(&self.base, &self.file_digest)
    }

    /// Whether the sandbox still waits for a run: nothing comes on either channel before
    /// the attach, so anything readable (a failure, an exit, the end of the stream) means
    /// it died.
    pub fn is_alive(&self) -> bool {
        self.helper
            .as_ref()
            .is_some_and(|h| super::quiet(&h.control) && super::quiet(&h.handshake))
    }

    /// Give this sandbox the run of `profile` with the working directory `cwd`: its
    /// request and descriptors go to the waiting PID 1, which builds the workspace's
    /// steps and confines the payload; the attestation that comes back is checked
    /// against the run's whole profile and plan. A profile whose base is not this
    /// sandbox's is refused with [`SandboxError::PoolMismatch`] before anything is sent.
    /// `on_spawn` gets the helper's pid first, as [`crate::Sandbox::on_spawn`] would.
    pub fn attach(
        mut self,
        profile: &SandboxProfile,
        cwd: &str,
        output: OutputMode,
        on_spawn: impl FnOnce(u32),
    ) -> Result<PreparedRun, SandboxError> {
        let mut parts = RunParts::new(profile, cwd)?;
        parts.request.cgroup = self.base.cgroup.clone();
        let base_len = self.base.plan.steps.len();
        let digest = file_digest(parts.file_contents.as_deref());
        if parts.request.base(base_len) != self.base || digest != self.file_digest {
            return Err(SandboxError::PoolMismatch(
                "the run's profile, plan or CA differs from the one the sandbox was built for"
                    .into(),
            ));
        }
        let Some(helper) = self.helper.take() else {
            return Err(SandboxError::Protocol("the pooled sandbox is gone".into()));
        };
        on_spawn(helper.child.id());
        let sent = send_attach(&helper.handshake, &parts);
        let mut running = helper.into_running(output, profile.output_cap_bytes);
        let RunParts { request, host, .. } = parts;
        match sent.and_then(|()| running.attest(profile, &request.plan, &host)) {
            Ok(attestation) => Ok(PreparedRun::new(running, request, attestation)),
            Err(e) => {
                running.abandon();
                Err(e)
            }
        }
    }
}

/// One byte with the run's descriptors, then the [`Attach`] line.
fn send_attach(handshake: &UnixStream, parts: &RunParts) -> Result<(), SandboxError> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let fds: Vec<i32> = [
        parts.relay_socket.as_ref().map(|(fd, _)| fd.as_raw_fd()),
        parts.workspace_tree.as_ref().map(AsRawFd::as_raw_fd),
        parts.layers_tree.as_ref().map(AsRawFd::as_raw_fd),
    ]
    .into_iter()
    .flatten()
    .collect();
    let iov = [std::io::IoSlice::new(b"A")];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &cmsg };
    sendmsg::<()>(handshake.as_raw_fd(), &iov, cmsgs, MsgFlags::empty(), None)
        .map_err(|e| SandboxError::Protocol(format!("attaching the run: {e}")))?;
    let mut w = handshake;
    protocol::send(
        &mut w,
        &Attach {
            request: parts.request.clone(),
        },
    )
    .map_err(|e| SandboxError::Protocol(format!("attaching the run: {e}")))
}

impl Drop for PooledSandbox {
    fn drop(&mut self) {
        if let Some(mut h) = self.helper.take() {
            let _ = protocol::send(&mut h.control, &HostCommand::Kill);
            let _ = h.control.shutdown(std::net::Shutdown::Both);
            let _ = h.handshake.shutdown(std::net::Shutdown::Both);
            let _ = h.child.wait();
            drop(h.cgroup.take());
        }
    }
}
