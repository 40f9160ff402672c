//! Set-user-ID and set-group-ID files: a file the sandbox leaves in the workspace belongs to
//! the operator (or the sandbox uid), so a set-id copy of a program would let any local
//! user run it as that owner. Every call that can set those bits is refused with `EPERM`
//! by the seccomp filter; `openat2`, whose mode no filter can read, answers `ENOSYS`.
//!
//! Every probe works on a scratch name in the workspace and removes whatever it made, so a
//! run on an unconfined host leaves nothing behind (and reports the success).

use std::ffi::CString;
use std::path::{Path, PathBuf};

use libc::{ENOSYS, EPERM};

use crate::context::Ctx;
use crate::probe::{Category, Expect, Got, Probe};
use crate::sys::{c_path, close, scratch_path};

const C: Category = Category::SetId;

pub const PROBES: &[Probe] = &[
    denied!(
        "chmod_setuid",
        "chmod 4755 a copy of a program in the workspace",
        chmod_setuid,
        true
    ),
    denied!(
        "fchmod_setgid",
        "fchmod 2755 an open file in the workspace",
        fchmod_setgid,
        true
    ),
    denied!(
        "fchmodat_setuid",
        "fchmodat(AT_FDCWD, file, 04755)",
        fchmodat_setuid,
        true
    ),
    denied!(
        "fchmodat2_setuid",
        "fchmodat2(AT_FDCWD, file, 04755, 0)",
        fchmodat2_setuid,
        true
    ),
    denied!(
        "open_creat_setuid",
        "open(file, O_CREAT, 04755), as install -m 4755 and Python os.open do",
        open_creat_setuid,
        true
    ),
    denied!(
        "open_tmpfile_setgid",
        "open(workspace, O_TMPFILE, 02755)",
        open_tmpfile_setgid,
        true
    ),
    denied!(
        "mkdir_setgid",
        "mkdir(dir, 02755) (Linux ignores S_ISGID here; refused like systemd does)",
        mkdir_setgid,
        true
    ),
    denied!(
        "mknod_setuid_regular",
        "mknodat(AT_FDCWD, file, S_IFREG|04755, 0)",
        mknod_setuid_regular,
        true
    ),
    Probe {
        name: "openat2_enosys",
        category: C,
        what: "openat2() must look unimplemented (its mode is out of the filter's reach)",
        expect: Expect::Errno(&[ENOSYS]),
        run: openat2_enosys,
        host_safe: true,
    },
];

/// A scratch file in the workspace holding a copy of a program, as `cp /usr/bin/id x`.
struct Scratch {
    path: PathBuf,
    c: CString,
}

impl Scratch {
    fn new(ctx: &Ctx, stem: &str, with_program: bool) -> Result<Scratch, Got> {
        let path = scratch_path(&ctx.workspace, stem);
        let c = c_path(&path)?;
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_dir(&path);
        if with_program {
            let program = ["/usr/bin/id", "/usr/bin/true", "/bin/true"]
                .into_iter()
                .map(Path::new)
                .find(|p| p.is_file())
                .ok_or_else(|| Got::NotRun("no /usr/bin/id or /usr/bin/true to copy".into()))?;
            std::fs::copy(program, &path)
                .map_err(|e| Got::NotRun(format!("cannot copy {}: {e}", program.display())))?;
        }
        Ok(Scratch { path, c })
    }

