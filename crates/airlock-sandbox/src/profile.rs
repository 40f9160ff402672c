//! `SandboxProfile`: everything the operator decides about one sandboxed run.
//!
//! A profile is plain data (serde, `deny_unknown_fields`) so that it can live in
//! `airlock.toml`, be shown by `airlock doctor`, and be sent to `airlock-sandbox-init`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::SandboxError;
use crate::overlay::WorkspaceOverlay;
use crate::workspace_check::{check_workspace, OperatorDirs};

/// The Landlock ABI below which the sandbox refuses to run unless weakened.
///
/// ABI 6 (Linux 6.12) is the first that scopes abstract UNIX sockets and signals; without it
/// a payload could talk to host daemons over abstract sockets or signal host processes of
/// the same uid.
pub const MIN_SAFE_LANDLOCK_ABI: u32 = 6;

/// The lowest ABI accepted under [`WeakenedMode::WithoutLandlockScopes`]: ABI 3 still
/// covers file truncation, so the filesystem rules stay complete.
pub const MIN_LANDLOCK_ABI_WITHOUT_SCOPES: u32 = 3;

/// Workspace paths that are always bound read-only over the workspace (when they exist),
/// because host tools execute what they contain. When `.git` exists, these two must exist
/// too (the run is refused otherwise, with a help line that says how to create them).
pub const DEFAULT_PROTECTED_PATHS: &[&str] = &[".git/hooks", ".git/config"];

/// Entries of an existing `.git` directory that git executes or takes config from, bound
/// read-only when they exist (most repositories have only some of them), in addition to
/// [`DEFAULT_PROTECTED_PATHS`]:
/// - `commondir` redirects the whole repository (config and hooks included) elsewhere;
/// - `config.worktree` is read as config once `extensions.worktreeConfig` is set;
/// - `info/` holds attributes, excludes and sparse-checkout patterns the host's git obeys;
/// - `modules/` holds every submodule's repository (its `config` and `hooks/`);
/// - `worktrees/` holds each linked worktree's `config.worktree`, `commondir` and `gitdir`;
/// - `remotes/` and `branches/` are the legacy remote definitions (URLs git fetches from).
///
/// `objects/info/alternates` stays writable: it lets a repository borrow objects from
/// another directory, and objects are checked by their hash and never executed.
pub const GIT_PROTECTED_IF_PRESENT: &[&str] = &[
    ".git/config.worktree",
    ".git/commondir",
    ".git/info",
    ".git/modules",
    ".git/worktrees",
    ".git/remotes",
    ".git/branches",
];

/// Names in an existing `.git` directory that must not *appear* during a run: git reads
/// them when present, and a file that does not exist cannot be bound read-only. The host
/// removes any of them that a run created (see `crate::git_guard`).
pub const GIT_MUST_NOT_APPEAR: &[&str] = &["commondir", "config.worktree"];

/// An explicit operator choice to run with less confinement than the default.
///
/// The name of each mode says what it gives up. The mode is recorded in every
/// [`crate::Attestation`] (and therefore in every audit record) of runs made under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WeakenedMode {
    /// Run even when the kernel has no usable Landlock: no filesystem access rules, no
    /// scoping. Namespaces, the read-only root and seccomp still apply.
    WithoutLandlock,
    /// Accept a Landlock ABI from 3 to 5: filesystem rules apply but abstract UNIX sockets
    /// and signals are not scoped.
    WithoutLandlockScopes,
}

impl WeakenedMode {
    /// The name used in `airlock.toml` and in audit records.
    pub fn name(self) -> &'static str {
        match self {
            WeakenedMode::WithoutLandlock => "without_landlock",
            WeakenedMode::WithoutLandlockScopes => "without_landlock_scopes",
        }
    }
}

/// Resource limits applied with `setrlimit` to the payload (soft = hard).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Rlimits {
    /// `RLIMIT_CPU`, seconds of CPU time.
    pub cpu_seconds: u64,
    /// `RLIMIT_AS`, bytes of address space.
    pub address_space_bytes: u64,
    /// `RLIMIT_NPROC`, processes of the sandbox uid inside the sandbox's user namespace.
    pub processes: u64,
    /// `RLIMIT_NOFILE`, open file descriptors.
    pub open_files: u64,
    /// `RLIMIT_FSIZE`, largest file the payload may write, in bytes.
    pub file_size_bytes: u64,
}

