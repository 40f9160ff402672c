//! The workspace overlay: a run sees the workspace through overlayfs, and its writes land
//! in a per-run upper layer instead of the workspace.
//!
//! With [`SandboxProfile::workspace_overlay`](crate::SandboxProfile::workspace_overlay)
//! set, the helper mounts at the workspace path an overlayfs whose lower layer is the real
//! workspace (a read-only, non-recursive bind of it) and whose upper and work directories
//! are [`WorkspaceOverlay::upper`] and [`WorkspaceOverlay::work`]. Nothing of the real
//! workspace is writable inside the sandbox: there is no read-write bind of it anywhere,
//! and the attestation proves the mount at the workspace is this overlay
//! ([`crate::Attestation::verify`]). After the run the host reads the upper layer, decides
//! on the change set and commits it (or not); then [`WorkspaceOverlay::remove`] deletes
//! the layers.
//!
//! The mount (inside the sandbox's user namespace, by the sandbox uid) uses exactly the
//! options [`MOUNT_OPTIONS`] names:
//! - `userxattr`: overlayfs keeps its own metadata in `user.overlay.*` extended
//!   attributes; the `trusted.*` namespace is out of reach in a user namespace (without
//!   the option the kernel falls back to `uuid=null` and cannot mark opaque directories).
//! - `redirect_dir=nofollow`: a directory that exists in the workspace cannot be renamed
//!   inside the sandbox (`rename` gives `EXDEV`; `mv` and other tools then copy and
//!   delete), so the upper layer never holds redirects.
//! - `metacopy=off`: a metadata change copies the whole file up, so every regular file in
//!   the upper layer holds its complete contents.
//! - `index=off`, `xino=off`: no inode index, no inode-number tricks.
//!
//! # The upper layer's format (Linux 6.18, checked by the tests in this crate)
//!
//! This is the contract with the code that computes the change set. The upper directory
//! mirrors the workspace: the entry at `upper/P` says what happened to the workspace path
//! `P`. Paths not in the upper layer were not touched.
//!
//! | entry at `upper/P` | meaning for workspace path `P` |
//! |---|---|
//! | character device with `rdev` 0:0 (`c---------`) | **whiteout**: `P` was deleted (or moved away). Whiteouts may share one inode (link count above 1): that is overlayfs reusing a whiteout, not a hard link of content. A whiteout whose `P` does not exist in the workspace deletes nothing. |
//! | directory with xattr `user.overlay.opaque` = `y` | **opaque directory**: `P` was removed and made again (`rm -rf P; mkdir P`). Nothing of the workspace's `P` shows through: every workspace entry below `P` is deleted, and the upper directory's contents are `P`'s whole new contents. |
//! | directory without `user.overlay.opaque` | **merged directory**: entries of the workspace's `P` not named in the upper directory are unchanged. Present because something below it changed, or because `P` itself is new, or its mode, owner or times changed (compare with the workspace). |
//! | regular file | `P` was created, or it existed and was copied up: written, truncated, opened for writing, or only its mode, times or xattrs changed. The file is always complete (metacopy is off); whether its contents changed is for the reader to compare with the workspace. |
//! | symbolic link | created, or copied up (an existing link whose owner or times changed). The target is the link's text, never followed. |
//! | FIFO | made by the run (`mkfifo`). |
//! | any other device node, or a socket | cannot be made by the sandbox (`mknod` is refused; `socket(AF_UNIX)` is refused by seccomp); never commit one. |
//!
//! Renames:
//! - a *file* that exists in the workspace, renamed from `A` to `B`: a whiteout at `A`
//!   and a regular file at `B` (copied up, then renamed in the upper layer);
//! - a *directory* that exists in the workspace cannot be renamed (`EXDEV`, see above):
//!   `mv A B` copies, so `B` is a new directory holding full copies and `A` a whiteout;
//! - an entry created during the run and renamed is simply at its new name.
//!
//! So a rename shows as a whiteout plus a new entry with the same contents; nothing in the
//! layer says which pairs belong together.
//!
//! Hard links: `ln A B` on a workspace file copies `A` up first, so `A` and `B` are then
//! two names of one inode in the upper layer (link count 2), like links the run made
//! between its own new files. Whiteouts sharing an inode (above) are not links of
//! content.
//!
//! Extended attributes in the upper layer:
//! - overlayfs' own, all in `user.overlay.`: `opaque` (above), `origin` (on copied-up
//!   entries: a file handle of the workspace entry, possibly empty), `impure` (on
//!   directories holding copied-up entries), `uuid` (on the upper root). Only `opaque`
//!   carries meaning for the change set; the others are bookkeeping. `redirect`,
//!   `metacopy`, `whiteout` and `nlink` never appear with these options. The 6.7+
//!   *xattr whiteouts* (a regular file with `user.overlay.whiteout`, in a directory whose
//!   `user.overlay.opaque` is `x`) are read only from lower layers and are never written
//!   to an upper one; a reader that meets either should refuse the layer, not guess.
//! - the payload's own: `user.*` as set. An xattr the payload names `user.overlay.X` is
//!   stored *escaped* as `user.overlay.overlay.X` (Linux 6.7+), so the payload can never
//!   forge overlayfs' own attributes (an `opaque` it sets on a directory shows up as
//!   `user.overlay.overlay.opaque`, which means nothing to overlayfs).
//!
//! Ownership and modes: everything in the upper layer belongs to the sandbox uid and gid
//! (the caller's own ids when the host is not root), whatever the workspace entry's owner
//! was. A root host's lower layer is id-mapped so that the workspace owner's files show as
//! the sandbox's ([`crate::idmap`]); files of other owners cannot be copied up, so the run
//! cannot change them (`EOVERFLOW`). Modes are as the run left them, set-user-ID and set-group-ID bits included (the
//! seccomp list refuses them, but the reader must strip them anyway).
//!
//! The work directory holds overlayfs' scratch space (`work/work`, mode 000, and
//! sometimes `work/index`). It is never part of the change set.
//!
//! Where the layers live is the caller's choice (`runs_dir`). On a tmpfs (a directory
//! below `/dev/shm` or `$XDG_RUNTIME_DIR`; user xattrs need Linux 6.6 there) making,
//! mounting and removing them adds nothing measurable to a run; on a journaling disk file
//! system each of their few directory creations and removals is a metadata write, which a
//! busy disk makes slow (see `scripts/bench-sandbox`). A tmpfs holds what the run wrote in
//! memory until the host has decided, and loses it on a reboot (the workspace is then
//! simply unchanged).
//!
//! The overlay exists only in the sandbox's mount namespace, so it is gone once the run
//! has returned: the host reads the upper layer as plain files, with nothing mounted on
//! top of it. If the workspace changed on the host during the run, overlayfs' view was
//! undefined for those paths; comparing against the workspace at commit time is the
//! reader's job.

