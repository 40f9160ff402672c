//! The host side of a run: start the helper, send the request, check the attestation, give
//! the go-ahead, enforce the timeout, collect the output and the exit status.

use std::io::BufReader;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use airlock_core::action::ExecAction;
use airlock_core::Authorized;

use crate::attestation::{namespace_ids, Attestation, HostView};
use crate::cgroup::RunCgroup;
use crate::error::SandboxError;
use crate::host_support::usable_landlock_abi;
use crate::mount_plan::MountPlan;
use crate::output::{pump, OutputCap, OutputMode, Stream};
use crate::profile::SandboxProfile;
use crate::protocol::{
    self, HostCommand, InitRequest, PayloadMessage, StageMessage, Verdict, CONTROL_FD,
    HANDSHAKE_FD, RELAY_FD,
};

/// Name of the helper binary.
pub const INIT_BINARY: &str = "airlock-sandbox-init";
/// Environment variable naming the helper binary explicitly.
pub const INIT_ENV: &str = "AIRLOCK_SANDBOX_INIT";
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
    /// Captured stdout ([`OutputMode::Capture`] only).
    pub stdout: Vec<u8>,
    /// Captured stderr ([`OutputMode::Capture`] only).
    pub stderr: Vec<u8>,
    /// The verified confinement of this run, for its audit record.
    pub attestation: Attestation,
    /// Wall time from the go-ahead to the end of the process tree.
    pub elapsed: Duration,
}

/// A located `airlock-sandbox-init` helper.
#[derive(Debug, Clone)]
pub struct Sandbox {
    init: PathBuf,
    on_spawn: Option<SpawnHook>,
}

/// Called with the host pid of each helper (stage 0) right after it starts. Stage 0 takes
/// the whole sandbox with it when it dies (PID 1 and the payload hold a parent-death
/// signal), so this pid is what a kill switch in another process needs.
#[derive(Clone)]
struct SpawnHook(std::sync::Arc<dyn Fn(u32) + Send + Sync>);

impl std::fmt::Debug for SpawnHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SpawnHook")
    }
}

impl Sandbox {
    /// Find the helper: `$AIRLOCK_SANDBOX_INIT`, else next to the current executable (or one
    /// directory up, where cargo puts binaries relative to test executables).
    pub fn locate() -> Result<Sandbox, SandboxError> {
        if let Some(p) = std::env::var_os(INIT_ENV) {
            return Sandbox::with_init(PathBuf::from(p));
        }
        let exe = std::env::current_exe().map_err(|e| SandboxError::Helper {
            message: format!("cannot find the current executable: {e}"),
            help: format!("set {INIT_ENV} to the path of {INIT_BINARY}"),
        })?;
        let dir = exe.parent().unwrap_or(Path::new("/"));
        for candidate in [dir.join(INIT_BINARY), dir.join("..").join(INIT_BINARY)] {
            if candidate.is_file() {
                return Sandbox::with_init(candidate);
            }
        }
        Err(SandboxError::Helper {
            message: format!("{INIT_BINARY} is not next to {}", exe.display()),
            help: format!(
                "install {INIT_BINARY} in the same directory as airlock, or set {INIT_ENV}"
            ),
        })
    }

    /// Use the helper at `path`.
    pub fn with_init(path: PathBuf) -> Result<Sandbox, SandboxError> {
        if !path.is_file() {
            return Err(SandboxError::Helper {
                message: format!("{} does not exist", path.display()),
                help: format!(
                    "build it (cargo build -p airlock-sandbox) or point {INIT_ENV} at it"
                ),
            });
        }
        Ok(Sandbox {
            init: path,
            on_spawn: None,
        })
    }

    /// Call `hook` with the host pid of the helper each time one starts, before it is
    /// given the request. SIGKILL to that pid ends the whole sandboxed process tree.
    pub fn on_spawn(mut self, hook: impl Fn(u32) + Send + Sync + 'static) -> Sandbox {
        self.on_spawn = Some(SpawnHook(std::sync::Arc::new(hook)));
        self
    }

    /// The helper's path.
    pub fn init_path(&self) -> &Path {
        &self.init
    }

    /// Run the authorized command as `/bin/sh -c <command>` in a sandbox built from
    /// `profile`, or directly when it is only plain words and the shell would add nothing
    /// (see [`crate::direct_exec`]). The action's `cwd` (if any) picks the working
    /// directory inside the workspace. The environment is exactly `profile.env` (plus
    /// `PWD`, which the shell would have set, for a direct run).
    pub fn run(
        &self,
        auth: &Authorized<ExecAction>,
        profile: &SandboxProfile,
        output: OutputMode,
    ) -> Result<RunOutcome, SandboxError> {
        let action = auth.action();
        let path = profile
            .env
            .get("PATH")
            .map(String::as_str)
            .unwrap_or_default();
        match crate::direct_exec::plan(&action.command, path) {
            Some(direct) => self.launch(
                direct.argv,
                Some(direct.program.display().to_string()),
                &action.cwd,
                profile,
                output,
            ),
            None => {
                let argv = vec![
                    "/bin/sh".to_string(),
                    "-c".to_string(),
                    action.command.clone(),
                ];
                self.launch(argv, None, &action.cwd, profile, output)
            }
        }
    }

