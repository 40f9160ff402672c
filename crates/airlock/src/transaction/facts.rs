//! A change set as the Gate's `workspace.commit` action: counts and flags from its
//! summary, and the paths behind each flag, escaped and bounded.

use std::path::Path;

use airlock_core::action::{CommitPaths, WorkspaceCommitAction, MAX_COMMIT_PATHS};
use airlock_workspace::{ChangeKind, ChangeSet, LimitExceeded};

/// The action for committing `cs` to `workspace`. Its `change_set_sha256` is the change
/// set's digest, so an approval of this action covers exactly these changes.
pub fn commit_action(workspace: &Path, cs: &ChangeSet) -> WorkspaceCommitAction {
    let s = cs.summary();
    let mut paths = Vec::new();
    let (mut deleted, mut overwritten, mut git, mut protected, mut links_out) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for e in &cs.entries {
        // `display` escapes controls, newlines and invalid UTF-8: a path in the facts, the
        // reasons and the audit record can never steer a terminal.
        let p = e.path.display();
        match e.kind() {
            ChangeKind::Deleted if e.is_file_like() && e.renamed_to.is_none() => {
                deleted.push(p.clone())
            }
            ChangeKind::Modified if e.is_file_like() => overwritten.push(p.clone()),
            _ => {}
        }
        if e.before.is_none() && e.after.is_some() {
            if e.path.file_name() == b".git" {
                git.push(p.clone());
            }
            if e.protected {
                protected.push(p.clone());
            }
        }
        if e.link_leaves_workspace {
            links_out.push(p.clone());
        }
        if paths.len() < MAX_COMMIT_PATHS {
            paths.push(p);
        }
    }
    let count = |n: usize| n as u64;
    WorkspaceCommitAction {
        workspace: workspace.display().to_string(),
        change_set_sha256: cs.digest(),
        files_added: count(s.files_added),
        // A rename changes a name the owner knew: counted with the modifications.
        files_modified: count(s.files_modified + s.files_renamed + s.mode_changed),
        files_deleted: count(s.files_deleted),
        bytes: s.bytes_written,
        paths,
        deletes_preexisting: CommitPaths::new(count(s.deletes_preexisting), deleted),
        overwrites_preexisting: CommitPaths::new(count(s.overwrites_preexisting), overwritten),
        touches_sensitive: CommitPaths::of(s.sensitive_paths),
        creates_git: flagged(s.creates_git, git),
        creates_protected: flagged(s.creates_protected, protected),
        symlink_out_of_workspace: flagged(s.symlink_out_of_workspace, links_out),
        conflicts: CommitPaths::of(s.conflicts),
        exceeds_limits: s
            .exceeds_limits
            .iter()
            .take(MAX_COMMIT_PATHS)
            .map(describe_limit)
            .collect(),
    }
}

/// The summary's flag with the paths found for it; a flag set with no path found still
/// counts (the summary is what decides).
fn flagged(flag: bool, paths: Vec<String>) -> CommitPaths {
    match (flag, paths.is_empty()) {
        (false, _) => CommitPaths::default(),
        (true, true) => CommitPaths::new(1, Vec::new()),
        (true, false) => CommitPaths::of(paths),
    }
}

/// `name: actual > limit`, with the `[workspace]` key that raises it.
fn describe_limit(l: &LimitExceeded) -> String {
    match l {
        LimitExceeded::BytesWritten { limit, actual } => {
            format!("bytes written {actual} > {limit} (max_bytes_written)")
        }
        LimitExceeded::FilesChanged { limit, actual } => {
            format!("files changed {actual} > {limit} (max_files_changed)")
        }
        LimitExceeded::FilesDeleted { limit, actual } => {
            format!("files deleted {actual} > {limit} (max_files_deleted)")
        }
        LimitExceeded::ScanEntries { limit } => {
            format!("more than {limit} entries in the run's layer: the change set is incomplete")
        }
    }
}
