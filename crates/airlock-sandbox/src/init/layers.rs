//! The confinement layers the helper applies, named so that a test-only build can leave one
//! out on purpose and show that the host refuses the run (and which layer still blocks an
//! escape).
//!
//! In this crate the hooks below are constants: [`skips`] is `false` for every layer,
//! [`adjust_request`] and [`before_attesting`] do nothing, [`skipped_landlock`] is `None`.
//! The code that leaves a layer out is the sibling module `weakened`, compiled only under
//! `cfg(airlock_weakened)`. Nothing in a build of `airlock-sandbox` can set that cfg:
//!
//! - it is not a cargo feature, so `cargo build --workspace` cannot unify it into the
//!   shipped helper;
//! - it is set by the build script of `crates/airlock-sandbox-weakened`, and a build
//!   script's `cargo:rustc-cfg` applies only to the package that owns it. That package
//!   compiles these same sources as a *separate* library (`airlock_sandbox_weakened`) for
//!   its own binary, `airlock-sandbox-init-weakened`, which nothing ships, and which is
//!   `publish = false`.
//!
//! `crates/airlock-sandbox/tests/suite/forced_shortfalls.rs` checks that the shipped
//! helper holds none of the weakened module's marker strings.

/// One confinement layer of the sandbox.
// Only the test-only build names the layers whose hooks are not `skips` calls.
#[cfg_attr(not(airlock_weakened), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layer {
    UserNamespace,
    MountNamespace,
    PidNamespace,
    NetNamespace,
    IpcNamespace,
    UtsNamespace,
    CgroupNamespace,
    Landlock,
    Seccomp,
    Capabilities,
    NoNewPrivs,
    /// The read-only flags of the mount plan (the root tmpfs, the system binds, the
    /// protected workspace paths).
    ReadOnlyMounts,
}

#[cfg(airlock_weakened)]
#[path = "weakened.rs"]
mod weakened;
#[cfg(airlock_weakened)]
pub(super) use weakened::{adjust_request, before_attesting, load, skipped_landlock, skips};

/// Whether this build leaves `layer` out: never, in every build but the test-only one.
#[cfg(not(airlock_weakened))]
#[inline(always)]
pub(super) const fn skips(_layer: Layer) -> bool {
    false
}

/// Read which layer to leave out: nothing to read in every build but the test-only one.
#[cfg(not(airlock_weakened))]
#[inline(always)]
pub(super) fn load() -> Result<(), super::InitError> {
    Ok(())
}

/// Change the host's request before it is built: never, but in the test-only build.
#[cfg(not(airlock_weakened))]
#[inline(always)]
pub(super) fn adjust_request(_request: &mut crate::protocol::InitRequest) {}

/// The Landlock report of a payload left without Landlock: never, but in the test-only
/// build.
#[cfg(not(airlock_weakened))]
#[inline(always)]
pub(super) fn skipped_landlock() -> Option<crate::attestation::LandlockReport> {
    None
}

/// Run something in the confined payload before it attests: nothing, but in the
/// test-only build.
#[cfg(not(airlock_weakened))]
#[inline(always)]
pub(super) fn before_attesting() {}
