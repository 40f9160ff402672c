//! Small file helpers for operator-owned files in the config directory.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Write `bytes` to `path` atomically (temp file in the same directory, fsync, rename),
/// with mode 0600, so a crash never leaves a half-written rules or secrets file.
pub(crate) fn write_private_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic(path, bytes, 0o600)
}

/// Write `bytes` to `path` atomically with `mode`. The temporary name is unique per
/// process and call, so concurrent writers (runs starting together) never share one.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let seq = NEXT.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.tmp.{}.{seq}", std::process::id()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        // The umask may have narrowed the mode at creation.
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Create `path` exclusively with mode 0600 and write `bytes`; fails if it exists.
pub(crate) fn create_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// An exclusive lock on an operator file, held across a whole read-modify-write so two
/// commands editing the same file at once cannot lose each other's change (thirty
/// parallel `airlock net allow` once left one rule, and a revoked rule came back).
///
/// `flock(2)` on `<file>.lock` beside the file, not on the file itself: the file is
/// replaced by rename on every write, so a lock on its inode would guard a file that no
/// longer has the name. The kernel releases the lock when the holder exits, even on a
/// crash, so a dead editor never wedges the next one. Dropping the guard unlocks.
#[derive(Debug)]
pub struct FileLock {
    _file: std::fs::File,
}

impl FileLock {
    /// Block until this process holds the exclusive lock for `target`.
    pub fn acquire(target: &Path) -> std::io::Result<FileLock> {
        let dir = target.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let name = target
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("file");
        let path = dir.join(format!("{name}.lock"));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)?;
        loop {
            // `File::lock` is flock(2) LOCK_EX on Linux.
            match file.lock() {
                Ok(()) => return Ok(FileLock { _file: file }),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}