    fn launch(
        &self,
        argv: Vec<String>,
        program: Option<String>,
        cwd: &str,
        profile: &SandboxProfile,
        output: OutputMode,
    ) -> Result<RunOutcome, SandboxError> {
        let workspace = profile.validate()?;
        let cwd = profile.resolve_cwd(&workspace, cwd)?;
        let mut profile = std::borrow::Cow::Borrowed(profile);
        if program.is_some() {
            let env = &mut profile.to_mut().env;
            env.insert("PWD".into(), cwd.display().to_string());
        }
        let profile = profile.as_ref();
        let plan = MountPlan::for_profile(profile, &workspace)?;
        let relay_socket = open_relay_socket(profile)?;
        let mut host = host_view(profile);
        host.relay_socket = relay_socket.as_ref().map(|(_, id)| *id);
        let (cgroup, cgroup_report) = RunCgroup::create(&profile.cgroup);
        let request = InitRequest {
            profile: profile.clone(),
            plan: plan.clone(),
            workspace,
            argv,
            program,
            cwd,
            cgroup: cgroup_report,
        };

        let (control, control_child) = UnixStream::pair()?;
        let (handshake, handshake_child) = UnixStream::pair()?;
        let relay_fd = relay_socket.as_ref().map(|(fd, _)| fd);
        let mut child = self.spawn(profile, &control_child, &handshake_child, relay_fd)?;
        drop((control_child, handshake_child, relay_socket));
        if let Some(hook) = &self.on_spawn {
            (hook.0)(child.id());
        }
        if let Some(cg) = &cgroup {
            if let Err(e) = cg.add(child.id()) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(SandboxError::Setup {
                    stage: "cgroup".into(),
                    message: e.to_string(),
                    help: "check the delegated cgroup's permissions".into(),
                });
            }
        }
        let cap = OutputCap::new(profile.output_cap_bytes);
        let out = child
            .stdout
            .take()
            .map(|s| pump(s, output, Stream::Stdout, cap.clone()));
        let err = child
            .stderr
            .take()
            .map(|s| pump(s, output, Stream::Stderr, cap.clone()));
        let mut run = Running {
            child,
            control,
            handshake,
            status: None,
        };
        let result = run.drive(&request, profile, &plan, &host);
        let status = run.finish(result.as_ref().err().is_some());
        let stdout = out
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        let stderr = err
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        drop(cgroup);
        let (attestation, timed_out, elapsed) = result?;
        let status = status.ok_or_else(|| {
            SandboxError::Protocol("the helper did not report an exit status".into())
        })?;
        Ok(RunOutcome {
            status,
            timed_out,
            truncated: cap.truncated(),
            stdout,
            stderr,
            attestation,
            elapsed,
        })
    }

    fn spawn(
        &self,
        profile: &SandboxProfile,
        control: &UnixStream,
        handshake: &UnixStream,
        relay: Option<&OwnedFd>,
    ) -> Result<std::process::Child, SandboxError> {
        // Keep the helper and the sockets on descriptors >= 10 so that placing the sockets on
        // 3 and 4 in the child never overwrites one of them.
        let init = std::fs::File::open(&self.init).map_err(|e| SandboxError::Helper {
            message: format!("{}: {e}", self.init.display()),
            help: format!("check that {} is readable", self.init.display()),
        })?;
        let init_fd = dup_high(init.as_raw_fd())?;
        let control_fd = dup_high(control.as_raw_fd())?;
        let handshake_fd = dup_high(handshake.as_raw_fd())?;
        let relay_fd = relay.map(|r| dup_high(r.as_raw_fd())).transpose()?;
        // Executed through /proc/self/fd so that a helper in a directory the sandbox uid
        // cannot traverse (e.g. /root/.cargo/bin) still starts after the uid switch.
        let mut cmd = Command::new(format!("/proc/self/fd/{}", init_fd.as_raw_fd()));
        cmd.arg0(INIT_BINARY)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .current_dir("/");
        if nix::unistd::geteuid().is_root() {
            // Root never runs the sandbox: the helper starts as the sandbox uid, with no
            // supplementary groups (std drops them when switching away from root).
            cmd.uid(profile.sandbox_uid).gid(profile.sandbox_gid);
        }
        let (c, h) = (control_fd.as_raw_fd(), handshake_fd.as_raw_fd());
        let r = relay_fd.as_ref().map(|f| f.as_raw_fd());
        // SAFETY: the closure only calls dup2, which is async-signal-safe, and allocates
        // nothing.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(c, CONTROL_FD) < 0 || libc::dup2(h, HANDSHAKE_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(r) = r {
                    if libc::dup2(r, RELAY_FD) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| SandboxError::Helper {
            message: format!("{}: {e}", self.init.display()),
            help: format!(
                "check that {} is executable by uid {}",
                self.init.display(),
                host_uid(profile)
            ),
        })?;
        drop((init_fd, control_fd, handshake_fd, relay_fd, init));
        Ok(child)
    }
}

