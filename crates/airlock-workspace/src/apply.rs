//! The writes of a commit or restore, beneath the workspace's descriptor.
//!
//! Every op is idempotent: it looks at what the path holds now and does nothing when that
//! is already the op's `after`, its work when it is the op's `before` (or, mid-way through
//! a change of kind, nothing), and refuses otherwise. So the same plan runs a commit, and
//! finishes it (or, reversed, rolls it back) after a crash at any point. A file is written
//! to a temporary name in its directory, fsynced and renamed over the old one, so each
//! path is always wholly its old or its new content; links are created the same way.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use sha2::{Digest, Sha256};

use crate::journal::Op;
use crate::node::{self, Node, KEPT_MODE_BITS};
use crate::objects::Objects;
use crate::{beneath, RelPath, WorkspaceError};

/// A path in the workspace holds neither the op's before nor its after.
#[derive(Debug)]
pub(crate) struct Diverged {
    pub path: RelPath,
}

pub(crate) enum ApplyError {
    Diverged(Diverged),
    Other(WorkspaceError),
}

impl From<WorkspaceError> for ApplyError {
    fn from(e: WorkspaceError) -> Self {
        ApplyError::Other(e)
    }
}

/// What `path` holds now, with a regular file's content hashed; `None` when absent.
pub(crate) fn current(root: &OwnedFd, path: &RelPath) -> Result<Option<Node>, WorkspaceError> {
    let (dir, name) = match beneath::open_parent(root, path) {
        Ok(d) => d,
        // A missing (or non-directory) parent: the path does not exist.
        Err(Errno::NOENT) | Err(Errno::NOTDIR) => return Ok(None),
        // A link where a directory should be: nothing at this path is reachable without
        // following it, so it is not what any op recorded.
        Err(Errno::LOOP) | Err(Errno::XDEV) => {
            return Err(WorkspaceError::ThroughLink {
                path: path.display(),
            })
        }
        Err(e) => return Err(beneath::error("open", path, e)),
    };
    node::node_at(&dir, name)
        .map(|n| n.map(|(n, _)| n))
        .map_err(|e| beneath::error("read", path, e))
}

/// Same kind and content, and for files and directories the same kept permission bits.
pub(crate) fn exact(a: &Option<Node>, b: &Option<Node>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(x), Some(y)) => {
            x.matches(y)
                && x.mode().map(|m| m & KEPT_MODE_BITS) == y.mode().map(|m| m & KEPT_MODE_BITS)
        }
        _ => false,
    }
}

/// Same kind and content (modes aside): "this is still the version we recorded".
pub(crate) fn same(a: &Option<Node>, b: &Option<Node>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(x), Some(y)) => x.same_content(y),
        _ => false,
    }
}

/// Removals deepest first, then creations shallowest first.
fn order(ops: &[Op]) -> (Vec<usize>, Vec<usize>) {
    let mut removals: Vec<usize> = (0..ops.len())
        .filter(|&i| match (&ops[i].before, &ops[i].after) {
            (Some(_), None) => true,
            (Some(b), Some(a)) => !b.same_type(a),
            _ => false,
        })
        .collect();
    removals.sort_by_key(|&i| std::cmp::Reverse(ops[i].path.depth()));
    let mut creations: Vec<usize> = (0..ops.len()).filter(|&i| ops[i].after.is_some()).collect();
    creations.sort_by_key(|&i| ops[i].path.depth());
    (removals, creations)
}

/// Number of steps [`apply`] reports.
pub(crate) fn steps(ops: &[Op]) -> usize {
    let (r, c) = order(ops);
    r.len() + c.len()
}

/// Run `ops`; `tag` names the temporary files (`.airlock-tmp-<tag>-<n>`). `step` is called
/// after each step.
pub(crate) fn apply(
    root: &OwnedFd,
    objects: &Objects,
    ops: &[Op],
    tag: &str,
    step: &mut dyn FnMut(),
) -> Result<(), ApplyError> {
    run(root, objects, ops, tag, step, false).map(|_| ())
}

