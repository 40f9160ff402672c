//! The walk that turns an upper layer into a [`ChangeSet`]: upper and lower directories
//! are walked side by side through directory descriptors (`O_NOFOLLOW` at every step),
//! whiteouts and opaque directories become deletions of what the lower layer holds, and
//! special files and extended attributes are dropped and listed.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use rustix::fs::{Mode, OFlags, Stat};
use rustix::io::Errno;

use crate::changeset::{Conflict, Dropped, DroppedKind, Entry};
use crate::diff::{is_text, unified};
use crate::node::{self, hash_reader, kind_of, Kind, Node, SpecialKind, KEPT_MODE_BITS};
use crate::{beneath, links, ChangeSet, ChangeSetOptions, RelPath, WorkspaceError};

/// What the upper layer says about a path, for resolving links in the merged view.
enum Mark {
    Whiteout,
    Dropped,
    /// A directory; `hides_lower` when nothing of the lower layer shows through it.
    Dir {
        hides_lower: bool,
    },
    Node(Node),
}

struct Scan<'a> {
    opts: &'a ChangeSetOptions,
    upper_path: &'a Path,
    entries: Vec<Entry>,
    dropped: Vec<Dropped>,
    conflicts: Vec<Conflict>,
    marks: HashMap<RelPath, Mark>,
    scanned: usize,
    complete: bool,
    diff_lines_left: usize,
    /// Upper files copied up from the workspace at a path it no longer holds, with the
    /// run's version (see [`Scan::deleted_by_the_owner`]).
    copied_up_elsewhere: Vec<(RelPath, Node)>,
}

pub(crate) fn compute(
    workspace: &Path,
    upper: &Path,
    opts: &ChangeSetOptions,
) -> Result<ChangeSet, WorkspaceError> {
    let open_root = |p: &Path| {
        rustix::fs::open(
            p,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| WorkspaceError::io("open directory", p, e))
    };
    let lower_root = open_root(workspace)?;
    let upper_root = open_root(upper)?;
    let mut s = Scan {
        opts,
        upper_path: upper,
        entries: Vec::new(),
        dropped: Vec::new(),
        conflicts: Vec::new(),
        marks: HashMap::new(),
        scanned: 0,
        complete: true,
        diff_lines_left: opts.diff.max_total_lines,
        copied_up_elsewhere: Vec::new(),
    };
    s.walk(upper_root.as_fd(), Some(lower_root.as_fd()), None, false)?;
    s.pair_renames();
    s.deleted_by_the_owner();
    s.check_links(&lower_root);
    for e in &mut s.entries {
        e.protected = opts.protected.matches(&e.path);
        e.sensitive = e.protected || opts.sensitive.matches(&e.path);
    }
    s.entries.sort_by(|a, b| a.path.cmp(&b.path));
    s.dropped.sort_by(|a, b| a.path.cmp(&b.path));
    s.conflicts.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(ChangeSet {
        entries: s.entries,
        dropped: s.dropped,
        conflicts: s.conflicts,
        complete: s.complete,
        scanned: s.scanned,
        limits: opts.limits,
    })
}

fn name_path(name: &[u8]) -> &Path {
    Path::new(std::ffi::OsStr::from_bytes(name))
}

fn child(rel: Option<&RelPath>, name: &[u8]) -> Result<RelPath, WorkspaceError> {
    match rel {
        Some(r) => r.join(name),
        None => RelPath::single(name),
    }
}

fn ctime(st: &Stat) -> SystemTime {
    let secs = st.st_ctime.max(0) as u64;
    SystemTime::UNIX_EPOCH + Duration::new(secs, st.st_ctime_nsec as u32)
}

