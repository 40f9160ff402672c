//! Protected files: the read-only trees, the protected workspace paths, host secrets, other
//! processes' `/proc` entries, and links planted to reach files outside the sandbox.
//!
//! Where two layers legitimately answer first with different codes, both are accepted: a
//! read-only mount gives EROFS, Landlock or file permissions give EACCES. ENOENT is accepted
//! only where absence *is* the confinement (a host file the sandbox does not contain).

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use libc::{EACCES, EBUSY, ENOENT, EPERM, EROFS, ETXTBSY, EXDEV};

use crate::context::Ctx;
use crate::probe::{Category, Expect, Got, Probe};
use crate::sys::{c_path, got_from_io, scratch_path};

const C: Category = Category::Files;

/// A write refused by a read-only mount or by Landlock / file permissions.
const WRITE_DENIED: &[i32] = &[EROFS, EACCES];

/// Files of `/etc` that a sandbox normally provides; the first present one is attacked.
const ETC_FILES: &[&str] = &[
    "/etc/passwd",
    "/etc/hosts",
    "/etc/ld.so.cache",
    "/etc/nsswitch.conf",
];

/// Files of `/usr` that every system has; the first present one is attacked.
const USR_FILES: &[&str] = &["/usr/bin/env", "/usr/bin/true", "/usr/bin/sh"];

pub const PROBES: &[Probe] = &[
    Probe {
        name: "proc_sys_write",
        category: C,
        what: "open /proc/sys/kernel/hostname for writing",
        expect: Expect::Errno(WRITE_DENIED),
        run: proc_sys_write,
        host_safe: true,
    },
    Probe {
        name: "core_pattern_write",
        category: C,
        what: "open /proc/sys/kernel/core_pattern (a pipe handler runs on the host) for writing",
        expect: Expect::Errno(WRITE_DENIED),
        run: core_pattern_write,
        host_safe: true,
    },
    Probe {
        name: "root_create",
        category: C,
        what: "create a file in /",
        expect: Expect::Errno(WRITE_DENIED),
        run: root_create,
        host_safe: true,
    },
    Probe {
        name: "usr_create",
        category: C,
        what: "create a file in /usr/bin",
        expect: Expect::Errno(WRITE_DENIED),
        run: usr_create,
        host_safe: true,
    },
    Probe {
        name: "usr_write_existing",
        category: C,
        what: "open an existing /usr/bin program for writing",
        expect: Expect::Errno(WRITE_DENIED),
        run: usr_write_existing,
        host_safe: true,
    },
    Probe {
        name: "etc_create",
        category: C,
        what: "create a file in /etc",
        expect: Expect::Errno(WRITE_DENIED),
        run: etc_create,
        host_safe: true,
    },
    Probe {
        name: "etc_write_existing",
        category: C,
        what: "open an existing /etc file for writing",
        expect: Expect::Errno(WRITE_DENIED),
        run: etc_write_existing,
        host_safe: true,
    },
    Probe {
        name: "protected_create",
        category: C,
        what: "create a file in each protected directory (e.g. .git/hooks/)",
        expect: Expect::Errno(WRITE_DENIED),
        run: protected_create,
        host_safe: true,
    },
    Probe {
        name: "protected_write_existing",
        category: C,
        what: "open each protected file (or a file in each protected directory) for writing",
        expect: Expect::Errno(WRITE_DENIED),
        run: protected_write_existing,
        host_safe: true,
    },
    Probe {
        name: "protected_rename",
        category: C,
        what: "rename each protected path away (to replace it with a writable copy)",
        expect: Expect::Errno(&[EBUSY, EROFS, EACCES, EPERM]),
        run: protected_rename,
        host_safe: true,
    },
    Probe {
        name: "protected_parent_rename",
        category: C,
        what: "rename the parent of each protected path (e.g. .git) away to plant a new one",
        expect: Expect::Errno(&[EBUSY, EROFS, EACCES, EPERM]),
        run: protected_parent_rename,
        host_safe: true,
    },
    Probe {
        name: "etc_shadow_read",
        category: C,
        what: "read /etc/shadow (absent from the sandbox, or unreadable)",
        expect: Expect::Errno(&[ENOENT, EACCES]),
        run: etc_shadow_read,
        host_safe: true,
    },
    Probe {
        name: "proc1_environ_read",
        category: C,
        what: "read /proc/1/environ",
        expect: Expect::Errno(&[EACCES]),
        run: proc1_environ_read,
        host_safe: true,
    },
    Probe {
        name: "proc1_root_traverse",
        category: C,
        what: "open /proc/1/root/ (another process's root directory)",
        expect: Expect::Errno(&[EACCES]),
        run: proc1_root_traverse,
        host_safe: true,
    },
    Probe {
        name: "proc1_exe_write",
        category: C,
        what: "open /proc/1/exe (the host's init binary) for writing",
        expect: Expect::Errno(&[EACCES, ETXTBSY, EROFS]),
        run: proc1_exe_write,
        host_safe: true,
    },
    Probe {
        name: "symlink_outside_read",
        category: C,
        what: "read the --outside-path file through a symlink planted in the workspace",
        expect: Expect::Errno(&[ENOENT, EACCES]),
        run: symlink_outside_read,
        host_safe: true,
    },
    Probe {
        name: "symlink_outside_write",
        category: C,
        what: "write the --outside-path file through a symlink planted in the workspace",
        expect: Expect::Errno(&[ENOENT, EACCES, EROFS]),
        run: symlink_outside_write,
        host_safe: true,
    },
    Probe {
        name: "hardlink_outside",
        category: C,
        what: "hard-link the --outside-path file into the workspace",
        expect: Expect::Errno(&[ENOENT, EXDEV, EPERM, EACCES]),
        run: hardlink_outside,
        host_safe: true,
    },
    Probe {
        name: "hardlink_read_only_tree",
        category: C,
        what: "hard-link an /etc file into the workspace (to write it through the link)",
        expect: Expect::Errno(&[EXDEV]),
        run: hardlink_read_only_tree,
        host_safe: true,
    },
    Probe {
        name: "mknod_char_device",
        category: C,
        what: "mknod a character device (1,1 = /dev/mem) in /tmp",
        expect: Expect::Errno(&[EPERM]),
        run: mknod_char_device,
        host_safe: true,
    },
    Probe {
        name: "dev_mem_absent",
        category: C,
        what: "open /dev/mem",
        expect: Expect::Errno(&[ENOENT]),
        run: dev_mem_absent,
        host_safe: true,
    },
    Probe {
        name: "sysfs_absent",
        category: C,
        what: "stat /sys/kernel (no /sys in the sandbox)",
        expect: Expect::Errno(&[ENOENT]),
        run: sysfs_absent,
        host_safe: true,
    },
];

