//! Path resolution beneath a root descriptor, by the kernel: `openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`. No component of a path
//! is ever a link that gets followed, and `..` (which a [`RelPath`] cannot hold anyway)
//! cannot climb out. There is no fallback walk: without `openat2` commits refuse.

use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::{RelPath, WorkspaceError};

/// Open `rel` beneath `root` with `flags` (plus `O_CLOEXEC`); `.` opens `root` again.
pub(crate) fn open(
    root: &OwnedFd,
    rel: &Path,
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, Errno> {
    let mut tries = 0;
    loop {
        match rustix::fs::openat2(
            root,
            rel,
            flags | OFlags::CLOEXEC,
            mode,
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        ) {
            // The kernel asks for a retry when a rename raced the resolution.
            Err(Errno::AGAIN) if tries < 16 => tries += 1,
            other => return other,
        }
    }
}

/// Open the directory `rel` beneath `root`. A link where a directory should be is
/// `ELOOP` (never `ENOTDIR`, which would read as "does not exist").
pub(crate) fn open_dir(root: &OwnedFd, rel: Option<&RelPath>) -> Result<OwnedFd, Errno> {
    let p = rel.map(RelPath::as_path).unwrap_or(Path::new("."));
    match open(
        root,
        p,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW,
        Mode::empty(),
    ) {
        Err(Errno::NOTDIR) => {
            // Which component is not a directory? Walk the prefixes, opening each as a
            // path only, never following it.
            let Some(rel) = rel else {
                return Err(Errno::NOTDIR);
            };
            let mut prefix = Vec::new();
            for comp in rel.components() {
                if !prefix.is_empty() {
                    prefix.push(b'/');
                }
                prefix.extend_from_slice(comp);
                let pp = Path::new(
                    <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&prefix),
                );
                match open(root, pp, OFlags::PATH | OFlags::NOFOLLOW, Mode::empty()) {
                    Ok(fd) => match rustix::fs::fstat(&fd) {
                        Ok(st)
                            if rustix::fs::FileType::from_raw_mode(st.st_mode)
                                == rustix::fs::FileType::Symlink =>
                        {
                            return Err(Errno::LOOP)
                        }
                        Ok(st)
                            if rustix::fs::FileType::from_raw_mode(st.st_mode)
                                != rustix::fs::FileType::Directory =>
                        {
                            return Err(Errno::NOTDIR)
                        }
                        _ => {}
                    },
                    Err(e) => return Err(e),
                }
            }
            Err(Errno::NOTDIR)
        }
        other => other,
    }
}

/// The directory holding `rel`, beneath `root`, and `rel`'s last component.
pub(crate) fn open_parent<'a>(
    root: &OwnedFd,
    rel: &'a RelPath,
) -> Result<(OwnedFd, &'a Path), Errno> {
    let dir = open_dir(root, rel.parent().as_ref())?;
    Ok((
        dir,
        Path::new(std::ffi::OsStr::from_bytes_compat(rel.file_name())),
    ))
}

/// `OsStr::from_bytes` under a name that reads at the call site.
trait FromBytesCompat {
    fn from_bytes_compat(b: &[u8]) -> &std::ffi::OsStr;
}

impl FromBytesCompat for std::ffi::OsStr {
    fn from_bytes_compat(b: &[u8]) -> &std::ffi::OsStr {
        std::os::unix::ffi::OsStrExt::from_bytes(b)
    }
}

/// A resolution error as a [`WorkspaceError`] about `rel`.
pub(crate) fn error(what: &'static str, rel: &RelPath, e: Errno) -> WorkspaceError {
    match e {
        Errno::NOSYS => WorkspaceError::Openat2Unavailable,
        Errno::LOOP | Errno::XDEV => WorkspaceError::ThroughLink {
            path: rel.display(),
        },
        e => WorkspaceError::Io {
            what,
            path: rel.display(),
            source: e.into(),
        },
    }
}