impl Scan<'_> {
    /// Count one entry; `false` once the scan limit is reached (the change set is then
    /// marked incomplete and the walk unwinds).
    fn tick(&mut self) -> bool {
        if self.scanned >= self.opts.limits.max_scan_entries {
            self.complete = false;
            return false;
        }
        self.scanned += 1;
        true
    }

    fn io(&self, what: &'static str, rel: &RelPath, e: Errno) -> WorkspaceError {
        WorkspaceError::io(what, &self.upper_path.join(rel.as_path()), e)
    }

    fn walk(
        &mut self,
        upper: BorrowedFd<'_>,
        lower: Option<BorrowedFd<'_>>,
        rel: Option<&RelPath>,
        hide_lower_rest: bool,
    ) -> Result<(), WorkspaceError> {
        let here = rel.cloned();
        let names = node::list_dir(upper).map_err(|e| match &here {
            Some(r) => self.io("list", r, e),
            None => WorkspaceError::io("list", self.upper_path, e),
        })?;
        for name in &names {
            if !self.tick() {
                return Ok(());
            }
            let path = child(rel, name)?;
            self.one(upper, lower, &path, name, hide_lower_rest)?;
        }
        if let (true, Some(lower)) = (hide_lower_rest, lower) {
            // Opaque: whatever the lower directory holds that the upper does not is gone.
            let upper_names: HashSet<&Vec<u8>> = names.iter().collect();
            let lower_names = node::list_dir(lower).map_err(|e| {
                WorkspaceError::io(
                    "list",
                    here.as_ref().map_or(Path::new("."), RelPath::as_path),
                    e,
                )
            })?;
            for lname in lower_names.iter().filter(|n| !upper_names.contains(n)) {
                if !self.tick() {
                    return Ok(());
                }
                let path = child(rel, lname)?;
                if let Some(before) = self.lower_node(lower, lname, &path)? {
                    self.delete_tree(lower, lname, &path, before)?;
                }
            }
        }
        Ok(())
    }

    fn lower_node(
        &mut self,
        lower: BorrowedFd<'_>,
        name: &[u8],
        path: &RelPath,
    ) -> Result<Option<(Node, Stat)>, WorkspaceError> {
        node::node_at(lower, name_path(name)).map_err(|e| beneath::error("read", path, e))
    }

    fn one(
        &mut self,
        upper: BorrowedFd<'_>,
        lower: Option<BorrowedFd<'_>>,
        path: &RelPath,
        name: &[u8],
        hide_lower_rest: bool,
    ) -> Result<(), WorkspaceError> {
        let np = name_path(name);
        let Some(ust) = node::lstat_at(upper, np).map_err(|e| self.io("inspect", path, e))? else {
            return Ok(());
        };
        let before = match lower {
            Some(l) => self.lower_node(l, name, path)?,
            None => None,
        };
        match kind_of(&ust) {
            Kind::Special(SpecialKind::CharDevice) if ust.st_rdev == 0 => {
                self.whiteout(lower, name, path, before)
            }
            Kind::Special(what) => {
                self.marks.insert(path.clone(), Mark::Dropped);
                self.dropped.push(Dropped {
                    path: path.clone(),
                    what: DroppedKind::Special { what },
                });
                Ok(())
            }
            Kind::File => {
                let (file, fst) =
                    node::open_file_at(upper, np).map_err(|e| self.io("open", path, e))?;
                let xattrs = self.xattrs(&file, path)?;
                if xattrs.whiteout && fst.st_size == 0 {
                    return self.whiteout(lower, name, path, before);
                }
                let (sha256, size) = hash_reader(&file).map_err(|e| {
                    WorkspaceError::io("read", &self.upper_path.join(path.as_path()), e)
                })?;
                let after = Node::File {
                    size,
                    sha256,
                    mode: fst.st_mode & KEPT_MODE_BITS,
                };
                if before.is_none() && xattrs.origin && self.opts.run_started.is_some() {
                    self.copied_up_elsewhere.push((path.clone(), after.clone()));
                }
                self.marks.insert(path.clone(), Mark::Node(after.clone()));
                self.change(
                    lower,
                    Some(upper),
                    name,
                    path,
                    before,
                    after,
                    fst.st_mode & 0o7000,
                )
            }
            Kind::Symlink => {
                let target =
                    node::readlink_at(upper, np).map_err(|e| self.io("read link", path, e))?;
                let after = Node::Symlink { target };
                self.marks.insert(path.clone(), Mark::Node(after.clone()));
                self.change(lower, Some(upper), name, path, before, after, 0)
            }
            Kind::Dir => {
                let ufd = node::open_dir_at(upper, np).map_err(|e| self.io("open", path, e))?;
                let x = self.xattrs(&ufd, path)?;
                let after = Node::Dir {
                    mode: ust.st_mode & KEPT_MODE_BITS,
                };
                let stripped = ust.st_mode & 0o7000;
                match before {
                    Some((Node::Dir { mode }, _)) => {
                        let hides = x.opaque || hide_lower_rest;
                        self.marks
                            .insert(path.clone(), Mark::Dir { hides_lower: hides });
                        if mode & KEPT_MODE_BITS != ust.st_mode & KEPT_MODE_BITS {
                            self.push(Entry::new(
                                path.clone(),
                                Some(Node::Dir { mode }),
                                Some(after),
                                stripped,
                            ));
                        }
                        let Some(lower) = lower else {
                            return Ok(());
                        };
                        let lfd = node::open_dir_at(lower, np)
                            .map_err(|e| beneath::error("open", path, e))?;
                        self.walk(ufd.as_fd(), Some(lfd.as_fd()), Some(path), hides)
                    }
                    other => {
                        self.marks
                            .insert(path.clone(), Mark::Dir { hides_lower: true });
                        self.change(lower, None, name, path, other, after, stripped)?;
                        self.walk(ufd.as_fd(), None, Some(path), false)
                    }
                }
            }
        }
    }

    fn whiteout(
        &mut self,
        lower: Option<BorrowedFd<'_>>,
        name: &[u8],
        path: &RelPath,
        before: Option<(Node, Stat)>,
    ) -> Result<(), WorkspaceError> {
        self.marks.insert(path.clone(), Mark::Whiteout);
        match (lower, before) {
            (Some(l), Some(b)) => self.delete_tree(l, name, path, b),
            _ => Ok(()),
        }
    }

    /// Entries deleting `name` (and, for a directory, everything below it).
    fn delete_tree(
        &mut self,
        lower: BorrowedFd<'_>,
        name: &[u8],
        path: &RelPath,
        before: (Node, Stat),
    ) -> Result<(), WorkspaceError> {
        if let Node::Dir { .. } = before.0 {
            let dfd = node::open_dir_at(lower, name_path(name))
                .map_err(|e| beneath::error("open", path, e))?;
            self.delete_children(dfd.as_fd(), path)?;
        }
        self.check_conflict(path, &before, None);
        self.push(Entry::new(path.clone(), Some(before.0), None, 0));
        Ok(())
    }

    fn delete_children(
        &mut self,
        dir: BorrowedFd<'_>,
        path: &RelPath,
    ) -> Result<(), WorkspaceError> {
        let names = node::list_dir(dir).map_err(|e| beneath::error("list", path, e))?;
        for n in &names {
            if !self.tick() {
                return Ok(());
            }
            let p = path.join(n)?;
            if let Some(b) = self.lower_node(dir, n, &p)? {
                self.delete_tree(dir, n, &p, b)?;
            }
        }
        Ok(())
    }

    /// An entry for `path` becoming `after` (unless it already is exactly that).
    #[allow(clippy::too_many_arguments)]
    fn change(
        &mut self,
        lower: Option<BorrowedFd<'_>>,
        upper: Option<BorrowedFd<'_>>,
        name: &[u8],
        path: &RelPath,
        before: Option<(Node, Stat)>,
        after: Node,
        stripped: u32,
    ) -> Result<(), WorkspaceError> {
        if let Some((b, _)) = &before {
            if b.matches(&after) && stripped == 0 {
                // A copy-up with nothing changed (`touch`, a chown the commit ignores).
                return Ok(());
            }
            if b.is_dir() && !after.is_dir() {
                if let Some(l) = lower {
                    let dfd = node::open_dir_at(l, name_path(name))
                        .map_err(|e| beneath::error("open", path, e))?;
                    self.delete_children(dfd.as_fd(), path)?;
                }
            }
        }
        if let Some(b) = &before {
            self.check_conflict(path, b, Some(&after));
        }
        let mut entry = Entry::new(path.clone(), before.map(|b| b.0), Some(after), stripped);
        if let (Some(u), Node::File { size, .. }) = (
            upper,
            entry.after.as_ref().unwrap_or(&Node::Dir { mode: 0 }),
        ) {
            let before_small = match &entry.before {
                Some(Node::File { size, .. }) => *size <= self.opts.diff.max_file_bytes,
                Some(_) => false,
                None => true,
            };
            if *size <= self.opts.diff.max_file_bytes && before_small && self.diff_lines_left > 0 {
                entry.diff = self.text_diff(lower, u, name, path, entry.before.is_some())?;
            }
        }
        self.push(entry);
        Ok(())
    }

    fn text_diff(
        &mut self,
        lower: Option<BorrowedFd<'_>>,
        upper: BorrowedFd<'_>,
        name: &[u8],
        path: &RelPath,
        has_before: bool,
    ) -> Result<Option<crate::Diff>, WorkspaceError> {
        let cap = self.opts.diff.max_file_bytes;
        let read = |dir: BorrowedFd<'_>| -> Result<Vec<u8>, Errno> {
            let (f, _) = node::open_file_at(dir, name_path(name))?;
            let mut v = Vec::new();
            f.take(cap + 1)
                .read_to_end(&mut v)
                .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))?;
            Ok(v)
        };
        let new = read(upper).map_err(|e| self.io("read", path, e))?;
        let old = match (has_before, lower) {
            (true, Some(l)) => read(l).map_err(|e| beneath::error("read", path, e))?,
            _ => Vec::new(),
        };
        if !is_text(&new) || !is_text(&old) {
            return Ok(None);
        }
        let max = self.opts.diff.max_lines_per_file.min(self.diff_lines_left);
        let d = unified(
            std::str::from_utf8(&old).unwrap_or_default(),
            std::str::from_utf8(&new).unwrap_or_default(),
            max,
        );
        self.diff_lines_left -= d.lines.len();
        Ok(Some(d))
    }

    /// Files the run changed that the owner deleted on the host meanwhile.
    ///
    /// overlayfs marks every file it copies up from the workspace (`user.overlay.origin`;
    /// inside a user namespace the mark is empty, so it says only *that* the file came from
    /// the workspace, not from which inode). Such a file at a path the workspace no longer
    /// holds was either renamed there by the run, or deleted by the owner while the run
    /// changed it. A rename is recognised when the scan pairs it with a removed workspace
    /// file of the same contents ([`Scan::pair_renames`]); any other is taken as the
    /// owner's deletion, a conflict the commit never overrides. A file the run both
    /// renamed and changed is held the same way: the change set cannot tell it from the
    /// owner's deletion, and holding is the side that loses nothing.
    fn deleted_by_the_owner(&mut self) {
        let renamed: HashSet<RelPath> = self
            .entries
            .iter()
            .filter(|e| e.renamed_from.is_some())
            .map(|e| e.path.clone())
            .collect();
        for (path, run) in std::mem::take(&mut self.copied_up_elsewhere) {
            if !renamed.contains(&path) {
                self.conflicts.push(Conflict {
                    path,
                    owner: None,
                    run: Some(run),
                    changed_after_start_ms: 0,
                });
            }
        }
    }

    fn check_conflict(&mut self, path: &RelPath, before: &(Node, Stat), after: Option<&Node>) {
        let Some(start) = self.opts.run_started else {
            return;
        };
        if before.0.is_dir() {
            // A directory's change time moves with every entry added under it.
            return;
        }
        let changed = ctime(&before.1);
        if let Ok(late) = changed.duration_since(start) {
            if late > Duration::ZERO {
                self.conflicts.push(Conflict {
                    path: path.clone(),
                    owner: Some(before.0.clone()),
                    run: after.cloned(),
                    changed_after_start_ms: late.as_millis() as u64,
                });
            }
        }
    }

    fn push(&mut self, e: Entry) {
        self.entries.push(e);
    }

    /// Extended attributes on an upper file or directory: the overlay's own (which say
    /// whiteout, opaque, or features this crate refuses) and the rest, which are dropped.
    fn xattrs(&mut self, fd: impl AsFd, path: &RelPath) -> Result<Xattrs, WorkspaceError> {
        let fd = fd.as_fd();
        let mut out = Xattrs::default();
        let mut buf = vec![0u8; 64 * 1024];
        let n = match rustix::fs::flistxattr(fd, &mut buf[..]) {
            Ok(n) => n,
            Err(Errno::NOTSUP) => return Ok(out),
            Err(e) => return Err(self.io("list attributes of", path, e)),
        };
        for name in buf[..n].split(|b| *b == 0).filter(|n| !n.is_empty()) {
            let overlay = name
                .strip_prefix(b"user.overlay.")
                .or_else(|| name.strip_prefix(b"trusted.overlay."));
            match overlay {
                // The payload's own `user.overlay.X`, which overlayfs (Linux 6.7+) stores
                // escaped as `user.overlay.overlay.X` so it cannot forge the overlay's
                // attributes: the payload's, and dropped like any other.
                Some(rest) if rest.starts_with(b"overlay.") => self.dropped.push(Dropped {
                    path: path.clone(),
                    what: DroppedKind::Xattr {
                        name: name.to_vec(),
                    },
                }),
                Some(b"opaque") => {
                    let mut v = [0u8; 8];
                    let len =
                        rustix::fs::fgetxattr(fd, std::ffi::OsStr::from_bytes(name), &mut v[..])
                            .unwrap_or(0);
                    // "y": opaque. "x" (Linux 6.7+) only says the directory holds xattr
                    // whiteouts; it is not opaque.
                    out.opaque |= &v[..len] == b"y";
                }
                Some(b"whiteout") => out.whiteout = true,
                Some(b"redirect") => {
                    return Err(WorkspaceError::UnsupportedUpper {
                        path: path.display(),
                        feature: "redirect_dir",
                    })
                }
                Some(b"metacopy") => {
                    return Err(WorkspaceError::UnsupportedUpper {
                        path: path.display(),
                        feature: "metacopy",
                    })
                }
                Some(b"origin") => out.origin = true,
                // impure, nlink, whiteouts, …: the overlay's bookkeeping.
                Some(_) => {}
                None => self.dropped.push(Dropped {
                    path: path.clone(),
                    what: DroppedKind::Xattr {
                        name: name.to_vec(),
                    },
                }),
            }
        }
        Ok(out)
    }

    /// A deleted and an added file with the same content, each the only one with it, are
    /// shown as a rename (the commit still deletes and writes).
    fn pair_renames(&mut self) {
        let mut deleted: HashMap<String, Vec<usize>> = HashMap::new();
        let mut added: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, e) in self.entries.iter().enumerate() {
            match (&e.before, &e.after) {
                (Some(Node::File { sha256, .. }), None) => {
                    deleted.entry(sha256.clone()).or_default().push(i)
                }
                (None, Some(Node::File { sha256, .. })) => {
                    added.entry(sha256.clone()).or_default().push(i)
                }
                _ => {}
            }
        }
        for (hash, d) in deleted {
            if let (1, Some(a)) = (d.len(), added.get(&hash)) {
                if a.len() == 1 {
                    let (di, ai) = (d[0], a[0]);
                    let from = self.entries[di].path.clone();
                    let to = self.entries[ai].path.clone();
                    self.entries[ai].renamed_from = Some(from);
                    self.entries[ai].diff = None;
                    self.entries[di].renamed_to = Some(to);
                }
            }
        }
    }

    /// Resolve every symlink the commit writes through the merged view.
    fn check_links(&mut self, lower_root: &OwnedFd) {
        let marks = &self.marks;
        let mut lookup = |p: &RelPath| -> Option<Node> {
            if let Some(m) = marks.get(p) {
                return match m {
                    Mark::Whiteout => None,
                    Mark::Dir { .. } => Some(Node::Dir { mode: 0 }),
                    Mark::Node(n) => Some(n.clone()),
                    Mark::Dropped => lower_kind(lower_root, p),
                };
            }
            let mut anc = p.parent();
            while let Some(a) = anc {
                match marks.get(&a) {
                    Some(Mark::Dir { hides_lower: true })
                    | Some(Mark::Whiteout)
                    | Some(Mark::Node(_)) => return None,
                    _ => {}
                }
                anc = a.parent();
            }
            lower_kind(lower_root, p)
        };
        for e in &mut self.entries {
            if let Some(Node::Symlink { target }) = &e.after {
                e.link_leaves_workspace = links::leaves_workspace(&e.path, target, &mut lookup);
            }
        }
    }
}

