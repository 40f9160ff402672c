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

/// Open the directory `sub` beneath the directory `root`, making each missing component
/// with `mkdirat` in the one above it (mode `0o777` less the umask, as `mkdir -p` does).
/// Each step is resolved by the kernel from the descriptor of the step before, so no
/// component is ever a link that gets followed: a link anywhere in `sub`, even one that
/// stays inside `root`, is [`WorkspaceError::ThroughLink`], and nothing at or below it is
/// made. `root` itself is opened as given: it is the caller's directory, not something a
/// run left behind.
///
/// ```no_run
/// # use airlock_workspace::{open_subdir, RelPath};
/// let sub = RelPath::new("reports/q3").unwrap();
/// let dir = open_subdir(std::path::Path::new("/home/me/ws"), &sub)?;
/// # Ok::<(), airlock_workspace::WorkspaceError>(())
/// ```
pub fn open_subdir(root: &Path, sub: &RelPath) -> Result<OwnedFd, WorkspaceError> {
    let mut dir = rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| WorkspaceError::Io {
        what: "open the workspace",
        path: crate::display_bytes(std::os::unix::ffi::OsStrExt::as_bytes(root.as_os_str())),
        source: e.into(),
    })?;
    let mut at: Option<RelPath> = None;
    for comp in sub.components() {
        let here = match &at {
            None => RelPath::single(comp)?,
            Some(p) => p.join(comp)?,
        };
        let name = Path::new(std::ffi::OsStr::from_bytes_compat(comp));
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW;
        let next = match open(&dir, name, flags, Mode::empty()) {
            Err(Errno::NOENT) => {
                match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o777)) {
                    // Made by someone else meanwhile: opened (and checked) below all the same.
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(error("make directory", &here, e)),
                }
                open(&dir, name, flags, Mode::empty())
            }
            // `O_DIRECTORY` on a final link says "not a directory": say which it is.
            Err(Errno::NOTDIR) => {
                match rustix::fs::statat(&dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st)
                        if rustix::fs::FileType::from_raw_mode(st.st_mode)
                            == rustix::fs::FileType::Symlink =>
                    {
                        Err(Errno::LOOP)
                    }
                    _ => Err(Errno::NOTDIR),
                }
            }
            other => other,
        };
        dir = next.map_err(|e| error("open directory", &here, e))?;
        at = Some(here);
    }
    Ok(dir)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_subdir_is_made_beneath_the_root_and_never_through_a_link() {
        let t = tempfile::tempdir().unwrap();
        let ws = t.path().join("ws");
        let outside = t.path().join("outside");
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        std::fs::create_dir(&outside).unwrap();
        symlink(".git", ws.join("reports")).unwrap();
        symlink(&outside, ws.join("data")).unwrap();
        std::fs::create_dir(ws.join("real")).unwrap();
        symlink("../.git", ws.join("real/up")).unwrap();
        std::fs::write(ws.join("file"), "x").unwrap();

        let fd = open_subdir(&ws, &RelPath::new("part/one").unwrap()).unwrap();
        assert!(ws.join("part/one").is_dir());
        let st = rustix::fs::fstat(&fd).unwrap();
        let meta =
            std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(ws.join("part/one")).unwrap());
        assert_eq!(st.st_ino, meta);

        for (sub, made) in [
            ("reports", None),
            ("reports/x", Some(ws.join(".git/x"))),
            ("data/x/y", Some(outside.join("x"))),
            ("real/up/hooks", None),
        ] {
            let e = open_subdir(&ws, &RelPath::new(sub).unwrap()).unwrap_err();
            assert!(
                matches!(e, WorkspaceError::ThroughLink { .. }),
                "{sub}: {e}"
            );
            if let Some(m) = made {
                assert!(!m.exists(), "{sub} made {}", m.display());
            }
        }
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        let e = open_subdir(&ws, &RelPath::new("file/x").unwrap()).unwrap_err();
        assert!(matches!(e, WorkspaceError::Io { .. }), "{e}");
    }
}
