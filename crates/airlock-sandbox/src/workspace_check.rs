//! Which host directories may be a sandbox's workspace.
//!
//! The workspace is mounted read-write, so a workspace that holds the operator's own files
//! (the config dir with the audit key, CA key and policies; the state dir with the audit
//! log) or a shared runtime directory (the sockets of `/tmp`, `$XDG_RUNTIME_DIR`) hands them
//! to whatever runs inside. This module is the one place that refuses such a workspace,
//! with no override. Directories are compared by device and inode, walking the ancestors of
//! each, so no spelling gets around it: symlinks, `..`, a bind mount of a refused
//! directory (it has the same device and inode) and a bind mount of one of its ancestors.
//! Directories cannot be hard-linked. A bind mount of a *subdirectory* of the config or
//! state dir elsewhere is not recognised (nothing links it to its parent); the kernel's
//! own trees (`/proc`, `/sys`, `/dev`, `/run`, and `/boot` when it is a file system of its
//! own) are also refused by device, which catches their bind mounts too.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::SandboxError;

/// The operator's own directories, which a workspace may neither be, contain nor lie in
/// (except Airlock's own session workspaces in the state dir). The `airlock` binary fills
/// them from its `Home` in the one function that builds profiles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorDirs {
    /// The config dir: `airlock.toml`, policies, secrets, signing and CA keys.
    pub config: Option<PathBuf>,
    /// The state dir: database, audit log, `sessions/<id>/workspace`.
    pub state: Option<PathBuf>,
}

/// Shared directories that hold other programs' sockets and files: a workspace may be
/// neither one of them nor an ancestor of one (a subdirectory is fine).
const SHARED_DIRS: &[&str] = &["/", "/tmp", "/var/tmp", "/dev/shm"];

/// System trees a workspace may not lie in.
const SYSTEM_TREES: &[&str] = &["/etc", "/run", "/proc", "/sys", "/dev", "/usr", "/boot"];

/// A directory's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Id {
    dev: u64,
    ino: u64,
}

fn id_of(path: &Path) -> Option<Id> {
    std::fs::metadata(path).ok().map(|m| Id {
        dev: m.dev(),
        ino: m.ino(),
    })
}

/// `path` and each of its ancestors, as (canonical path, identity), innermost first. A
/// path that does not exist yet starts at its deepest existing ancestor.
fn chain(path: &Path) -> Vec<(PathBuf, Id)> {
    let mut start = Some(path);
    let canonical = loop {
        match start {
            Some(p) => match p.canonicalize() {
                Ok(c) => break Some(c),
                Err(_) => start = p.parent(),
            },
            None => break None,
        }
    };
    let Some(canonical) = canonical else {
        return Vec::new();
    };
    canonical
        .ancestors()
        .filter_map(|a| id_of(a).map(|id| (a.to_path_buf(), id)))
        .collect()
}

fn refuse(message: String, help: &str) -> SandboxError {
    SandboxError::Profile {
        field: "workspace",
        message,
        help: help.into(),
    }
}

/// Refuse `workspace` (canonical, existing) when it is, contains or lies in a directory
/// that must never be mounted read-write into a sandbox.
pub fn check_workspace(workspace: &Path, operator: &OperatorDirs) -> Result<(), SandboxError> {
    let ws_chain = chain(workspace);
    let Some(&(_, ws_id)) = ws_chain.first() else {
        return Err(refuse(
            format!("cannot inspect {}", workspace.display()),
            "pass an existing directory as the workspace",
        ));
    };
    let shown = workspace.display();
    let is_ancestor_of_ws = |id: Id| ws_chain.iter().any(|(_, a)| *a == id);

    for system in SYSTEM_TREES {
        let Some(sys_id) = id_of(Path::new(system)) else {
            continue;
        };
        // A tree that is a file system of its own (procfs, sysfs, a tmpfs /run) is refused
        // by device too, which catches a bind mount of any directory inside it.
        let own_fs = id_of(Path::new(system).parent().unwrap_or(Path::new("/")))
            .is_some_and(|parent| parent.dev != sys_id.dev);
        let under = is_ancestor_of_ws(sys_id) || (own_fs && ws_id.dev == sys_id.dev);
        // `/dev/shm` lies in /dev: refused here, with the /dev reason.
        if under {
            return Err(refuse(
                format!("{shown} lies in {system}, a system directory"),
                "choose a project directory of your own as the workspace",
            ));
        }
    }

    let mut shared: Vec<PathBuf> = SHARED_DIRS.iter().map(PathBuf::from).collect();
    if let Some(runtime) = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        shared.push(PathBuf::from(runtime));
    }
    for dir in &shared {
        if !dir.exists() {
            continue;
        }
        // The workspace is this directory, or one of its ancestors.
        if chain(dir).iter().any(|(_, id)| *id == ws_id) {
            return Err(refuse(
                format!(
                    "{shown} is {} or one of its parents, which holds other programs' sockets and files",
                    dir.display()
                ),
                "create a project directory inside it (for example mkdir /tmp/project) and use that",
            ));
        }
    }

    if let Some(config) = &operator.config {
        let inside = id_of(config).is_some_and(is_ancestor_of_ws);
        let contains = chain(config).iter().any(|(_, id)| *id == ws_id);
        if inside || contains {
            return Err(refuse(
                format!(
                    "{shown} {} Airlock's config dir {}, which holds its keys and policies",
                    relation(contains, inside),
                    config.display()
                ),
                "choose a project directory outside Airlock's config dir",
            ));
        }
    }

    if let Some(state) = &operator.state {
        let contains = chain(state).iter().any(|(_, id)| *id == ws_id);
        let inside = id_of(state).is_some_and(is_ancestor_of_ws);
        if contains || (inside && !in_session_workspace(&ws_chain, state)) {
            return Err(refuse(
                format!(
                    "{shown} {} Airlock's state dir {}, which holds its audit log and database",
                    relation(contains, inside),
                    state.display()
                ),
                "choose a project directory outside Airlock's state dir; agent sessions get their own workspace in it",
            ));
        }
    }
    Ok(())
}