/// Open `path` for writing without creating or truncating it (so success changes nothing).
fn open_for_write(path: &Path) -> Got {
    got_from_io(OpenOptions::new().write(true).open(path), |_| {
        format!("opened {} for writing", path.display())
    })
}

/// Create a new file at `path`; one that got created is removed again at once.
fn create_new(path: &Path) -> Got {
    let got = got_from_io(
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path),
        |_| format!("created {}", path.display()),
    );
    if matches!(got, Got::Succeeded(_)) {
        let _ = std::fs::remove_file(path);
    }
    got
}

/// The first existing path of `candidates`.
fn first_existing(candidates: &[&str]) -> Result<PathBuf, Got> {
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|p| p.symlink_metadata().is_ok())
        .ok_or_else(|| Got::NotRun(format!("none of {} exists", candidates.join(", "))))
}

/// Run `attempt` on every protected path; pass only if every attempt gives an accepted errno
/// (the first other outcome is returned).
fn each_protected(ctx: &Ctx, accepted: &[i32], attempt: impl Fn(&Path) -> Got) -> Got {
    if ctx.protected.is_empty() {
        return Got::NotRun("needs --protected PATH".into());
    }
    let mut last = Got::NotRun("no attempt".into());
    for path in &ctx.protected {
        let got = attempt(path);
        match got {
            Got::Failed(errno) if accepted.contains(&errno) => last = got,
            other => return other,
        }
    }
    last
}

fn proc_sys_write(_: &Ctx) -> Got {
    open_for_write(Path::new("/proc/sys/kernel/hostname"))
}

fn core_pattern_write(_: &Ctx) -> Got {
    open_for_write(Path::new("/proc/sys/kernel/core_pattern"))
}

fn root_create(_: &Ctx) -> Got {
    create_new(&scratch_path(Path::new("/"), "root"))
}

fn usr_create(_: &Ctx) -> Got {
    create_new(&scratch_path(Path::new("/usr/bin"), "usr"))
}

fn usr_write_existing(_: &Ctx) -> Got {
    first_existing(USR_FILES).map_or_else(|e| e, |p| open_for_write(&p))
}

fn etc_create(_: &Ctx) -> Got {
    create_new(&scratch_path(Path::new("/etc"), "etc"))
}

fn etc_write_existing(_: &Ctx) -> Got {
    first_existing(ETC_FILES).map_or_else(|e| e, |p| open_for_write(&p))
}

fn protected_create(ctx: &Ctx) -> Got {
    each_protected(ctx, WRITE_DENIED, |path| {
        if path.is_dir() {
            create_new(&scratch_path(path, "hook"))
        } else {
            // A protected file: create a sibling-free replacement is covered by rename; here
            // the attempt is to open it with O_CREAT|O_TRUNC, the way a shell redirect does.
            got_from_io(
                OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(path),
                |_| format!("truncated {}", path.display()),
            )
        }
    })
}

fn protected_write_existing(ctx: &Ctx) -> Got {
    each_protected(ctx, WRITE_DENIED, |path| {
        if !path.is_dir() {
            return open_for_write(path);
        }
        let file = std::fs::read_dir(path).ok().and_then(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .find(|p| p.is_file())
        });
        match file {
            Some(file) => open_for_write(&file),
            None => Got::NotRun(format!("{} holds no file to attack", path.display())),
        }
    })
}

