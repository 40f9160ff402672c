//! The host side of a run: start the helper, send the request, check the attestation, give
//! the go-ahead, enforce the timeout, collect the output and the exit status.

pub(crate) mod pool;
pub(crate) mod spawn;

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use airlock_core::action::ExecAction;
use airlock_core::Authorized;

use crate::attestation::{
    namespace_ids, AttachedReport, CgroupReport, FileId, HostView, OverlayReport,
};
use crate::cgroup::RunCgroup;
use crate::error::SandboxError;
use crate::host_support::usable_landlock_abi;
use crate::init::{IDENTITY_GID_FLAG, IDENTITY_UID_FLAG};
use crate::mount_plan::MountPlan;
use crate::output::{OutputCap, OutputMode};
use crate::overlay::WorkspaceOverlay;
use crate::profile::SandboxProfile;
use crate::protocol::{
    self, InitRequest, CONTROL_FD, FILE_FD, HANDSHAKE_FD, OVERLAY_FD, RELAY_FD, WORKSPACE_FD,
};
use crate::running::Running;
pub use crate::running::{PreparedRun, RunOutcome};
pub use pool::{pool_key, PooledSandbox};
use spawn::{SpawnSpec, SpawnedChild};

/// Name of the helper binary.
pub const INIT_BINARY: &str = "airlock-sandbox-init";
/// Environment variable naming the helper binary explicitly.
pub const INIT_ENV: &str = "AIRLOCK_SANDBOX_INIT";