    /// The outcome of a call that should have set a set-id bit: a success counts only if the
    /// bit is really there (a kernel may quietly drop S_ISGID for a non-member group).
    fn judge(&self, ret: i64) -> Got {
        if ret < 0 {
            return Got::from_ret(ret);
        }
        match std::fs::symlink_metadata(&self.path) {
            Ok(meta) => {
                use std::os::unix::fs::MetadataExt;
                let mode = meta.mode();
                Got::Succeeded(format!("{} now has mode {mode:o}", self.path.display()))
            }
            Err(_) => Got::Succeeded(format!("returned {ret}")),
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_dir(&self.path);
    }
}

fn with_scratch(ctx: &Ctx, stem: &str, program: bool, f: impl FnOnce(&Scratch) -> i64) -> Got {
    match Scratch::new(ctx, stem, program) {
        Ok(s) => {
            // Read errno before anything else can change it.
            let ret = f(&s);
            let got = if ret < 0 {
                Got::from_ret(-1)
            } else {
                s.judge(ret)
            };
            drop(s);
            got
        }
        Err(not_run) => not_run,
    }
}

fn chmod_setuid(ctx: &Ctx) -> Got {
    with_scratch(ctx, "chmod", true, |s| {
        // SAFETY: a valid C path and an integer mode.
        (unsafe { libc::chmod(s.c.as_ptr(), 0o4755) }) as i64
    })
}

fn fchmod_setgid(ctx: &Ctx) -> Got {
    with_scratch(ctx, "fchmod", true, |s| {
        // SAFETY: a valid C path; the descriptor is closed below.
        let fd = unsafe { libc::open(s.c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return -1;
        }
        // SAFETY: an open descriptor and an integer mode.
        let ret = unsafe { libc::fchmod(fd, 0o2755) };
        let errno = crate::sys::last_errno();
        close(fd);
        set_errno(errno);
        ret as i64
    })
}

fn fchmodat_setuid(ctx: &Ctx) -> Got {
    with_scratch(ctx, "fchmodat", true, |s| {
        // SAFETY: raw syscall with a valid C path and integer arguments (glibc's wrapper
        // may emulate flags; the bare call is what the filter sees).
        (unsafe { libc::syscall(libc::SYS_fchmodat, libc::AT_FDCWD, s.c.as_ptr(), 0o4755) }) as i64
    })
}

fn fchmodat2_setuid(ctx: &Ctx) -> Got {
    with_scratch(ctx, "fchmodat2", true, |s| {
        // SAFETY: raw syscall with a valid C path and integer arguments.
        (unsafe { libc::syscall(libc::SYS_fchmodat2, libc::AT_FDCWD, s.c.as_ptr(), 0o4755, 0) })
            as i64
    })
}

fn open_creat_setuid(ctx: &Ctx) -> Got {
    with_scratch(ctx, "creat", false, |s| {
        // SAFETY: raw openat with a valid C path; a returned descriptor is closed.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat,
                libc::AT_FDCWD,
                s.c.as_ptr(),
                libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                0o4755,
            )
        };
        if fd >= 0 {
            close(fd as i32);
        }
        fd as i64
    })
}

fn open_tmpfile_setgid(ctx: &Ctx) -> Got {
    let dir = match c_path(&ctx.workspace) {
        Ok(c) => c,
        Err(not_run) => return not_run,
    };
    // SAFETY: raw openat with a valid C path; a returned descriptor is closed (an unnamed
    // file vanishes with it).
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            dir.as_ptr(),
            libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
            0o2755,
        )
    };
    if fd >= 0 {
        close(fd as i32);
        return Got::Succeeded(format!("got file descriptor {fd}"));
    }
    Got::from_ret(-1)
}

fn mkdir_setgid(ctx: &Ctx) -> Got {
    with_scratch(ctx, "mkdir", false, |s| {
        // SAFETY: raw mkdirat with a valid C path and an integer mode.
        (unsafe { libc::syscall(libc::SYS_mkdirat, libc::AT_FDCWD, s.c.as_ptr(), 0o2755) }) as i64
    })
}

fn mknod_setuid_regular(ctx: &Ctx) -> Got {
    with_scratch(ctx, "mknod", false, |s| {
        // SAFETY: raw mknodat of a regular file with a valid C path and integer arguments.
        (unsafe {
            libc::syscall(
                libc::SYS_mknodat,
                libc::AT_FDCWD,
                s.c.as_ptr(),
                libc::S_IFREG | 0o4755,
                0,
            )
        }) as i64
    })
}

fn openat2_enosys(ctx: &Ctx) -> Got {
    let dir = match c_path(&ctx.workspace) {
        Ok(c) => c,
        Err(not_run) => return not_run,
    };
    // struct open_how { u64 flags; u64 mode; u64 resolve; }
    let how: [u64; 3] = [
        (libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64,
        0,
        0,
    ];
    // SAFETY: raw openat2 with a valid C path and a correctly sized open_how; a returned
    // descriptor is closed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            dir.as_ptr(),
            how.as_ptr(),
            std::mem::size_of_val(&how),
        )
    };
    if fd >= 0 {
        close(fd as i32);
        return Got::Succeeded(format!("got file descriptor {fd}"));
    }
    Got::from_ret(-1)
}

fn set_errno(errno: i32) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = errno };
}
