//! The change set: what a run (or a host-side file write) would change in the workspace,
//! computed from its upper layer against the workspace as it is now.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::diff::Diff;
use crate::node::{Node, SpecialKind};
use crate::rel_path::{de_bytes, ser_bytes};
use crate::{ChangeSetOptions, Limits, RelPath, WorkspaceError};

/// One path that changes. `before` is the workspace now (the lower layer), `after` what the
/// commit leaves; the kind of change follows from the two ([`Entry::kind`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The path, raw.
    pub path: RelPath,
    /// What is there now; `None` when nothing is.
    pub before: Option<Node>,
    /// What the commit leaves; `None` when it deletes the path.
    pub after: Option<Node>,
    /// For an added file: the deleted file with the same content it was most likely
    /// renamed from.
    pub renamed_from: Option<RelPath>,
    /// For a deleted file: where it was most likely renamed to.
    pub renamed_to: Option<RelPath>,
    /// Set-user-ID, set-group-ID and sticky bits the run set and the commit strips.
    pub stripped_mode_bits: u32,
    /// For a symlink in `after`: whether it resolves (in the committed tree) to somewhere
    /// outside the workspace, or to an absolute path.
    pub link_leaves_workspace: bool,
    /// Whether the path matches the sensitive list (defaults plus `protected_paths`).
    pub sensitive: bool,
    /// Whether the path matches the operator's `protected_paths`.
    pub protected: bool,
    /// The text diff (for text files within the diff limits).
    pub diff: Option<Diff>,
}

/// The kind of change of an [`Entry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// A new path.
    Added,
    /// A new path holding the content of a deleted one.
    Renamed,
    /// New content (or another kind of file) at an existing path.
    Modified,
    /// Same content, other permission bits.
    ModeChanged,
    /// The path is removed.
    Deleted,
}

impl Entry {
    /// The kind of change.
    pub fn kind(&self) -> ChangeKind {
        match (&self.before, &self.after) {
            (None, _) if self.renamed_from.is_some() => ChangeKind::Renamed,
            (None, _) => ChangeKind::Added,
            (Some(_), None) => ChangeKind::Deleted,
            (Some(b), Some(a)) if b.same_content(a) => ChangeKind::ModeChanged,
            (Some(_), Some(_)) => ChangeKind::Modified,
        }
    }

    /// Whether this is about a file or link (counted), not a directory.
    pub fn is_file_like(&self) -> bool {
        !(self.before.as_ref().is_none_or(Node::is_dir)
            && self.after.as_ref().is_none_or(Node::is_dir))
    }
}

/// Something in the upper layer that a commit never carries, listed so the operator sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dropped {
    /// Where it was.
    pub path: RelPath,
    /// What it was.
    pub what: DroppedKind,
}

/// What was dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DroppedKind {
    /// A device node, FIFO or socket (the workspace keeps whatever was at the path).
    Special {
        /// Which kind.
        what: SpecialKind,
    },
    /// An extended attribute (including ACLs) on a file or directory the commit writes.
    Xattr {
        /// The attribute's name, raw.
        #[serde(serialize_with = "ser_bytes", deserialize_with = "de_bytes")]
        name: Vec<u8>,
    },
}

/// A file the owner changed on the host while the run was going: the lower layer moved
/// under the overlay. The commit refuses while any is present.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conflict {
    /// The path.
    pub path: RelPath,
    /// The owner's version (the workspace now).
    pub owner: Option<Node>,
    /// The run's version.
    pub run: Option<Node>,
    /// Milliseconds after the run started that the owner's change happened.
    pub changed_after_start_ms: u64,
}

/// The change set of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangeSet {
    /// Changed paths, sorted by path.
    pub entries: Vec<Entry>,
    /// What the commit drops.
    pub dropped: Vec<Dropped>,
    /// Owner edits during the run.
    pub conflicts: Vec<Conflict>,
    /// `false` when the scan stopped at [`Limits::max_scan_entries`]: the change set is
    /// then shown and held, never committed.
    pub complete: bool,
    /// Entries scanned.
    pub scanned: usize,
    /// The limits it was computed with.
    pub limits: Limits,
}

impl ChangeSet {
    /// Read the upper layer at `upper` against the workspace (the lower layer) as it is now.
    ///
    /// The upper layer has the standard overlayfs format: a whiteout is a character device
    /// 0:0 (or a zero-size file with the `user.overlay.whiteout` or
    /// `trusted.overlay.whiteout` attribute), an opaque directory has `*.overlay.opaque` =
    /// `y`; `redirect_dir` and `metacopy` must be off (an upper layer that uses them is
    /// refused), so a directory rename shows as a delete and an add. Nothing in either
    /// layer is followed through a link.
    ///
    /// ```no_run
    /// use airlock_workspace::{ChangeSet, ChangeSetOptions};
    /// let cs = ChangeSet::compute("/home/me/proj".as_ref(), "/run/upper".as_ref(),
    ///                             &ChangeSetOptions::default())?;
    /// println!("{}", cs.render());
    /// # Ok::<(), airlock_workspace::WorkspaceError>(())
    /// ```
    pub fn compute(
        workspace: &Path,
        upper: &Path,
        opts: &ChangeSetOptions,
    ) -> Result<ChangeSet, WorkspaceError> {
        crate::scan::compute(workspace, upper, opts)
    }

    /// Whether nothing changes (dropped items alone change nothing).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A SHA-256 over the change set's canonical JSON: bind an approval to it, and check
    /// before committing that the change set is still the one approved.
    pub fn digest(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        crate::node::sha256_hex(&json)
    }

    /// The entry for `path`, if it changes.
    pub fn entry(&self, path: &RelPath) -> Option<&Entry> {
        self.entries
            .binary_search_by(|e| e.path.cmp(path))
            .ok()
            .map(|i| &self.entries[i])
    }
}
