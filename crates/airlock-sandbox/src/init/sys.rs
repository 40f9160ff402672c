//! Thin wrappers over system calls that `nix` does not cover: the fd-based mount API,
//! `openat2`, `pidfd_open`, `close_range`, `capset`, and bringing up loopback.
//!
//! Written by hand because these are single syscalls with small fixed structs; each wrapper
//! checks the return value and turns it into an `io::Error`.

use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub const OPEN_TREE_CLONE: u32 = 1;
pub const AT_RECURSIVE: u32 = 0x8000;
pub const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x4;
pub const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;
pub const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
pub const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
pub const RESOLVE_NO_SYMLINKS: u64 = 0x04;
pub const RESOLVE_BENEATH: u64 = 0x08;
pub const RESOLVE_IN_ROOT: u64 = 0x10;

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

fn check(r: libc::c_long) -> io::Result<libc::c_long> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn owned(r: libc::c_long) -> io::Result<OwnedFd> {
    let fd = check(r)? as RawFd;
    // SAFETY: the kernel just returned `fd` as a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `openat2(dirfd, path, flags, resolve)`.
pub fn openat2(dirfd: RawFd, path: &Path, flags: i32, resolve: u64) -> io::Result<OwnedFd> {
    let c = cstr(path)?;
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve,
    };
    // With RESOLVE_IN_ROOT/BENEATH the kernel answers EAGAIN when a rename or a mount
    // anywhere raced with the lookup (frequent while other sandboxes are being built);
    // the documented remedy is to retry.
    for _ in 0..10_000 {
        // SAFETY: `c` is a valid NUL-terminated string and `how` a valid open_how whose size
        // we pass; both outlive the call.
        let r = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dirfd,
                c.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN) {
            std::thread::yield_now();
            continue;
        }
        return owned(r);
    }
    Err(io::Error::from_raw_os_error(libc::EAGAIN))
}

/// `open_tree(fd, "", OPEN_TREE_CLONE | AT_EMPTY_PATH [| AT_RECURSIVE])`: a detached copy of
/// the mount at `fd`.
pub fn clone_tree(fd: &OwnedFd, recursive: bool) -> io::Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    let flags = OPEN_TREE_CLONE
        | libc::O_CLOEXEC as u32
        | libc::AT_EMPTY_PATH as u32
        | if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: an empty C string literal and a live fd; open_tree reads nothing else.
    owned(unsafe { libc::syscall(libc::SYS_open_tree, fd.as_raw_fd(), c"".as_ptr(), flags) })
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `mount_setattr(fd, "", AT_EMPTY_PATH [| AT_RECURSIVE], {attr_set})`.
pub fn set_mount_attrs(fd: RawFd, attrs: u64, recursive: bool) -> io::Result<()> {
    mount_setattr(fd, attrs, 0, recursive)
}

/// `mount_setattr` with `MOUNT_ATTR_IDMAP`: the detached mount `fd` shows file owners
/// through the user namespace `userns` (see [`crate::idmap`]), non-recursively.
pub fn set_mount_idmap(fd: RawFd, userns: RawFd) -> io::Result<()> {
    mount_setattr(fd, MOUNT_ATTR_IDMAP, userns as u64, false)
}

fn mount_setattr(fd: RawFd, attrs: u64, userns_fd: u64, recursive: bool) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: attrs,
        attr_clr: 0,
        propagation: 0,
        userns_fd,
    };
    let flags = libc::AT_EMPTY_PATH as u32 | if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: `attr` is a valid mount_attr and we pass its size; the path is an empty literal.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd,
            c"".as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })
    .map(|_| ())
}

/// `move_mount(tree, "", target, "", F_EMPTY_PATH | T_EMPTY_PATH)`: attach a detached tree
/// on the object `target` refers to.
pub fn attach_tree(tree: RawFd, target: RawFd) -> io::Result<()> {
    // SAFETY: live fds and empty C string literals.
    check(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree,
            c"".as_ptr(),
            target,
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    })
    .map(|_| ())
}

/// `pidfd_open(pid, 0)`.
pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain integer arguments.
    owned(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) })
}

/// Close every descriptor from `first` up.
pub fn close_from(first: u32) -> io::Result<()> {
    // SAFETY: plain integers; closing descriptors this process owns and no Rust object uses
    // (called before any such objects exist, or only on descriptors above the ones kept).
    check(unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0u32) }).map(|_| ())
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Empty the effective, permitted and inheritable capability sets of this thread.
pub fn clear_capabilities() -> io::Result<()> {
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: header and a two-element data array, as capset with version 3 expects.
    check(unsafe { libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) })
        .map(|_| ())
}

/// Bring the loopback interface of the current network namespace up.
pub fn loopback_up() -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: socket(2) with constant arguments.
    let sock =
        owned(
            unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) }
                as libc::c_long,
        )?;
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: `req` is a valid ifreq naming "lo"; SIOCGIFFLAGS fills ifru_flags.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } as libc::c_long)?;
    // SAFETY: reading and writing the flags member of the union that SIOCGIFFLAGS filled.
    unsafe {
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    }
    // SAFETY: as above; SIOCSIFFLAGS reads the request.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } as libc::c_long)?;
    Ok(())
}

pub const FSOPEN_CLOEXEC: u32 = 1;
pub const FSMOUNT_CLOEXEC: u32 = 1;
pub const FSCONFIG_SET_FLAG: u32 = 0;
pub const FSCONFIG_SET_STRING: u32 = 1;
pub const FSCONFIG_CMD_CREATE: u32 = 6;

/// `fsopen(name, FSOPEN_CLOEXEC)`: a new file system context.
pub fn fsopen(fs_type: &std::ffi::CStr) -> io::Result<OwnedFd> {
    // SAFETY: a valid NUL-terminated string and an integer flag.
    owned(unsafe { libc::syscall(libc::SYS_fsopen, fs_type.as_ptr(), FSOPEN_CLOEXEC) })
}

/// `fsconfig(fs, cmd, key, value, 0)` with a string value or none.
pub fn fsconfig(
    fs: RawFd,
    cmd: u32,
    key: Option<&std::ffi::CStr>,
    value: Option<&std::ffi::CStr>,
) -> io::Result<()> {
    let ptr = |s: Option<&std::ffi::CStr>| s.map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: `key` and `value` are NUL-terminated strings that outlive the call (or NULL,
    // which the commands used here accept), `fs` a live descriptor.
    check(unsafe { libc::syscall(libc::SYS_fsconfig, fs, cmd, ptr(key), ptr(value), 0) })
        .map(|_| ())
}

/// `fsmount(fs, FSMOUNT_CLOEXEC, attrs)`: the created file system as a detached mount.
pub fn fsmount(fs: RawFd, attrs: u64) -> io::Result<OwnedFd> {
    // SAFETY: plain integer arguments.
    owned(unsafe { libc::syscall(libc::SYS_fsmount, fs, FSMOUNT_CLOEXEC, attrs) })
}

/// The messages the kernel logged on a file system context (`e overlayfs: ...`), one per
/// line: they say why a mount was refused.
pub fn fs_context_log(fs: RawFd) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 1024];
    for _ in 0..32 {
        // SAFETY: reading into a live buffer of the given length.
        let n = unsafe { libc::read(fs, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        out.push(
            String::from_utf8_lossy(&buf[..n as usize])
                .trim()
                .to_string(),
        );
    }
    out.join("; ")
}
