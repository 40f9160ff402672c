//! Escaping the pid namespace: the payload cannot signal the sandbox's PID 1 (a reaper outside
//! the payload's Landlock domain) nor even see host processes.

use libc::{EPERM, ESRCH};

use crate::context::Ctx;
use crate::probe::{Category, Expect, Got, Probe};
use crate::sys::got_from_fd;

const C: Category = Category::PidNamespace;

/// More visible processes than this means the pid namespace is not private.
const MAX_VISIBLE_PROCESSES: usize = 8;

pub const PROBES: &[Probe] = &[
    Probe {
        name: "kill_pid1",
        category: C,
        what: "kill(1, 0): permission to signal the sandbox's PID 1",
        expect: Expect::Errno(&[EPERM]),
        run: kill_pid1,
        host_safe: true,
    },
    Probe {
        name: "kill_host_pid",
        category: C,
        what: "kill(--host-pid, 0): a host process must not exist in this pid namespace",
        expect: Expect::Errno(&[ESRCH]),
        run: kill_host_pid,
        host_safe: true,
    },
    Probe {
        name: "pidfd_open_host_pid",
        category: C,
        what: "pidfd_open(--host-pid)",
        expect: Expect::Errno(&[ESRCH]),
        run: pidfd_open_host_pid,
        host_safe: true,
    },
    Probe {
        name: "few_processes_visible",
        category: C,
        what: "/proc lists only the sandbox's own few processes",
        expect: Expect::Holds("at most 8 processes visible"),
        run: few_processes_visible,
        host_safe: true,
    },
];

fn kill_pid1(_: &Ctx) -> Got {
    // Signal 0 checks permission without delivering anything.
    // SAFETY: integer arguments only.
    Got::from_ret(unsafe { libc::kill(1, 0) } as i64)
}

/// The host pid to attack, if it cannot be confused with a process of this namespace.
fn host_pid(ctx: &Ctx) -> Result<i32, Got> {
    let Some(pid) = ctx.host_pid else {
        return Err(Got::NotRun("needs --host-pid PID".into()));
    };
    if pid <= 1 || pid as u32 == std::process::id() {
        return Err(Got::NotRun(format!(
            "--host-pid {pid} is not usable: give the pid of a host process other than 1"
        )));
    }
    Ok(pid)
}

fn kill_host_pid(ctx: &Ctx) -> Got {
    match host_pid(ctx) {
        // SAFETY: integer arguments only; signal 0 delivers nothing.
        Ok(pid) => Got::from_ret(unsafe { libc::kill(pid, 0) } as i64),
        Err(not_run) => not_run,
    }
}

fn pidfd_open_host_pid(ctx: &Ctx) -> Got {
    match host_pid(ctx) {
        // SAFETY: integer arguments only; a returned descriptor is closed.
        Ok(pid) => got_from_fd(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i64),
        Err(not_run) => not_run,
    }
}

fn few_processes_visible(_: &Ctx) -> Got {
    let entries = match std::fs::read_dir("/proc") {
        Ok(entries) => entries,
        Err(e) => return Got::NotRun(format!("cannot list /proc: {e}")),
    };
    let mut pids: Vec<u32> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    let detail = format!("{} processes visible: {pids:?}", pids.len());
    if pids.len() <= MAX_VISIBLE_PROCESSES {
        Got::Holds(detail)
    } else {
        Got::Violated(format!("{} processes visible", pids.len()))
    }
}