/// The proxy socket's `O_PATH` descriptor with its device and inode.
type RelaySocket = (OwnedFd, (u64, u64));

/// Open the proxy socket of the profile's relay as an `O_PATH` descriptor for the helper,
/// with its device and inode (which the relay's attestation must repeat).
fn open_relay_socket(profile: &SandboxProfile) -> Result<Option<RelaySocket>, SandboxError> {
    use std::os::unix::fs::FileTypeExt;
    let Some(relay) = profile.relay() else {
        return Ok(None);
    };
    let bad = |message: String| SandboxError::Profile {
        field: "network.socket",
        message,
        help: "start the egress proxy first; its socket must exist while the sandbox runs".into(),
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
        .open(&relay.socket)
        .map_err(|e| bad(format!("{}: {e}", relay.socket.display())))?;
    let meta = file
        .metadata()
        .map_err(|e| bad(format!("{}: {e}", relay.socket.display())))?;
    if !meta.file_type().is_socket() {
        return Err(bad(format!("{} is not a socket", relay.socket.display())));
    }
    use std::os::unix::fs::MetadataExt;
    Ok(Some((OwnedFd::from(file), (meta.dev(), meta.ino()))))
}

fn dup_high(fd: RawFd) -> Result<OwnedFd, SandboxError> {
    // SAFETY: F_DUPFD_CLOEXEC on a live descriptor returns a new one we then own.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
    if new < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: `new` was just created and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

fn setup_error(stage: String, message: String) -> SandboxError {
    let help = if message.contains("EACCES") || message.contains("Permission denied") {
        "when airlock runs as root the sandbox runs as sandbox_uid (65534 by default): make the workspace readable and writable by it (e.g. chown -R 65534:65534 DIR), or run airlock as an ordinary user"
    } else if stage.contains("namespace") {
        "enable user namespaces: sysctl -w user.max_user_namespaces=15000"
    } else {
        "see the message above; `airlock doctor` shows what this machine supports"
    };
    SandboxError::Setup {
        stage,
        message,
        help: help.into(),
    }
}

fn host_uid(profile: &SandboxProfile) -> u32 {
    let euid = nix::unistd::geteuid();
    if euid.is_root() {
        profile.sandbox_uid
    } else {
        euid.as_raw()
    }
}

fn host_view(profile: &SandboxProfile) -> HostView {
    let egid = nix::unistd::getegid().as_raw();
    HostView {
        namespaces: namespace_ids(Path::new("/proc/self/ns")),
        uid: host_uid(profile),
        gid: if nix::unistd::geteuid().is_root() {
            profile.sandbox_gid
        } else {
            egid
        },
        landlock_abi: usable_landlock_abi(),
        relay_socket: None,
    }
}

struct Running {
    child: std::process::Child,
    control: UnixStream,
    handshake: UnixStream,
    /// The exit status stage 0 reported.
    status: Option<i32>,
}

impl Running {
    /// Handshake, verdict, and wait with the timeout. Returns the attestation, whether the
    /// timeout fired, and the elapsed time.
    fn drive(
        &mut self,
        request: &InitRequest,
        profile: &SandboxProfile,
        plan: &MountPlan,
        host: &HostView,
    ) -> Result<(Attestation, bool, Duration), SandboxError> {
        protocol::send(&mut self.control, request)
            .map_err(|e| SandboxError::Protocol(format!("sending the request: {e}")))?;
        self.handshake.set_read_timeout(Some(SETUP_TIMEOUT))?;
        let mut hs_reader = BufReader::new(self.handshake.try_clone()?);
        let message = protocol::recv::<PayloadMessage>(&mut hs_reader);
        let mut attestation = match message {
            Ok(Some(PayloadMessage::Attestation(a))) => *a,
            Ok(Some(PayloadMessage::Failed { stage, message })) => {
                return Err(setup_error(stage, message))
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
        let started = Instant::now();
        protocol::send(&mut self.handshake, &Verdict::Go)
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
                    return Ok((attestation, timed_out, started.elapsed()));
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
    fn stage_failure(&mut self) -> SandboxError {
        let _ = self.control.set_read_timeout(Some(SETUP_TIMEOUT));
        let reader = self.control.try_clone().map(BufReader::new);
        match reader.map(|mut r| protocol::recv::<StageMessage>(&mut r)) {
            Ok(Ok(Some(StageMessage::Failed { stage, message }))) => setup_error(stage, message),
            other => SandboxError::Protocol(format!(
                "the sandbox ended before attesting its confinement ({other:?})"
            )),
        }
    }

    /// Make sure the helper is gone and reaped; returns the reported exit status.
    fn finish(&mut self, failed: bool) -> Option<i32> {
        if failed {
            let _ = protocol::send(&mut self.control, &HostCommand::Kill);
        }
        let _ = self.control.shutdown(std::net::Shutdown::Both);
        let _ = self.handshake.shutdown(std::net::Shutdown::Both);
        let _ = self.child.wait();
        self.status
    }
}