/// How the workspace stands to a refused directory, in words.
fn relation(contains: bool, inside: bool) -> &'static str {
    match (contains, inside) {
        (true, true) => "is",
        (true, false) => "contains",
        _ => "lies in",
    }
}

/// Whether the workspace is (or lies in) `state/sessions/<id>/workspace`, found by identity
/// along the workspace's own ancestors.
fn in_session_workspace(ws_chain: &[(PathBuf, Id)], state: &Path) -> bool {
    let Some(sessions) = id_of(&state.join("sessions")) else {
        return false;
    };
    ws_chain.windows(3).any(|w| {
        let (workspace, _) = &w[0];
        let (_, grandparent) = &w[2];
        *grandparent == sessions && workspace.file_name() == Some("workspace".as_ref())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs(root: &Path) -> OperatorDirs {
        OperatorDirs {
            config: Some(root.join("config")),
            state: Some(root.join("state")),
        }
    }

    #[test]
    fn i4_the_session_workspace_is_allowed_and_the_rest_of_the_state_dir_is_not() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        let ws = root.join("state/sessions/abc/workspace");
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::fs::create_dir_all(root.join("state/audit")).unwrap();
        std::fs::create_dir_all(root.join("config/keys")).unwrap();
        let operator = dirs(&root);
        check_workspace(&ws, &operator).unwrap();
        check_workspace(&ws.join("sub"), &operator).unwrap();
        for bad in [
            root.join("state"),
            root.join("state/audit"),
            root.join("state/sessions"),
            root.join("state/sessions/abc"),
            root.join("config"),
            root.join("config/keys"),
            root.clone(),
        ] {
            let err = check_workspace(&bad, &operator).unwrap_err().to_string();
            assert!(err.contains("Airlock's"), "{}: {err}", bad.display());
            assert!(err.contains("help:"), "{err}");
        }
    }

    #[test]
    fn i4_spellings_through_symlinks_do_not_get_around_it() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("config/policy")).unwrap();
        std::os::unix::fs::symlink(root.join("config"), root.join("link")).unwrap();
        let operator = dirs(&root);
        // check_workspace is given canonical paths by `validate`; a symlinked spelling
        // canonicalizes to the same directory, and so does `..`.
        let spelled = root.join("link/policy/..").canonicalize().unwrap();
        let err = check_workspace(&spelled, &operator)
            .unwrap_err()
            .to_string();
        assert!(err.contains("config dir"), "{err}");
    }

    #[test]
    fn i4_shared_and_system_directories_are_refused_but_a_tmp_subdirectory_is_not() {
        let operator = OperatorDirs::default();
        for bad in [
            "/",
            "/tmp",
            "/var/tmp",
            "/dev/shm",
            "/etc",
            "/usr/share",
            "/proc/self",
        ] {
            let path = Path::new(bad).canonicalize().unwrap();
            assert!(
                check_workspace(&path, &operator).is_err(),
                "{bad} was accepted"
            );
        }
        let sub = tempfile::tempdir_in("/tmp").unwrap();
        check_workspace(&sub.path().canonicalize().unwrap(), &operator).unwrap();
    }
}