impl Default for Rlimits {
    fn default() -> Self {
        Rlimits {
            cpu_seconds: 600,
            address_space_bytes: 16 << 30,
            processes: 512,
            open_files: 4096,
            file_size_bytes: 8 << 30,
        }
    }
}

/// How the sandbox reaches the network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum NetworkPolicy {
    /// A fresh network namespace with only loopback up. Nothing leaves the sandbox.
    #[default]
    LoopbackOnly,
    /// Loopback only, plus a relay inside the sandbox from `127.0.0.1:<port>` to the egress
    /// proxy's UNIX socket on the host: the one way out.
    ProxyRelay(ProxyRelay),
}

/// The relay to the egress proxy (see [`NetworkPolicy::ProxyRelay`]).
///
/// The helper never reaches the socket by path: the host opens it (`O_PATH`) and passes the
/// descriptor, so the socket can live in a directory the sandbox uid cannot traverse and
/// nothing of the host's filesystem is mounted for it. The relay connects through
/// `/proc/self/fd/<fd>`, which needs only write permission on the socket itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyRelay {
    /// TCP port on the sandbox's `127.0.0.1` the relay listens on (1024 or above: nothing in
    /// the sandbox holds the capability to bind lower ports). Landlock lets the payload
    /// connect to it and to no other port beyond [`SandboxProfile::tcp_ports`].
    #[serde(default = "default_relay_port")]
    pub port: u16,
    /// The proxy's UNIX socket on the host. It must not be inside the workspace, and the
    /// sandbox uid must be allowed to write to it.
    pub socket: PathBuf,
    /// A PEM CA certificate on the host, copied into the sandbox read-only at
    /// [`RELAY_CA_CERT`] (certificates only: a file holding a private key is refused).
    #[serde(default)]
    pub ca_cert: Option<PathBuf>,
}

/// The relay's default port (the customary HTTP proxy port).
pub const DEFAULT_RELAY_PORT: u16 = 3128;
/// Where the proxy's CA certificate appears inside the sandbox (read-only).
pub const RELAY_CA_CERT: &str = "/run/airlock/ca.pem";
/// The largest CA certificate file accepted: room for Airlock's CA together with a
/// system trust bundle (about 220 KB on Debian), which clients in the sandbox need to
/// verify pass-through hosts. It is written into the sandbox root (a 1 MiB tmpfs).
pub const MAX_CA_CERT_BYTES: u64 = 512 << 10;

fn default_relay_port() -> u16 {
    DEFAULT_RELAY_PORT
}

impl ProxyRelay {
    /// A relay on [`DEFAULT_RELAY_PORT`] to `socket`, without a CA certificate.
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        ProxyRelay {
            port: DEFAULT_RELAY_PORT,
            socket: socket.into(),
            ca_cert: None,
        }
    }

    /// `http://127.0.0.1:<port>`, the proxy URL for the payload's environment.
    pub fn proxy_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// cgroup v2 limits, applied when a delegated cgroup is available.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CgroupLimits {
    /// `memory.max` in bytes.
    pub memory_max_bytes: u64,
    /// `pids.max`.
    pub pids_max: u64,
    /// `cpu.max` as a share of one CPU in percent (100 = one full CPU).
    pub cpu_percent: u32,
}

impl Default for CgroupLimits {
    fn default() -> Self {
        CgroupLimits {
            memory_max_bytes: 4 << 30,
            pids_max: 1024,
            cpu_percent: 200,
        }
    }
}