/// The lower layer's node at `p`, without hashing (only links matter to the resolver).
fn lower_kind(root: &OwnedFd, p: &RelPath) -> Option<Node> {
    let (dir, name) = beneath::open_parent(root, p).ok()?;
    let st = node::lstat_at(&dir, name).ok()??;
    Some(match kind_of(&st) {
        Kind::Symlink => Node::Symlink {
            target: node::readlink_at(&dir, name).ok()?,
        },
        Kind::Dir => Node::Dir { mode: 0 },
        Kind::File => Node::File {
            size: 0,
            sha256: String::new(),
            mode: 0,
        },
        Kind::Special(what) => Node::Special { what },
    })
}

#[derive(Default)]
struct Xattrs {
    opaque: bool,
    whiteout: bool,
    /// `user.overlay.origin` is present: the entry was copied up from the workspace.
    origin: bool,
}

impl Entry {
    pub(crate) fn new(
        path: RelPath,
        before: Option<Node>,
        after: Option<Node>,
        stripped: u32,
    ) -> Entry {
        Entry {
            path,
            before,
            after,
            renamed_from: None,
            renamed_to: None,
            stripped_mode_bits: stripped,
            link_leaves_workspace: false,
            sensitive: false,
            protected: false,
            diff: None,
        }
    }
}
