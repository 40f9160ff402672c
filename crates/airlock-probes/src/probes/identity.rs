//! Identity and capabilities: the payload is an unprivileged uid with no capability in any set,
//! under `no_new_privs` and a seccomp filter, and cannot become anything else.

use libc::{SYS_capset, EINVAL, EPERM};

use crate::context::Ctx;
use crate::probe::{Category, Expect, Got, Probe};
use crate::sys::{in_child, status_field};

const C: Category = Category::Identity;

/// Becoming uid/gid 0 is refused: EPERM without CAP_SETUID/CAP_SETGID, or EINVAL when the
/// sandbox's user namespace does not map id 0 at all (then there is no root to become).
const ROOT_ID_REFUSED: &[i32] = &[EPERM, EINVAL];

/// `CAP_SYS_ADMIN` from <linux/capability.h> (the libc crate does not export capability numbers).
const CAP_SYS_ADMIN: libc::c_ulong = 21;

pub const PROBES: &[Probe] = &[
    Probe {
        name: "caps_effective_zero",
        category: C,
        what: "CapEff, CapPrm and CapAmb in /proc/self/status are all zero",
        expect: Expect::Holds("CapEff=CapPrm=CapAmb=0"),
        run: caps_effective_zero,
        host_safe: true,
    },
    Probe {
        name: "caps_bounding_empty",
        category: C,
        what: "CapBnd is zero, so no exec can regain a capability",
        expect: Expect::Holds("CapBnd=0"),
        run: caps_bounding_empty,
        host_safe: true,
    },
    Probe {
        name: "no_new_privs_set",
        category: C,
        what: "NoNewPrivs is 1, so setuid binaries and file capabilities are inert",
        expect: Expect::Holds("NoNewPrivs=1"),
        run: no_new_privs_set,
        host_safe: true,
    },
    Probe {
        name: "seccomp_filter_active",
        category: C,
        what: "Seccomp mode is 2 (filter) with at least one filter installed",
        expect: Expect::Holds("Seccomp=2, Seccomp_filters>=1"),
        run: seccomp_filter_active,
        host_safe: true,
    },
    Probe {
        name: "uid_not_root",
        category: C,
        what: "real, effective and saved uid and gid are not 0",
        expect: Expect::Holds("uid and gid non-zero"),
        run: uid_not_root,
        host_safe: true,
    },
    Probe {
        name: "setuid_root",
        category: C,
        what: "setuid(0)",
        expect: Expect::Errno(ROOT_ID_REFUSED),
        run: setuid_root,
        host_safe: true,
    },
    Probe {
        name: "setgid_root",
        category: C,
        what: "setgid(0)",
        expect: Expect::Errno(ROOT_ID_REFUSED),
        run: setgid_root,
        host_safe: true,
    },
    Probe {
        name: "setgroups_root",
        category: C,
        what: "setgroups([0])",
        expect: Expect::Errno(ROOT_ID_REFUSED),
        run: setgroups_root,
        host_safe: true,
    },
    Probe {
        name: "capset_raise_all",
        category: C,
        what: "capset() asking for every capability in all sets",
        expect: Expect::Errno(&[EPERM]),
        run: capset_raise_all,
        host_safe: true,
    },
    Probe {
        name: "ambient_raise_sys_admin",
        category: C,
        what: "prctl(PR_CAP_AMBIENT_RAISE, CAP_SYS_ADMIN)",
        expect: Expect::Errno(&[EPERM]),
        run: ambient_raise_sys_admin,
        host_safe: true,
    },
];

/// Each named capability set must be all zeroes.
fn caps_all_zero(fields: &[&str]) -> Got {
    let mut seen = Vec::new();
    for field in fields {
        let value = match status_field(field) {
            Ok(value) => value,
            Err(not_run) => return not_run,
        };
        if u64::from_str_radix(&value, 16) != Ok(0) {
            return Got::Violated(format!("{field}={value}"));
        }
        seen.push(format!("{field}=0"));
    }
    Got::Holds(seen.join(" "))
}