/// A located `airlock-sandbox-init` helper.
#[derive(Debug, Clone)]
pub struct Sandbox {
    init: PathBuf,
    on_spawn: Option<SpawnHook>,
    /// The SHA-256 (lower-case hex) the helper's bytes must have, checked on the very
    /// descriptor each run executes.
    pin: Option<String>,
    /// The helper file's identity when `pin` was taken of it: while the executed
    /// descriptor still has it, the bytes are not read again.
    pin_identity: Option<HelperIdentity>,
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
            pin: None,
            pin_identity: None,
        })
    }

    /// Run only a helper whose bytes hash to `sha256` (lower-case hex): each run hashes
    /// the descriptor it is about to execute and refuses on a mismatch.
    pub fn pinned(mut self, sha256: impl Into<String>) -> Sandbox {
        self.pin = Some(sha256.into());
        self
    }

    /// The pinned hash was computed for the helper file with this identity: a run whose
    /// descriptor still has it skips re-reading the whole helper (a few milliseconds per
    /// run for a release build). Any write to the file changes its identity, and then the
    /// run hashes it again.
    pub fn pinned_at(mut self, identity: HelperIdentity) -> Sandbox {
        self.pin_identity = Some(identity);
        self
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

    /// Run the authorized command as `/bin/bash --noprofile --norc -c <command>` (see
    /// [`crate::direct_exec::shell_argv`]) in a sandbox built from
    /// `profile`, or directly when it is only plain words and the shell would add nothing
    /// (see [`crate::direct_exec`]). The action's `cwd` (if any) picks the working
    /// directory inside the workspace. The environment is `profile.env` without the
    /// variables that change how bash reads or starts (see [`crate::payload_env`]), plus
    /// `PWD`, which the shell would have set, for a direct run.
    pub fn run(
        &self,
        auth: &Authorized<ExecAction>,
        profile: &SandboxProfile,
        output: OutputMode,
    ) -> Result<RunOutcome, SandboxError> {
        self.prepare(profile, &auth.action().cwd, output)?.run(auth)
    }

    /// Build and attest a sandbox for `profile` with the working directory `cwd`, ready
    /// for a command that is not decided yet. Nothing of the payload's runs until
    /// [`PreparedRun::run`] hands it an authorized command; dropping the prepared run
    /// instead tears the empty sandbox down. This lets a caller build the sandbox while
    /// the Gate decides. A shortfall in the attestation is an error here already.
    pub fn prepare(
        &self,
        profile: &SandboxProfile,
        cwd: &str,
        output: OutputMode,
    ) -> Result<PreparedRun, SandboxError> {
        let mut parts = RunParts::new(profile, cwd)?;
        let (cgroup, cgroup_report) = RunCgroup::create(&profile.cgroup);
        parts.request.cgroup = cgroup_report;
        let (control, control_child) = UnixStream::pair()?;
        let (handshake, handshake_child) = UnixStream::pair()?;
        let file = parts
            .file_contents
            .as_deref()
            .map(sealed_file)
            .transpose()?;
        let child = self.spawn(
            profile,
            &control_child,
            &handshake_child,
            parts.relay_socket.as_ref().map(|(fd, _)| fd),
            file.as_ref(),
            [parts.workspace_tree.as_ref(), parts.layers_tree.as_ref()],
        )?;
        drop((control_child, handshake_child, file));
        let RunParts { request, host, .. } = parts;
        if let Some(hook) = &self.on_spawn {
            (hook.0)(child.id());
        }
        let mut child = add_to_cgroup(child, cgroup.as_ref())?;
        let (out, err) = (child.stdout.take(), child.stderr.take());
        let mut running = Running {
            child,
            control,
            handshake,
            pumps: [None, None],
            cap: OutputCap::new(profile.output_cap_bytes),
            cgroup,
            status: None,
            deferred: None,
        };
        running.start_pumps(out, err, output);
        let sent = protocol::send(&mut running.control, &request)
            .map_err(|e| SandboxError::Protocol(format!("sending the request: {e}")));
        match sent.and_then(|()| running.attest(profile, &request.plan, &host)) {
            Ok(attestation) => Ok(PreparedRun::new(running, request, attestation)),
            Err(e) => {
                running.abandon();
                Err(e)
            }
        }
    }

    /// Build a sandbox for `profile` only as far as nothing depends on a run (see
    /// [`PooledSandbox`]): the profile's workspace, working directory, environment,
    /// overlay and proxy socket are not looked at. The helper's start hook is called when
    /// the sandbox is taken for a run, not here.
    pub fn build_pooled(&self, profile: &SandboxProfile) -> Result<PooledSandbox, SandboxError> {
        let mut plan = MountPlan::base_for_profile(profile)?;
        let file_contents = plan.file_contents.take();
        let (cgroup, cgroup_report) = RunCgroup::create(&profile.cgroup);
        let request = InitRequest {
            profile: profile.clone(),
            plan,
            workspace: PathBuf::from("/"),
            cwd: PathBuf::from("/"),
            cgroup: cgroup_report,
            workspace_tree: false,
            layers_tree: false,
            pooled: true,
        };
        let base_len = request.plan.steps.len();
        let request = request.base(base_len);
        let (control, control_child) = UnixStream::pair()?;
        let (handshake, handshake_child) = UnixStream::pair()?;
        let file = file_contents.as_deref().map(sealed_file).transpose()?;
        let child = self.spawn(
            profile,
            &control_child,
            &handshake_child,
            None,
            file.as_ref(),
            [None, None],
        )?;
        drop((control_child, handshake_child, file));
        let child = add_to_cgroup(child, cgroup.as_ref())?;
        PooledSandbox::staged(
            child,
            control,
            handshake,
            cgroup,
            request,
            pool::file_digest(file_contents.as_deref()),
        )
    }

    fn spawn(
        &self,
        profile: &SandboxProfile,
        control: &UnixStream,
        handshake: &UnixStream,
        relay: Option<&OwnedFd>,
        file: Option<&OwnedFd>,
        [workspace_tree, layers_tree]: [Option<&OwnedFd>; 2],
    ) -> Result<SpawnedChild, SandboxError> {
        let init = std::fs::File::open(&self.init).map_err(|e| SandboxError::Helper {
            message: format!("{}: {e}", self.init.display()),
            help: format!("check that {} is readable", self.init.display()),
        })?;
        let mut argv = vec![INIT_BINARY.to_string()];
        check_helper_file(&init, &self.init)?;
        if let Some(pin) = &self.pin {
            let unchanged =
                self.pin_identity.is_some() && helper_identity(&init).ok() == self.pin_identity;
            if !unchanged {
                check_helper_pin(&init, &self.init, pin)?;
            }
        }
        if nix::unistd::geteuid().is_root() {
            // Root never runs the sandbox. posix_spawn cannot switch users, so the helper
            // switches to these ids (and drops its supplementary groups) before it does
            // anything else, and refuses to run as root without them.
            for (flag, id) in [
                (IDENTITY_UID_FLAG, profile.sandbox_uid),
                (IDENTITY_GID_FLAG, profile.sandbox_gid),
            ] {
                argv.extend([flag.to_string(), id.to_string()]);
            }
        }
        let mut passed = vec![
            (control.as_fd(), CONTROL_FD),
            (handshake.as_fd(), HANDSHAKE_FD),
        ];
        passed.extend(relay.map(|r| (r.as_fd(), RELAY_FD)));
        passed.extend(file.map(|f| (f.as_fd(), FILE_FD)));
        passed.extend(workspace_tree.map(|t| (t.as_fd(), WORKSPACE_FD)));
        passed.extend(layers_tree.map(|t| (t.as_fd(), OVERLAY_FD)));
        spawn::spawn(&SpawnSpec {
            program: &init,
            argv,
            passed,
        })
        .map_err(|e| SandboxError::Helper {
            message: format!("{}: {e}", self.init.display()),
            help: format!(
                "check that {} is executable by uid {}",
                self.init.display(),
                nix::unistd::geteuid()
            ),
        })
    }
}

