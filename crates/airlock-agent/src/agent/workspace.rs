//! The built-in file tools, confined to one session workspace.
//!
//! Every path is resolved by the kernel with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`
//! relative to a directory descriptor of the workspace root: `..` cannot climb out, an
//! absolute path or a symlink that points outside fails with `EXDEV`, and `/proc` magic links
//! are refused. There is no fallback path walk: on a kernel without `openat2` the tools
//! refuse to run.
//!
//! What a sandboxed command left in the workspace is read as it is, never followed out of
//! it: besides links that leave the root, a file with other hard links is neither read nor
//! written (another name of it may lie outside the workspace), and only regular files are
//! read, opened without blocking (a FIFO the command made would otherwise hang the host).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use airlock_core::action::FsWriteAction;
use airlock_core::Authorized;

use super::tools::{content_hash, ListDir, ReadFile};

/// Largest file `read_file` returns; longer files are cut with a note.
pub const MAX_READ_BYTES: usize = 256 * 1024;
/// Largest content `write_file`/`edit_file` accept.
pub const MAX_WRITE_BYTES: usize = 4 * 1024 * 1024;
/// Most entries `list_dir` returns.
pub const MAX_LIST_ENTRIES: usize = 1000;

/// Why a file tool refused or failed. The text goes back to the model as a tool error.
#[derive(Debug, thiserror::Error)]
pub enum FileToolError {
    #[error("`{path}` is outside the session workspace\nhelp: use a path relative to the workspace root")]
    Outside { path: String },
    #[error(
        "`{path}` resolves through a link that leaves the workspace; file tools never follow it"
    )]
    LinkOut { path: String },
    #[error("`{path}` is a symbolic link; file tools do not write through links\nhelp: write to the file the link points to")]
    LinkWrite { path: String },
    #[error("`{path}` has other hard links, which may lie outside the workspace; file tools do not write through it\nhelp: remove the extra links or write a new file")]
    HardLink { path: String },
    #[error("`{path}` has other hard links, which may lie outside the workspace; file tools do not read through it\nhelp: read it with the shell, inside the sandbox")]
    HardLinkRead { path: String },
    #[error("`{path}` is or passes through a symbolic link; a file sent with a message must be named by its own path, so that what the Gate judges (its name) is what is sent\nhelp: send the file the link points to, by its own path")]
    LinkAttachment { path: String },
    #[error("`{path}` is not a regular file; file tools read and write only regular files\nhelp: inspect it with the shell, inside the sandbox")]
    NotRegular { path: String },
    #[error("`{path}`: {what}: {source}")]
    Io {
        path: String,
        what: &'static str,
        source: std::io::Error,
    },
    #[error("content is {size} bytes, over the {limit}-byte limit for file writes\nhelp: write the file in smaller parts")]
    TooLarge { size: usize, limit: usize },
    #[error("the content does not match the approved hash {expected} (got {actual}); nothing was written")]
    HashMismatch { expected: String, actual: String },
    #[error("this kernel has no openat2(2), so the file tools cannot resolve paths safely and refuse to run\nhelp: use Linux 5.6 or newer")]
    Openat2Unavailable,
    #[error("`old_text` was not found in `{path}`\nhelp: read the file again and quote the exact text to replace")]
    EditNotFound { path: String },
    #[error("`old_text` occurs {count} times in `{path}`\nhelp: include more surrounding text so it matches exactly once")]
    EditAmbiguous { path: String, count: usize },
}

/// The file tools of one workspace, holding a descriptor of its root.
#[derive(Debug)]
pub struct WorkspaceFiles {
    root: OwnedFd,
    root_path: PathBuf,
}

/// Whether a read follows symbolic links that stay beneath the workspace's root.
#[derive(Debug, Clone, Copy)]
enum Links {
    /// Followed while they stay beneath the root (the file tools' reads).
    FollowedBeneath,
    /// Refused, wherever they point (what is sent with a message).
    Refused,
}