/// Rename `path` to a scratch name next to it, and back again if that worked.
fn rename_away(path: &Path) -> Got {
    let Some(parent) = path.parent() else {
        return Got::NotRun(format!("{} has no parent", path.display()));
    };
    let aside = scratch_path(parent, "moved");
    let got = got_from_io(std::fs::rename(path, &aside), |_| {
        format!("renamed {} away", path.display())
    });
    if matches!(got, Got::Succeeded(_)) {
        let _ = std::fs::rename(&aside, path);
    }
    got
}

fn protected_rename(ctx: &Ctx) -> Got {
    each_protected(ctx, &[EBUSY, EROFS, EACCES, EPERM], rename_away)
}

fn protected_parent_rename(ctx: &Ctx) -> Got {
    // Parents strictly inside the workspace (renaming the workspace itself is a different
    // attack: it is a mount point).
    let mut parents: Vec<PathBuf> = ctx
        .protected
        .iter()
        .filter_map(|p| p.parent())
        .filter(|p| *p != ctx.workspace.as_path() && p.starts_with(&ctx.workspace))
        .map(Path::to_path_buf)
        .collect();
    parents.dedup();
    if parents.is_empty() {
        return Got::NotRun("needs a --protected path below a workspace subdirectory".into());
    }
    let parents_ctx = Ctx {
        protected: parents,
        ..ctx.clone()
    };
    each_protected(&parents_ctx, &[EBUSY, EROFS, EACCES, EPERM], rename_away)
}

fn etc_shadow_read(_: &Ctx) -> Got {
    got_from_io(std::fs::read("/etc/shadow"), |b| {
        format!("read {} bytes", b.len())
    })
}

fn proc1_environ_read(_: &Ctx) -> Got {
    got_from_io(std::fs::read("/proc/1/environ"), |b| {
        format!("read {} bytes", b.len())
    })
}

fn proc1_root_traverse(_: &Ctx) -> Got {
    got_from_io(std::fs::read_dir("/proc/1/root/"), |_| {
        "listed /proc/1/root/".into()
    })
}

fn proc1_exe_write(_: &Ctx) -> Got {
    open_for_write(Path::new("/proc/1/exe"))
}

/// Plant `workspace/<scratch>` -> `--outside-path`, run `attempt` on it, remove it.
fn through_planted_symlink(ctx: &Ctx, attempt: impl Fn(&Path) -> Got) -> Got {
    let Some(outside) = &ctx.outside_path else {
        return Got::NotRun("needs --outside-path FILE".into());
    };
    let link = scratch_path(&ctx.workspace, "symlink");
    if let Err(e) = std::os::unix::fs::symlink(outside, &link) {
        return Got::NotRun(format!("cannot plant a symlink at {}: {e}", link.display()));
    }
    let got = attempt(&link);
    let _ = std::fs::remove_file(&link);
    got
}

fn symlink_outside_read(ctx: &Ctx) -> Got {
    through_planted_symlink(ctx, |link| {
        got_from_io(std::fs::read(link), |b| format!("read {} bytes", b.len()))
    })
}

fn symlink_outside_write(ctx: &Ctx) -> Got {
    through_planted_symlink(ctx, |link| {
        got_from_io(OpenOptions::new().append(true).open(link), |_| {
            "opened the outside file for writing".into()
        })
    })
}

/// Hard-link `source` into the workspace; a created link is removed again.
fn hardlink_into_workspace(ctx: &Ctx, source: &Path) -> Got {
    let link = scratch_path(&ctx.workspace, "hardlink");
    let got = got_from_io(std::fs::hard_link(source, &link), |_| {
        format!("linked {} into the workspace", source.display())
    });
    if matches!(got, Got::Succeeded(_)) {
        let _ = std::fs::remove_file(&link);
    }
    got
}

fn hardlink_outside(ctx: &Ctx) -> Got {
    match &ctx.outside_path {
        Some(outside) => hardlink_into_workspace(ctx, outside),
        None => Got::NotRun("needs --outside-path FILE".into()),
    }
}

fn hardlink_read_only_tree(ctx: &Ctx) -> Got {
    first_existing(ETC_FILES).map_or_else(|e| e, |p| hardlink_into_workspace(ctx, &p))
}

fn mknod_char_device(_: &Ctx) -> Got {
    let node = scratch_path(Path::new("/tmp"), "mknod");
    let c = match c_path(&node) {
        Ok(c) => c,
        Err(not_run) => return not_run,
    };
    // SAFETY: `c` outlives the call.
    let ret = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 1)) };
    if ret == 0 {
        let _ = std::fs::remove_file(&node);
    }
    Got::from_ret(ret as i64)
}

fn dev_mem_absent(_: &Ctx) -> Got {
    got_from_io(std::fs::File::open("/dev/mem"), |_| {
        "opened /dev/mem".into()
    })
}

fn sysfs_absent(_: &Ctx) -> Got {
    got_from_io(std::fs::metadata("/sys/kernel"), |_| {
        "/sys/kernel exists".into()
    })
}
