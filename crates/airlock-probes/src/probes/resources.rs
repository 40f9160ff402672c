//! Resource exhaustion: process count, core dumps and the other rlimits are bounded, and the
//! payload cannot raise a hard limit.

use libc::{EAGAIN, EPERM};

use crate::context::Ctx;
use crate::probe::{Category, Expect, Got, Probe};
use crate::sys::{close, in_child, last_errno, wait_for};

const C: Category = Category::Resources;

/// Forks a bomb may attempt before the probe declares the process count unbounded.
const FORK_BOMB_CAP: usize = 4096;

pub const PROBES: &[Probe] = &[
    Probe {
        name: "fork_bomb_bounded",
        category: C,
        what: "fork repeatedly (at most 4096 times) until the kernel refuses",
        expect: Expect::Errno(&[EAGAIN]),
        run: fork_bomb_bounded,
        host_safe: false,
    },
    Probe {
        name: "rlimit_core_zero",
        category: C,
        what: "RLIMIT_CORE is 0 (soft and hard)",
        expect: Expect::Holds("RLIMIT_CORE 0/0"),
        run: rlimit_core_zero,
        host_safe: true,
    },
    Probe {
        name: "rlimits_finite",
        category: C,
        what: "hard limits on CPU, address space, processes, open files and file size",
        expect: Expect::Holds("no unlimited hard limit"),
        run: rlimits_finite,
        host_safe: true,
    },
    Probe {
        name: "raise_hard_rlimit",
        category: C,
        what: "setrlimit(RLIMIT_NPROC) above the hard limit",
        expect: Expect::Errno(&[EPERM]),
        run: raise_hard_rlimit,
        host_safe: true,
    },
];

fn fork_bomb_bounded(_: &Ctx) -> Got {
    in_child(|| {
        // Every bomb process waits on this pipe and exits when the write end closes, so one
        // close() cleans up however many were created.
        let mut release = [0i32; 2];
        // SAFETY: `release` is a valid array of two ints.
        if unsafe { libc::pipe(release.as_mut_ptr()) } != 0 {
            return Got::NotRun(format!("pipe failed: errno {}", last_errno()));
        }
        let mut children = Vec::new();
        let mut refused = None;
        for _ in 0..FORK_BOMB_CAP {
            // SAFETY: the child only blocks on a read and exits; see in_child for why forking
            // this single-threaded process is sound.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                close(release[1]);
                let mut byte = 0u8;
                // SAFETY: reading into a live one-byte buffer; returns at EOF.
                unsafe {
                    libc::read(release[0], (&mut byte as *mut u8).cast(), 1);
                    libc::_exit(0);
                }
            }
            if pid < 0 {
                refused = Some(last_errno());
                break;
            }
            children.push(pid);
        }
        close(release[1]);
        close(release[0]);
        for pid in &children {
            wait_for(*pid);
        }
        match refused {
            Some(errno) => Got::Failed(errno),
            None => Got::Succeeded(format!(
                "{} forks succeeded without hitting a limit",
                children.len()
            )),
        }
    })
}

fn limit(resource: libc::__rlimit_resource_t) -> Result<libc::rlimit, Got> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(resource, &mut lim) } != 0 {
        return Err(Got::NotRun(format!(
            "getrlimit failed: errno {}",
            last_errno()
        )));
    }
    Ok(lim)
}

fn rlimit_core_zero(_: &Ctx) -> Got {
    match limit(libc::RLIMIT_CORE) {
        Ok(l) if l.rlim_cur == 0 && l.rlim_max == 0 => Got::Holds("RLIMIT_CORE 0/0".into()),
        Ok(l) => Got::Violated(format!(
            "RLIMIT_CORE {}/{}",
            show(l.rlim_cur),
            show(l.rlim_max)
        )),
        Err(not_run) => not_run,
    }
}

fn show(value: libc::rlim_t) -> String {
    if value == libc::RLIM_INFINITY {
        "unlimited".into()
    } else {
        value.to_string()
    }
}

fn rlimits_finite(_: &Ctx) -> Got {
    let named = [
        ("RLIMIT_CPU", libc::RLIMIT_CPU),
        ("RLIMIT_AS", libc::RLIMIT_AS),
        ("RLIMIT_NPROC", libc::RLIMIT_NPROC),
        ("RLIMIT_NOFILE", libc::RLIMIT_NOFILE),
        ("RLIMIT_FSIZE", libc::RLIMIT_FSIZE),
    ];
    let mut unlimited = Vec::new();
    let mut seen = Vec::new();
    for (name, resource) in named {
        match limit(resource) {
            Ok(l) if l.rlim_max == libc::RLIM_INFINITY => unlimited.push(name),
            Ok(l) => seen.push(format!("{name}={}", l.rlim_max)),
            Err(not_run) => return not_run,
        }
    }
    if unlimited.is_empty() {
        Got::Holds(seen.join(" "))
    } else {
        Got::Violated(format!("unlimited: {}", unlimited.join(", ")))
    }
}

fn raise_hard_rlimit(_: &Ctx) -> Got {
    in_child(|| {
        let current = match limit(libc::RLIMIT_NPROC) {
            Ok(l) => l,
            Err(not_run) => return not_run,
        };
        if current.rlim_max == libc::RLIM_INFINITY {
            return Got::Violated("RLIMIT_NPROC hard limit is already unlimited".into());
        }
        let raised = libc::rlimit {
            rlim_cur: current.rlim_max + 1,
            rlim_max: current.rlim_max + 1,
        };
        // SAFETY: `raised` is a valid rlimit; affects only this (child) process.
        Got::from_ret(unsafe { libc::setrlimit(libc::RLIMIT_NPROC, &raised) } as i64)
    })
}
