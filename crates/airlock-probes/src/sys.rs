//! Small system helpers shared by the probes: errno capture, C strings, running an attempt in a
//! forked child, reading `/proc/self/status`.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::probe::Got;

/// Seconds a forked attempt may take before it is killed (and the probe fails with SIGALRM).
const CHILD_DEADLINE_SECS: u32 = 30;

/// Exit status of a child whose attempt panicked.
const CHILD_PANICKED: i32 = 101;

/// The errno of the last failed call on this thread.
pub fn last_errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The outcome of a std I/O call.
pub fn got_from_io<T>(result: io::Result<T>, success: impl FnOnce(T) -> String) -> Got {
    match result {
        Ok(value) => Got::Succeeded(success(value)),
        Err(err) => match err.raw_os_error() {
            Some(errno) => Got::Failed(errno),
            None => Got::NotRun(format!("I/O error without errno: {err}")),
        },
    }
}

/// The outcome of a raw call that returns a file descriptor; a returned descriptor is closed.
pub fn got_from_fd(ret: i64) -> Got {
    if ret >= 0 {
        close(ret as i32);
        Got::Succeeded(format!("got file descriptor {ret}"))
    } else {
        Got::from_ret(ret)
    }
}

/// Close a descriptor, ignoring errors (it is ours and only used once).
pub fn close(fd: i32) {
    // SAFETY: closing a descriptor this process owns has no memory-safety requirements.
    unsafe {
        libc::close(fd);
    }
}

/// A path as a C string. Paths come from our own arguments or constants; one holding a NUL
/// byte cannot be passed to the kernel, so the caller reports the probe as not run.
pub fn c_path(path: &Path) -> Result<CString, Got> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Got::NotRun(format!("path {} contains a NUL byte", path.display())))
}

/// A constant string as a C string.
pub fn c_str(text: &str) -> CString {
    // Constants in this crate never hold NUL bytes; fall back to an empty string if one did.
    CString::new(text).unwrap_or_default()
}

/// A scratch name under `dir` that no other probe or run uses.
pub fn scratch_path(dir: &Path, stem: &str) -> PathBuf {
    dir.join(format!(".airlock-probe-{stem}-{}", std::process::id()))
}

/// A field of `/proc/self/status` (`CapEff`, `Seccomp`, …), trimmed.
pub fn status_field(name: &str) -> Result<String, Got> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| Got::NotRun(format!("cannot read /proc/self/status: {e}")))?;
    parse_status_field(&status, name)
        .ok_or_else(|| Got::NotRun(format!("/proc/self/status has no {name} field")))
}

/// Find `name:` in the text of a `/proc/<pid>/status` file.
pub fn parse_status_field(status: &str, name: &str) -> Option<String> {
    status.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key == name).then(|| value.trim().to_string())
    })
}

/// Run `attempt` in a forked child and return what it reported, or how it died.
///
/// Attempts that would change the calling process (chroot, unshare, setrlimit, a 32-bit
/// system call that kills the caller) run here so the next probe starts from a clean process.
/// The child reports over a pipe; if it is killed, the signal is the outcome.
pub fn in_child(attempt: impl FnOnce() -> Got) -> Got {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid, writable array of two ints, as pipe2 requires.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Got::NotRun(format!("pipe2 failed: errno {}", last_errno()));
    }
    let (read_end, write_end) = (fds[0], fds[1]);
    // SAFETY: the probe binary is single-threaded, so the child starts with consistent state
    // (no lock held by another thread). The child only runs `attempt`, writes and `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let errno = last_errno();
        close(read_end);
        close(write_end);
        return Got::NotRun(format!("fork failed: errno {errno}"));
    }
    if pid == 0 {
        close(read_end);
        // SAFETY: alarm only arms a timer for this (child) process.
        unsafe { libc::alarm(CHILD_DEADLINE_SECS) };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(attempt));
        let code = match outcome {
            Ok(got) => {
                let bytes = serde_json::to_vec(&got).unwrap_or_default();
                write_all(write_end, &bytes);
                0
            }
            Err(_) => CHILD_PANICKED,
        };
        // SAFETY: _exit ends the child without running the parent's atexit handlers or
        // flushing stdio buffers it inherited (the parent flushes its own).
        unsafe { libc::_exit(code) };
    }
    close(write_end);
    let report = read_all(read_end);
    close(read_end);
    let status = wait_for(pid);
    if libc::WIFSIGNALED(status) {
        return Got::Killed(libc::WTERMSIG(status));
    }
    match serde_json::from_slice::<Got>(&report) {
        Ok(got) => got,
        Err(_) => Got::Exited(libc::WEXITSTATUS(status)),
    }
}

/// Wait for a child, retrying on EINTR; returns the raw wait status.
pub fn wait_for(pid: i32) -> i32 {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer for waitpid.
        let ret = unsafe { libc::waitpid(pid, &mut status, 0) };
        if ret == pid || last_errno() != libc::EINTR {
            return status;
        }
    }
}

fn write_all(fd: i32, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: the pointer and length describe the live `bytes` slice.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            if n < 0 && last_errno() == libc::EINTR {
                continue;
            }
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

fn read_all(fd: i32) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: the pointer and length describe the live, writable `buf`.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            out.extend_from_slice(&buf[..n as usize]);
        } else if n < 0 && last_errno() == libc::EINTR {
            continue;
        } else {
            return out;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status_fields() {
        let status = "Name:\tx\nCapEff:\t0000000000000000\nSeccomp:\t2\n";
        assert_eq!(
            parse_status_field(status, "CapEff").as_deref(),
            Some("0000000000000000")
        );
        assert_eq!(parse_status_field(status, "Seccomp").as_deref(), Some("2"));
        assert_eq!(parse_status_field(status, "Cap"), None);
    }

    #[test]
    fn child_reports_its_outcome() {
        let got = in_child(|| Got::Failed(libc::EPERM));
        assert_eq!(got, Got::Failed(libc::EPERM));
    }

    #[test]
    fn child_killed_by_a_signal_is_reported() {
        let got = in_child(|| {
            // SAFETY: raising a signal in the forked child only affects that child.
            unsafe { libc::raise(libc::SIGUSR1) };
            Got::Holds("unreachable".into())
        });
        assert_eq!(got, Got::Killed(libc::SIGUSR1));
    }
}