/// What a run adds to a sandbox, computed on the host from its profile: the request with
/// the whole plan, the descriptors the helper gets with it, and the host's view for the
/// attestation's check.
pub(crate) struct RunParts {
    pub(crate) request: InitRequest,
    pub(crate) host: HostView,
    pub(crate) file_contents: Option<Vec<u8>>,
    pub(crate) relay_socket: Option<RelaySocket>,
    pub(crate) workspace_tree: Option<OwnedFd>,
    pub(crate) layers_tree: Option<OwnedFd>,
}

impl RunParts {
    pub(crate) fn new(profile: &SandboxProfile, cwd: &str) -> Result<RunParts, SandboxError> {
        let workspace = profile.validate()?;
        let cwd = profile.resolve_cwd(&workspace, cwd)?;
        let mut plan = MountPlan::for_profile(profile, &workspace)?;
        // The file's contents travel in the sealed memory file, not with the request.
        let file_contents = plan.file_contents.take();
        let relay_socket = open_relay_socket(profile)?;
        let mut host = host_view(profile);
        host.relay_socket = relay_socket.as_ref().map(|(_, id)| *id);
        // Under the overlay the workspace is only ever the read-only lower layer.
        let overlay = profile.workspace_overlay.as_ref();
        if overlay.is_some() {
            check_overlay_kernel()?;
        }
        let workspace_tree = workspace_tree(&workspace, overlay.is_some(), profile)?;
        let layers_tree = overlay.map(layers_tree).transpose()?.flatten();
        host.overlay = overlay
            .map(|o| expected_layers(&workspace, o))
            .transpose()?;
        host.attached = Some(AttachedReport {
            cwd: cwd.clone(),
            workspace: FileId::of(&workspace).map_err(|e| SandboxError::Profile {
                field: "workspace",
                message: format!("{}: {e}", workspace.display()),
                help: "pass an existing directory as the workspace".into(),
            })?,
            env_sha256: crate::payload_env::digest(&profile.env),
        });
        let request = InitRequest {
            profile: profile.clone(),
            plan,
            workspace,
            cwd,
            cgroup: CgroupReport::Unavailable {
                reason: String::new(),
            },
            workspace_tree: workspace_tree.is_some(),
            layers_tree: layers_tree.is_some(),
            pooled: false,
        };
        Ok(RunParts {
            request,
            host,
            file_contents,
            relay_socket,
            workspace_tree,
            layers_tree,
        })
    }
}

