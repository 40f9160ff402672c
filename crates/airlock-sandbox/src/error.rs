//! Errors of the sandbox launcher. Each names what failed and how to fix it.

use crate::attestation::Shortfall;

/// Why a sandboxed run did not happen (or did not finish normally).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The profile is unusable.
    #[error("invalid sandbox profile: `{field}`: {message}\nhelp: {help}")]
    Profile {
        field: &'static str,
        message: String,
        help: String,
    },
    /// The `airlock-sandbox-init` helper could not be found or started.
    #[error("cannot start airlock-sandbox-init: {message}\nhelp: {help}")]
    Helper { message: String, help: String },
    /// The helper failed while building the sandbox. Nothing ran.
    #[error("the sandbox could not be built ({stage}): {message}\nhelp: {help}")]
    Setup {
        stage: String,
        message: String,
        help: String,
    },
    /// The confinement the kernel reports falls short of the profile. Nothing ran.
    #[error("refusing to run: the sandbox's confinement falls short of the profile:\n{}", format_shortfalls(.0))]
    Shortfall(Vec<Shortfall>),
    /// The host could not make or remove a workspace overlay's layers
    /// ([`crate::WorkspaceOverlay`]).
    #[error("workspace overlay layers ({stage}): {message}\nhelp: {help}")]
    Layers {
        stage: String,
        message: String,
        help: String,
    },
    /// A pooled sandbox was built for another base than the run's (another profile or
    /// config): it is discarded unused, and the run gets a sandbox built for it.
    #[error("the pooled sandbox does not fit this run: {0}\nhelp: build the run's sandbox from nothing (Sandbox::prepare)")]
    PoolMismatch(String),
    /// Talking to the helper failed.
    #[error("lost contact with airlock-sandbox-init: {0}\nhelp: this is a bug or the helper was killed; check the system log")]
    Protocol(String),
    /// An I/O error on the host side.
    #[error("sandbox I/O error: {0}")]
    Io(#[from] std::io::Error),
}

fn format_shortfalls(items: &[Shortfall]) -> String {
    items
        .iter()
        .map(|s| format!("  - {}: {}\n    help: {}", s.feature, s.detail, s.help))
        .collect::<Vec<_>>()
        .join("\n")
}
