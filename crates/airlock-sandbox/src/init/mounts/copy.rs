//! [`MountStep::Copy`](crate::mount_plan::MountStep::Copy): read a small host file through
//! the host root and write it into the sandbox's root tmpfs.
//!
//! Runs in `airlock-sandbox-init` as the sandbox uid inside its user namespace, whose only
//! mapped ids are the sandbox's own: the capabilities it holds there do not override the
//! permissions of host files owned by anyone else, so it reads exactly what the sandbox uid
//! may read. (A file owned by the sandbox uid itself is readable through them even without
//! a read bit, but its owner could grant itself that bit anyway.)

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use super::super::sys;

/// Why a copy could not be made.
#[derive(Debug)]
pub enum CopyError {
    /// The source is not a regular file (any more): a FIFO, a device, a socket or a
    /// directory. Nothing was read from it.
    NotRegular(&'static str),
    /// The source is longer than the plan allows.
    TooLong {
        max_len: u64,
    },
    Io(io::Error),
}

impl std::fmt::Display for CopyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CopyError::NotRegular(kind) => write!(
                f,
                "the plan copies a regular file but the host now has a {kind} there; nothing was read\nhelp: restore the regular file, or restart airlock so the plan binds what is there now"
            ),
            CopyError::TooLong { max_len } => write!(
                f,
                "the file has grown past the {max_len} bytes a copy may have\nhelp: restart airlock so the plan binds the file instead of copying it"
            ),
            CopyError::Io(e) => e.fmt(f),
        }
    }
}

fn kind_name(ft: std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "directory"
    } else if ft.is_fifo() {
        "FIFO"
    } else if ft.is_char_device() {
        "character device"
    } else if ft.is_block_device() {
        "block device"
    } else if ft.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

/// A host file the sandbox uid opened and `fstat` showed to be a regular file of at most
/// the plan's `max_len` bytes.
#[derive(Debug)]
pub struct HostFile {
    file: std::fs::File,
    max_len: u64,
}

/// Open `source` resolved inside the host root `host_root`, or `None` when the sandbox uid
/// may not read it or it no longer exists (the entry is then left out).
///
/// Resolution is the read-only binds' (`RESOLVE_IN_ROOT`: absolute symlinks and `..` stay
/// in the host root), with magic links refused as well. The open never blocks (`O_NONBLOCK`
/// returns at once on a FIFO) and takes no controlling terminal (`O_NOCTTY`); nothing is
/// read unless `fstat` shows a regular file.
pub fn open_host_file(
    host_root: &OwnedFd,
    source: &Path,
    max_len: u64,
) -> Result<Option<HostFile>, CopyError> {
    let rel = source.strip_prefix("/").unwrap_or(source);
    let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY;
    let resolve = sys::RESOLVE_IN_ROOT | sys::RESOLVE_NO_MAGICLINKS;
    let fd = match sys::openat2(host_root.as_raw_fd(), rel, flags, resolve) {
        Ok(fd) => fd,
        Err(e) if is_left_out(&e) => return Ok(None),
        Err(e) => return Err(CopyError::Io(e)),
    };
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(CopyError::Io)?;
    if !meta.file_type().is_file() {
        return Err(CopyError::NotRegular(kind_name(meta.file_type())));
    }
    if meta.len() > max_len {
        return Err(CopyError::TooLong { max_len });
    }
    Ok(Some(HostFile { file, max_len }))
}

/// Errors after which the entry is left out rather than the run refused: the sandbox uid
/// may not read the file (or search a directory on its way), or it is gone.
fn is_left_out(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EACCES | libc::EPERM | libc::ENOENT | libc::ENOTDIR)
    )
}

impl HostFile {
    /// Copy the file into a new file `dst` (`dst` does not exist) with exactly `mode`,
    /// reading at most one byte past `max_len` (the file may have grown since `fstat`).
    /// `umask` is the process's, so that `mode` is set again only when it took bits away.
    ///
    /// The bytes move inside the kernel (`sendfile` from the host file to the tmpfs file):
    /// a copy costs a handful of system calls, and each one counts on a path run before
    /// every command.
    pub fn copy_to(&self, dst: &Path, mode: u32, umask: u32) -> Result<(), CopyError> {
        let out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(mode)
            .open(dst)
            .map_err(CopyError::Io)?;
        let limit = self.max_len + 1;
        let mut copied = 0u64;
        while copied < limit {
            let want = usize::try_from(limit - copied).unwrap_or(usize::MAX);
            match nix::sys::sendfile::sendfile(&out, &self.file, None, want) {
                Ok(0) => break,
                Ok(n) => copied += n as u64,
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(CopyError::Io(e.into())),
            }
        }
        if copied > self.max_len {
            return Err(CopyError::TooLong {
                max_len: self.max_len,
            });
        }
        if mode & umask != 0 {
            // The umask kept bits out of `mode` (it never adds any): set it exactly.
            out.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
                .map_err(CopyError::Io)?;
        }
        Ok(())
    }
}

