//! Deleting a layer directory with everything in it: by descriptor, following no symlink,
//! at any depth with two directories open at most.
//!
//! The run decided what is in the layer, so it may be millions of entries deep or hold
//! directories without any permission bits. Recursion would open one descriptor per
//! level (and run out); instead every directory found one level below the top is moved up
//! to the top (a rename within the same file system) before its parent is removed, so the
//! tree flattens as it is deleted.

use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, RenameFlags};
use nix::sys::stat::{fstatat, FileStat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};
use nix::NixPath;

fn is_dir(st: &FileStat) -> bool {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR
}

fn stat(dir: &OwnedFd, name: &(impl NixPath + ?Sized)) -> nix::Result<FileStat> {
    fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
}

/// Remove `name` in `parent` (a file, a link or a whole directory tree). Absent is fine.
pub(crate) fn remove_entry(parent: &OwnedFd, name: &(impl NixPath + ?Sized)) -> nix::Result<()> {
    let st = match stat(parent, name) {
        Err(Errno::ENOENT) => return Ok(()),
        other => other?,
    };
    if !is_dir(&st) {
        return ignore_absent(unlinkat(parent.as_fd(), name, UnlinkatFlags::NoRemoveDir));
    }
    let top = open_dir(parent, name, &st)?;
    empty_flat(&top)?;
    ignore_absent(unlinkat(parent.as_fd(), name, UnlinkatFlags::RemoveDir))
}

fn ignore_absent(r: nix::Result<()>) -> nix::Result<()> {
    match r {
        Err(Errno::ENOENT) => Ok(()),
        other => other,
    }
}

/// Empty the directory `top`: files are unlinked, directories one level down are emptied
/// of files and their own subdirectories are moved up into `top`, until nothing is left.
fn empty_flat(top: &OwnedFd) -> nix::Result<()> {
    let mut moved = 0u64;
    loop {
        let names = list(top)?;
        if names.is_empty() {
            return Ok(());
        }
        for name in &names {
            let st = stat(top, name.as_os_str())?;
            if !is_dir(&st) {
                ignore_absent(unlinkat(
                    top.as_fd(),
                    name.as_os_str(),
                    UnlinkatFlags::NoRemoveDir,
                ))?;
                continue;
            }
            match unlinkat(top.as_fd(), name.as_os_str(), UnlinkatFlags::RemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => continue,
                Err(Errno::ENOTEMPTY | Errno::EEXIST) => {}
                Err(e) => return Err(e),
            }
            let sub = open_dir(top, name.as_os_str(), &st)?;
            for child in list(&sub)? {
                let cst = stat(&sub, child.as_os_str())?;
                if is_dir(&cst) {
                    // Moving a directory to another parent rewrites its `..`: it needs
                    // write permission on the directory itself.
                    open_up(&sub, child.as_os_str(), &cst)?;
                    move_up(&sub, &child, top, &mut moved)?;
                } else {
                    ignore_absent(unlinkat(
                        sub.as_fd(),
                        child.as_os_str(),
                        UnlinkatFlags::NoRemoveDir,
                    ))?;
                }
            }
            drop(sub);
            ignore_absent(unlinkat(
                top.as_fd(),
                name.as_os_str(),
                UnlinkatFlags::RemoveDir,
            ))?;
        }
    }
}

/// Rename `from/name` to a fresh name in `top` (never replacing anything there).
fn move_up(from: &OwnedFd, name: &OsString, top: &OwnedFd, moved: &mut u64) -> nix::Result<()> {
    loop {
        *moved += 1;
        let fresh = format!(".airlock-rm-{moved}");
        match nix::fcntl::renameat2(
            from.as_fd(),
            name.as_os_str(),
            top.as_fd(),
            fresh.as_str(),
            RenameFlags::RENAME_NOREPLACE,
        ) {
            Err(Errno::EEXIST) => continue,
            other => return other,
        }
    }
}

/// Open the directory `name` in `dir` for listing, after giving it owner access when it
/// lacks it.
fn open_dir(dir: &OwnedFd, name: &(impl NixPath + ?Sized), st: &FileStat) -> nix::Result<OwnedFd> {
    open_up(dir, name, st)?;
    nix::fcntl::openat(
        dir.as_fd(),
        name,
        OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// Give the directory `name` in `dir` mode 0700 when it belongs to this (unprivileged)
/// process and lacks owner access: the run may have left directories mode 000, and
/// overlayfs' `work/work` is one. Root needs no permission bits. The change goes through a
/// descriptor of the directory itself (`O_PATH`, not following a symlink), never by name.
fn open_up(dir: &OwnedFd, name: &(impl NixPath + ?Sized), st: &FileStat) -> nix::Result<()> {
    let euid = nix::unistd::geteuid();
    if euid.is_root() || st.st_uid != euid.as_raw() || st.st_mode & 0o700 == 0o700 {
        return Ok(());
    }
    let fd = nix::fcntl::openat(
        dir.as_fd(),
        name,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    // fchmod does not take an O_PATH descriptor; its /proc link names exactly this inode.
    let via = format!("/proc/self/fd/{}", fd.as_raw_fd());
    nix::sys::stat::fchmodat(
        nix::fcntl::AT_FDCWD,
        via.as_str(),
        Mode::S_IRWXU,
        nix::sys::stat::FchmodatFlags::FollowSymlink,
    )
}

/// The names in the directory `dir`, without `.` and `..`.
fn list(dir: &OwnedFd) -> nix::Result<Vec<OsString>> {
    // Through the descriptor's /proc link, which names exactly the opened directory.
    let via = format!("/proc/self/fd/{}", dir.as_raw_fd());
    let errno = |e: std::io::Error| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO));
    let mut names = Vec::new();
    for entry in std::fs::read_dir(via).map_err(errno)? {
        names.push(entry.map_err(errno)?.file_name());
    }
    Ok(names)
}
