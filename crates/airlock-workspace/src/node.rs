//! What one path is (a file with its hash, a directory, a link, something else) and the
//! descriptor-relative system calls that read it. Everything here works on directory
//! descriptors with `O_NOFOLLOW`, so a link is read as a link and never followed.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::rel_path::{de_bytes, ser_bytes};

/// Permission bits a commit keeps: set-user-ID, set-group-ID and sticky are stripped.
pub const KEPT_MODE_BITS: u32 = 0o777;

/// The state of one path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Node {
    /// A regular file.
    File {
        /// Size in bytes.
        size: u64,
        /// SHA-256 of the content, lower-case hex.
        sha256: String,
        /// Permission bits (`0o7777` at most; after a commit `0o777` at most).
        mode: u32,
    },
    /// A directory.
    Dir {
        /// Permission bits.
        mode: u32,
    },
    /// A symbolic link.
    Symlink {
        /// The target, raw bytes.
        #[serde(serialize_with = "ser_bytes", deserialize_with = "de_bytes")]
        target: Vec<u8>,
    },
    /// A FIFO, socket or device node already in the workspace: it can be deleted, but a
    /// checkpoint cannot hold it, so an undo cannot bring it back.
    Special {
        /// Which kind.
        what: SpecialKind,
    },
}

/// Kinds of file a commit never carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpecialKind {
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// A FIFO.
    Fifo,
    /// A UNIX socket.
    Socket,
}

impl SpecialKind {
    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            SpecialKind::CharDevice => "character device",
            SpecialKind::BlockDevice => "block device",
            SpecialKind::Fifo => "FIFO",
            SpecialKind::Socket => "socket",
        }
    }
}

impl Node {
    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        matches!(self, Node::Dir { .. })
    }

    /// Whether both are the same kind of thing (what decides remove-then-create).
    pub fn same_type(&self, other: &Node) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }

    /// The permission bits, for files and directories.
    pub fn mode(&self) -> Option<u32> {
        match self {
            Node::File { mode, .. } | Node::Dir { mode } => Some(*mode),
            _ => None,
        }
    }

    /// Same content (and target), whatever the mode.
    pub fn same_content(&self, other: &Node) -> bool {
        match (self, other) {
            (Node::File { sha256: a, .. }, Node::File { sha256: b, .. }) => a == b,
            (Node::Dir { .. }, Node::Dir { .. }) => true,
            (Node::Symlink { target: a }, Node::Symlink { target: b }) => a == b,
            (Node::Special { what: a }, Node::Special { what: b }) => a == b,
            _ => false,
        }
    }

    /// Equal for the purpose of "is this still what we recorded": content, and the
    /// permission bits of files (a directory's mode is not compared: listing or adding an
    /// entry does not change it, and `chmod` on a directory loses no data).
    pub fn matches(&self, other: &Node) -> bool {
        match (self, other) {
            (Node::File { mode: a, .. }, Node::File { mode: b, .. }) => {
                self.same_content(other) && (a & KEPT_MODE_BITS) == (b & KEPT_MODE_BITS)
            }
            _ => self.same_content(other),
        }
    }

    /// Bytes of content.
    pub fn size(&self) -> u64 {
        match self {
            Node::File { size, .. } => *size,
            _ => 0,
        }
    }

    /// One line describing it (escaped).
    pub fn describe(&self) -> String {
        match self {
            Node::File { size, sha256, mode } => {
                format!(
                    "file, {size} bytes, mode {mode:o}, sha256 {}",
                    &sha256[..16.min(sha256.len())]
                )
            }
            Node::Dir { mode } => format!("directory, mode {mode:o}"),
            Node::Symlink { target } => {
                format!("symlink -> {}", crate::rel_path::display_bytes(target))
            }
            Node::Special { what } => what.name().to_string(),
        }
    }
}

/// How a name in a directory reads, before any content is hashed.
pub(crate) enum Kind {
    File,
    Dir,
    Symlink,
    Special(SpecialKind),
}

pub(crate) fn kind_of(st: &Stat) -> Kind {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => Kind::File,
        FileType::Directory => Kind::Dir,
        FileType::Symlink => Kind::Symlink,
        FileType::Fifo => Kind::Special(SpecialKind::Fifo),
        FileType::Socket => Kind::Special(SpecialKind::Socket),
        FileType::CharacterDevice => Kind::Special(SpecialKind::CharDevice),
        _ => Kind::Special(SpecialKind::BlockDevice),
    }
}

/// `lstat` of `name` in `dir`; `None` when it does not exist.
pub(crate) fn lstat_at(dir: impl AsFd, name: &Path) -> Result<Option<Stat>, Errno> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::NOENT) | Err(Errno::NOTDIR) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Open the directory `name` in `dir`, never through a link.
pub(crate) fn open_dir_at(dir: impl AsFd, name: &Path) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Open the regular file `name` in `dir` for reading: never through a link, never blocking
/// (a FIFO swapped in would otherwise hang the host), and checked to be a regular file on
/// the descriptor.
pub(crate) fn open_file_at(dir: impl AsFd, name: &Path) -> Result<(File, Stat), Errno> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(Errno::INVAL);
    }
    Ok((File::from(fd), st))
}

/// Read a link's target.
pub(crate) fn readlink_at(dir: impl AsFd, name: &Path) -> Result<Vec<u8>, Errno> {
    Ok(rustix::fs::readlinkat(dir, name, Vec::new())?.into_bytes())
}

/// SHA-256 and length of everything `r` yields.
pub(crate) fn hash_reader(mut r: impl Read) -> std::io::Result<(String, u64)> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut n = 0u64;
    loop {
        let got = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(got) => got,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        h.update(&buf[..got]);
        n += got as u64;
    }
    Ok((hex::encode(h.finalize()), n))
}

/// SHA-256 of bytes, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The node `name` in `dir` is, hashing a regular file's content; `None` when absent.
pub(crate) fn node_at(dir: impl AsFd, name: &Path) -> Result<Option<(Node, Stat)>, Errno> {
    let dir = dir.as_fd();
    let Some(st) = lstat_at(dir, name)? else {
        return Ok(None);
    };
    let node = match kind_of(&st) {
        Kind::File => {
            let (file, fst) = open_file_at(dir, name)?;
            let (sha256, size) =
                hash_reader(file).map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))?;
            return Ok(Some((
                Node::File {
                    size,
                    sha256,
                    mode: fst.st_mode & 0o7777,
                },
                fst,
            )));
        }
        Kind::Dir => Node::Dir {
            mode: st.st_mode & 0o7777,
        },
        Kind::Symlink => Node::Symlink {
            target: readlink_at(dir, name)?,
        },
        Kind::Special(what) => Node::Special { what },
    };
    Ok(Some((node, st)))
}

/// The names in a directory, without `.` and `..`, sorted.
pub(crate) fn list_dir(dir: impl AsFd) -> Result<Vec<Vec<u8>>, Errno> {
    let dup = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut out = Vec::new();
    for entry in rustix::fs::Dir::new(dup)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        out.push(name.to_vec());
    }
    out.sort();
    Ok(out)
}
