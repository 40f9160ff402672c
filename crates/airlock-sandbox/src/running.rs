//! One helper's run, after it started: the attestation handshake, then either the
//! go-ahead with the authorized command and the wait for its end, or the teardown of a
//! sandbox that never ran anything.

use std::io::BufReader;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use airlock_core::action::ExecAction;
use airlock_core::Authorized;

use crate::attestation::{Attestation, HostView};
use crate::cgroup::RunCgroup;
use crate::error::SandboxError;
use crate::git_guard::GitGuard;
use crate::launcher::setup_error;
use crate::launcher::spawn::SpawnedChild;
use crate::mount_plan::MountPlan;
use crate::output::{pump, DeferredOutput, OutputCap, OutputMode, Stream};
use crate::profile::SandboxProfile;
use crate::protocol::{
    self, ExecOrder, HostCommand, InitRequest, PayloadMessage, StageMessage, Verdict,
};

/// How long building the sandbox may take before the run is abandoned.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// The result of a run that happened.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The command's exit code, or 128 + signal when a signal ended it (137 after a timeout).
    pub status: i32,
    /// The timeout killed the process tree.
    pub timed_out: bool,
    /// Output beyond the profile's cap was cut.
    pub truncated: bool,
    /// Captured stdout ([`crate::OutputMode::Capture`] only).
    pub stdout: Vec<u8>,
    /// Captured stderr ([`crate::OutputMode::Capture`] only).
    pub stderr: Vec<u8>,
    /// The verified confinement of this run, for its audit record.
    pub attestation: Attestation,
    /// Wall time from the go-ahead to the end of the process tree.
    pub elapsed: Duration,
    /// Files the command created in the workspace's `.git` that git would take config from,
    /// removed by the host after the run (see [`crate::profile::GIT_MUST_NOT_APPEAR`]).
    pub removed_from_git: Vec<std::path::PathBuf>,
}

/// A sandbox built and attested, waiting for its command ([`crate::Sandbox::prepare`]).
/// Its payload process is confined and blocked on the host's verdict; dropping this
/// aborts it and reaps the helper.
pub struct PreparedRun {
    running: Option<Running>,
    request: InitRequest,
    attestation: Attestation,
}

impl std::fmt::Debug for PreparedRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedRun")
            .field("cwd", &self.request.cwd)
            .finish_non_exhaustive()
    }
}

impl PreparedRun {
    pub(crate) fn new(
        running: Running,
        request: InitRequest,
        attestation: Attestation,
    ) -> PreparedRun {
        PreparedRun {
            running: Some(running),
            request,
            attestation,
        }
    }

    /// The confinement the sandbox reported and the host verified.
    pub fn attestation(&self) -> &Attestation {
        &self.attestation
    }

    /// Whether the sandbox still waits for its command: nothing comes on either channel
    /// before the go-ahead, so anything readable (a failure, an exit, the end of the
    /// stream) means it died.
    pub fn is_alive(&self) -> bool {
        self.running.as_ref().is_some_and(|r| {
            crate::launcher::quiet(&r.control) && crate::launcher::quiet(&r.handshake)
        })
    }

    /// Run the authorized command in this sandbox: as `/bin/bash --noprofile --norc -c
    /// <command>` (bash is the grammar the Gate parsed), or directly
    /// when it is only plain words (see [`crate::direct_exec`]). The action's working
    /// directory must be the one the sandbox was prepared with.
    pub fn run(mut self, auth: &Authorized<ExecAction>) -> Result<RunOutcome, SandboxError> {
        let action = auth.action();
        let profile = &self.request.profile;
        let cwd = profile.resolve_cwd(&self.request.workspace, &action.cwd)?;
        if cwd != self.request.cwd {
            return Err(SandboxError::Profile {
                field: "cwd",
                message: format!(
                    "the command's working directory {} is not the prepared sandbox's {}",
                    cwd.display(),
                    self.request.cwd.display()
                ),
                help: "prepare the sandbox with the action's own working directory".into(),
            });
        }
        let path = profile
            .env
            .get("PATH")
            .map(String::as_str)
            .unwrap_or_default();
        let order = match crate::direct_exec::plan(&action.command, path) {
            Some(direct) => ExecOrder {
                argv: direct.argv,
                program: Some(direct.program.display().to_string()),
            },
            None => ExecOrder {
                argv: crate::direct_exec::shell_argv(&action.command),
                program: None,
            },
        };
        let mut running = self
            .running
            .take()
            .ok_or_else(|| SandboxError::Protocol("the prepared sandbox is gone".into()))?;
        // Noted before the go-ahead, checked once the sandbox's process tree is gone. With
        // the overlay nothing reaches the workspace's `.git`: the commit decision holds it.
        let git_guard = profile
            .workspace_overlay
            .is_none()
            .then(|| GitGuard::before(&self.request.workspace));
        let result = running.go_and_wait(order, profile);
        let mut ended = running.end(result.is_err());
        let removed = git_guard.map(|g| g.after()).unwrap_or_default();
        for path in &removed {
            ended.stderr.extend_from_slice(
                format!(
                    "airlock-sandbox: removed {}, which the command created: git would take its config from it\n",
                    path.display()
                )
                .as_bytes(),
            );
        }
        let (timed_out, elapsed) = result?;
        let status = ended.status.ok_or_else(|| {
            SandboxError::Protocol("the helper did not report an exit status".into())
        })?;
        Ok(RunOutcome {
            status,
            timed_out,
            truncated: ended.truncated,
            stdout: ended.stdout,
            stderr: ended.stderr,
            attestation: self.attestation.clone(),
            elapsed,
            removed_from_git: removed,
        })
    }
}