/// Everything that defines one sandboxed run except the command itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxProfile {
    /// Host directory mounted read-write at the same absolute path.
    pub workspace: PathBuf,
    /// Allow the workspace to be the caller's home directory itself. Nothing allows the
    /// directories [`crate::workspace_check`] refuses.
    #[serde(default)]
    pub allow_broad_workspace: bool,
    /// The operator's config and state dirs, which the workspace may neither be, contain
    /// nor lie in. Filled on the host by the one function of the `airlock` binary that
    /// builds profiles; never read from a config file nor sent to the helper.
    #[serde(skip)]
    pub operator_dirs: OperatorDirs,
    /// Workspace-relative paths bound read-only over the workspace, in addition to
    /// [`DEFAULT_PROTECTED_PATHS`].
    #[serde(default)]
    pub protected_paths: Vec<PathBuf>,
    /// Extra absolute host paths (files or directories) bound read-only, with execute
    /// rights, at the same path: toolchains outside `/usr`, a probe binary.
    #[serde(default)]
    pub read_only_paths: Vec<PathBuf>,
    /// Working directory inside the sandbox; `None` means the workspace root. Relative paths
    /// are taken from the workspace root. It must lie inside the workspace.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The uid the sandbox runs as when the caller is root (never 0). An unprivileged
    /// caller runs as itself.
    #[serde(default = "default_sandbox_id")]
    pub sandbox_uid: u32,
    /// The gid the sandbox runs as when the caller is root (never 0).
    #[serde(default = "default_sandbox_id")]
    pub sandbox_gid: u32,
    /// The complete environment of the payload. Nothing else from the host passes.
    #[serde(default = "default_env")]
    pub env: BTreeMap<String, String>,
    /// Resource limits.
    #[serde(default)]
    pub rlimits: Rlimits,
    /// cgroup v2 limits (applied only when a delegated cgroup is available; the attestation
    /// says whether they were).
    #[serde(default)]
    pub cgroup: CgroupLimits,
    /// Size of the `/tmp` and `/dev/shm` tmpfs mounts, in bytes.
    #[serde(default = "default_tmp_size")]
    pub tmp_size_bytes: u64,
    /// Wall-clock limit in seconds; the whole process tree is killed when it passes.
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    /// Bytes of output (stdout and stderr together) kept before the rest is cut.
    #[serde(default = "default_output_cap")]
    pub output_cap_bytes: u64,
    /// The Landlock ABI the run requires. `None` means the best the kernel offers, and never
    /// less than [`MIN_SAFE_LANDLOCK_ABI`].
    #[serde(default)]
    pub landlock_abi: Option<u32>,
    /// TCP ports the payload may bind and connect to (Landlock network rules). Empty means
    /// no TCP at all, not even on the sandbox's own loopback.
    #[serde(default)]
    pub tcp_ports: Vec<u16>,
    /// Network access.
    #[serde(default)]
    pub network: NetworkPolicy,
    /// An explicit weaker mode; `None` is full confinement.
    #[serde(default)]
    pub weakened: Option<WeakenedMode>,
    /// See the workspace through an overlay whose writes land in these layers, never in
    /// the workspace itself (see [`crate::overlay`]). `None`: the workspace is bound
    /// read-write, with its git metadata and protected paths bound read-only.
    #[serde(default)]
    pub workspace_overlay: Option<WorkspaceOverlay>,
}

