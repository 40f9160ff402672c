//! An upper-layer-shaped directory built from host-side writes, so the agent's file tools
//! (`write_file`, `edit_file`) reach the workspace through the same change set, Gate
//! decision and commit as a sandboxed run.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use crate::node::{self, KEPT_MODE_BITS};
use crate::{RelPath, WorkspaceError};

/// A staging upper layer for one transaction of host-side writes.
///
/// ```no_run
/// use airlock_workspace::{ChangeSet, ChangeSetOptions, RelPath, Staging};
/// let ws = std::path::Path::new("/home/me/proj");
/// let staging = Staging::new("/tmp/stage-1".as_ref(), ws)?;
/// staging.write_file(&RelPath::new("notes/todo.md")?, b"- ship\n", 0o644)?;
/// let cs = ChangeSet::compute(ws, staging.path(), &ChangeSetOptions::default())?;
/// # Ok::<(), airlock_workspace::WorkspaceError>(())
/// ```
#[derive(Debug)]
pub struct Staging {
    dir: PathBuf,
    root: OwnedFd,
    lower: OwnedFd,
}

impl Staging {
    /// Create the staging directory `dir` (which must not exist yet) for writes to
    /// `workspace`. Parent directories it creates take the workspace's modes, so they do
    /// not show as mode changes.
    pub fn new(dir: &Path, workspace: &Path) -> Result<Staging, WorkspaceError> {
        rustix::fs::mkdir(dir, Mode::from_raw_mode(0o700))
            .map_err(|e| WorkspaceError::io("create staging directory", dir, e))?;
        let open = |p: &Path| {
            rustix::fs::open(
                p,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                Mode::empty(),
            )
            .map_err(|e| WorkspaceError::io("open directory", p, e))
        };
        let root = open(dir)?;
        let lower = open(workspace)?;
        // The staging root stands for the workspace root: give it the same mode.
        if let Ok(st) = rustix::fs::fstat(&lower) {
            let _ = rustix::fs::fchmod(&root, Mode::from_raw_mode(st.st_mode & KEPT_MODE_BITS));
        }
        Ok(Staging {
            dir: dir.to_path_buf(),
            root,
            lower,
        })
    }

    /// The staging directory (the `upper` of [`ChangeSet::compute`](crate::ChangeSet::compute)).
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Stage `bytes` as the new content of `rel` with permission bits `mode` (special bits
    /// are stripped here already).
    pub fn write_file(&self, rel: &RelPath, bytes: &[u8], mode: u32) -> Result<(), WorkspaceError> {
        let (dir, lower) = self.parent_dir(rel)?;
        let name = Path::new(std::ffi::OsStr::from_bytes_ext(rel.file_name()));
        if let Some(l) = &lower {
            self.refuse_link_or_file(l, name, rel, false)?;
        }
        let _ = rustix::fs::unlinkat(&dir, name, rustix::fs::AtFlags::empty());
        let fd = rustix::fs::openat(
            &dir,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode & KEPT_MODE_BITS),
        )
        .map_err(|e| self.err("create", rel, e))?;
        // The umask must not decide the mode that gets committed.
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode & KEPT_MODE_BITS))
            .map_err(|e| self.err("chmod", rel, e))?;
        let mut f = std::fs::File::from(fd);
        f.write_all(bytes)
            .map_err(|e| WorkspaceError::io("write", &self.dir.join(rel.as_path()), e))?;
        Ok(())
    }

    /// Stage the removal of `rel` (a file, link or whole directory): a whiteout, as the
    /// overlay makes one (a character device 0:0; where `mknod` is not allowed, a
    /// zero-size file with `user.overlay.whiteout`).
    pub fn remove(&self, rel: &RelPath) -> Result<(), WorkspaceError> {
        let (dir, _) = self.parent_dir(rel)?;
        let name = Path::new(std::ffi::OsStr::from_bytes_ext(rel.file_name()));
        let _ = rustix::fs::unlinkat(&dir, name, rustix::fs::AtFlags::empty());
        match rustix::fs::mknodat(
            &dir,
            name,
            rustix::fs::FileType::CharacterDevice,
            Mode::empty(),
            0,
        ) {
            Ok(()) => Ok(()),
            Err(Errno::PERM) => {
                let fd = rustix::fs::openat(
                    &dir,
                    name,
                    OFlags::WRONLY
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )
                .map_err(|e| self.err("create whiteout", rel, e))?;
                rustix::fs::fsetxattr(
                    &fd,
                    "user.overlay.whiteout",
                    b"y",
                    rustix::fs::XattrFlags::empty(),
                )
                .map_err(|e| self.err("mark whiteout", rel, e))
            }
            Err(e) => Err(self.err("create whiteout", rel, e)),
        }
    }

    /// The staged parent directory of `rel`, created as needed with the workspace's modes.
    fn parent_dir(&self, rel: &RelPath) -> Result<(OwnedFd, Option<OwnedFd>), WorkspaceError> {
        let mut dir = node::open_dir_at(&self.root, Path::new("."))
            .map_err(|e| WorkspaceError::io("open", &self.dir, e))?;
        let mut lower = node::open_dir_at(&self.lower, Path::new(".")).ok();
        let comps: Vec<&[u8]> = rel.components().collect();
        for comp in &comps[..comps.len() - 1] {
            let name = Path::new(std::ffi::OsStr::from_bytes_ext(comp));
            if let Some(l) = &lower {
                // The file tools never write through a link, nor turn a file into a
                // directory on the way to the one they write.
                self.refuse_link_or_file(l, name, rel, true)?;
            }
            let lower_next = lower.as_ref().and_then(|l| node::open_dir_at(l, name).ok());
            let mode = lower_next
                .as_ref()
                .and_then(|l| rustix::fs::fstat(l).ok())
                .map_or(0o755, |st| st.st_mode & KEPT_MODE_BITS);
            match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(mode)) {
                Ok(()) => {
                    let fd = node::open_dir_at(&dir, name).map_err(|e| self.err("open", rel, e))?;
                    let _ = rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode));
                    dir = fd;
                }
                Err(Errno::EXIST) => {
                    dir = node::open_dir_at(dir.as_fd(), name)
                        .map_err(|e| self.err("open", rel, e))?;
                }
                Err(e) => return Err(self.err("create directory for", rel, e)),
            }
            lower = lower_next;
        }
        Ok((dir, lower))
    }

    fn refuse_link_or_file(
        &self,
        lower: &OwnedFd,
        name: &Path,
        rel: &RelPath,
        want_dir: bool,
    ) -> Result<(), WorkspaceError> {
        match node::lstat_at(lower, name) {
            Ok(Some(st)) => match node::kind_of(&st) {
                node::Kind::Symlink => Err(WorkspaceError::ThroughLink {
                    path: rel.display(),
                }),
                node::Kind::Dir => Ok(()),
                _ if want_dir => Err(WorkspaceError::io(
                    "create directory for",
                    rel.as_path(),
                    Errno::NOTDIR,
                )),
                _ => Ok(()),
            },
            _ => Ok(()),
        }
    }

    fn err(&self, what: &'static str, rel: &RelPath, e: Errno) -> WorkspaceError {
        WorkspaceError::io(what, &self.dir.join(rel.as_path()), e)
    }
}

trait OsStrBytes {
    fn from_bytes_ext(b: &[u8]) -> &std::ffi::OsStr;
}

impl OsStrBytes for std::ffi::OsStr {
    fn from_bytes_ext(b: &[u8]) -> &std::ffi::OsStr {
        std::os::unix::ffi::OsStrExt::from_bytes(b)
    }
}
