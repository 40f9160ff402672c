//! Symbolic names for errno values and signals, as printed in probe results.

use nix::errno::Errno;
use nix::sys::signal::Signal;

/// `EPERM` for 1, `errno 4242` for values the platform does not name.
pub fn errno_name(errno: i32) -> String {
    match Errno::from_raw(errno) {
        Errno::UnknownErrno => format!("errno {errno}"),
        known => format!("{known:?}"),
    }
}

/// `SIGSYS` for 31, `signal 99` for values the platform does not name.
pub fn signal_name(sig: i32) -> String {
    match Signal::try_from(sig) {
        Ok(signal) => signal.as_str().to_string(),
        Err(_) => format!("signal {sig}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_known_values() {
        assert_eq!(errno_name(libc::EPERM), "EPERM");
        assert_eq!(errno_name(libc::ENOSYS), "ENOSYS");
        assert_eq!(signal_name(libc::SIGSYS), "SIGSYS");
    }

    #[test]
    fn falls_back_to_numbers() {
        assert_eq!(errno_name(4242), "errno 4242");
        assert_eq!(signal_name(99), "signal 99");
    }
}