/// The process's file mode creation mask (reading it means setting it, so it is set back).
pub fn current_umask() -> u32 {
    use nix::sys::stat::{umask, Mode};
    let mask = umask(Mode::from_bits_truncate(0o022));
    umask(mask);
    mask.bits()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn open_root(path: &Path) -> OwnedFd {
        sys::openat2(libc::AT_FDCWD, path, libc::O_PATH | libc::O_DIRECTORY, 0).unwrap()
    }

    /// Open `source` under `host_root` and copy it as the helper does; the copy's bytes.
    fn read_host_file(
        host_root: &OwnedFd,
        source: &Path,
        max_len: u64,
    ) -> Result<Option<Vec<u8>>, CopyError> {
        let Some(file) = open_host_file(host_root, source, max_len)? else {
            return Ok(None);
        };
        let dir = tempfile::tempdir().unwrap();
        let dst = dir.path().join("copy");
        file.copy_to(&dst, 0o444, current_umask())?;
        Ok(Some(std::fs::read(dst).unwrap()))
    }

    /// A fake host root with `etc/` and `run/`.
    fn host_root() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("etc")).unwrap();
        std::fs::create_dir_all(dir.path().join("run/resolve")).unwrap();
        dir
    }

    #[test]
    fn absolute_and_dotdot_symlinks_resolve_inside_the_host_root() {
        let root = host_root();
        let inside = b"nameserver 127.0.0.53 # the fake root's file\n";
        std::fs::write(root.path().join("run/resolve/stub.conf"), inside).unwrap();
        // Absolute, as on systemd hosts: must not reach the real /run.
        symlink(
            "/run/resolve/stub.conf",
            root.path().join("etc/resolv.conf"),
        )
        .unwrap();
        // Climbing above the root stops at the root, like `..` at `/`.
        symlink(
            "../../../../../../run/resolve/stub.conf",
            root.path().join("etc/hosts"),
        )
        .unwrap();
        let fd = open_root(root.path());
        for entry in ["/etc/resolv.conf", "/etc/hosts"] {
            let got = read_host_file(&fd, Path::new(entry), 4096).unwrap();
            assert_eq!(got.as_deref(), Some(&inside[..]), "{entry}");
        }
        // A link to a host path the fake root lacks is absent, not the real host's file.
        symlink("/etc/passwd", root.path().join("etc/group")).unwrap();
        assert!(Path::new("/etc/passwd").exists());
        assert!(read_host_file(&fd, Path::new("/etc/group"), 4096)
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let root = host_root();
        let fifo = root.path().join("etc/passwd");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        let fd = open_root(root.path());
        // A blocking open would wait for a writer forever; the test would hang.
        let err = read_host_file(&fd, Path::new("/etc/passwd"), 4096).unwrap_err();
        assert!(matches!(err, CopyError::NotRegular("FIFO")), "{err}");
        assert!(err.to_string().contains("help:"), "{err}");
    }

    #[test]
    fn a_device_is_refused_and_magic_links_are_not_followed() {
        // The real root as host root: /dev/zero is a device that would read forever.
        let fd = open_root(Path::new("/"));
        let err = read_host_file(&fd, Path::new("/dev/zero"), 4096).unwrap_err();
        assert!(
            matches!(err, CopyError::NotRegular("character device")),
            "{err}"
        );
        // /proc/self/exe is a magic link (to this test binary): refused, not read.
        let real = read_host_file(&fd, Path::new("/proc/self/exe"), 1 << 30).unwrap_err();
        assert!(
            matches!(&real, CopyError::Io(e) if e.raw_os_error() == Some(libc::ELOOP)),
            "{real}"
        );
    }

    #[test]
    fn a_file_past_the_cap_is_refused_and_one_at_it_is_read_whole() {
        let root = host_root();
        std::fs::write(root.path().join("etc/services"), vec![b'x'; 100]).unwrap();
        let fd = open_root(root.path());
        let err = read_host_file(&fd, Path::new("/etc/services"), 99).unwrap_err();
        assert!(matches!(err, CopyError::TooLong { max_len: 99 }), "{err}");
        let whole = read_host_file(&fd, Path::new("/etc/services"), 100).unwrap();
        assert_eq!(whole.map(|c| c.len()), Some(100));
    }

    /// Set in the copy of this test binary that runs as the sandbox uid.
    const UNREADABLE_ROOT: &str = "AIRLOCK_TEST_UNREADABLE_HOST_ROOT";

    /// What the sandbox uid sees in a host root holding a 0600 root-owned (or, for an
    /// unprivileged run, 0000) file next to a world-readable one.
    fn check_as_sandbox_uid(root: &Path) {
        let fd = open_root(root);
        let secret = read_host_file(&fd, Path::new("/etc/gshadow"), 4096).unwrap();
        assert_eq!(
            secret, None,
            "the sandbox uid must not get an unreadable file"
        );
        let public = read_host_file(&fd, Path::new("/etc/group"), 4096).unwrap();
        assert_eq!(public.as_deref(), Some(&b"root:x:0:\n"[..]));
    }

    #[test]
    fn a_file_the_sandbox_uid_cannot_read_is_left_out() {
        use std::os::unix::fs::PermissionsExt;
        use std::os::unix::process::CommandExt;
        if let Some(root) = std::env::var_os(UNREADABLE_ROOT) {
            return check_as_sandbox_uid(Path::new(&root));
        }
        let root = host_root();
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode(root.path(), 0o755);
        mode(&root.path().join("etc"), 0o755);
        std::fs::write(root.path().join("etc/group"), "root:x:0:\n").unwrap();
        std::fs::write(root.path().join("etc/gshadow"), "root:*::\n").unwrap();
        if !nix::unistd::geteuid().is_root() {
            mode(&root.path().join("etc/gshadow"), 0o000);
            return check_as_sandbox_uid(root.path());
        }
        // Root reads anything: run this test again as the sandbox uid the helper has.
        mode(&root.path().join("etc/gshadow"), 0o600);
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "init::mounts::copy::tests::a_file_the_sandbox_uid_cannot_read_is_left_out",
                "--nocapture",
            ])
            .env(UNREADABLE_ROOT, root.path())
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn a_file_that_grows_past_the_cap_after_the_check_is_refused() {
        let root = host_root();
        let path = root.path().join("etc/hosts");
        std::fs::write(&path, vec![b'x'; 100]).unwrap();
        let fd = open_root(root.path());
        let file = open_host_file(&fd, Path::new("/etc/hosts"), 100)
            .unwrap()
            .unwrap();
        let mut grow = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        io::Write::write_all(&mut grow, b"more").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let err = file
            .copy_to(&dir.path().join("hosts"), 0o444, current_umask())
            .unwrap_err();
        assert!(matches!(err, CopyError::TooLong { max_len: 100 }), "{err}");
    }

    #[test]
    fn a_copy_is_written_with_exactly_the_mode_and_never_through_a_link() {
        use std::os::unix::fs::PermissionsExt;
        let root = host_root();
        std::fs::write(
            root.path().join("etc/passwd"),
            "root:x:0:0::/root:/bin/sh\n",
        )
        .unwrap();
        let fd = open_root(root.path());
        let file = open_host_file(&fd, Path::new("/etc/passwd"), 4096)
            .unwrap()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let dst = dir.path().join("passwd");
        file.copy_to(&dst, 0o444, current_umask()).unwrap();
        let meta = std::fs::metadata(&dst).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o444);
        assert_eq!(std::fs::read(&dst).unwrap(), b"root:x:0:0::/root:/bin/sh\n");
        let victim = dir.path().join("victim");
        symlink(&victim, dir.path().join("group")).unwrap();
        let err = file
            .copy_to(&dir.path().join("group"), 0o444, current_umask())
            .unwrap_err();
        assert!(
            matches!(&err, CopyError::Io(e) if e.kind() == io::ErrorKind::AlreadyExists),
            "{err}"
        );
        assert!(!victim.exists());
    }
}
