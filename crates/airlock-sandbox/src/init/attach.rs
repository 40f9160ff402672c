//! PID 1 of a pooled sandbox: built as far as nothing depends on a run, then given the
//! run's own request and descriptors.
//!
//! The base request (`InitRequest::pooled`) has the plan's fixed steps only. PID 1 runs
//! them into a staged root (the host's root still at `/oldroot`, nothing but PID 1 in the
//! sandbox), tells the host [`PayloadMessage::Staged`], and waits. The host's [`Attach`]
//! brings the run's whole request, with the proxy socket, workspace tree and layers tree
//! the request needs passed as `SCM_RIGHTS`. PID 1 accepts it only when its base is the
//! one it was built from, installs the descriptors at the numbers a sandbox built for the
//! run would have had them ([`RELAY_FD`], [`WORKSPACE_FD`], [`OVERLAY_FD`]), runs the
//! workspace's steps, and from there goes on exactly as such a sandbox: relay, payload,
//! confinement, attestation. So the attestation covers the attached parts as it covers a
//! sandbox built from nothing.

use std::io::BufReader;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use super::{mounts, pid1_lock_down, pid1_prelude, pid1_root, InitError};
use crate::attestation::OverlayReport;
use crate::protocol::{
    self, Attach, InitRequest, PayloadMessage, OVERLAY_FD, RELAY_FD, WORKSPACE_FD,
};

/// The most descriptors an [`Attach`] carries: proxy socket, workspace, layers.
const MAX_ATTACHED_FDS: usize = 3;

/// Build the base, wait for the run, attach it. Returns what the overlay was built on and
/// the run's request, which replaces the base from here on.
pub(super) fn pooled_setup(
    base: &InitRequest,
    handshake: &mut UnixStream,
) -> Result<(Option<OverlayReport>, Option<InitRequest>), InitError> {
    pid1_prelude()?;
    // The run's descriptors go to fixed numbers later: keep those numbers from being
    // handed to anything opened meanwhile.
    for fd in [RELAY_FD, WORKSPACE_FD, OVERLAY_FD] {
        reserve(fd)?;
    }
    let mut root = mounts::StagedRoot::stage()?;
    root.run_steps(&base.plan.steps, None, None)?;
    protocol::send(handshake, &PayloadMessage::Staged)
        .map_err(|e| InitError::new("pool", format!("reporting the staged sandbox: {e}")))?;
    let (mut request, fds) = receive(handshake)?;
    super::layers::adjust_request(&mut request);
    if request.base(base.plan.steps.len()) != *base {
        return Err(InitError::new(
            "pool",
            "the run's request does not match the base this pooled sandbox was built from",
        ));
    }
    install(&request, fds)?;
    let tail = &request.plan.steps[base.plan.steps.len()..];
    pid1_root(&request, &mut root, tail)?;
    let overlay = root.finish()?;
    pid1_lock_down()?;
    Ok((overlay, Some(request)))
}

/// Hold `fd` with a descriptor of `/dev/null` (close-on-exec) until the run's own
/// replaces it.
fn reserve(fd: RawFd) -> Result<(), InitError> {
    let null = nix::fcntl::open(
        "/dev/null",
        nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| InitError::new("pool", format!("/dev/null: {e}")))?;
    if null.as_raw_fd() != fd {
        // SAFETY: dup3 onto a number no Rust object of this process owns (stage 0 closed
        // it, or it was never open); `null` stays owned and is closed on drop.
        if unsafe { libc::dup3(null.as_raw_fd(), fd, libc::O_CLOEXEC) } < 0 {
            return Err(InitError::new(
                "pool",
                format!("reserving fd {fd}: {}", std::io::Error::last_os_error()),
            ));
        }
    } else {
        std::mem::forget(null);
    }
    Ok(())
}

/// Read the one byte that carries the descriptors, then the [`Attach`] line.
fn receive(handshake: &mut UnixStream) -> Result<(InitRequest, Vec<OwnedFd>), InitError> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let fail = |e: &dyn std::fmt::Display| InitError::new("pool", format!("attach: {e}"));
    let mut byte = [0u8; 1];
    let mut space = nix::cmsg_space!([RawFd; MAX_ATTACHED_FDS]);
    let mut fds = Vec::new();
    let n = loop {
        let mut iov = [std::io::IoSliceMut::new(&mut byte)];
        match recvmsg::<()>(
            handshake.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) => {
                for c in msg.cmsgs().map_err(|e| fail(&e))? {
                    if let ControlMessageOwned::ScmRights(r) = c {
                        // SAFETY: the kernel just installed these descriptors for us.
                        fds.extend(r.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
                    }
                }
                break msg.bytes;
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(fail(&e)),
        }
    };
    if n == 0 {
        // The host let the pooled sandbox go unused.
        std::process::exit(super::EXIT_ABORTED);
    }
    let reader = handshake.try_clone().map_err(|e| fail(&e))?;
    let attach: Attach = match protocol::recv(&mut BufReader::new(reader)) {
        Ok(Some(a)) => a,
        Ok(None) => std::process::exit(super::EXIT_ABORTED),
        Err(e) => return Err(fail(&e)),
    };
    Ok((attach.request, fds))
}

/// Put the run's descriptors where a sandbox built for it would have them, in the order
/// [`Attach`] names; a number the run does not use is closed.
fn install(request: &InitRequest, fds: Vec<OwnedFd>) -> Result<(), InitError> {
    let wanted: Vec<RawFd> = [
        (request.profile.relay().is_some(), RELAY_FD),
        (request.workspace_tree, WORKSPACE_FD),
        (request.layers_tree, OVERLAY_FD),
    ]
    .into_iter()
    .filter_map(|(w, fd)| w.then_some(fd))
    .collect();
    if fds.len() != wanted.len() {
        return Err(InitError::new(
            "pool",
            format!(
                "the run came with {} descriptors, its request needs {}",
                fds.len(),
                wanted.len()
            ),
        ));
    }
    for (fd, at) in fds.iter().zip(&wanted) {
        // SAFETY: dup2 onto a reserved number that no Rust object of this process owns;
        // the copy is not close-on-exec, as a descriptor passed at start would be (the
        // relay and the mount steps take and close it before anything executes).
        if unsafe { libc::dup2(fd.as_raw_fd(), *at) } < 0 {
            return Err(InitError::new(
                "pool",
                format!("fd {at}: {}", std::io::Error::last_os_error()),
            ));
        }
    }
    for at in [RELAY_FD, WORKSPACE_FD, OVERLAY_FD] {
        if !wanted.contains(&at) {
            // SAFETY: closing a reserved placeholder no Rust object owns.
            unsafe { libc::close(at) };
        }
    }
    Ok(())
}
