//! Lexical path normalization and workspace containment.
//!
//! The Gate never touches the filesystem, so containment here is *lexical*: `..` and `.`
//! are folded and the result must stay under the workspace root. Executors add the
//! kernel-enforced half (openat2 `RESOLVE_BENEATH`, Landlock) so that a symlink planted in
//! the workspace cannot lead out either.

use serde::Serialize;
use std::path::{Component, Path, PathBuf};

/// Fold `.` and `..` without touching the filesystem. `..` above the root stays at the root.
/// A relative path is joined to `base` first.
pub fn normalize_lexically(path: &str, base: &Path) -> PathBuf {
    let joined = if Path::new(path).is_absolute() {
        PathBuf::from(path)
    } else {
        base.join(path)
    };
    let mut out = PathBuf::from("/");
    for comp in joined.components() {
        match comp {
            Component::RootDir | Component::Prefix(_) | Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(part) => out.push(part),
        }
    }
    out
}

/// A path proven (lexically) to lie inside the workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkspacePath {
    absolute: PathBuf,
    relative: PathBuf,
}

impl WorkspacePath {
    /// Resolve `path` (absolute, or relative to `workspace`) and check containment.
    /// Returns `None` when the path leaves the workspace.
    pub fn resolve(path: &str, workspace: &Path) -> Option<WorkspacePath> {
        let root = normalize_lexically(&workspace.to_string_lossy(), Path::new("/"));
        let absolute = normalize_lexically(path, &root);
        let relative = absolute.strip_prefix(&root).ok()?.to_path_buf();
        Some(WorkspacePath { absolute, relative })
    }

    pub fn absolute(&self) -> &Path {
        &self.absolute
    }

    /// Path relative to the workspace root (empty for the root itself).
    pub fn relative(&self) -> &Path {
        &self.relative
    }
}

/// Facts about one path for the policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathFacts {
    /// Lexically normalized absolute path.
    pub normalized: String,
    pub in_workspace: bool,
    /// Inside a path the operator protects (`.git/hooks`, `.git/config`, …).
    pub protected: bool,
}

/// Workspace-relative paths that stay read-only even inside the workspace: writing them
/// would run code later outside the sandbox's view. For git, every entry of `.git` that git
/// executes or takes config from (the same list the sandbox binds read-only).
pub const DEFAULT_PROTECTED: &[&str] = &[
    ".git/hooks",
    ".git/config",
    ".git/config.worktree",
    ".git/commondir",
    ".git/info",
    ".git/modules",
    ".git/worktrees",
    ".git/remotes",
    ".git/branches",
    ".airlock",
];

/// Whether `relative` (a workspace-relative, normalized path) is git metadata that git
/// would run code from or take its config from, in the workspace's own repository or in
/// one nested anywhere below it (a vendored checkout, a submodule): a `.git` itself (the
/// directory, or a file that points git at another directory), or one of the `.git`
/// entries of [`DEFAULT_PROTECTED`] below any `.git`. The owner runs git in those
/// directories too.
fn is_git_metadata(relative: &Path) -> bool {
    let parts: Vec<&std::ffi::OsStr> = relative.components().map(|c| c.as_os_str()).collect();
    parts.iter().enumerate().any(|(i, part)| {
        if *part != ".git" {
            return false;
        }
        if i + 1 == parts.len() {
            return true;
        }
        let from_git: PathBuf = parts[i..].iter().collect();
        DEFAULT_PROTECTED
            .iter()
            .filter(|p| p.starts_with(".git/"))
            .any(|p| from_git.starts_with(p))
    })
}

/// File names that hold credentials by convention: never sent out of the workspace
/// whole (a message's attachment), whatever the policy allows for messages.
const CREDENTIAL_NAMES: &[&str] = &[
    ".env",
    ".envrc",
    ".netrc",
    "_netrc",
    ".npmrc",
    ".pypirc",
    ".pgpass",
    ".git-credentials",
    ".htpasswd",
    "credentials",
    "credentials.json",
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    "secrets.yaml",
    "secrets.yml",
    "secrets.json",
];
/// Extensions of key and keystore files.
const CREDENTIAL_EXTENSIONS: &[&str] = &["pem", "key", "p12", "pfx", "jks", "kdbx", "keystore"];
/// Directories whose every file is someone's credentials or keys.
const CREDENTIAL_DIRS: &[&str] = &[".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker"];

/// Whether a workspace-relative path names a file that holds credentials by
/// convention: `.env` (and `.env.*`), SSH and TLS keys, `.netrc`, cloud CLI credentials.
pub fn looks_like_credentials(relative: &Path) -> bool {
    let in_dir = relative.components().any(|c| {
        let c = c.as_os_str().to_string_lossy().to_ascii_lowercase();
        CREDENTIAL_DIRS.contains(&c.as_str())
    });
    let Some(name) = relative.file_name() else {
        return in_dir;
    };
    let name = name.to_string_lossy().to_ascii_lowercase();
    let ext = name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    in_dir
        || CREDENTIAL_NAMES.contains(&name.as_str())
        || name.starts_with(".env.")
        || CREDENTIAL_EXTENSIONS.contains(&ext)
}

