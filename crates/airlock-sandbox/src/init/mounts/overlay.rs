//! Mount the workspace overlay (see [`crate::overlay`]) at the workspace path.
//!
//! Both source trees are attached for a moment in the staging root, where overlayfs can
//! name them: the workspace as a read-only, non-recursive bind (`/overlay/lower`) and the
//! run directory holding the upper and work layers (`/overlay/layers`). A root host passes
//! both as detached mounts (it made them itself, because the sandbox uid cannot walk into
//! root's state dir); otherwise they are bound from the host root, resolved inside it and
//! following no symlink. overlayfs keeps private clones of its layers, so both staging
//! mounts are detached again right after: nothing of the workspace is mounted anywhere in
//! the sandbox but below the overlay.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use nix::mount::{umount2, MntFlags};

use super::{err, mkdirs, open_path, sys, InitError, RESOLVE_NO_LINKS};
use crate::attestation::{FileId, OverlayReport};

const LOWER_AT: &str = "/overlay/lower";
const LAYERS_AT: &str = "/overlay/layers";
const STAGE: &str = "workspace overlay";

/// The host paths of the overlay's layers, and the trees a root host passed for them.
pub(super) struct OverlaySources<'a> {
    pub lower: &'a Path,
    pub upper: &'a Path,
    pub work: &'a Path,
    pub lower_tree: Option<OwnedFd>,
    pub layers_tree: Option<OwnedFd>,
}

fn fail(message: String) -> InitError {
    InitError::new(STAGE, message)
}

/// A non-recursive bind of the host path `path` (resolved inside `oldroot`, following no
/// symlink), detached, with `attrs`.
fn host_tree(oldroot: &OwnedFd, path: &Path, attrs: u64) -> Result<OwnedFd, InitError> {
    let rel = path.strip_prefix("/").unwrap_or(path);
    let src = sys::openat2(
        oldroot.as_raw_fd(),
        rel,
        libc::O_PATH | libc::O_DIRECTORY,
        sys::RESOLVE_IN_ROOT | RESOLVE_NO_LINKS,
    )
    .map_err(|e| err("open source", path, e))?;
    let tree = sys::clone_tree(&src, false).map_err(|e| err("open_tree", path, e))?;
    sys::set_mount_attrs(tree.as_raw_fd(), attrs, false)
        .map_err(|e| err("mount_setattr", path, e))?;
    Ok(tree)
}

fn attach(tree: &OwnedFd, at: &Path) -> Result<(), InitError> {
    mkdirs(at)?;
    let target = open_path(at)?;
    sys::attach_tree(tree.as_raw_fd(), target.as_raw_fd()).map_err(|e| err("move_mount", at, e))
}

fn id_of(path: &Path) -> Result<FileId, InitError> {
    FileId::of(path).map_err(|e| err("stat", path, e))
}

fn cstring(s: &str) -> Result<CString, InitError> {
    CString::new(s).map_err(|_| fail(format!("{s:?} holds a NUL byte")))
}

/// Build the overlay and attach it at `dst` (the workspace below the new root). Returns
/// the identities of the directories overlayfs was given, for the attestation.
pub(super) fn mount_overlay(
    src: OverlaySources<'_>,
    oldroot: &OwnedFd,
    dst: &Path,
) -> Result<OverlayReport, InitError> {
    let read_only = sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV;
    let lower = match src.lower_tree {
        // Made read-only, nosuid and nodev by the host.
        Some(tree) => tree,
        None => host_tree(oldroot, src.lower, read_only)?,
    };
    let layers_dir = src
        .upper
        .parent()
        .ok_or_else(|| fail(format!("{} has no parent", src.upper.display())))?;
    let layers = match src.layers_tree {
        Some(tree) => tree,
        None => host_tree(
            oldroot,
            layers_dir,
            sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
        )?,
    };
    let (lower_at, layers_at) = (Path::new(LOWER_AT), Path::new(LAYERS_AT));
    attach(&lower, lower_at)?;
    attach(&layers, layers_at)?;
    drop((lower, layers));
    let name = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .map(|n| layers_at.join(n))
            .ok_or_else(|| fail(format!("{} has no plain name", p.display())))
    };
    let (upper_at, work_at) = (name(src.upper)?, name(src.work)?);
    let report = OverlayReport {
        lower: id_of(lower_at)?,
        upper: id_of(&upper_at)?,
        work: id_of(&work_at)?,
    };

    let fs = sys::fsopen(c"overlay").map_err(|e| {
        fail(match e.raw_os_error() {
            Some(libc::ENODEV) => format!("fsopen(overlay): {e}: the kernel has no overlayfs"),
            _ => format!("fsopen(overlay): {e}"),
        })
    })?;
    let kernel_says = |what: &str, e: std::io::Error| {
        let log = sys::fs_context_log(fs.as_raw_fd());
        fail(if log.is_empty() {
            format!("{what}: {e}")
        } else {
            format!("{what}: {e} (the kernel says: {log})")
        })
    };
    let mut settings: Vec<(String, Option<String>)> = vec![
        ("lowerdir".into(), Some(LOWER_AT.into())),
        ("upperdir".into(), Some(upper_at.display().to_string())),
        ("workdir".into(), Some(work_at.display().to_string())),
    ];
    settings.extend(
        crate::overlay::MOUNT_OPTIONS
            .iter()
            .map(|(k, v)| (k.to_string(), v.map(str::to_string))),
    );
    for (key, value) in &settings {
        let (cmd, value_c) = match value {
            Some(v) => (sys::FSCONFIG_SET_STRING, Some(cstring(v)?)),
            None => (sys::FSCONFIG_SET_FLAG, None),
        };
        sys::fsconfig(
            fs.as_raw_fd(),
            cmd,
            Some(&cstring(key)?),
            value_c.as_deref(),
        )
        .map_err(|e| kernel_says(&format!("overlay option {key}"), e))?;
    }
    sys::fsconfig(fs.as_raw_fd(), sys::FSCONFIG_CMD_CREATE, None, None)
        .map_err(|e| kernel_says("create the overlay", e))?;
    let mnt = sys::fsmount(
        fs.as_raw_fd(),
        sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
    )
    .map_err(|e| kernel_says("fsmount", e))?;
    attach(&mnt, dst)?;
    for at in [lower_at, layers_at] {
        umount2(at, MntFlags::MNT_DETACH).map_err(|e| err("detach staging layer", at, e))?;
    }
    Ok(report)
}