impl Drop for PreparedRun {
    fn drop(&mut self) {
        if let Some(mut running) = self.running.take() {
            let _ = protocol::send(&mut running.handshake, &Verdict::Abort);
            running.abandon();
        }
    }
}

/// What is left once the helper is reaped.
pub(crate) struct Ended {
    /// The exit status stage 0 reported.
    status: Option<i32>,
    truncated: bool,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// A started helper: its channels, its output pumps and its cgroup.
pub(crate) struct Running {
    pub(crate) child: SpawnedChild,
    pub(crate) control: UnixStream,
    pub(crate) handshake: UnixStream,
    pub(crate) pumps: [Option<JoinHandle<Vec<u8>>>; 2],
    pub(crate) cap: Arc<OutputCap>,
    pub(crate) cgroup: Option<RunCgroup>,
    /// The exit status stage 0 reported, once it did.
    pub(crate) status: Option<i32>,
    /// Where the output goes, when that is told later ([`OutputMode::Deferred`]): set
    /// to a capture at the end if no caller ever set it, so that the pumps finish.
    pub(crate) deferred: Option<DeferredOutput>,
}

impl Running {
    /// Start copying the helper's output to `output`, under the run's cap.
    pub(crate) fn start_pumps(
        &mut self,
        out: Option<std::fs::File>,
        err: Option<std::fs::File>,
        output: OutputMode,
    ) {
        let cap = self.cap.clone();
        if let OutputMode::Deferred(later) = &output {
            self.deferred = Some(later.clone());
        }
        self.pumps = [
            out.map(|s| pump(s, output.clone(), Stream::Stdout, cap.clone())),
            err.map(|s| pump(s, output, Stream::Stderr, cap)),
        ];
    }

    /// Read the attestation that comes back (the request was sent) and check it against
    /// the profile.
    pub(crate) fn attest(
        &mut self,
        profile: &SandboxProfile,
        plan: &MountPlan,
        host: &HostView,
    ) -> Result<Attestation, SandboxError> {
        self.handshake.set_read_timeout(Some(SETUP_TIMEOUT))?;
        let mut hs_reader = BufReader::new(self.handshake.try_clone()?);
        let message = protocol::recv::<PayloadMessage>(&mut hs_reader);
        let mut attestation = match message {
            Ok(Some(PayloadMessage::Attestation(a))) => *a,
            Ok(Some(PayloadMessage::Failed { stage, message })) => {
                return Err(setup_error(stage, message))
            }
            Ok(Some(PayloadMessage::Staged)) => {
                return Err(SandboxError::Protocol(
                    "the sandbox reported a staged base instead of its attestation".into(),
                ))
            }
            Ok(None) => return Err(self.stage_failure()),
            Err(e) => {
                return Err(SandboxError::Protocol(format!(
                    "reading the attestation: {e}"
                )))
            }
        };
        attestation.host_namespaces = host.namespaces.clone();
        let shortfalls = attestation.verify(profile, plan, host);
        if !shortfalls.is_empty() {
            let _ = protocol::send(&mut self.handshake, &Verdict::Abort);
            return Err(SandboxError::Shortfall(shortfalls));
        }
        Ok(attestation)
    }