/// Whether nothing can be read from `socket` now (no data, no end of stream): a
/// sandbox that waits for the host says nothing until it is spoken to.
pub(crate) fn quiet(socket: &std::os::unix::net::UnixStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut p = [libc::pollfd {
        fd: socket.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    // SAFETY: one valid pollfd for the duration of the call, no wait.
    let n = unsafe { libc::poll(p.as_mut_ptr(), 1, 0) };
    n == 0
}

/// Put the helper in the run's cgroup, or kill it.
pub(crate) fn add_to_cgroup(
    mut child: SpawnedChild,
    cgroup: Option<&RunCgroup>,
) -> Result<SpawnedChild, SandboxError> {
    if let Some(cg) = cgroup {
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
    Ok(child)
}

/// A root host hands the workspace to the helper as a detached bind mount of it
/// (`open_tree` clone, nosuid and nodev): the sandbox uid could not walk down to a
/// workspace below root's private directories (a session workspace in the state dir), and
/// no host directory is loosened for it. An unprivileged host's sandbox runs as the
/// caller, who reaches the workspace by its path. `read_only`: the bind is the lower
/// layer of the workspace overlay, and shows the workspace owner's files as the sandbox
/// uid's, so that the run can change them (see [`crate::idmap`]).
fn workspace_tree(
    workspace: &Path,
    read_only: bool,
    profile: &SandboxProfile,
) -> Result<Option<OwnedFd>, SandboxError> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    if !read_only {
        return detached_bind(workspace, 0, "workspace").map(Some);
    }
    let tree = detached_bind(workspace, crate::init::sys::MOUNT_ATTR_RDONLY, "workspace")?;
    let owner = std::fs::symlink_metadata(workspace).map_err(|e| SandboxError::Setup {
        stage: "workspace overlay".into(),
        message: format!("{}: {e}", workspace.display()),
        help: "check that the workspace is an ordinary directory on a local file system".into(),
    })?;
    let shift = crate::idmap::IdShift {
        from_uid: std::os::unix::fs::MetadataExt::uid(&owner),
        from_gid: std::os::unix::fs::MetadataExt::gid(&owner),
        to_uid: profile.sandbox_uid,
        to_gid: profile.sandbox_gid,
    };
    if !shift.is_identity() {
        crate::idmap::apply(&tree, shift).map_err(|e| SandboxError::Setup {
            stage: "workspace overlay".into(),
            message: format!(
                "{}: showing the files of uid {} as the sandbox's uid {}: {e}",
                workspace.display(),
                shift.from_uid,
                shift.to_uid
            ),
            help: "as root, the workspace overlay needs id-mapped mounts (Linux 5.12 or newer, on a file system that supports them: ext4, xfs, btrfs, tmpfs from 6.3); or chown the workspace to the sandbox uid, or run airlock as an ordinary user".into(),
        })?;
    }
    Ok(Some(tree))
}

/// A root host hands the overlay's run directory (holding its upper and work layers, which
/// overlayfs wants on one mount) to the helper the same way as the workspace.
fn layers_tree(overlay: &WorkspaceOverlay) -> Result<Option<OwnedFd>, SandboxError> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let dir = overlay.layers_dir().ok_or_else(|| SandboxError::Profile {
        field: "workspace_overlay",
        message: format!("{} has no parent directory", overlay.upper.display()),
        help: "make the layers with WorkspaceOverlay::create".into(),
    })?;
    detached_bind(dir, 0, "workspace overlay").map(Some)
}

/// A kernel too old for overlayfs in a user namespace is refused before anything starts
/// (newer kernels that lack it, say without CONFIG_OVERLAY_FS, are refused by the helper
/// with the kernel's own reason).
fn check_overlay_kernel() -> Result<(), SandboxError> {
    use crate::host_support::{kernel_version, OVERLAY_IN_USERNS_SINCE};
    let (major, minor) = kernel_version();
    if (major, minor) < OVERLAY_IN_USERNS_SINCE {
        return Err(SandboxError::Setup {
            stage: "workspace overlay".into(),
            message: format!(
                "Linux {major}.{minor} cannot mount overlayfs inside a user namespace (it needs {}.{} or newer)",
                OVERLAY_IN_USERNS_SINCE.0, OVERLAY_IN_USERNS_SINCE.1
            ),
            help: OVERLAY_HELP.into(),
        });
    }
    Ok(())
}

/// The host's own record of the layers: the attestation must name these very directories.
fn expected_layers(
    workspace: &Path,
    overlay: &WorkspaceOverlay,
) -> Result<OverlayReport, SandboxError> {
    let id = |p: &Path| {
        FileId::of(p).map_err(|e| SandboxError::Profile {
            field: "workspace_overlay",
            message: format!("{}: {e}", p.display()),
            help: "make the layers with WorkspaceOverlay::create before the run".into(),
        })
    };
    Ok(OverlayReport {
        lower: id(workspace)?,
        upper: id(&overlay.upper)?,
        work: id(&overlay.work)?,
    })
}

/// A detached, non-recursive, nosuid and nodev bind of the directory `path` (plus
/// `extra_attrs`), opened without following a symlink at its last component.
pub(crate) fn detached_bind(
    path: &Path,
    extra_attrs: u64,
    what: &str,
) -> Result<OwnedFd, SandboxError> {
    use crate::init::sys;
    let fail = |stage: &str, e: &dyn std::fmt::Display| SandboxError::Setup {
        stage: format!("{what} {stage}"),
        message: format!("{}: {e}", path.display()),
        help: "check that the workspace is an ordinary directory on a local file system".into(),
    };
    let dir = nix::fcntl::open(
        path,
        nix::fcntl::OFlag::O_PATH
            | nix::fcntl::OFlag::O_DIRECTORY
            | nix::fcntl::OFlag::O_NOFOLLOW
            | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| fail("open", &e))?;
    let tree = sys::clone_tree(&dir, false).map_err(|e| fail("open_tree", &e))?;
    sys::set_mount_attrs(
        std::os::fd::AsRawFd::as_raw_fd(&tree),
        sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV | extra_attrs,
        false,
    )
    .map_err(|e| fail("mount_setattr", &e))?;
    Ok(tree)
}

/// The helper must be its owner's alone, and its owner must be root or the user Airlock
/// runs as: otherwise whoever else can write it decides what runs as the sandbox's parent
/// (as root, on a root host: the helper starts as root and switches to the sandbox uid
/// itself). So: owned by root or the current euid, writable by no group and no other, no
/// set-id bits, a regular file. The descriptor checked is the one executed
/// (`/proc/self/fd/N`).
pub fn check_helper_file(init: &std::fs::File, path: &Path) -> Result<(), SandboxError> {
    use std::os::unix::fs::MetadataExt;
    let meta = init.metadata()?;
    let mode = meta.mode();
    let euid = nix::unistd::geteuid().as_raw();
    let owner_ok = meta.uid() == 0 || meta.uid() == euid;
    if !meta.is_file() || !owner_ok || mode & 0o022 != 0 || mode & 0o6000 != 0 {
        let owners = if euid == 0 {
            "root".to_string()
        } else {
            format!("root or uid {euid} (the user airlock runs as)")
        };
        return Err(SandboxError::Helper {
            message: format!(
                "{} is owned by uid {} with mode {:o}: airlock runs only a helper that {owners} owns and no one else can write",
                path.display(),
                meta.uid(),
                mode & 0o7777
            ),
            help: if euid == 0 {
                format!("chown root:root {p} && chmod 0755 {p}", p = path.display())
            } else {
                format!("chmod go-w,ug-s {p}, and reinstall it if another user owns it", p = path.display())
            },
        });
    }
    Ok(())
}

/// What tells whether the helper file's bytes changed, without reading them: its device,
/// inode and size, and its modification and change times to the nanosecond. Every write
/// sets the change time to the current time, which no process can set back without
/// changing the system clock, so an unchanged identity means the bytes a hash was taken of
/// are still there. Take it *before* hashing: a write during the hash then changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelperIdentity {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: i64,
    pub mtime_nsec: i64,
    pub ctime: i64,
    pub ctime_nsec: i64,
}

