//! Who waits for an approval request: the process that created it, named by its pid and its
//! start time, so that a pid reused by another process is not taken for the waiter.
//!
//! Read from `/proc/<pid>/stat` by hand: the one field needed (22, `starttime`, in clock
//! ticks since boot) follows the parenthesised command name, which may itself hold spaces
//! and parentheses, so the fields are counted from the last `)`.

/// A process, as this host's kernel knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Waiter {
    pub pid: u32,
    /// `starttime` from `/proc/<pid>/stat`.
    pub start: u64,
}

impl Waiter {
    /// This process.
    pub(crate) fn current() -> Option<Waiter> {
        let pid = std::process::id();
        Some(Waiter {
            pid,
            start: start_time(pid)?,
        })
    }

    /// Whether this process still runs: same pid, same start time, and not a zombie (a
    /// process killed but not yet reaped runs nothing).
    pub(crate) fn is_alive(&self) -> bool {
        match read_stat(self.pid) {
            Some((state, start)) => start == self.start && state != 'Z' && state != 'X',
            None => false,
        }
    }
}

fn start_time(pid: u32) -> Option<u64> {
    read_stat(pid).map(|(_, start)| start)
}

/// State letter and start time of `pid`, or `None` if there is no such process.
fn read_stat(pid: u32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &text[text.rfind(')')? + 1..];
    let mut fields = after_name.split_ascii_whitespace();
    // Field 3 is the state; `starttime` is field 22, 19 fields later.
    let state = fields.next()?.chars().next()?;
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_different_start_time_is_not() {
        let me = Waiter::current().expect("procfs is mounted");
        assert!(me.is_alive());
        let reused = Waiter {
            start: me.start + 1,
            ..me
        };
        assert!(!reused.is_alive());
        let gone = Waiter {
            pid: u32::MAX - 1,
            start: 0,
        };
        assert!(!gone.is_alive());
    }
}