    /// Give the go-ahead with the command and wait for the end, enforcing the timeout.
    /// Returns whether the timeout fired and the time since the go-ahead.
    fn go_and_wait(
        &mut self,
        order: ExecOrder,
        profile: &SandboxProfile,
    ) -> Result<(bool, Duration), SandboxError> {
        let started = Instant::now();
        protocol::send(&mut self.handshake, &Verdict::Go(Box::new(order)))
            .map_err(|e| SandboxError::Protocol(format!("sending the go-ahead: {e}")))?;
        let deadline = started + Duration::from_secs(profile.timeout_secs);
        let mut reader = BufReader::new(self.control.try_clone()?);
        let mut timed_out = false;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() && !timed_out {
                timed_out = true;
                let _ = protocol::send(&mut self.control, &HostCommand::Kill);
            }
            let wait = if timed_out { SETUP_TIMEOUT } else { left };
            self.control
                .set_read_timeout(Some(wait.max(Duration::from_millis(1))))?;
            match protocol::recv::<StageMessage>(&mut reader) {
                Ok(Some(StageMessage::Exited { status })) => {
                    self.status = Some(status);
                    return Ok((timed_out, started.elapsed()));
                }
                Ok(Some(StageMessage::Failed { stage, message })) => {
                    return Err(setup_error(stage, message))
                }
                Ok(None) => {
                    return Err(SandboxError::Protocol(
                        "the helper exited without a status".into(),
                    ))
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) && !timed_out =>
                {
                    continue
                }
                Err(e) => {
                    return Err(SandboxError::Protocol(format!(
                        "waiting for the command: {e}"
                    )))
                }
            }
        }
    }

    /// A setup failure reported by stage 0 on the control channel.
    pub(crate) fn stage_failure(&mut self) -> SandboxError {
        let _ = self.control.set_read_timeout(Some(SETUP_TIMEOUT));
        let reader = self.control.try_clone().map(BufReader::new);
        match reader.map(|mut r| protocol::recv::<StageMessage>(&mut r)) {
            Ok(Ok(Some(StageMessage::Failed { stage, message }))) => setup_error(stage, message),
            other => SandboxError::Protocol(format!(
                "the sandbox ended before attesting its confinement ({other:?})"
            )),
        }
    }

    /// Kill whatever is left of a sandbox that will not run, and reap it.
    pub(crate) fn abandon(self) {
        self.end(true);
    }

    /// Reap stage 0 and release the cgroup on a thread of their own. When no thread can
    /// be started, the closure is dropped with them, and their drops do the same here
    /// (`SpawnedChild` reaps, `RunCgroup` releases).
    fn reap_aside(&mut self) {
        let mut child = std::mem::replace(&mut self.child, SpawnedChild::reaped());
        let cgroup = self.cgroup.take();
        let _ = std::thread::Builder::new()
            .name("airlock-sandbox-reap".into())
            .spawn(move || {
                let _ = child.wait();
                drop(cgroup);
            });
    }

    /// Make sure the helper is gone and reaped (killing it first when `kill`), then
    /// collect the output and release the cgroup.
    fn end(mut self, kill: bool) -> Ended {
        if kill {
            let _ = protocol::send(&mut self.control, &HostCommand::Kill);
        }
        let _ = self.control.shutdown(std::net::Shutdown::Both);
        let _ = self.handshake.shutdown(std::net::Shutdown::Both);
        // Stage 0 reported PID 1's end: the sandbox's whole process tree is gone (a PID
        // namespace ends with its PID 1), and stage 0 holds no output pipe (it let its
        // copies go once PID 1 had them). What is left is stage 0's own exit, which tears
        // down the namespaces it holds: a millisecond or more that nothing here needs to
        // wait for. It is reaped (and the cgroup released, which needs it gone) on a
        // thread of its own. Otherwise (killed, or no status came) it is reaped here.
        // Output no caller took is read (and dropped) from now on: nothing in the sandbox
        // may be left blocked on a full pipe while it is reaped.
        if let Some(later) = self.deferred.take() {
            later.set(OutputMode::Capture);
        }
        if !kill && self.status.is_some() {
            self.reap_aside();
        } else {
            let _ = self.child.wait();
        }
        let [out, err] = std::mem::take(&mut self.pumps);
        let join = |h: Option<JoinHandle<Vec<u8>>>| {
            h.map(|h| h.join().unwrap_or_default()).unwrap_or_default()
        };
        let stdout = join(out);
        let stderr = join(err);
        drop(self.cgroup.take());
        Ended {
            status: self.status,
            truncated: self.cap.truncated(),
            stdout,
            stderr,
        }
    }
}
