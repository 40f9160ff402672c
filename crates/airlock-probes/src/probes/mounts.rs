//! Mounts and namespaces: the payload can neither change its view of the filesystem nor enter
//! or create namespaces (where a fresh user namespace would hand it a full capability set).

use libc::{c_long, EPERM};

use crate::context::Ctx;
use crate::probe::{Category, Expect, Got, Probe};
use crate::sys::{c_path, c_str, close, got_from_fd, in_child, last_errno, scratch_path, wait_for};

const C: Category = Category::Mounts;

pub const PROBES: &[Probe] = &[
    denied!(
        "mount_tmpfs",
        "mount a tmpfs on a fresh directory in /tmp",
        mount_tmpfs,
        false
    ),
    denied!(
        "remount_usr_rw",
        "mount(MS_REMOUNT|MS_BIND) to make /usr writable",
        remount_usr_rw,
        false
    ),
    denied!(
        "umount_usr",
        "umount2(\"/usr\", MNT_DETACH)",
        umount_usr,
        false
    ),
    denied!("chroot_tmp", "chroot(\"/tmp\")", chroot_tmp, true),
    denied!(
        "pivot_root",
        "pivot_root(\".\", \".\") from /",
        pivot_root,
        false
    ),
    denied!(
        "unshare_user_mount",
        "unshare(CLONE_NEWUSER|CLONE_NEWNS)",
        unshare_user_mount,
        true
    ),
    denied!("unshare_net", "unshare(CLONE_NEWNET)", unshare_net, true),
    denied!("clone_newuser", "clone(CLONE_NEWUSER)", clone_newuser, true),
    denied!("clone_newnet", "clone(CLONE_NEWNET)", clone_newnet, true),
    denied!(
        "setns_mount",
        "setns() into PID 1's (or our own) mount namespace",
        setns_mount,
        true
    ),
    denied!("fsopen_tmpfs", "fsopen(\"tmpfs\")", fsopen_tmpfs, true),
    denied!(
        "open_tree_clone",
        "open_tree(\"/usr\", OPEN_TREE_CLONE|AT_RECURSIVE)",
        open_tree_clone,
        true
    ),
    denied!("move_mount", "move_mount(absent, absent)", move_mount, true),
    denied!(
        "mount_setattr_usr_rw",
        "mount_setattr(\"/usr\", clear MOUNT_ATTR_RDONLY)",
        mount_setattr_usr_rw,
        false
    ),
];

// `c_long` is `i64` only on 64-bit targets.
#[allow(clippy::unnecessary_cast)]
fn raw(ret: c_long) -> Got {
    Got::from_ret(ret as i64)
}

fn mount_tmpfs(_: &Ctx) -> Got {
    let dir = scratch_path(std::path::Path::new("/tmp"), "mnt");
    if let Err(e) = std::fs::create_dir(&dir) {
        return Got::NotRun(format!("cannot create {}: {e}", dir.display()));
    }
    let got = match c_path(&dir) {
        Ok(target) => {
            let (source, fstype, data) = (c_str("none"), c_str("tmpfs"), c_str("size=1m"));
            // SAFETY: all strings outlive the call.
            let ret = unsafe {
                libc::mount(
                    source.as_ptr(),
                    target.as_ptr(),
                    fstype.as_ptr(),
                    0,
                    data.as_ptr().cast(),
                )
            };
            if ret == 0 {
                // SAFETY: undo the mount we just made.
                unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
            }
            raw(ret as c_long)
        }
        Err(not_run) => not_run,
    };
    let _ = std::fs::remove_dir(&dir);
    got
}

fn remount_usr_rw(_: &Ctx) -> Got {
    let target = c_str("/usr");
    // SAFETY: `target` outlives the call; null source, type and data are allowed for remount.
    raw(unsafe {
        libc::mount(
            std::ptr::null(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT | libc::MS_BIND,
            std::ptr::null(),
        )
    } as c_long)
}

fn umount_usr(_: &Ctx) -> Got {
    let target = c_str("/usr");
    // SAFETY: `target` outlives the call.
    raw(unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } as c_long)
}

fn chroot_tmp(_: &Ctx) -> Got {
    in_child(|| {
        let dir = c_str("/tmp");
        // SAFETY: `dir` outlives the call; affects only the calling (child) process.
        raw(unsafe { libc::chroot(dir.as_ptr()) } as c_long)
    })
}

