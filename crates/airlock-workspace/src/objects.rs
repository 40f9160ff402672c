//! The content-addressed object store of a workspace's checkpoints: each file content once,
//! named by its SHA-256 (`objects/ab/cdef…`), written to a temporary name, fsynced and
//! renamed into place, and checked against its name whenever it is read back.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::WorkspaceError;

/// The object directory of one workspace's state.
#[derive(Debug, Clone)]
pub(crate) struct Objects {
    dir: PathBuf,
}

impl Objects {
    pub(crate) fn new(dir: PathBuf) -> Objects {
        Objects { dir }
    }

    pub(crate) fn path_of(&self, sha256: &str) -> Result<PathBuf, WorkspaceError> {
        if sha256.len() != 64
            || !sha256
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        {
            return Err(WorkspaceError::corrupt(
                &self.dir,
                format!("`{sha256}` is not a SHA-256 name"),
            ));
        }
        Ok(self.dir.join(&sha256[..2]).join(&sha256[2..]))
    }

    pub(crate) fn contains(&self, sha256: &str) -> bool {
        self.path_of(sha256).map(|p| p.is_file()).unwrap_or(false)
    }

    /// Store everything `src` yields and check it hashes to `expected`; `Ok(false)` (and
    /// nothing stored) when it does not.
    pub(crate) fn put(&self, mut src: impl Read, expected: &str) -> Result<bool, WorkspaceError> {
        let dest = self.path_of(expected)?;
        if dest.is_file() {
            // Already stored; the content behind `src` is still checked, since the caller
            // relies on it matching.
            let (got, _) = crate::node::hash_reader(&mut src)
                .map_err(|e| WorkspaceError::io("read", &dest, e))?;
            return Ok(got == expected);
        }
        let shard = dest.parent().unwrap_or(&self.dir).to_path_buf();
        std::fs::create_dir_all(&shard).map_err(|e| WorkspaceError::io("create", &shard, e))?;
        // Unique among processes and among threads of one (a host commits for many runs).
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = shard.join(format!(
            ".tmp-{}-{n}-{}",
            std::process::id(),
            &expected[2..10]
        ));
        let mut f = File::options()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(|e| WorkspaceError::io("create", &tmp, e))?;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match src.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(WorkspaceError::io("read for checkpoint", &tmp, e));
                }
            };
            h.update(&buf[..n]);
            f.write_all(&buf[..n])
                .map_err(|e| WorkspaceError::io("write", &tmp, e))?;
        }
        if hex::encode(h.finalize()) != expected {
            let _ = std::fs::remove_file(&tmp);
            return Ok(false);
        }
        f.sync_all()
            .map_err(|e| WorkspaceError::io("fsync", &tmp, e))?;
        drop(f);
        std::fs::rename(&tmp, &dest).map_err(|e| WorkspaceError::io("rename", &dest, e))?;
        sync_dir(&shard)?;
        sync_dir(&self.dir)?;
        Ok(true)
    }

    /// The stored content, checked against its name.
    pub(crate) fn get(&self, sha256: &str) -> Result<Vec<u8>, WorkspaceError> {
        let p = self.path_of(sha256)?;
        let bytes = std::fs::read(&p).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                WorkspaceError::corrupt(&p, "a checkpointed file content is missing")
            } else {
                WorkspaceError::io("read", &p, e)
            }
        })?;
        if crate::node::sha256_hex(&bytes) != sha256 {
            return Err(WorkspaceError::corrupt(
                &p,
                "a checkpointed file content does not match its hash",
            ));
        }
        Ok(bytes)
    }

    /// Size of a stored object (0 when absent).
    pub(crate) fn size(&self, sha256: &str) -> u64 {
        self.path_of(sha256)
            .ok()
            .and_then(|p| std::fs::metadata(p).ok())
            .map_or(0, |m| m.len())
    }

    /// Remove every object not in `keep`.
    pub(crate) fn retain(
        &self,
        keep: &std::collections::HashSet<String>,
    ) -> Result<(), WorkspaceError> {
        let Ok(shards) = std::fs::read_dir(&self.dir) else {
            return Ok(());
        };
        for shard in shards.flatten() {
            let Ok(files) = std::fs::read_dir(shard.path()) else {
                continue;
            };
            let prefix = shard.file_name().to_string_lossy().into_owned();
            for f in files.flatten() {
                let name = format!("{prefix}{}", f.file_name().to_string_lossy());
                if !keep.contains(&name) {
                    let _ = std::fs::remove_file(f.path());
                }
            }
        }
        Ok(())
    }
}

/// fsync a directory, so a rename or creation in it is durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), WorkspaceError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| WorkspaceError::io("fsync", dir, e))
}