fn caps_effective_zero(_: &Ctx) -> Got {
    caps_all_zero(&["CapEff", "CapPrm", "CapAmb", "CapInh"])
}

fn caps_bounding_empty(_: &Ctx) -> Got {
    caps_all_zero(&["CapBnd"])
}

fn no_new_privs_set(_: &Ctx) -> Got {
    match status_field("NoNewPrivs") {
        Ok(v) if v == "1" => Got::Holds("NoNewPrivs=1".into()),
        Ok(v) => Got::Violated(format!("NoNewPrivs={v}")),
        Err(not_run) => not_run,
    }
}

fn seccomp_filter_active(_: &Ctx) -> Got {
    let mode = match status_field("Seccomp") {
        Ok(mode) => mode,
        Err(not_run) => return not_run,
    };
    let filters = status_field("Seccomp_filters").unwrap_or_else(|_| "?".into());
    let count: u32 = filters.parse().unwrap_or(0);
    if mode == "2" && count >= 1 {
        Got::Holds(format!("Seccomp=2, Seccomp_filters={filters}"))
    } else {
        Got::Violated(format!("Seccomp={mode}, Seccomp_filters={filters}"))
    }
}

fn uid_not_root(_: &Ctx) -> Got {
    let (mut r, mut e, mut s) = (0, 0, 0);
    let (mut gr, mut ge, mut gs) = (0, 0, 0);
    // SAFETY: the out-pointers are valid, distinct locals.
    let ok = unsafe {
        libc::getresuid(&mut r, &mut e, &mut s) == 0
            && libc::getresgid(&mut gr, &mut ge, &mut gs) == 0
    };
    if !ok {
        return Got::NotRun("getresuid/getresgid failed".into());
    }
    let ids = format!("uid={r}/{e}/{s} gid={gr}/{ge}/{gs}");
    if [r, e, s, gr, ge, gs].contains(&0) {
        Got::Violated(ids)
    } else {
        Got::Holds(ids)
    }
}

fn setuid_root(_: &Ctx) -> Got {
    // In a child: on an unconfined host the call succeeds and would change this process.
    in_child(|| {
        // SAFETY: setuid takes a plain integer and affects only the calling (child) process.
        Got::from_ret(unsafe { libc::setuid(0) } as i64)
    })
}

fn setgid_root(_: &Ctx) -> Got {
    in_child(|| {
        // SAFETY: setgid takes a plain integer and affects only the calling (child) process.
        Got::from_ret(unsafe { libc::setgid(0) } as i64)
    })
}

fn setgroups_root(_: &Ctx) -> Got {
    in_child(|| {
        let groups = [0 as libc::gid_t];
        // SAFETY: the pointer and length describe the live `groups` array.
        Got::from_ret(unsafe { libc::setgroups(groups.len(), groups.as_ptr()) } as i64)
    })
}

/// `struct __user_cap_header_struct` from <linux/capability.h>.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

/// `struct __user_cap_data_struct` from <linux/capability.h>.
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAP_VERSION_3: u32 = 0x2008_0522;

fn capset_raise_all(_: &Ctx) -> Got {
    in_child(|| {
        let mut header = CapHeader {
            version: CAP_VERSION_3,
            pid: 0,
        };
        let all = CapData {
            effective: u32::MAX,
            permitted: u32::MAX,
            inheritable: u32::MAX,
        };
        let data = [all, all];
        // SAFETY: header and data match the kernel's v3 layout (one header, two data words)
        // and live across the call.
        let ret = unsafe { libc::syscall(SYS_capset, &mut header, data.as_ptr()) };
        Got::from_ret(ret)
    })
}

fn ambient_raise_sys_admin(_: &Ctx) -> Got {
    in_child(|| {
        // SAFETY: prctl with integer arguments only; affects the calling (child) process.
        let ret = unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
                CAP_SYS_ADMIN,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            )
        };
        Got::from_ret(ret as i64)
    })
}