fn default_sandbox_id() -> u32 {
    65534
}
fn default_tmp_size() -> u64 {
    512 << 20
}
fn default_timeout() -> u64 {
    300
}
fn default_output_cap() -> u64 {
    8 << 20
}
fn default_env() -> BTreeMap<String, String> {
    [
        (
            "PATH",
            "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
        ),
        ("HOME", "/tmp"),
        ("LANG", "C.UTF-8"),
        ("TERM", "dumb"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

impl SandboxProfile {
    /// A profile with the defaults for `workspace`.
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        SandboxProfile {
            workspace: workspace.into(),
            allow_broad_workspace: false,
            operator_dirs: OperatorDirs::default(),
            protected_paths: Vec::new(),
            read_only_paths: Vec::new(),
            cwd: None,
            sandbox_uid: default_sandbox_id(),
            sandbox_gid: default_sandbox_id(),
            env: default_env(),
            rlimits: Rlimits::default(),
            cgroup: CgroupLimits::default(),
            tmp_size_bytes: default_tmp_size(),
            timeout_secs: default_timeout(),
            output_cap_bytes: default_output_cap(),
            landlock_abi: None,
            tcp_ports: Vec::new(),
            network: NetworkPolicy::default(),
            weakened: None,
            workspace_overlay: None,
        }
    }

    /// The profile without what a run asks for (see [`crate::protocol::InitRequest::base`]):
    /// no workspace, working directory, environment, protected paths, overlay, proxy
    /// socket, timeout nor output cap.
    pub fn base(&self) -> SandboxProfile {
        let mut base = self.clone();
        base.workspace = "/".into();
        base.allow_broad_workspace = false;
        base.operator_dirs = OperatorDirs::default();
        base.protected_paths.clear();
        base.cwd = None;
        base.env.clear();
        base.timeout_secs = 0;
        base.output_cap_bytes = 0;
        base.workspace_overlay = None;
        if let NetworkPolicy::ProxyRelay(relay) = &mut base.network {
            relay.socket = PathBuf::new();
        }
        base
    }

    /// The Landlock ABI a run must prove, given the kernel's best `available` ABI.
    pub fn required_landlock_abi(&self, available: u32) -> u32 {
        let floor = match self.weakened {
            None => MIN_SAFE_LANDLOCK_ABI,
            Some(WeakenedMode::WithoutLandlockScopes) => MIN_LANDLOCK_ABI_WITHOUT_SCOPES,
            Some(WeakenedMode::WithoutLandlock) => 0,
        };
        self.landlock_abi.unwrap_or(available).max(floor)
    }

    /// The TCP ports Landlock opens to the payload: [`SandboxProfile::tcp_ports`] plus the
    /// relay's port when there is one.
    pub fn allowed_tcp_ports(&self) -> Vec<u16> {
        let mut ports = self.tcp_ports.clone();
        if let NetworkPolicy::ProxyRelay(relay) = &self.network {
            ports.push(relay.port);
        }
        ports.sort_unstable();
        ports.dedup();
        ports
    }

    /// The relay, when the profile has one.
    pub fn relay(&self) -> Option<&ProxyRelay> {
        match &self.network {
            NetworkPolicy::ProxyRelay(r) => Some(r),
            NetworkPolicy::LoopbackOnly => None,
        }
    }

    /// All protected workspace-relative paths: the defaults then the profile's own.
    pub fn all_protected_paths(&self) -> Vec<PathBuf> {
        let mut all: Vec<PathBuf> = DEFAULT_PROTECTED_PATHS.iter().map(PathBuf::from).collect();
        for p in &self.protected_paths {
            if !all.contains(p) {
                all.push(p.clone());
            }
        }
        all
    }

    /// Check the profile and return the canonical workspace path.
    pub fn validate(&self) -> Result<PathBuf, SandboxError> {
        let ws = self
            .workspace
            .canonicalize()
            .map_err(|e| SandboxError::Profile {
                field: "workspace",
                message: format!("cannot resolve {}: {e}", self.workspace.display()),
                help: "pass an existing directory as the workspace".into(),
            })?;
        if !ws.is_dir() {
            return Err(SandboxError::Profile {
                field: "workspace",
                message: format!("{} is not a directory", ws.display()),
                help: "pass a directory as the workspace".into(),
            });
        }
        check_workspace(&ws, &self.operator_dirs)?;
        if !self.allow_broad_workspace {
            if let Some(home) = caller_home() {
                if home.canonicalize().ok().as_deref() == Some(ws.as_path()) {
                    return Err(SandboxError::Profile {
                        field: "workspace",
                        message: format!(
                            "the workspace is your home directory {} itself",
                            ws.display()
                        ),
                        help: "choose a project directory inside it, or set allow_broad_workspace = true".into(),
                    });
                }
            }
        }
        if self.sandbox_uid == 0 || self.sandbox_gid == 0 {
            return Err(SandboxError::Profile {
                field: "sandbox_uid",
                message: "the sandbox uid and gid must not be 0".into(),
                help: "use an unprivileged id such as 65534 (nobody)".into(),
            });
        }
        for p in &self.protected_paths {
            if p.is_absolute()
                || p.components()
                    .any(|c| !matches!(c, std::path::Component::Normal(_)))
            {
                return Err(SandboxError::Profile {
                    field: "protected_paths",
                    message: format!("{} is not a plain workspace-relative path", p.display()),
                    help: "write protected paths relative to the workspace, without `..`".into(),
                });
            }
        }
        for p in &self.read_only_paths {
            let bad = !p.is_absolute()
                || p == Path::new("/")
                || ["/proc", "/sys", "/dev"].iter().any(|s| p.starts_with(s))
                || !p.exists();
            if bad {
                return Err(SandboxError::Profile {
                    field: "read_only_paths",
                    message: format!(
                        "{} is not an existing absolute path outside /, /proc, /sys and /dev",
                        p.display()
                    ),
                    help: "list existing absolute host paths such as /opt/toolchain".into(),
                });
            }
        }
        for (k, v) in &self.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return Err(SandboxError::Profile {
                    field: "env",
                    message: format!("invalid environment entry {k:?}"),
                    help: "names must be non-empty and contain no `=`; no NUL bytes".into(),
                });
            }
        }
        if self.timeout_secs == 0 {
            return Err(SandboxError::Profile {
                field: "timeout_secs",
                message: "the timeout is 0".into(),
                help: "give a timeout of at least one second".into(),
            });
        }
        if self.tmp_size_bytes < 1 << 20 {
            return Err(SandboxError::Profile {
                field: "tmp_size_bytes",
                message: format!("/tmp size {} bytes is below 1 MiB", self.tmp_size_bytes),
                help: "give /tmp at least 1 MiB".into(),
            });
        }
        if let Some(relay) = self.relay() {
            validate_relay(relay, &ws)?;
        }
        if let Some(overlay) = &self.workspace_overlay {
            overlay.validate(&ws)?;
        }
        Ok(ws)
    }

    /// The working directory inside the sandbox, given an action's `cwd` (which may be
    /// empty, relative to the workspace, or absolute).
    pub fn resolve_cwd(&self, workspace: &Path, action_cwd: &str) -> Result<PathBuf, SandboxError> {
        let requested: Option<PathBuf> = if !action_cwd.is_empty() {
            Some(PathBuf::from(action_cwd))
        } else {
            self.cwd.clone()
        };
        let Some(req) = requested else {
            return Ok(workspace.to_path_buf());
        };
        let joined = if req.is_absolute() {
            req
        } else {
            workspace.join(req)
        };
        let resolved = joined.canonicalize().map_err(|e| SandboxError::Profile {
            field: "cwd",
            message: format!("cannot resolve working directory {}: {e}", joined.display()),
            help: "give a directory that exists inside the workspace".into(),
        })?;
        if !resolved.starts_with(workspace) {
            return Err(SandboxError::Profile {
                field: "cwd",
                message: format!(
                    "working directory {} is outside the workspace {}",
                    resolved.display(),
                    workspace.display()
                ),
                help: "give a directory inside the workspace".into(),
            });
        }
        Ok(resolved)
    }
}

