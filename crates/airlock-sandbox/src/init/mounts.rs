//! Execute a [`crate::mount_plan::MountPlan`] in a fresh mount namespace and pivot into the result.
//!
//! The host root stays reachable at `/oldroot` (below a private staging tmpfs) while the new
//! root is assembled at `/newroot`; host sources are opened with `RESOLVE_IN_ROOT` under
//! `/oldroot`, so absolute symlinks on the host (`/etc/resolv.conf -> /run/...`) resolve
//! inside the host root and never in the staging area. Binds use the fd-based mount API
//! (`open_tree` + `mount_setattr` + `move_mount`), so the read-only flag is applied to the
//! whole detached tree before it becomes visible. Small `/etc` files are copied into the
//! root tmpfs rather than bound ([`copy`]), through the same host-root resolution.

mod copy;
mod overlay;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

use super::sys;
use super::InitError;
use crate::attestation::OverlayReport;
use crate::mount_plan::{MountStep, NodeKind, RebindReason};
use crate::protocol::FILE_FD;

const STAGING: &str = "/tmp";
const NEWROOT: &str = "/newroot";

fn at_newroot(target: &Path) -> PathBuf {
    Path::new(NEWROOT).join(target.strip_prefix("/").unwrap_or(target))
}

fn err(stage: &str, path: &Path, e: impl std::fmt::Display) -> InitError {
    InitError::new(format!("mount {stage}"), format!("{}: {e}", path.display()))
}

fn mkdirs(path: &Path) -> Result<(), InitError> {
    std::fs::create_dir_all(path).map_err(|e| err("mkdir", path, e))
}

fn make_mount_point(path: &Path, node: NodeKind) -> Result<(), InitError> {
    match node {
        NodeKind::Dir => mkdirs(path),
        NodeKind::File => {
            if let Some(parent) = path.parent() {
                mkdirs(parent)?;
            }
            if !path.exists() {
                std::fs::File::create(path).map_err(|e| err("create mount point", path, e))?;
            }
            Ok(())
        }
    }
}

fn open_path(path: &Path) -> Result<OwnedFd, InitError> {
    sys::openat2(
        libc::AT_FDCWD,
        path,
        libc::O_PATH | libc::O_NOFOLLOW,
        RESOLVE_NO_LINKS,
    )
    .map_err(|e| err("open", path, e))
}

const RESOLVE_NO_LINKS: u64 = sys::RESOLVE_NO_SYMLINKS | sys::RESOLVE_NO_MAGICLINKS;

/// Clone the mount tree at `source`, set its attributes, attach it at `target`.
fn bind_fd(
    source: &OwnedFd,
    target: &OwnedFd,
    attrs: u64,
    recursive: bool,
    what: &Path,
) -> Result<(), InitError> {
    let tree = sys::clone_tree(source, recursive).map_err(|e| err("open_tree", what, e))?;
    sys::set_mount_attrs(tree.as_raw_fd(), attrs, recursive)
        .map_err(|e| err("mount_setattr", what, e))?;
    sys::attach_tree(tree.as_raw_fd(), target.as_raw_fd()).map_err(|e| err("move_mount", what, e))
}

fn tmpfs(target: &Path, size: u64, mode: u32) -> Result<(), InitError> {
    let data = format!("size={size},mode={mode:o}");
    mount(
        Some("tmpfs"),
        target,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(data.as_str()),
    )
    .map_err(|e| err("tmpfs", target, e))
}

/// A root being assembled at `/newroot` while the host's root is still reachable at
/// `/oldroot`. A pooled sandbox's PID 1 holds one between its fixed steps and the run's
/// workspace steps (see [`super::attach`]); nothing but PID 1 exists in the sandbox then.
pub struct StagedRoot {
    oldroot: OwnedFd,
    umask: u32,
    overlay_report: Option<OverlayReport>,
    read_only_later: Vec<PathBuf>,
}