/// Like [`apply`], for rolling back: a path that holds neither version (the owner edited
/// it since) is left as it is and returned, never overwritten, and a directory that
/// still holds something is kept.
pub(crate) fn apply_sparing(
    root: &OwnedFd,
    objects: &Objects,
    ops: &[Op],
    tag: &str,
) -> Result<Vec<RelPath>, ApplyError> {
    run(root, objects, ops, tag, &mut || {}, true)
}

fn run(
    root: &OwnedFd,
    objects: &Objects,
    ops: &[Op],
    tag: &str,
    step: &mut dyn FnMut(),
    sparing: bool,
) -> Result<Vec<RelPath>, ApplyError> {
    let mut spared = Vec::new();
    let (removals, creations) = order(ops);
    let mut touched: BTreeSet<Option<RelPath>> = BTreeSet::new();
    for i in removals {
        let op = &ops[i];
        let cur = current(root, &op.path)?;
        if exact(&cur, &op.after) || cur.is_none() {
            step();
            continue;
        }
        if !same(&cur, &op.before) {
            if sparing {
                spared.push(op.path.clone());
                step();
                continue;
            }
            return Err(ApplyError::Diverged(Diverged {
                path: op.path.clone(),
            }));
        }
        match remove(root, &op.path, cur.as_ref().is_some_and(Node::is_dir)) {
            Err(WorkspaceError::Unrestorable { .. }) if sparing => {
                spared.push(op.path.clone());
                step();
                continue;
            }
            other => other?,
        }
        touched.insert(op.path.parent());
        step();
    }
    for i in creations {
        let op = &ops[i];
        let Some(after) = &op.after else { continue };
        let cur = current(root, &op.path)?;
        if exact(&cur, &op.after) {
            step();
            continue;
        }
        let replaceable = match &cur {
            None => true,
            Some(c) => c.same_type(after) && (same(&cur, &op.before) || c.same_content(after)),
        };
        if !replaceable {
            if sparing {
                spared.push(op.path.clone());
                step();
                continue;
            }
            return Err(ApplyError::Diverged(Diverged {
                path: op.path.clone(),
            }));
        }
        create(
            root,
            objects,
            &op.path,
            after,
            cur.as_ref(),
            &format!(".airlock-tmp-{tag}-{i}"),
        )?;
        touched.insert(op.path.parent());
        if after.is_dir() {
            touched.insert(Some(op.path.clone()));
        }
        step();
    }
    for dir in touched {
        if let Ok(fd) = beneath::open_dir(root, dir.as_ref()) {
            let _ = rustix::fs::fsync(&fd);
        }
    }
    Ok(spared)
}

/// Remove the temporary files a crash may have left for `ops` under `tag`.
pub(crate) fn clean_temps(root: &OwnedFd, ops: &[Op], tag: &str) {
    for (i, op) in ops.iter().enumerate() {
        if let Ok((dir, _)) = beneath::open_parent(root, &op.path) {
            let _ = rustix::fs::unlinkat(
                &dir,
                format!(".airlock-tmp-{tag}-{i}").as_str(),
                AtFlags::empty(),
            );
        }
    }
}

fn remove(root: &OwnedFd, path: &RelPath, is_dir: bool) -> Result<(), WorkspaceError> {
    let (dir, name) =
        beneath::open_parent(root, path).map_err(|e| beneath::error("open", path, e))?;
    let flags = if is_dir {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    match rustix::fs::unlinkat(&dir, name, flags) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(Errno::NOTEMPTY) | Err(Errno::EXIST) => Err(WorkspaceError::Unrestorable {
            path: path.display(),
            why: "the directory holds files this change does not cover (made outside Airlock)",
        }),
        Err(e) => Err(beneath::error("remove", path, e)),
    }
}