mod remove;

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::Mode;
use serde::{Deserialize, Serialize};

use crate::error::SandboxError;

/// The overlayfs options of every workspace overlay besides its layers (see the module
/// documentation for why each is there).
pub const MOUNT_OPTIONS: &[(&str, Option<&str>)] = &[
    ("userxattr", None),
    ("redirect_dir", Some("nofollow")),
    ("metacopy", Some("off")),
    ("index", Some("off")),
    ("xino", Some("off")),
];

/// [`MOUNT_OPTIONS`] as overlayfs spells them (`userxattr,redirect_dir=nofollow,…`).
pub fn options_text() -> String {
    MOUNT_OPTIONS
        .iter()
        .map(|(k, v)| match v {
            Some(v) => format!("{k}={v}"),
            None => k.to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The extended attribute that marks an opaque directory in the upper layer; its value is
/// `y`.
pub const OPAQUE_XATTR: &str = "user.overlay.opaque";

/// Whether `meta` (of an upper-layer entry, not followed) is a whiteout: a character
/// device with device number 0:0.
pub fn is_whiteout(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    meta.file_type().is_char_device() && meta.rdev() == 0
}

/// The upper and work directories of one run's workspace overlay.
///
/// Both are absolute host paths without symlinks, siblings in one directory (overlayfs
/// wants them on the same mount, and the helper receives that directory as one mount);
/// [`WorkspaceOverlay::create`] makes them so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceOverlay {
    /// Where the run's writes land (see the module documentation for its format).
    pub upper: PathBuf,
    /// overlayfs' scratch directory: empty at mount, never part of the change set.
    pub work: PathBuf,
}

/// The name of a run directory: letters, digits, `.`, `_` and `-`, at most 128 bytes,
/// and not `.` or `..`. It becomes a path component and an overlayfs option value.
fn check_name(field: &'static str, name: &str) -> Result<(), SandboxError> {
    let plain = !name.is_empty()
        && name.len() <= 128
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if plain {
        Ok(())
    } else {
        Err(SandboxError::Profile {
            field,
            message: format!("{name:?} is not a plain name"),
            help: "use letters, digits, `.`, `_` and `-` only (at most 128), not `.` or `..`"
                .into(),
        })
    }
}

fn io_error(what: &str, path: &Path, e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Layers {
        stage: what.to_string(),
        message: format!("{}: {e}", path.display()),
        help: "check that the runs directory is a local directory writable by airlock (the state dir's `runs/`)".into(),
    }
}

impl WorkspaceOverlay {
    /// Make `<runs_dir>/<run_id>/{upper,work}` for one run.
    ///
    /// `runs_dir` is created (mode 0700) when missing and must be a directory, not a
    /// symlink. `<run_id>` must not exist yet: an old upper layer would otherwise pass for
    /// this run's changes. The run directory and both layers are mode 0700, created by
    /// descriptor without following any symlink, and when the host is root they belong to
    /// `sandbox_uid:sandbox_gid` (the sandbox mounts the overlay as that uid and writes
    /// through it); otherwise to the caller, whom the sandbox then runs as (the ids are
    /// not used). The returned paths are absolute and contain no symlink.
    pub fn create(
        runs_dir: &Path,
        run_id: &str,
        sandbox_uid: u32,
        sandbox_gid: u32,
    ) -> Result<WorkspaceOverlay, SandboxError> {
        check_name("run_id", run_id)?;
        if sandbox_uid == 0 || sandbox_gid == 0 {
            return Err(SandboxError::Profile {
                field: "sandbox_uid",
                message: "the sandbox uid and gid must not be 0".into(),
                help: "use an unprivileged id such as 65534 (nobody)".into(),
            });
        }
        if std::fs::symlink_metadata(runs_dir).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(SandboxError::Profile {
                field: "runs_dir",
                message: format!("{} is a symlink", runs_dir.display()),
                help: "give the real directory (the state dir's runs/)".into(),
            });
        }
        if !runs_dir.exists() {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(runs_dir)
                .map_err(|e| io_error("create", runs_dir, e))?;
        }
        let runs = runs_dir
            .canonicalize()
            .map_err(|e| io_error("resolve", runs_dir, e))?;
        let runs_fd = open_dir(None, &runs).map_err(|e| io_error("open", &runs, e))?;
        let run_path = runs.join(run_id);
        mkdir_0700(&runs_fd, Path::new(run_id)).map_err(|e| io_error("create", &run_path, e))?;
        let made = (|| {
            let run_fd = open_dir(Some(&runs_fd), Path::new(run_id))
                .map_err(|e| io_error("open", &run_path, e))?;
            let owner = nix::unistd::geteuid()
                .is_root()
                .then_some((sandbox_uid, sandbox_gid));
            settle(&run_fd, owner).map_err(|e| io_error("chown", &run_path, e))?;
            for name in ["upper", "work"] {
                let path = run_path.join(name);
                mkdir_0700(&run_fd, Path::new(name)).map_err(|e| io_error("create", &path, e))?;
                let fd = open_dir(Some(&run_fd), Path::new(name))
                    .map_err(|e| io_error("open", &path, e))?;
                settle(&fd, owner).map_err(|e| io_error("chown", &path, e))?;
            }
            Ok(WorkspaceOverlay {
                upper: run_path.join("upper"),
                work: run_path.join("work"),
            })
        })();
        if made.is_err() {
            // Leave nothing half-made behind.
            let _ = remove::remove_entry(&runs_fd, run_id);
        }
        made
    }

    /// Delete the upper and work directories with everything in them, then their parent
    /// directory when that is left empty. Follows no symlink: every entry is removed by
    /// descriptor, relative to its opened parent, and directories the run made
    /// inaccessible (mode 000, like overlayfs' own `work/work`) are opened up first when
    /// they belong to the caller. Depth does not matter: nested directories are moved up
    /// before they are emptied, so at most two directories are open at a time.
    ///
    /// Call it only once the run has returned (the overlay is then unmounted). Missing
    /// directories are not an error.
    pub fn remove(&self) -> Result<(), SandboxError> {
        let mut parent = None;
        for dir in [&self.upper, &self.work] {
            let (Some(base), Some(name)) = (dir.parent(), dir.file_name()) else {
                return Err(io_error("remove", dir, "not a directory below another"));
            };
            let base_fd = match open_dir(None, base) {
                Ok(fd) => fd,
                Err(nix::errno::Errno::ENOENT) => continue,
                Err(e) => return Err(io_error("remove", base, e)),
            };
            remove::remove_entry(&base_fd, Path::new(name))
                .map_err(|e| io_error("remove", dir, e))?;
            parent = Some(base.to_path_buf());
        }
        if let Some(run_dir) = parent {
            match std::fs::remove_dir(&run_dir) {
                Ok(()) => {}
                Err(e)
                    if e.kind() == std::io::ErrorKind::NotFound
                        || e.raw_os_error() == Some(libc::ENOTEMPTY) => {}
                Err(e) => return Err(io_error("remove", &run_dir, e)),
            }
        }
        Ok(())
    }

    /// The directory holding both layers (the helper receives it as one mount).
    pub fn layers_dir(&self) -> Option<&Path> {
        self.upper.parent()
    }

    /// Check the overlay against the workspace `workspace` (canonical).
    pub(crate) fn validate(&self, workspace: &Path) -> Result<(), SandboxError> {
        let bad = |message: String, help: &str| SandboxError::Profile {
            field: "workspace_overlay",
            message,
            help: help.into(),
        };
        let make_them = "make the layers with WorkspaceOverlay::create";
        for dir in [&self.upper, &self.work] {
            if !dir.is_absolute() || dir.canonicalize().ok().as_ref() != Some(dir) {
                return Err(bad(
                    format!(
                        "{} is not an existing absolute path without symlinks",
                        dir.display()
                    ),
                    make_them,
                ));
            }
            if dir.starts_with(workspace) || workspace.starts_with(dir) {
                return Err(bad(
                    format!(
                        "{} and the workspace {} overlap",
                        dir.display(),
                        workspace.display()
                    ),
                    "keep the overlay layers outside the workspace (the state dir's runs/)",
                ));
            }
            let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
            check_name("workspace_overlay", name)?;
        }
        if self.upper == self.work || self.upper.parent() != self.work.parent() {
            return Err(bad(
                format!(
                    "upper {} and work {} are not two directories side by side",
                    self.upper.display(),
                    self.work.display()
                ),
                make_them,
            ));
        }
        Ok(())
    }
}

/// Open the directory `path` (relative to `dir`, or as given) without following a
/// symlink in its last component.
fn open_dir(dir: Option<&OwnedFd>, path: &Path) -> nix::Result<OwnedFd> {
    let flags = OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_RDONLY | OFlag::O_CLOEXEC;
    match dir {
        Some(d) => nix::fcntl::openat(d.as_fd(), path, flags, Mode::empty()),
        None => nix::fcntl::open(path, flags, Mode::empty()),
    }
}

fn mkdir_0700<P: ?Sized + nix::NixPath>(dir: &OwnedFd, name: &P) -> nix::Result<()> {
    nix::sys::stat::mkdirat(dir.as_fd(), name, Mode::S_IRWXU)
}

/// Give the opened directory mode 0700 exactly (whatever the umask took away) and, when
/// `owner` is set, that owner.
fn settle(dir: &OwnedFd, owner: Option<(u32, u32)>) -> nix::Result<()> {
    nix::sys::stat::fchmod(dir.as_fd(), Mode::S_IRWXU)?;
    if let Some((uid, gid)) = owner {
        nix::unistd::fchownat(
            dir.as_fd(),
            "",
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(gid)),
            AtFlags::AT_EMPTY_PATH,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