fn pivot_root(_: &Ctx) -> Got {
    in_child(|| {
        let root = c_str("/");
        let dot = c_str(".");
        // SAFETY: `root` outlives the call.
        if unsafe { libc::chdir(root.as_ptr()) } != 0 {
            return Got::NotRun(format!("chdir(\"/\") failed: errno {}", last_errno()));
        }
        // SAFETY: `dot` outlives the call.
        raw(unsafe { libc::syscall(libc::SYS_pivot_root, dot.as_ptr(), dot.as_ptr()) })
    })
}

fn unshare(flags: i32) -> Got {
    // SAFETY: integer flags; affects only the calling (child) process.
    in_child(|| raw(unsafe { libc::unshare(flags) } as c_long))
}

fn unshare_user_mount(_: &Ctx) -> Got {
    unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS)
}

fn unshare_net(_: &Ctx) -> Got {
    unshare(libc::CLONE_NEWNET)
}

/// Raw `clone` with namespace flags; a created child exits at once.
fn clone_with(flags: i32) -> Got {
    in_child(|| {
        // SAFETY: raw clone without CLONE_VM: the new process gets its own copy of memory, so
        // returning into Rust code is as safe as after fork; it only calls `_exit`.
        let pid = unsafe {
            libc::syscall(
                libc::SYS_clone,
                (flags | libc::SIGCHLD) as c_long,
                0usize,
                0usize,
                0usize,
                0usize,
            )
        };
        if pid == 0 {
            // SAFETY: leave the new process immediately.
            unsafe { libc::_exit(0) };
        }
        if pid > 0 {
            wait_for(pid as i32);
        }
        raw(pid)
    })
}

fn clone_newuser(_: &Ctx) -> Got {
    clone_with(libc::CLONE_NEWUSER)
}

fn clone_newnet(_: &Ctx) -> Got {
    clone_with(libc::CLONE_NEWNET)
}

fn setns_mount(_: &Ctx) -> Got {
    in_child(|| {
        let mut fd = -1;
        for path in ["/proc/1/ns/mnt", "/proc/self/ns/mnt"] {
            let c = c_str(path);
            // SAFETY: `c` outlives the call.
            fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
            if fd >= 0 {
                break;
            }
        }
        if fd < 0 {
            return Got::NotRun(format!(
                "cannot open a mount namespace file: errno {}",
                last_errno()
            ));
        }
        // SAFETY: `fd` is a namespace descriptor we own; affects only this (child) process.
        let ret = unsafe { libc::setns(fd, libc::CLONE_NEWNS) };
        close(fd);
        raw(ret as c_long)
    })
}

fn fsopen_tmpfs(_: &Ctx) -> Got {
    let fstype = c_str("tmpfs");
    const FSOPEN_CLOEXEC: c_long = 1;
    // SAFETY: `fstype` outlives the call; a returned descriptor is closed.
    got_from_fd(unsafe { libc::syscall(libc::SYS_fsopen, fstype.as_ptr(), FSOPEN_CLOEXEC) } as i64)
}

fn open_tree_clone(_: &Ctx) -> Got {
    const OPEN_TREE_CLONE: c_long = 1;
    let path = c_str("/usr");
    let flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as c_long | libc::AT_RECURSIVE as c_long;
    // SAFETY: `path` outlives the call; a returned (detached) tree is released on close.
    got_from_fd(
        unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), flags) } as i64,
    )
}

fn move_mount(_: &Ctx) -> Got {
    let (from, to) = (
        c_str("/nonexistent/airlock-probe-a"),
        c_str("/nonexistent/airlock-probe-b"),
    );
    // SAFETY: both strings outlive the call.
    raw(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            0,
        )
    })
}

fn mount_setattr_usr_rw(_: &Ctx) -> Got {
    // `struct mount_attr { u64 attr_set, attr_clr, propagation, userns_fd; }`.
    const MOUNT_ATTR_RDONLY: u64 = 1;
    let attr = [0u64, MOUNT_ATTR_RDONLY, 0, 0];
    let path = c_str("/usr");
    // SAFETY: `path` and `attr` outlive the call; the size matches `attr`.
    raw(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            0,
            attr.as_ptr(),
            std::mem::size_of_val(&attr),
        )
    })
}