/// Compute [`PathFacts`] for `path` against `workspace` and the protected list.
pub fn path_facts(path: &str, workspace: &Path, protected: &[String]) -> PathFacts {
    let normalized = normalize_lexically(path, workspace);
    let inside = WorkspacePath::resolve(path, workspace);
    let protected = inside.as_ref().is_some_and(|wp| {
        protected.iter().any(|p| wp.relative().starts_with(p))
            || DEFAULT_PROTECTED
                .iter()
                .any(|p| wp.relative().starts_with(p))
            || is_git_metadata(wp.relative())
    });
    PathFacts {
        normalized: normalized.to_string_lossy().into_owned(),
        in_workspace: inside.is_some(),
        protected,
    }
}

/// Why the directory `relative` (workspace-relative, normalized) must not become the whole
/// workspace of a session of its own (a sub-agent's), or `None` when it may. Inside such a
/// workspace every path is judged from that directory, so a place that is protected, lies
/// in one, or holds one would lose its protection there: in a workspace rooted at `.git`,
/// `hooks/pre-commit` is just a file. Refused: any `.git` component; any hidden component
/// (tools keep what they run in hidden folders: `.github`, `.vscode`, `.cargo`); a path
/// that is, lies in or holds [`DEFAULT_PROTECTED`] or `protected` (the operator's
/// `protected_paths`); a credentials place ([`looks_like_credentials`]).
pub fn subworkspace_refusal(relative: &Path, protected: &[String]) -> Option<String> {
    let parts: Vec<&std::ffi::OsStr> = relative.components().map(|c| c.as_os_str()).collect();
    if parts.is_empty() {
        return None;
    }
    if parts.iter().any(|p| *p == ".git") {
        return Some(
            "it is git metadata (`.git`), whose hooks and config git runs on the owner's machine"
                .into(),
        );
    }
    if parts.iter().any(|p| p.to_string_lossy().starts_with('.')) {
        return Some(
            "it is a hidden folder, where tools keep settings and scripts they run (`.github`, `.vscode`, `.cargo`)"
                .into(),
        );
    }
    let entries = DEFAULT_PROTECTED
        .iter()
        .copied()
        .chain(protected.iter().map(String::as_str))
        .map(|p| p.trim_start_matches("./").trim_start_matches('/'))
        .filter(|p| !p.is_empty());
    for p in entries {
        let p = Path::new(p);
        if relative.starts_with(p) || p.starts_with(relative) {
            return Some(format!(
                "it is, lies in or holds the protected path `{}`",
                p.display()
            ));
        }
    }
    if is_git_metadata(relative) {
        return Some("it is git metadata".into());
    }
    if looks_like_credentials(relative) {
        return Some("it is a place that holds credentials by convention".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sub_workspace_is_never_a_protected_place() {
        let refused = |p: &str| subworkspace_refusal(Path::new(p), &["vendor/keys".into()]);
        for p in [
            ".git",
            ".git/hooks",
            "a/.git",
            "a/.git/objects",
            ".github",
            "x/.cargo",
            ".airlock",
            "vendor",
            "vendor/keys/inner",
            "deploy/id_rsa",
        ] {
            assert!(refused(p).is_some(), "{p} was accepted");
        }
        assert!(refused(".git/hooks").unwrap().contains(".git"));
        for p in ["reports", "reports/q1", "src/git", "vendorx"] {
            assert_eq!(refused(p), None, "{p}");
        }
    }

    #[test]
    fn git_metadata_is_protected_in_nested_repositories_too() {
        let ws = Path::new("/w");
        let protected = |p: &str| path_facts(p, ws, &[]).protected;
        for p in [
            ".git",
            ".git/hooks/pre-commit",
            "sub/.git",
            "vendor/lib/.git/hooks/post-checkout",
            "vendor/lib/.git/config",
            "a/b/.git/info/attributes",
        ] {
            assert!(protected(p), "{p}");
        }
        for p in [
            ".gitignore",
            "src/.git-notes",
            "vendor/lib/.git/objects/ab/cdef",
            "docs/git/config",
        ] {
            assert!(!protected(p), "{p}");
        }
    }

    #[test]
    fn dotdot_cannot_escape() {
        let ws = Path::new("/home/u/ws");
        assert!(WorkspacePath::resolve("a/../b", ws).is_some());
        assert!(WorkspacePath::resolve("../ws2/x", ws).is_none());
        assert!(WorkspacePath::resolve("a/../../ws/x", ws).is_some());
        assert!(WorkspacePath::resolve("/etc/passwd", ws).is_none());
        assert!(WorkspacePath::resolve("/home/u/ws/../../../../etc", ws).is_none());
        assert!(
            WorkspacePath::resolve("/home/u/wsx", ws).is_none(),
            "prefix of a name is not containment"
        );
    }

    #[test]
    fn protected_paths() {
        let ws = Path::new("/w");
        assert!(path_facts(".git/hooks/pre-commit", ws, &[]).protected);
        assert!(path_facts("./x/../.git/config", ws, &[]).protected);
        for git in [
            ".git/commondir",
            ".git/config.worktree",
            ".git/modules/sub/config",
        ] {
            assert!(path_facts(git, ws, &[]).protected, "{git}");
        }
        assert!(!path_facts(".git/objects/ab/cdef", ws, &[]).protected);
        assert!(!path_facts(".github/x", ws, &[]).protected);
        assert!(path_facts("secrets/a", ws, &["secrets".into()]).protected);
    }

    proptest::proptest! {
        #[test]
        fn normalized_never_contains_dotdot(p in "[a-z./]{0,40}") {
            let n = normalize_lexically(&p, Path::new("/w"));
            proptest::prop_assert!(n.components().all(|c| !matches!(c, Component::ParentDir | Component::CurDir)));
        }
    }
}
