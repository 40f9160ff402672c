//! The scheduler's clock: the system clock, read in one place.
//!
//! Debug builds only: `AIRLOCK_DEBUG_CLOCK_FILE=<file>` makes it read "now" (unix
//! seconds) from the file each time, so the host's tests move the scheduler's time by
//! hours or across a daylight-saving change without waiting. A release build has no such
//! variable and reads the system clock only.

#[cfg(debug_assertions)]
const DEBUG_CLOCK_VAR: &str = "AIRLOCK_DEBUG_CLOCK_FILE";

/// Now, in unix seconds.
pub fn now() -> i64 {
    #[cfg(debug_assertions)]
    if let Some(path) = std::env::var_os(DEBUG_CLOCK_VAR) {
        if let Some(t) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
        {
            return t;
        }
    }
    crate::runtime::now_unix() as i64
}
