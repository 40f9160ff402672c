//! What the probes know about their surroundings: the host endpoints the test opened, the
//! workspace, the protected paths, and facts captured at start-up.

use std::path::PathBuf;

/// Inputs shared by all probes.
#[derive(Debug, Clone, Default)]
pub struct Ctx {
    /// TCP port of a listener on the host's 127.0.0.1.
    pub host_tcp: Option<u16>,
    /// UDP port of an echo socket on the host's 127.0.0.1.
    pub host_udp: Option<u16>,
    /// Name (without the leading NUL) of an abstract UNIX socket listening on the host.
    pub host_abstract: Option<String>,
    /// A UNIX socket a host process listens on by path, reachable by file permissions.
    pub host_unix_path: Option<PathBuf>,
    /// A pid that exists on the host, outside the sandbox.
    pub host_pid: Option<i32>,
    /// A host file outside the workspace, used as the target of planted links.
    pub outside_path: Option<PathBuf>,
    /// The read-write workspace.
    pub workspace: PathBuf,
    /// Workspace paths that must be read-only (`.git/hooks`, `.git/config`, …).
    pub protected: Vec<PathBuf>,
    /// Extra mount points the sandbox is expected to have (read-only binds of tools); the
    /// probe binary's own path is always allowed.
    pub allowed_mounts: Vec<PathBuf>,
    /// Descriptors above 2 open when the process started (number, target).
    pub inherited_fds: Vec<(i32, String)>,
    /// The process holds effective capabilities: it is clearly not confined.
    pub privileged: bool,
}
