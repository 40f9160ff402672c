//! # airlock-sandbox — who runs
//!
//! The native Linux sandbox. Every command a model chose runs through [`Sandbox::run`] (or
//! [`run`]), which requires an [`Authorized`](airlock_core::Authorized) token from the Gate,
//! and which runs the command only after the sandbox has *proven* its confinement:
//!
//! 1. The host computes the [`MountPlan`] from a [`SandboxProfile`] and starts the
//!    single-threaded helper `airlock-sandbox-init`, passing the request over a socket
//!    (never argv or the environment).
//! 2. The helper builds user, mount, pid, net, ipc, uts and cgroup namespaces, the read-only
//!    root, drops every capability, and confines the payload process with rlimits, Landlock,
//!    no_new_privs and seccomp (last; the deny-list is [`seccomp_policy::deny_list`]).
//! 3. The payload reads back from the kernel what is applied (`/proc/self/status`, id maps,
//!    namespace ids, Landlock status, mountinfo) and sends it as an [`Attestation`].
//! 4. The host compares it with the profile ([`Attestation::verify`]). Any shortfall refuses
//!    the run with [`SandboxError::Shortfall`] naming the missing feature and how to enable
//!    it; the command never starts. Nothing ever falls back to running on the host.
//!
//! Architecture invariant: this crate runs code, it never decides whether code may run.
//!
//! ```no_run
//! use airlock_sandbox::{OutputMode, Sandbox, SandboxProfile};
//! # fn demo(auth: airlock_core::Authorized<airlock_core::action::ExecAction>) -> Result<(), airlock_sandbox::SandboxError> {
//! let profile = SandboxProfile::new("/home/me/project");
//! let outcome = Sandbox::locate()?.run(&auth, &profile, OutputMode::Inherit)?;
//! println!("exit {} (timed out: {})", outcome.status, outcome.timed_out);
//! let audit_json = serde_json::to_string(&outcome.attestation).unwrap();
//! # let _ = audit_json; Ok(()) }
//! ```
//!
//! For `airlock doctor`: [`host_support`] probes the machine, and [`describe_profile`]
//! prints the mount plan and the seccomp rules a profile applies.
//!
//! With [`SandboxProfile::workspace_overlay`] the run sees the workspace through an
//! overlay and its writes land in a per-run upper layer ([`WorkspaceOverlay`]; the
//! layer's format is documented in [`overlay`]), never in the workspace itself.
//!
//! ## Identity
//!
//! An unprivileged caller runs as itself inside (one-id identity map), so files the sandbox
//! creates belong to the caller. A root caller starts the helper as
//! [`SandboxProfile::sandbox_uid`] (65534 by default); files then belong to that uid, and the
//! workspace must be writable by it, except under the workspace overlay, whose lower layer
//! shows the workspace owner's files as the sandbox uid's (an id-mapped mount, see
//! `idmap.rs`). uid 0 never runs inside the sandbox.

pub mod attestation;
mod cgroup;
pub mod direct_exec;
pub mod error;
mod git_guard;
pub mod host_support;
mod idmap;
#[doc(hidden)]
pub mod init;
mod launcher;
pub mod mount_plan;
mod output;
pub mod overlay;
pub mod payload_env;
pub mod profile;
pub mod protocol;
mod running;
pub mod seccomp_policy;
pub mod workspace_check;

pub use attestation::{Attestation, CgroupReport, Shortfall};
pub use error::SandboxError;
pub use host_support::{host_support, HostSupport};
pub use launcher::{
    check_helper_file, helper_identity, helper_sha256, pool_key, HelperIdentity, PooledSandbox,
    PreparedRun, RunOutcome, Sandbox, INIT_BINARY, INIT_ENV,
};
pub use mount_plan::MountPlan;
pub use output::{DeferredOutput, ForwardTo, OutputMode};
pub use overlay::WorkspaceOverlay;
pub use profile::{SandboxProfile, WeakenedMode};
pub use workspace_check::OperatorDirs;

use airlock_core::action::ExecAction;
use airlock_core::Authorized;

/// Run an authorized command with the helper found by [`Sandbox::locate`].
pub fn run(
    auth: &Authorized<ExecAction>,
    profile: &SandboxProfile,
    output: OutputMode,
) -> Result<RunOutcome, SandboxError> {
    Sandbox::locate()?.run(auth, profile, output)
}

/// The mount plan and the seccomp rules `profile` applies, as readable tables.
pub fn describe_profile(profile: &SandboxProfile) -> Result<String, SandboxError> {
    let workspace = profile.validate()?;
    let plan = MountPlan::for_profile(profile, &workspace)?;
    let rules = seccomp_policy::deny_list();
    let workspace_mode = match &profile.workspace_overlay {
        Some(o) => format!(
            "overlay (the workspace is read-only below it; writes land in {})",
            o.upper.display()
        ),
        None => "read-write bind (git metadata and protected paths read-only)".to_string(),
    };
    Ok(format!(
        "weakened mode: {}\nworkspace: {workspace_mode}\nmount plan:\n{plan}\nseccomp (installed last, {} filters):\n{}",
        profile.weakened.map(|w| w.name()).unwrap_or("none"),
        seccomp_policy::FILTER_COUNT,
        seccomp_policy::DenyListTable(&rules)
    ))
}
