//! The plain facts of a change set that the Gate's policy decides on. This crate computes
//! them; it never decides what they mean.

use serde::{Deserialize, Serialize};

use crate::changeset::ChangeKind;
use crate::node::Node;
use crate::{ChangeSet, RelPath};

/// Which per-run limit a change set goes over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "which", rename_all = "snake_case")]
pub enum LimitExceeded {
    /// Bytes written.
    BytesWritten {
        /// The cap.
        limit: u64,
        /// This change set.
        actual: u64,
    },
    /// Files changed.
    FilesChanged {
        /// The cap.
        limit: usize,
        /// This change set.
        actual: usize,
    },
    /// Files deleted.
    FilesDeleted {
        /// The cap.
        limit: usize,
        /// This change set.
        actual: usize,
    },
    /// The scan stopped at its cap: the change set is incomplete and cannot be committed.
    ScanEntries {
        /// The cap.
        limit: usize,
    },
}

/// Counts and flags of a change set, for the `workspace.commit` action's facts.
/// Files here means files and symlinks; directories are not counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitSummary {
    /// Files that did not exist (renames excluded).
    pub files_added: usize,
    /// Files whose content (or kind) changes.
    pub files_modified: usize,
    /// Files removed (renames excluded).
    pub files_deleted: usize,
    /// Files renamed (a deletion and an addition with the same content).
    pub files_renamed: usize,
    /// Files and directories whose permission bits alone change.
    pub mode_changed: usize,
    /// Bytes of content written (added and modified files).
    pub bytes_written: u64,
    /// Files deleted that existed before the run (every deletion: the lower layer is the
    /// workspace as it was when the run started).
    pub deletes_preexisting: usize,
    /// Files that existed before the run and get new content or another kind.
    pub overwrites_preexisting: usize,
    /// Whether a sensitive path (defaults plus `protected_paths`) changes.
    pub touches_sensitive: bool,
    /// The sensitive paths that change, escaped for display.
    pub sensitive_paths: Vec<String>,
    /// Whether a `.git` (directory or file) is created anywhere, top level or nested,
    /// where none was.
    pub creates_git: bool,
    /// Whether a `protected_paths` entry is created where nothing was.
    pub creates_protected: bool,
    /// Whether a symlink the commit writes leads out of the workspace (or is absolute).
    pub symlink_out_of_workspace: bool,
    /// Files the owner changed on the host during the run, escaped. A commit refuses
    /// while any is listed.
    pub conflicts: Vec<String>,
    /// Limits the change set goes over.
    pub exceeds_limits: Vec<LimitExceeded>,
    /// Items dropped (special files, extended attributes).
    pub dropped: usize,
    /// Files whose set-user-ID, set-group-ID or sticky bit is stripped.
    pub mode_bits_stripped: usize,
}

impl ChangeSet {
    /// The facts the Gate decides on.
    pub fn summary(&self) -> CommitSummary {
        let mut s = CommitSummary::default();
        for e in &self.entries {
            let file_like = e.is_file_like();
            match e.kind() {
                ChangeKind::Added if file_like => s.files_added += 1,
                ChangeKind::Renamed => s.files_renamed += 1,
                ChangeKind::Modified if file_like => {
                    s.files_modified += 1;
                    s.overwrites_preexisting += 1;
                }
                ChangeKind::Deleted if file_like && e.renamed_to.is_none() => {
                    s.files_deleted += 1;
                    s.deletes_preexisting += 1;
                }
                ChangeKind::ModeChanged => s.mode_changed += 1,
                _ => {}
            }
            if let Some(Node::File { size, .. }) = &e.after {
                if e.kind() != ChangeKind::ModeChanged {
                    s.bytes_written += size;
                }
            }
            if e.sensitive {
                s.touches_sensitive = true;
                s.sensitive_paths.push(e.path.display());
            }
            if e.before.is_none() && e.after.is_some() {
                if e.path.file_name() == b".git" {
                    s.creates_git = true;
                }
                if e.protected {
                    s.creates_protected = true;
                }
            }
            s.symlink_out_of_workspace |= e.link_leaves_workspace;
            if e.stripped_mode_bits != 0 {
                s.mode_bits_stripped += 1;
            }
        }
        s.conflicts = self.conflicts.iter().map(|c| c.path.display()).collect();
        s.dropped = self.dropped.len();
        let changed =
            s.files_added + s.files_modified + s.files_deleted + s.files_renamed + s.mode_changed;
        let l = &self.limits;
        if s.bytes_written > l.max_bytes_written {
            s.exceeds_limits.push(LimitExceeded::BytesWritten {
                limit: l.max_bytes_written,
                actual: s.bytes_written,
            });
        }
        if changed > l.max_files_changed {
            s.exceeds_limits.push(LimitExceeded::FilesChanged {
                limit: l.max_files_changed,
                actual: changed,
            });
        }
        if s.files_deleted > l.max_files_deleted {
            s.exceeds_limits.push(LimitExceeded::FilesDeleted {
                limit: l.max_files_deleted,
                actual: s.files_deleted,
            });
        }
        if !self.complete {
            s.exceeds_limits.push(LimitExceeded::ScanEntries {
                limit: l.max_scan_entries,
            });
        }
        s
    }
}

/// Whether any entry's path is `path` or lies below it (a helper for callers' checks).
pub fn touches(cs: &ChangeSet, path: &RelPath) -> bool {
    cs.entries.iter().any(|e| e.path.is_within(path))
}