impl StagedRoot {
    /// Make the mount tree private and move to the staging tmpfs, the host root at
    /// `/oldroot`.
    pub fn stage() -> Result<StagedRoot, InitError> {
        let root = Path::new("/");
        mount(
            None::<&str>,
            root,
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .map_err(|e| err("make-rprivate", root, e))?;
        let staging = Path::new(STAGING);
        tmpfs(staging, 1 << 20, 0o755)?;
        mkdirs(&staging.join("newroot"))?;
        mkdirs(&staging.join("oldroot"))?;
        nix::unistd::pivot_root(staging, &staging.join("oldroot"))
            .map_err(|e| err("pivot_root", staging, e))?;
        nix::unistd::chdir(root).map_err(|e| err("chdir", root, e))?;
        let oldroot = sys::openat2(
            libc::AT_FDCWD,
            Path::new("/oldroot"),
            libc::O_PATH | libc::O_DIRECTORY,
            0,
        )
        .map_err(|e| err("open", Path::new("/oldroot"), e))?;
        Ok(StagedRoot {
            oldroot,
            umask: copy::current_umask(),
            overlay_report: None,
            read_only_later: Vec::new(),
        })
    }

    /// Execute `steps` in order. `workspace_tree` is the workspace's path with the
    /// detached mount a root host made of it: that bind is attached as it is, without
    /// walking the host path (see [`crate::protocol::WORKSPACE_FD`]). `layers_tree` is the
    /// overlay's run directory a root host passed the same way
    /// ([`crate::protocol::OVERLAY_FD`]).
    pub fn run_steps(
        &mut self,
        steps: &[MountStep],
        mut workspace_tree: Option<(&Path, OwnedFd)>,
        mut layers_tree: Option<OwnedFd>,
    ) -> Result<(), InitError> {
        let oldroot = &self.oldroot;
        let umask = self.umask;
        for step in steps {
            let dst = at_newroot(&step.target());
            match step {
                MountStep::Tmpfs {
                    size_bytes,
                    mode,
                    read_only,
                    ..
                } => {
                    mkdirs(&dst)?;
                    tmpfs(&dst, *size_bytes, *mode)?;
                    if *read_only {
                        self.read_only_later.push(dst);
                    }
                }
                MountStep::Bind {
                    source,
                    node,
                    read_only,
                    recursive,
                    devices,
                    ..
                } => {
                    // Writable binds (the workspace, device nodes) must not traverse symlinks at
                    // all; read-only system paths may (resolved inside the host root).
                    let resolve = if *read_only {
                        sys::RESOLVE_IN_ROOT
                    } else {
                        sys::RESOLVE_IN_ROOT | RESOLVE_NO_LINKS
                    };
                    if let Some((_, tree)) =
                        workspace_tree.take_if(|(ws, _)| *ws == source.as_path())
                    {
                        // Made by the host with nosuid and nodev, not recursive, like the bind
                        // below.
                        make_mount_point(&dst, *node)?;
                        let target = open_path(&dst)?;
                        sys::attach_tree(tree.as_raw_fd(), target.as_raw_fd())
                            .map_err(|e| err("move_mount", source, e))?;
                        continue;
                    }
                    let rel = source.strip_prefix("/").unwrap_or(source);
                    let src = sys::openat2(oldroot.as_raw_fd(), rel, libc::O_PATH, resolve)
                        .map_err(|e| err("open source", source, e))?;
                    make_mount_point(&dst, *node)?;
                    let target = open_path(&dst)?;
                    let mut attrs = sys::MOUNT_ATTR_NOSUID;
                    attrs |= if *devices {
                        sys::MOUNT_ATTR_NOEXEC
                    } else {
                        sys::MOUNT_ATTR_NODEV
                    };
                    if *read_only {
                        attrs |= sys::MOUNT_ATTR_RDONLY;
                    }
                    bind_fd(&src, &target, attrs, *recursive, source)?;
                }
                MountStep::Proc { .. } => {
                    mkdirs(&dst)?;
                    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
                    mount(Some("proc"), &dst, Some("proc"), flags, None::<&str>)
                        .map_err(|e| err("proc", &dst, e))?;
                }
                MountStep::Devpts { .. } => {
                    mkdirs(&dst)?;
                    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
                    mount(
                        Some("devpts"),
                        &dst,
                        Some("devpts"),
                        flags,
                        Some("newinstance,ptmxmode=0666,mode=620"),
                    )
                    .map_err(|e| err("devpts", &dst, e))?;
                }
                MountStep::Symlink { points_to, .. } => {
                    if let Some(parent) = dst.parent() {
                        mkdirs(parent)?;
                    }
                    std::os::unix::fs::symlink(points_to, &dst)
                        .map_err(|e| err("symlink", &dst, e))?;
                }
                MountStep::File { len, mode, .. } => {
                    use std::os::unix::fs::OpenOptionsExt;
                    if let Some(parent) = dst.parent() {
                        mkdirs(parent)?;
                    }
                    let contents = passed_file(*len).map_err(|e| err("file", &dst, e))?;
                    let mut file = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(*mode)
                        .open(&dst)
                        .map_err(|e| err("file", &dst, e))?;
                    std::io::Write::write_all(&mut file, &contents)
                        .map_err(|e| err("file", &dst, e))?;
                }
                MountStep::Copy {
                    source,
                    max_len,
                    mode,
                    ..
                } => {
                    let stage = |e: &dyn std::fmt::Display| {
                        InitError::new("copy host file", format!("{}: {e}", source.display()))
                    };
                    // Left out when the sandbox uid may not read it (see `MountStep::Copy`).
                    if let Some(file) =
                        copy::open_host_file(oldroot, source, *max_len).map_err(|e| stage(&e))?
                    {
                        // The parent directory is made only when the create finds it missing
                        // (the first copy into /etc): no `stat` of it for every other copy.
                        let mut copied = file.copy_to(&dst, *mode, umask);
                        if matches!(&copied, Err(copy::CopyError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound)
                        {
                            if let Some(parent) = dst.parent() {
                                mkdirs(parent)?;
                            }
                            copied = file.copy_to(&dst, *mode, umask);
                        }
                        copied.map_err(|e| stage(&e))?;
                    }
                }
                MountStep::Overlay {
                    lower, upper, work, ..
                } => {
                    let lower_tree = workspace_tree
                        .take_if(|(ws, _)| *ws == lower.as_path())
                        .map(|(_, t)| t);
                    let sources = overlay::OverlaySources {
                        lower,
                        upper,
                        work,
                        lower_tree,
                        layers_tree: layers_tree.take(),
                    };
                    self.overlay_report = Some(overlay::mount_overlay(sources, oldroot, &dst)?);
                }
                MountStep::Rebind {
                    anchor,
                    relative,
                    read_only,
                    reason,
                } => {
                    // The anchor is a mount this plan made; below it, follow no symlink and never
                    // leave it (the workspace is attacker-writable). Crossing mounts is allowed:
                    // the only mounts below the anchor are the pins made just before.
                    let anchor_fd = open_path(&at_newroot(anchor))?;
                    let resolve = sys::RESOLVE_BENEATH | RESOLVE_NO_LINKS;
                    let fd = sys::openat2(
                        anchor_fd.as_raw_fd(),
                        relative,
                        libc::O_PATH | libc::O_NOFOLLOW,
                        resolve,
                    )
                    .map_err(|e| err("open protected path", &dst, e))?;
                    let mut attrs = sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV;
                    if *read_only {
                        attrs |= sys::MOUNT_ATTR_RDONLY;
                    }
                    let recursive = *reason != RebindReason::Pin;
                    bind_fd(&fd, &fd, attrs, recursive, &dst)?;
                }
            }
        }
        Ok(())
    }

    /// Apply the read-only flags, let go of the host's root and make the new root the
    /// process root. Returns what the overlay was built on, when the plan has one.
    pub fn finish(self) -> Result<Option<OverlayReport>, InitError> {
        let root = Path::new("/");
        let staging = Path::new(STAGING);
        let StagedRoot {
            oldroot,
            overlay_report,
            read_only_later,
            ..
        } = self;
        for dir in read_only_later.iter().rev() {
            let fd = open_path(dir)?;
            sys::set_mount_attrs(
                fd.as_raw_fd(),
                sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
                false,
            )
            .map_err(|e| err("make read-only", dir, e))?;
        }
        drop(oldroot);
        let old = Path::new("/oldroot");
        umount2(old, MntFlags::MNT_DETACH).map_err(|e| err("detach host root", old, e))?;
        let newroot = Path::new(NEWROOT);
        nix::unistd::chdir(newroot).map_err(|e| err("chdir", newroot, e))?;
        nix::unistd::pivot_root(".", ".").map_err(|e| err("pivot_root", newroot, e))?;
        umount2(".", MntFlags::MNT_DETACH).map_err(|e| err("detach staging root", staging, e))?;
        nix::unistd::chdir(root).map_err(|e| err("chdir", root, e))?;
        Ok(overlay_report)
    }
}

/// The contents of the plan's file, from the sealed memory file the host passed on
/// [`FILE_FD`]: exactly `len` bytes, or an error.
fn passed_file(len: u64) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let size = usize::try_from(len).map_err(std::io::Error::other)?;
    // SAFETY: FILE_FD is the descriptor the host passed for this step; it is only borrowed
    // here (ManuallyDrop) and closed by PID 1 once the root is built.
    let file = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(FILE_FD) });
    let mut contents = vec![0u8; size];
    file.read_exact_at(&mut contents, 0)?;
    let mut extra = [0u8; 1];
    if file.read_at(&mut extra, len)? != 0 {
        return Err(std::io::Error::other(format!(
            "the host's file is longer than the {len} bytes the plan names"
        )));
    }
    Ok(contents)
}