fn validate_relay(relay: &ProxyRelay, workspace: &Path) -> Result<(), SandboxError> {
    let bad = |field, message: String, help: &str| SandboxError::Profile {
        field,
        message,
        help: help.into(),
    };
    if relay.port < 1024 {
        return Err(bad(
            "network.port",
            format!("relay port {} is below 1024", relay.port),
            "pick a port from 1024 to 65535 (the default is 3128)",
        ));
    }
    if !relay.socket.is_absolute() {
        return Err(bad(
            "network.socket",
            format!("{} is not an absolute path", relay.socket.display()),
            "give the absolute path of the egress proxy's UNIX socket",
        ));
    }
    let socket_dir = relay
        .socket
        .parent()
        .and_then(|d| d.canonicalize().ok())
        .unwrap_or_else(|| relay.socket.clone());
    if socket_dir.starts_with(workspace) {
        return Err(bad(
            "network.socket",
            format!(
                "the proxy socket {} is inside the workspace {}",
                relay.socket.display(),
                workspace.display()
            ),
            "keep the proxy socket in a private directory under the state dir",
        ));
    }
    if let Some(cert) = &relay.ca_cert {
        let meta = std::fs::metadata(cert).map_err(|e| {
            bad(
                "network.ca_cert",
                format!("{}: {e}", cert.display()),
                "run `airlock init` to create the egress proxy's CA",
            )
        })?;
        if !meta.is_file() || meta.len() > MAX_CA_CERT_BYTES {
            return Err(bad(
                "network.ca_cert",
                format!(
                    "{} is not a regular file of at most 512 KiB",
                    cert.display()
                ),
                "point ca_cert at the proxy's PEM certificate (ca.pem)",
            ));
        }
    }
    Ok(())
}

