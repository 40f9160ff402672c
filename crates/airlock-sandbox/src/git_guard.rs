//! Files that must not appear in an existing `.git` directory during a run.
//!
//! The mount plan binds read-only every entry of `.git` that git executes or takes config
//! from, but only entries that exist can be bound. Two names that most repositories lack
//! would still hand the host's git to the sandbox if a run created them:
//! `commondir` (git then takes config and hooks from the directory it names) and
//! `config.worktree`. The host notes which of them are absent before the command starts and
//! removes any that appeared once the sandbox's process tree has ended, so nothing can
//! create them again in between. See [`crate::profile::GIT_MUST_NOT_APPEAR`].

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fstatat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};

use crate::profile::GIT_MUST_NOT_APPEAR;

/// The names of [`GIT_MUST_NOT_APPEAR`] absent from the workspace's `.git` before a run.
pub(crate) struct GitGuard {
    git_dir: Option<OwnedFd>,
    workspace: PathBuf,
    absent: Vec<&'static str>,
}

impl GitGuard {
    /// Note what is absent now. A workspace without a `.git` directory has nothing to guard
    /// (a repository created by the run is not closed here).
    pub(crate) fn before(workspace: &Path) -> GitGuard {
        // O_NOFOLLOW: a `.git` that is a symlink is not followed (the mount plan refuses
        // symlinked protected paths anyway).
        let git_dir = nix::fcntl::open(
            &workspace.join(".git"),
            OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .ok();
        let absent = match &git_dir {
            Some(dir) => GIT_MUST_NOT_APPEAR
                .iter()
                .copied()
                .filter(|name| {
                    fstatat(dir.as_fd(), *name, AtFlags::AT_SYMLINK_NOFOLLOW)
                        .is_err_and(|e| e == nix::errno::Errno::ENOENT)
                })
                .collect(),
            None => Vec::new(),
        };
        GitGuard {
            git_dir,
            workspace: workspace.to_path_buf(),
            absent,
        }
    }

    /// After the sandbox's processes are gone: remove what appeared, and say what was
    /// removed (workspace paths). A directory that appeared under one of these names is
    /// emptied of nothing and left; git fails on it rather than reading it as config.
    pub(crate) fn after(&self) -> Vec<PathBuf> {
        let Some(dir) = &self.git_dir else {
            return Vec::new();
        };
        let mut removed = Vec::new();
        for name in &self.absent {
            let Ok(stat) = fstatat(dir.as_fd(), *name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
                continue;
            };
            let is_dir = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR;
            let how = if is_dir {
                UnlinkatFlags::RemoveDir
            } else {
                UnlinkatFlags::NoRemoveDir
            };
            if unlinkat(dir.as_fd(), *name, how).is_ok() {
                removed.push(self.workspace.join(".git").join(name));
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn i2_a_commondir_created_during_the_run_is_removed_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::write(ws.join(".git/config.worktree"), "kept: it existed before\n").unwrap();
        let guard = GitGuard::before(ws);
        std::fs::write(ws.join(".git/commondir"), "../evil\n").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", ws.join(".git/config.worktree.new")).unwrap();
        let removed = guard.after();
        assert_eq!(removed, vec![ws.join(".git/commondir")]);
        assert!(!ws.join(".git/commondir").exists());
        assert!(ws.join(".git/config.worktree").exists());
    }

    #[test]
    fn no_git_dir_guards_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let guard = GitGuard::before(dir.path());
        std::fs::create_dir_all(dir.path().join(".git")).unwrap();
        std::fs::write(dir.path().join(".git/commondir"), "x").unwrap();
        assert!(guard.after().is_empty());
    }
}