fn create(
    root: &OwnedFd,
    objects: &Objects,
    path: &RelPath,
    after: &Node,
    cur: Option<&Node>,
    tmp: &str,
) -> Result<(), WorkspaceError> {
    let (dir, name) =
        beneath::open_parent(root, path).map_err(|e| beneath::error("open", path, e))?;
    let tmp = Path::new(tmp);
    let owner = owner_to_keep(&dir, name);
    let chown_failed = |e| beneath::error("chown", path, e);
    match after {
        Node::Dir { mode } => {
            let mode = Mode::from_raw_mode(mode & KEPT_MODE_BITS);
            if cur.is_none() {
                match rustix::fs::mkdirat(&dir, name, mode) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(beneath::error("create directory", path, e)),
                }
            }
            let fd = node::open_dir_at(&dir, name).map_err(|e| beneath::error("open", path, e))?;
            if let Some((uid, gid)) = owner {
                rustix::fs::fchown(&fd, Some(uid), Some(gid)).map_err(chown_failed)?;
            }
            // mkdir applies the umask; the mode recorded is the mode wanted.
            rustix::fs::fchmod(&fd, mode).map_err(|e| beneath::error("chmod", path, e))?;
            rustix::fs::fsync(&fd).map_err(|e| beneath::error("fsync", path, e))?;
        }
        Node::File { sha256, mode, .. } => {
            let _ = rustix::fs::unlinkat(&dir, tmp, AtFlags::empty());
            let mode = Mode::from_raw_mode(mode & KEPT_MODE_BITS);
            let fd = rustix::fs::openat(
                &dir,
                tmp,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                mode,
            )
            .map_err(|e| beneath::error("create", path, e))?;
            if let Some((uid, gid)) = owner {
                if let Err(e) = rustix::fs::fchown(&fd, Some(uid), Some(gid)) {
                    let _ = rustix::fs::unlinkat(&dir, tmp, AtFlags::empty());
                    return Err(chown_failed(e));
                }
            }
            let src = objects.path_of(sha256)?;
            let result = copy_checked(&src, fd, sha256, mode);
            if let Err(e) = result {
                let _ = rustix::fs::unlinkat(&dir, tmp, AtFlags::empty());
                return Err(match e {
                    CopyError::Io(e) => WorkspaceError::io("write", path.as_path(), e),
                    CopyError::Mismatch => WorkspaceError::corrupt(
                        &src,
                        "a checkpointed file content does not match its hash",
                    ),
                });
            }
            rustix::fs::renameat(&dir, tmp, &dir, name)
                .map_err(|e| beneath::error("rename", path, e))?;
        }
        Node::Symlink { target } => {
            let _ = rustix::fs::unlinkat(&dir, tmp, AtFlags::empty());
            let t =
                Path::new(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(target));
            rustix::fs::symlinkat(t, &dir, tmp)
                .map_err(|e| beneath::error("create link", path, e))?;
            if let Some((uid, gid)) = owner {
                rustix::fs::chownat(&dir, tmp, Some(uid), Some(gid), AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(chown_failed)?;
            }
            rustix::fs::renameat(&dir, tmp, &dir, name)
                .map_err(|e| beneath::error("rename", path, e))?;
        }
        Node::Special { .. } => {
            return Err(WorkspaceError::Unrestorable {
                path: path.display(),
                why: "it was a FIFO, socket or device node, which checkpoints do not hold",
            })
        }
    }
    Ok(())
}

/// Whose an entry a root host writes must be: the owner of the entry it replaces, or else
/// of the directory it goes in. Without this every file a commit or restore wrote would be
/// root's, in a workspace that may be someone else's (and the next run, which sees the
/// workspace owner's files as its own, could not change it). An unprivileged host's files
/// are its own, as anything it writes: `None`.
fn owner_to_keep(dir: &OwnedFd, name: &Path) -> Option<(rustix::fs::Uid, rustix::fs::Gid)> {
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .or_else(|_| rustix::fs::fstat(dir))
        .ok()?;
    Some((
        rustix::fs::Uid::from_raw(st.st_uid),
        rustix::fs::Gid::from_raw(st.st_gid),
    ))
}

enum CopyError {
    Io(std::io::Error),
    Mismatch,
}

fn copy_checked(src: &Path, fd: OwnedFd, sha256: &str, mode: Mode) -> Result<(), CopyError> {
    let mut from = std::fs::File::open(src).map_err(CopyError::Io)?;
    let mut to = std::fs::File::from(fd);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(CopyError::Io(e)),
        };
        h.update(&buf[..n]);
        to.write_all(&buf[..n]).map_err(CopyError::Io)?;
    }
    if hex::encode(h.finalize()) != sha256 {
        return Err(CopyError::Mismatch);
    }
    rustix::fs::fchmod(&to, mode).map_err(|e| CopyError::Io(e.into()))?;
    to.sync_all().map_err(CopyError::Io)
}
