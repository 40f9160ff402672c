//! Machine-wide administration: modules, kexec, reboot, swap, accounting, quotas, clocks, I/O
//! ports and host names. All need a capability the payload lacks, and the seccomp filter
//! denies them besides.
//!
//! Arguments are chosen so that an unconfined root caller is refused *after* the permission
//! check (a missing path, a wrong magic number, an invalid flag) or changes nothing (setting
//! the host name it already has), so a run on the host cannot reboot, unload or reconfigure it.

use libc::{c_long, EPERM};

use crate::context::Ctx;
use crate::probe::{Category, Expect, Got, Probe};
use crate::sys::{c_str, in_child};

const C: Category = Category::KernelAdmin;

/// Port I/O is refused: EPERM without CAP_SYS_RAWIO (or from a filter), or ENOSYS on kernels
/// built without `CONFIG_X86_IOPL_IOPERM`, which have no port I/O for anyone to reach.
const PORT_IO_REFUSED: &[i32] = &[EPERM, libc::ENOSYS];

/// A path that exists on no system.
const ABSENT_PATH: &str = "/nonexistent/airlock-probe";

pub const PROBES: &[Probe] = &[
    denied!("init_module", "init_module(empty image)", init_module, true),
    denied!("finit_module", "finit_module(-1)", finit_module, true),
    denied!(
        "delete_module",
        "delete_module(absent module)",
        delete_module,
        true
    ),
    denied!(
        "kexec_load",
        "kexec_load with invalid flags",
        kexec_load,
        false
    ),
    denied!(
        "kexec_file_load",
        "kexec_file_load with invalid flags",
        kexec_file_load,
        false
    ),
    denied!(
        "reboot",
        "reboot(CAD_OFF) with a wrong second magic",
        reboot,
        false
    ),
    denied!("swapon", "swapon(absent path)", swapon, true),
    denied!("swapoff", "swapoff(absent path)", swapoff, true),
    denied!("acct", "acct(absent path)", acct, true),
    denied!(
        "quotactl",
        "quotactl(Q_GETFMT, absent device)",
        quotactl,
        true
    ),
    denied!(
        "settimeofday",
        "settimeofday(NULL, NULL)",
        settimeofday,
        true
    ),
    denied!(
        "clock_settime",
        "clock_settime(CLOCK_MONOTONIC)",
        clock_settime,
        true
    ),
    Probe {
        name: "iopl",
        category: C,
        what: "iopl(3)",
        expect: Expect::Errno(PORT_IO_REFUSED),
        run: iopl,
        host_safe: true,
    },
    Probe {
        name: "ioperm",
        category: C,
        what: "ioperm(0x80, 1, on)",
        expect: Expect::Errno(PORT_IO_REFUSED),
        run: ioperm,
        host_safe: true,
    },
    denied!(
        "sethostname",
        "sethostname(current name)",
        sethostname,
        true
    ),
    denied!(
        "setdomainname",
        "setdomainname(current name)",
        setdomainname,
        true
    ),
];

// `c_long` is `i64` only on 64-bit targets.
#[allow(clippy::unnecessary_cast)]
fn raw(ret: c_long) -> Got {
    Got::from_ret(ret as i64)
}

fn init_module(_: &Ctx) -> Got {
    let params = c_str("");
    // SAFETY: a null image of length 0 is never read; `params` outlives the call.
    raw(unsafe { libc::syscall(libc::SYS_init_module, 0usize, 0usize, params.as_ptr()) })
}

fn finit_module(_: &Ctx) -> Got {
    let params = c_str("");
    // SAFETY: an invalid descriptor; `params` outlives the call.
    raw(unsafe { libc::syscall(libc::SYS_finit_module, -1, params.as_ptr(), 0) })
}

fn delete_module(_: &Ctx) -> Got {
    let name = c_str("airlock_probe_absent");
    // SAFETY: `name` outlives the call.
    raw(unsafe { libc::syscall(libc::SYS_delete_module, name.as_ptr(), libc::O_NONBLOCK) })
}

/// Flags no kernel accepts: an unknown flag bit and a foreign architecture (ARM) in the arch
/// field. With valid flags and no segments, kexec_load would unload the loaded kernel.
const KEXEC_INVALID_FLAGS: c_long = (40 << 16) | 0x8000;

fn kexec_load(_: &Ctx) -> Got {
    // SAFETY: no segments and a null segment pointer; nothing is read.
    raw(unsafe {
        libc::syscall(
            libc::SYS_kexec_load,
            0usize,
            0usize,
            0usize,
            KEXEC_INVALID_FLAGS,
        )
    })
}