impl WorkspaceFiles {
    /// Open the workspace root (which must be an existing directory).
    pub fn open(root: &Path) -> Result<WorkspaceFiles, FileToolError> {
        let fd = rustix::fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| FileToolError::Io {
            path: root.display().to_string(),
            what: "open workspace",
            source: e.into(),
        })?;
        Ok(WorkspaceFiles {
            root: fd,
            root_path: root.to_path_buf(),
        })
    }

    /// The workspace root this handle confines to.
    pub fn root(&self) -> &Path {
        &self.root_path
    }

    /// Read a file (at most [`MAX_READ_BYTES`]; longer files are cut with a note).
    pub fn read_file(&self, auth: &Authorized<ReadFile>) -> Result<String, FileToolError> {
        let path = &auth.action().0.path;
        let (text, truncated) = self.read_capped(path, MAX_READ_BYTES)?;
        if truncated {
            Ok(format!(
                "{text}\n[file cut at {MAX_READ_BYTES} bytes; read a smaller part with the shell]"
            ))
        } else {
            Ok(text)
        }
    }

    /// Current content of a file for an edit or a diff preview; `None` when it does not
    /// exist. Reads up to [`MAX_WRITE_BYTES`]. Used before the Gate decides, only to
    /// compute the proposed content; nothing read here reaches the model.
    pub fn current_content(&self, path: &str) -> Result<Option<String>, FileToolError> {
        match self.read_capped(path, MAX_WRITE_BYTES) {
            Ok((text, _)) => Ok(Some(text)),
            Err(FileToolError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Write `content` as the authorized write, after checking it is exactly the content
    /// whose hash the Gate (and any approver) saw.
    pub fn write_file(
        &self,
        auth: &Authorized<FsWriteAction>,
        content: &[u8],
    ) -> Result<String, FileToolError> {
        let action = auth.action();
        if content.len() > MAX_WRITE_BYTES {
            return Err(FileToolError::TooLarge {
                size: content.len(),
                limit: MAX_WRITE_BYTES,
            });
        }
        let actual = content_hash(content);
        let expected = action.content_sha256.clone().unwrap_or_default();
        if actual != expected {
            return Err(FileToolError::HashMismatch { expected, actual });
        }
        let fd = self.open_beneath(
            &action.path,
            // Non-blocking: opening a FIFO for writing would otherwise wait for a reader.
            OFlags::WRONLY
                | OFlags::CREATE
                | OFlags::CLOEXEC
                | OFlags::NOFOLLOW
                | OFlags::NONBLOCK
                | OFlags::NOCTTY,
            Mode::from_raw_mode(0o644),
        )?;
        // A hard link may share its inode with a file outside the workspace; writing
        // through it would change that file. Checked before truncating anything.
        let stat = rustix::fs::fstat(&fd).map_err(|e| io_err(&action.path, "inspect", e))?;
        if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(FileToolError::NotRegular {
                path: action.path.clone(),
            });
        }
        if stat.st_nlink > 1 {
            return Err(FileToolError::HardLink {
                path: action.path.clone(),
            });
        }
        let mut file = File::from(fd);
        file.set_len(0)
            .and_then(|_| file.write_all(content))
            .and_then(|_| file.sync_data())
            .map_err(|e| FileToolError::Io {
                path: action.path.clone(),
                what: "write",
                source: e,
            })?;
        Ok(format!("wrote {} bytes to {}", content.len(), action.path))
    }

    /// List a directory: one entry per line, directories with a trailing `/`.
    pub fn list_dir(&self, auth: &Authorized<ListDir>) -> Result<String, FileToolError> {
        let path = &auth.action().0.path;
        let fd = self.open_beneath(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let dir = rustix::fs::Dir::new(fd).map_err(|e| io_err(path, "list", e))?;
        let mut names = Vec::new();
        for entry in dir {
            let entry = entry.map_err(|e| io_err(path, "list", e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == "." || name == ".." {
                continue;
            }
            let suffix = if entry.file_type() == rustix::fs::FileType::Directory {
                "/"
            } else {
                ""
            };
            names.push(format!("{name}{suffix}"));
        }
        names.sort();
        let total = names.len();
        names.truncate(MAX_LIST_ENTRIES);
        let mut out = names.join("\n");
        if total > MAX_LIST_ENTRIES {
            out.push_str(&format!(
                "\n[{} more entries not shown]",
                total - MAX_LIST_ENTRIES
            ));
        }
        Ok(out)
    }

    /// The bytes of a file to send with a message: a regular file beneath the root, with
    /// one link, of at most `limit` bytes (a longer one is refused, never cut: what is
    /// sent must be the whole file whose hash was decided on).
    ///
    /// No symbolic link is followed, not even one inside the workspace: the Gate judges an
    /// attachment by its path (a credentials file is never sent through a chat), so a link
    /// named `notes.txt` must not send the `.env` it points to.
    pub fn attachment_bytes(&self, path: &str, limit: usize) -> Result<Vec<u8>, FileToolError> {
        let (buf, truncated) = self.read_bytes_capped(path, limit, Links::Refused)?;
        if truncated {
            return Err(FileToolError::TooLarge {
                size: limit + 1,
                limit,
            });
        }
        Ok(buf)
    }

    fn read_capped(&self, path: &str, cap: usize) -> Result<(String, bool), FileToolError> {
        let (buf, truncated) = self.read_bytes_capped(path, cap, Links::FollowedBeneath)?;
        Ok((String::from_utf8_lossy(&buf).into_owned(), truncated))
    }

    fn read_bytes_capped(
        &self,
        path: &str,
        cap: usize,
        links: Links,
    ) -> Result<(Vec<u8>, bool), FileToolError> {
        // Non-blocking: opening a FIFO for reading would otherwise wait for a writer.
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY;
        let fd = self.open_beneath_with(path, flags, Mode::empty(), links)?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| io_err(path, "inspect", e))?;
        if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(FileToolError::NotRegular {
                path: path.to_string(),
            });
        }
        if stat.st_nlink > 1 {
            return Err(FileToolError::HardLinkRead {
                path: path.to_string(),
            });
        }
        let file = File::from(fd);
        let mut buf = Vec::new();
        file.take(cap as u64 + 1)
            .read_to_end(&mut buf)
            .map_err(|e| FileToolError::Io {
                path: path.to_string(),
                what: "read",
                source: e,
            })?;
        let truncated = buf.len() > cap;
        buf.truncate(cap);
        Ok((buf, truncated))
    }

    /// Resolve `path` beneath the root with the kernel's help. Never walks paths itself.
    fn open_beneath(
        &self,
        path: &str,
        flags: OFlags,
        mode: Mode,
    ) -> Result<OwnedFd, FileToolError> {
        self.open_beneath_with(path, flags, mode, Links::FollowedBeneath)
    }

    /// [`Self::open_beneath`], following links beneath the root or refusing every one.
    fn open_beneath_with(
        &self,
        path: &str,
        flags: OFlags,
        mode: Mode,
        links: Links,
    ) -> Result<OwnedFd, FileToolError> {
        let rel = self.relative(path)?;
        let resolve = match links {
            Links::FollowedBeneath => ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
            Links::Refused => {
                ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS | ResolveFlags::NO_SYMLINKS
            }
        };
        rustix::fs::openat2(&self.root, rel.as_path(), flags, mode, resolve).map_err(|e| match e {
            Errno::NOSYS => FileToolError::Openat2Unavailable,
            Errno::XDEV => FileToolError::LinkOut {
                path: path.to_string(),
            },
            Errno::LOOP if matches!(links, Links::Refused) => FileToolError::LinkAttachment {
                path: path.to_string(),
            },
            Errno::LOOP if flags.contains(OFlags::NOFOLLOW) => FileToolError::LinkWrite {
                path: path.to_string(),
            },
            Errno::LOOP => FileToolError::LinkOut {
                path: path.to_string(),
            },
            other => io_err(path, "open", other),
        })
    }

    /// A workspace-relative path: an absolute path is accepted only inside the root.
    fn relative(&self, path: &str) -> Result<PathBuf, FileToolError> {
        let p = Path::new(path);
        let rel = if p.is_absolute() {
            p.strip_prefix(&self.root_path)
                .map_err(|_| FileToolError::Outside {
                    path: path.to_string(),
                })?
                .to_path_buf()
        } else {
            p.to_path_buf()
        };
        if rel.components().any(|c| matches!(c, Component::RootDir)) {
            return Err(FileToolError::Outside {
                path: path.to_string(),
            });
        }
        if rel.as_os_str().is_empty() {
            return Ok(PathBuf::from("."));
        }
        Ok(rel)
    }
}

fn io_err(path: &str, what: &'static str, e: Errno) -> FileToolError {
    FileToolError::Io {
        path: path.to_string(),
        what,
        source: e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Gate judges an attachment by its path: a link with a harmless name must not
    /// send the credentials file it points to, even one inside the workspace, nor a file
    /// reached through a linked directory.
    #[test]
    fn an_attachment_is_never_read_through_a_symbolic_link() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join(".env"), "API_KEY=sk-live-1").unwrap();
        std::os::unix::fs::symlink(".env", ws.path().join("notes.txt")).unwrap();
        std::fs::create_dir(ws.path().join("private")).unwrap();
        std::fs::write(ws.path().join("private/keys"), "k").unwrap();
        std::os::unix::fs::symlink("private", ws.path().join("docs")).unwrap();
        let files = WorkspaceFiles::open(ws.path()).unwrap();
        for linked in ["notes.txt", "docs/keys"] {
            let e = files.attachment_bytes(linked, 1024).unwrap_err();
            assert!(
                matches!(e, FileToolError::LinkAttachment { .. }),
                "{linked}: {e}"
            );
            assert!(e.to_string().contains("symbolic link"), "{e}");
        }
        assert_eq!(
            files.attachment_bytes(".env", 1024).unwrap(),
            b"API_KEY=sk-live-1"
        );
        // The file tools' reads still follow a link that stays inside.
        assert_eq!(
            files.read_capped("notes.txt", 1024).unwrap().0,
            "API_KEY=sk-live-1"
        );
    }
}
