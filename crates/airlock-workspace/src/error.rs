//! The one error type of the crate. Every message names the path it is about (escaped for
//! a terminal) and ends with a `help:` line.

use std::path::Path;

use airlock_core::terminal_text::escape_line;

/// Why computing, committing or restoring a change failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// A system call on a file failed.
    #[error("{what} `{path}`: {source}\nhelp: check that the path exists and is readable and writable by the operator")]
    Io {
        /// What was being done ("read", "rename", …).
        what: &'static str,
        /// The path, escaped.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A path in the upper layer or a request cannot name a file inside the workspace.
    #[error("`{path}` is not a path inside the workspace: {why}\nhelp: use a relative path without `.`, `..` or empty components")]
    BadPath {
        /// The path, escaped.
        path: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The upper layer uses an overlay feature this crate does not read.
    #[error("the upper layer at `{path}` uses {feature}, which Airlock's overlays never turn on; nothing was committed\nhelp: mount the overlay with redirect_dir=off and metacopy=off")]
    UnsupportedUpper {
        /// The path, escaped.
        path: String,
        /// The feature (`redirect_dir`, `metacopy`).
        feature: &'static str,
    },
    /// The owner changed files on the host while the run was going, or since the change
    /// set was computed; the commit would overwrite their edits.
    #[error("{} changed on the host while the run was going, so the commit would overwrite the owner's edit: {}\nhelp: review both versions (the change set shows them), then rerun on the current files or drop the run", plural(paths.len()), paths.join(", "))]
    Conflict {
        /// The paths, escaped.
        paths: Vec<String>,
    },
    /// The upper layer no longer holds what the change set (the thing decided) says.
    #[error("`{path}` in the upper layer differs from the change set that was decided; nothing was committed\nhelp: compute the change set again and decide on that")]
    UpperChanged {
        /// The path, escaped.
        path: String,
    },
    /// The change set is not complete (its scan stopped at a limit) and cannot be committed.
    #[error("the change set is incomplete: the scan stopped after {scanned} entries, so committing it would apply part of the run\nhelp: raise the scan limit or drop the run")]
    Incomplete {
        /// Entries scanned before the stop.
        scanned: usize,
    },
    /// A restore would overwrite files changed outside Airlock since the checkpoint.
    #[error("{} changed outside Airlock since the checkpoint, and restoring would overwrite {}: {}\nhelp: copy what you want to keep, then rerun with --force", plural(paths.len()), if paths.len() == 1 { "it" } else { "them" }, paths.join(", "))]
    ChangedOutside {
        /// The paths, escaped.
        paths: Vec<String>,
    },
    /// No such checkpoint (or it was pruned by the retention limit).
    #[error("there is no checkpoint {id} for this workspace{}\nhelp: `airlock checkpoints list` shows the checkpoints that are kept", if *pruned { " (it was pruned by the retention limit)" } else { "" })]
    NoCheckpoint {
        /// The id asked for.
        id: String,
        /// Whether it existed once and was pruned.
        pruned: bool,
    },
    /// `undo N` asked for more commits than there are.
    #[error("there {} to undo (asked for {asked})\nhelp: `airlock checkpoints list` shows what can be undone", match available { 0 => "are no commits".to_string(), 1 => "is 1 commit".to_string(), n => format!("are {n} commits") })]
    NothingToUndo {
        /// How many were asked for.
        asked: usize,
        /// How many live commits there are.
        available: usize,
    },
    /// The checkpoint store holds something it did not write.
    #[error("the checkpoint store at `{path}` is damaged: {why}\nhelp: move the directory aside to start a new history (the workspace itself is not touched)")]
    Corrupt {
        /// The path, escaped.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// A stored prior version cannot be put back as it was.
    #[error("`{path}` cannot be restored: {why}\nhelp: restore it by hand; the other files were not touched")]
    Unrestorable {
        /// The path, escaped.
        path: String,
        /// Why.
        why: &'static str,
    },
    /// The kernel lacks `openat2`, so paths cannot be resolved beneath the workspace.
    #[error("this kernel has no openat2(2), so workspace commits cannot resolve paths safely and refuse to run\nhelp: use Linux 5.6 or newer")]
    Openat2Unavailable,
    /// A path resolves through a symbolic link, which commits never follow.
    #[error("`{path}` goes through a symbolic link in the workspace; commits never follow links\nhelp: remove the link or commit to another path")]
    ThroughLink {
        /// The path, escaped.
        path: String,
    },
}

fn plural(n: usize) -> String {
    if n == 1 {
        "1 file".to_string()
    } else {
        format!("{n} files")
    }
}

impl WorkspaceError {
    pub(crate) fn io(what: &'static str, path: &Path, source: impl Into<std::io::Error>) -> Self {
        WorkspaceError::Io {
            what,
            path: escape_line(&path.to_string_lossy()),
            source: source.into(),
        }
    }

    pub(crate) fn corrupt(path: &Path, why: impl Into<String>) -> Self {
        WorkspaceError::Corrupt {
            path: escape_line(&path.to_string_lossy()),
            why: why.into(),
        }
    }
}