fn kexec_file_load(_: &Ctx) -> Got {
    let cmdline = c_str("");
    // SAFETY: invalid descriptors; `cmdline` outlives the call.
    raw(unsafe {
        libc::syscall(
            libc::SYS_kexec_file_load,
            -1,
            -1,
            1usize,
            cmdline.as_ptr(),
            0x8000 as c_long,
        )
    })
}

fn reboot(_: &Ctx) -> Got {
    // LINUX_REBOOT_MAGIC1 with a second magic that is none of the accepted ones.
    const MAGIC1: c_long = 0xfee1_dead;
    const WRONG_MAGIC2: c_long = 0x1234;
    // SAFETY: integer arguments only; the wrong magic makes the kernel refuse after its
    // permission check.
    raw(unsafe {
        libc::syscall(
            libc::SYS_reboot,
            MAGIC1,
            WRONG_MAGIC2,
            libc::LINUX_REBOOT_CMD_CAD_OFF,
            0usize,
        )
    })
}

fn swapon(_: &Ctx) -> Got {
    let path = c_str(ABSENT_PATH);
    // SAFETY: `path` outlives the call.
    raw(unsafe { libc::syscall(libc::SYS_swapon, path.as_ptr(), 0) })
}

fn swapoff(_: &Ctx) -> Got {
    let path = c_str(ABSENT_PATH);
    // SAFETY: `path` outlives the call.
    raw(unsafe { libc::syscall(libc::SYS_swapoff, path.as_ptr()) })
}

fn acct(_: &Ctx) -> Got {
    let path = c_str(ABSENT_PATH);
    // SAFETY: `path` outlives the call.
    raw(unsafe { libc::syscall(libc::SYS_acct, path.as_ptr()) })
}

fn quotactl(_: &Ctx) -> Got {
    // QCMD(Q_GETFMT, USRQUOTA): needs no privilege on an unfiltered kernel, which answers
    // ENOENT for the absent device; only the filter answers EPERM.
    const Q_GETFMT_USR: c_long = 0x80_0004 << 8;
    let device = c_str(ABSENT_PATH);
    let mut format = 0u32;
    // SAFETY: `device` and `format` outlive the call; `format` is writable.
    raw(unsafe {
        libc::syscall(
            libc::SYS_quotactl,
            Q_GETFMT_USR,
            device.as_ptr(),
            0,
            &mut format,
        )
    })
}

fn settimeofday(_: &Ctx) -> Got {
    // SAFETY: both pointers null: the kernel only checks CAP_SYS_TIME and changes nothing.
    raw(unsafe { libc::syscall(libc::SYS_settimeofday, 0usize, 0usize) })
}

fn clock_settime(_: &Ctx) -> Got {
    // CLOCK_MONOTONIC cannot be set at all (EINVAL on an unfiltered kernel); only the filter
    // answers EPERM.
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    // SAFETY: `now` outlives the call.
    raw(unsafe { libc::syscall(libc::SYS_clock_settime, libc::CLOCK_MONOTONIC, &now) })
}

fn iopl(_: &Ctx) -> Got {
    // In a child: on an unconfined host the new I/O privilege level dies with it.
    // SAFETY: integer argument; affects only the calling (child) process.
    in_child(|| raw(unsafe { libc::syscall(libc::SYS_iopl, 3) }))
}

fn ioperm(_: &Ctx) -> Got {
    // SAFETY: integer arguments; affects only the calling (child) process.
    in_child(|| raw(unsafe { libc::syscall(libc::SYS_ioperm, 0x80, 1, 1) }))
}

/// The node name and domain name this UTS namespace already has.
fn current_names() -> Result<(Vec<u8>, Vec<u8>), Got> {
    // SAFETY: utsname is plain old data; all-zero is a valid value.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uts` is a valid, writable utsname.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return Err(Got::NotRun("uname failed".into()));
    }
    let field = |chars: &[libc::c_char]| -> Vec<u8> {
        chars
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect()
    };
    Ok((field(&uts.nodename), field(&uts.domainname)))
}

fn sethostname(_: &Ctx) -> Got {
    let (node, _) = match current_names() {
        Ok(names) => names,
        Err(not_run) => return not_run,
    };
    // SAFETY: pointer and length describe the live `node` buffer.
    raw(unsafe { libc::syscall(libc::SYS_sethostname, node.as_ptr(), node.len()) })
}

fn setdomainname(_: &Ctx) -> Got {
    let (_, domain) = match current_names() {
        Ok(names) => names,
        Err(not_run) => return not_run,
    };
    // SAFETY: pointer and length describe the live `domain` buffer.
    raw(unsafe { libc::syscall(libc::SYS_setdomainname, domain.as_ptr(), domain.len()) })
}
