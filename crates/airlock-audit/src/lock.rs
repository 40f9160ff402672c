//! The exclusive lock that serializes appends across threads and processes.
//!
//! `flock(2)` on a dedicated lock file: released by the kernel when the holder exits, even
//! on a crash, so a dead writer never wedges the log.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use rustix::fs::{flock, FlockOperation};
use rustix::io::Errno;

use crate::AuditError;

/// Held while appending; dropping it (closing the file) releases the lock.
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: File,
}

impl DirLock {
    /// Block until this process holds the exclusive lock on `path`.
    pub(crate) fn acquire(path: &Path) -> Result<DirLock, AuditError> {
        // If the lock file is replaced between open and flock, two writers could lock two
        // different inodes. After locking, make sure the path still names what we locked.
        for _ in 0..100 {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(path)
                .map_err(|e| AuditError::io("open lock file", path, e))?;
            loop {
                match flock(&file, FlockOperation::LockExclusive) {
                    Ok(()) => break,
                    Err(Errno::INTR) => continue,
                    Err(e) => return Err(AuditError::io("lock", path, e.into())),
                }
            }
            let held = file
                .metadata()
                .map_err(|e| AuditError::io("inspect lock file", path, e))?;
            match fs::metadata(path) {
                Ok(now) if now.dev() == held.dev() && now.ino() == held.ino() => {
                    return Ok(DirLock { _file: file });
                }
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(AuditError::io("inspect lock file", path, e)),
            }
        }
        Err(AuditError::LockUnstable {
            path: path.to_path_buf(),
        })
    }
}