/// The identity of the opened helper `file` (see [`HelperIdentity`]).
pub fn helper_identity(file: &std::fs::File) -> std::io::Result<HelperIdentity> {
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata()?;
    Ok(HelperIdentity {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime: m.mtime(),
        mtime_nsec: m.mtime_nsec(),
        ctime: m.ctime(),
        ctime_nsec: m.ctime_nsec(),
    })
}

/// The SHA-256 (lower-case hex) of everything `file` holds, read from its start.
pub fn helper_sha256(file: &std::fs::File) -> std::io::Result<String> {
    use sha2::Digest;
    use std::os::unix::fs::FileExt;
    // Positioned reads: the descriptor's offset is left alone for whoever executes it.
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut offset = 0u64;
    loop {
        let n = file.read_at(&mut buf, offset)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        offset += n as u64;
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The helper about to run must be the one pinned.
fn check_helper_pin(init: &std::fs::File, path: &Path, pin: &str) -> Result<(), SandboxError> {
    let got = helper_sha256(init).map_err(|e| SandboxError::Helper {
        message: format!("{}: cannot read it to check its hash: {e}", path.display()),
        help: format!("check that {} is readable", path.display()),
    })?;
    if got != pin {
        return Err(SandboxError::Helper {
            message: format!(
                "{} has SHA-256 {got}, not the pinned {pin}: it is not the helper that was installed",
                path.display()
            ),
            help: "if you installed a new airlock, pin its helper with `airlock sandbox pin-helper` (the audit log records it); otherwise reinstall airlock".into(),
        });
    }
    Ok(())
}

/// The proxy socket's `O_PATH` descriptor with its device and inode.
pub(crate) type RelaySocket = (OwnedFd, (u64, u64));

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

/// A sealed memory file holding `contents`: what the helper reads is exactly what the
/// host checked, and nothing can change it afterwards.
fn sealed_file(contents: &[u8]) -> Result<OwnedFd, SandboxError> {
    use std::io::Write;
    // SAFETY: a NUL-terminated name and flags; the returned descriptor is new and ours.
    let fd = unsafe {
        libc::memfd_create(
            c"airlock-sandbox-file".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.write_all(contents)?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: F_ADD_SEALS with integer flags on a descriptor we own.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(OwnedFd::from(file))
}

/// What the workspace overlay needs of the machine, for a refusal while building it.
const OVERLAY_HELP: &str = "the workspace overlay needs overlayfs mountable inside a user namespace with the userxattr option (Linux 5.11 or newer, CONFIG_OVERLAY_FS=y or `modprobe overlay`), and its upper layer on a writable local file system with user extended attributes (ext4, xfs, btrfs; tmpfs from Linux 6.6); `airlock doctor` shows what this machine supports. The run never falls back to writing into the workspace";

pub(crate) fn setup_error(stage: String, message: String) -> SandboxError {
    let help = if stage.contains("overlay") {
        OVERLAY_HELP
    } else if message.contains("EACCES") || message.contains("Permission denied") {
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
        overlay: None,
        attached: None,
    }
}