/// Read the CA certificate the relay's sandbox gets; refuse anything but certificates.
pub fn read_ca_cert(path: &Path) -> Result<String, SandboxError> {
    let bad = |message: String| SandboxError::Profile {
        field: "network.ca_cert",
        message,
        help: "point ca_cert at the proxy's PEM certificate (ca.pem), never at a key".into(),
    };
    let text =
        std::fs::read_to_string(path).map_err(|e| bad(format!("{}: {e}", path.display())))?;
    if text.len() as u64 > MAX_CA_CERT_BYTES || !text.contains("-----BEGIN CERTIFICATE-----") {
        return Err(bad(format!("{} is not a PEM certificate", path.display())));
    }
    if text.contains("PRIVATE KEY") {
        return Err(bad(format!(
            "{} holds a private key; the sandbox may only get the certificate",
            path.display()
        )));
    }
    Ok(text)
}

/// The caller's home directory, from the password database (not `$HOME`, which the caller
/// controls less reliably than the system does).
fn caller_home() -> Option<PathBuf> {
    let uid = nix::unistd::geteuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(u)) => Some(u.dir),
        _ => std::env::var_os("HOME").map(PathBuf::from),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Gate's protected paths (which its file tools may only stage, for a held
    /// commit) and the git entries this sandbox binds read-only without an overlay are
    /// one list: every git entry the Gate protects is bound here, and the other way round.
    #[test]
    fn the_gates_git_paths_and_the_sandboxs_read_only_binds_are_the_same_list() {
        let gate: std::collections::BTreeSet<&str> = airlock_core::paths::DEFAULT_PROTECTED
            .iter()
            .copied()
            .filter(|p| p.starts_with(".git/"))
            .collect();
        let sandbox: std::collections::BTreeSet<&str> = DEFAULT_PROTECTED_PATHS
            .iter()
            .chain(GIT_PROTECTED_IF_PRESENT)
            .copied()
            .collect();
        assert_eq!(gate, sandbox);
    }

    #[test]
    fn i4_root_workspace_is_refused_even_when_broad_workspaces_are_allowed() {
        let mut p = SandboxProfile::new("/");
        p.allow_broad_workspace = true;
        let err = p.validate().unwrap_err().to_string();
        assert!(err.contains("holds other programs' sockets"), "{err}");
    }

    #[test]
    fn i4_operator_dirs_are_refused_through_validate() {
        let root = tempfile::tempdir().unwrap();
        let config = root.path().join("config");
        std::fs::create_dir_all(config.join("keys")).unwrap();
        let mut p = SandboxProfile::new(config.join("keys/../keys"));
        p.allow_broad_workspace = true;
        p.operator_dirs.config = Some(config);
        let err = p.validate().unwrap_err().to_string();
        assert!(err.contains("config dir"), "{err}");
    }

    #[test]
    fn home_workspace_is_refused() {
        let home = caller_home().unwrap();
        if home.is_dir() {
            let err = SandboxProfile::new(&home)
                .validate()
                .unwrap_err()
                .to_string();
            assert!(err.contains("home directory"), "{err}");
        }
    }

    #[test]
    fn required_abi_never_drops_below_the_floor() {
        let mut p = SandboxProfile::new("/tmp");
        assert_eq!(p.required_landlock_abi(7), 7);
        p.landlock_abi = Some(2);
        assert_eq!(p.required_landlock_abi(7), MIN_SAFE_LANDLOCK_ABI);
        p.weakened = Some(WeakenedMode::WithoutLandlockScopes);
        assert_eq!(p.required_landlock_abi(7), 3);
        p.landlock_abi = Some(99);
        assert_eq!(p.required_landlock_abi(7), 99);
    }

    #[test]
    fn cwd_outside_workspace_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        std::fs::create_dir(ws.join("sub")).unwrap();
        let p = SandboxProfile::new(&ws);
        assert_eq!(p.resolve_cwd(&ws, "sub").unwrap(), ws.join("sub"));
        assert_eq!(p.resolve_cwd(&ws, "").unwrap(), ws);
        let err = p.resolve_cwd(&ws, "..").unwrap_err().to_string();
        assert!(err.contains("outside the workspace"), "{err}");
    }

    #[test]
    fn unknown_profile_fields_are_refused() {
        let err = serde_json::from_str::<SandboxProfile>(r#"{"workspace":"/x","sneaky":1}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field"), "{err}");
    }
}
