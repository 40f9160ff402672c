//! What the helper undoes of how it was started, before anything else runs.
//!
//! The host starts the helper with glibc's `posix_spawn`, which asks for an empty signal
//! mask and every signal at its default disposition. Two things it cannot give:
//!
//! - glibc's own signals 32 and 33 (thread cancellation and set*id broadcast) are set to
//!   *ignored* in every child it spawns, and `sigaddset` refuses them, so no attribute can
//!   change that. An ignored signal stays ignored across `fork` and `execve`, so without a
//!   reset every payload would start with both ignored.
//! - descriptors the host inherited from its own parent without close-on-exec reach the
//!   helper too (everything the host opens itself is close-on-exec).

use std::io;

use crate::protocol::OVERLAY_FD;

/// The signals glibc reserves for itself (`SIGCANCEL`, `SIGSETXID`). The helper is
/// single-threaded and uses neither.
const GLIBC_INTERNAL_SIGNALS: [libc::c_int; 2] = [32, 33];

/// Give glibc's internal signals their default disposition, and close every descriptor
/// above the ones the host passes (0-2, and 3 to 8, see [`crate::protocol`]).
pub(super) fn clean_start() -> Result<(), String> {
    for sig in GLIBC_INTERNAL_SIGNALS {
        default_disposition(sig).map_err(|e| format!("rt_sigaction({sig}, SIG_DFL): {e}"))?;
    }
    super::sys::close_from(OVERLAY_FD as u32 + 1).map_err(|e| format!("close_range: {e}"))
}

/// The kernel's `struct sigaction` for `rt_sigaction` (x86_64 and aarch64 layout).
#[repr(C)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// `rt_sigaction(sig, SIG_DFL)`, as a system call: glibc's `sigaction` refuses its
/// internal signals.
fn default_disposition(sig: libc::c_int) -> io::Result<()> {
    let action = KernelSigaction {
        handler: libc::SIG_DFL,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    // SAFETY: a valid kernel sigaction for the new disposition, no old one requested, and
    // the size of the kernel's signal set (8 bytes).
    let r = unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            sig,
            &action as *const KernelSigaction,
            std::ptr::null_mut::<KernelSigaction>(),
            std::mem::size_of::<u64>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
