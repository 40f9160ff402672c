//! The mount plan: the sandbox's filesystem as data.
//!
//! The host computes the plan from a profile ([`MountPlan::for_profile`]), `airlock doctor`
//! prints it, `airlock-sandbox-init` executes it step by step, and the host checks the
//! sandbox's `/proc/self/mountinfo` against it. Nothing about the filesystem layout lives
//! anywhere else.
//!
//! Most host paths are read-only binds; small regular files of `/etc` are copies written
//! into the sandbox's own root tmpfs instead ([`MountStep::Copy`], bounded by
//! [`COPY_MAX_LEN`] and [`COPY_BUDGET`]), which saves a mount each. Copies are not mounts,
//! and the attestation refuses a mount found at a copy's path.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::SandboxError;
use crate::profile::SandboxProfile;

mod display;
mod etc;

pub use etc::{COPY_BUDGET, COPY_MAX_LEN, COPY_MODE, ETC_ENTRIES, ROOT_TMPFS_BASE, ROOT_TMPFS_MAX};

/// Top-level directories that are symlinks into `/usr` on merged-usr systems, and real
/// directories (bound read-only) elsewhere.
pub const USR_MERGE_DIRS: &[&str] = &["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// Host device nodes bound into the sandbox's `/dev`.
pub const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// Whether a bind's source is a directory or a single file (the mount point must match).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    Dir,
    File,
}

/// Why a path of the sandbox is re-bound onto itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RebindReason {
    /// A protected path, made read-only.
    Protected,
    /// An ancestor of a protected path, made a mount point so that it cannot be renamed or
    /// removed (which would let the payload swap in an unprotected copy).
    Pin,
    /// A kernel interface made read-only (`/proc/sys`).
    KernelInterface,
}

/// One step of the plan, executed in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MountStep {
    /// A fresh tmpfs. `read_only` ones are made read-only after the steps below them.
    Tmpfs {
        target: PathBuf,
        size_bytes: u64,
        mode: u32,
        read_only: bool,
    },
    /// A bind of a host path (resolved inside the host's root, symlinks included).
    Bind {
        source: PathBuf,
        target: PathBuf,
        node: NodeKind,
        read_only: bool,
        /// Include the mounts below `source` (made read-only too when `read_only`).
        recursive: bool,
        /// Device nodes work through this mount (only for the `/dev` entries).
        devices: bool,
    },
    /// A fresh procfs for the sandbox's pid namespace.
    Proc { target: PathBuf },
    /// A new devpts instance (its own ptys, none of the host's).
    Devpts { target: PathBuf },
    /// A symbolic link.
    Symlink { target: PathBuf, points_to: PathBuf },
    /// A small file written into the sandbox's own (later read-only) root tmpfs: the
    /// egress proxy's CA certificate. The host's file is never mounted; the contents the
    /// host checked ([`MountPlan::file_contents`]) reach the helper in a sealed memory file
    /// on [`crate::protocol::FILE_FD`], not in the request, and must be `len` bytes long.
    File {
        target: PathBuf,
        len: u64,
        mode: u32,
    },
    /// A small host file copied into the sandbox's own (later read-only) root tmpfs instead
    /// of being bound: the regular files among [`ETC_ENTRIES`].
    ///
    /// Not a mount: the attestation expects *no* mount at `target`. `airlock-sandbox-init`
    /// makes the copy, inside its user namespace as the sandbox uid, so it reads only what
    /// the sandbox uid may read (never the host process, which may be root). It resolves
    /// `source` inside the host root like a read-only bind (absolute symlinks such as
    /// `/etc/localtime -> /usr/share/zoneinfo/...` stay in the host root, magic links are
    /// refused), opens it non-blocking without taking a controlling terminal, and accepts
    /// only a regular file of at most `max_len` bytes: anything else refuses the run (the
    /// helper never waits on a FIFO nor reads a device). An entry the sandbox uid cannot
    /// read, or that vanished since the plan was made, is left out, as if the host had
    /// none: a bind would have shown a file that fails with `EACCES`, and programs treat
    /// an unreadable `/etc` file like a missing one. The copy gets `mode` (no write bits)
    /// on a root that is read-only once built, so writes fail with `EACCES`/`EROFS`.
    Copy {
        source: PathBuf,
        target: PathBuf,
        max_len: u64,
        mode: u32,
    },
    /// The workspace seen through overlayfs (see [`crate::overlay`]): `lower` (the host's
    /// workspace, resolved like a writable bind, following no symlink) is bound
    /// read-only, non-recursively, as the lower layer; the run's writes land in `upper`
    /// (with `work` as overlayfs' scratch directory). Nothing of `lower` is mounted
    /// anywhere else in the sandbox.
    Overlay {
        target: PathBuf,
        lower: PathBuf,
        upper: PathBuf,
        work: PathBuf,
    },
    /// `anchor/relative` bound onto itself, resolved below `anchor` without following any
    /// symlink and without leaving the anchor's mount.
    Rebind {
        anchor: PathBuf,
        relative: PathBuf,
        read_only: bool,
        reason: RebindReason,
    },
}

impl MountStep {
    /// The path inside the sandbox this step creates.
    pub fn target(&self) -> PathBuf {
        match self {
            MountStep::Tmpfs { target, .. }
            | MountStep::Bind { target, .. }
            | MountStep::Proc { target }
            | MountStep::Devpts { target }
            | MountStep::Symlink { target, .. }
            | MountStep::File { target, .. }
            | MountStep::Copy { target, .. }
            | MountStep::Overlay { target, .. } => target.clone(),
            MountStep::Rebind {
                anchor, relative, ..
            } => anchor.join(relative),
        }
    }

    /// The step's kind as `airlock doctor` prints it (`bind`, `copy`, …).
    pub fn kind_name(&self) -> &'static str {
        match self {
            MountStep::Tmpfs { .. } => "tmpfs",
            MountStep::Bind { .. } => "bind",
            MountStep::Proc { .. } => "proc",
            MountStep::Devpts { .. } => "devpts",
            MountStep::Symlink { .. } => "symlink",
            MountStep::File { .. } => "file",
            MountStep::Copy { .. } => "copy",
            MountStep::Rebind { .. } => "rebind",
            MountStep::Overlay { .. } => "overlay",
        }
    }

    /// Whether this step produces a mount (symlinks, files and copies do not).
    pub fn is_mount(&self) -> bool {
        !matches!(
            self,
            MountStep::Symlink { .. } | MountStep::File { .. } | MountStep::Copy { .. }
        )
    }

    /// Whether the mount this step produces must end up read-only.
    pub fn read_only(&self) -> bool {
        match self {
            MountStep::Tmpfs { read_only, .. }
            | MountStep::Bind { read_only, .. }
            | MountStep::Rebind { read_only, .. } => *read_only,
            MountStep::Proc { .. }
            | MountStep::Devpts { .. }
            | MountStep::Symlink { .. }
            | MountStep::File { .. }
            | MountStep::Copy { .. }
            | MountStep::Overlay { .. } => false,
        }
    }

    /// Whether host mounts below the target may legitimately appear (recursive binds).
    pub fn allows_submounts(&self) -> bool {
        matches!(
            self,
            MountStep::Bind {
                recursive: true,
                ..
            } | MountStep::Proc { .. }
        )
    }
}

/// The ordered list of steps that builds the sandbox's root.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MountPlan {
    pub steps: Vec<MountStep>,
    /// The contents of the plan's [`MountStep::File`] (there is at most one), kept on the
    /// host side: the launcher passes them as a sealed memory file rather than inside the
    /// JSON request (a CA bundle is a few hundred kilobytes).
    #[serde(skip)]
    pub file_contents: Option<Vec<u8>>,
}

impl MountPlan {
    /// Compute the plan for `profile` whose canonical workspace is `workspace`.
    ///
    /// Reads the host's filesystem to learn which optional entries exist. Refuses a
    /// protected path that is a symlink, or that is missing while its parent exists.
    pub fn for_profile(
        profile: &SandboxProfile,
        workspace: &Path,
    ) -> Result<MountPlan, SandboxError> {
        Self::for_host_root(profile, workspace, Path::new("/"))
    }

    /// [`MountPlan::for_profile`] for a host whose root directory is `host_root` (tests
    /// build a fake one).
    fn for_host_root(
        profile: &SandboxProfile,
        workspace: &Path,
        host_root: &Path,
    ) -> Result<MountPlan, SandboxError> {
        let mut plan = Self::base_for_host_root(profile, host_root)?;
        plan.steps
            .extend(workspace_steps(profile, workspace, host_root)?);
        Ok(plan)
    }

    /// The steps of [`MountPlan::for_profile`] that depend on nothing a run asks for: the
    /// whole plan but the workspace's steps, which always come last. A pooled sandbox
    /// (see [`crate::PooledSandbox`]) is built this far before any request exists.
    pub fn base_for_profile(profile: &SandboxProfile) -> Result<MountPlan, SandboxError> {
        Self::base_for_host_root(profile, Path::new("/"))
    }

    fn base_for_host_root(
        profile: &SandboxProfile,
        host_root: &Path,
    ) -> Result<MountPlan, SandboxError> {
        let host = |p: &str| host_root.join(p.trim_start_matches('/'));
        // The root tmpfs holds the /etc copies too: its size comes with them.
        let etc = etc::etc_steps(host_root);
        let mut steps = vec![MountStep::Tmpfs {
            target: "/".into(),
            size_bytes: etc.root_tmpfs_bytes,
            mode: 0o755,
            read_only: true,
        }];
        steps.push(ro_bind("/usr", NodeKind::Dir));
        for dir in USR_MERGE_DIRS {
            let path = host(dir);
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.file_type().is_symlink() => {
                    let to = std::fs::read_link(&path)?;
                    steps.push(MountStep::Symlink {
                        target: Path::new("/").join(dir),
                        points_to: to,
                    });
                }
                Ok(m) if m.is_dir() => steps.push(ro_bind(&format!("/{dir}"), NodeKind::Dir)),
                _ => {}
            }
        }
        steps.extend(etc.steps);
        steps.push(MountStep::Tmpfs {
            target: "/dev".into(),
            size_bytes: 64 << 10,
            mode: 0o755,
            read_only: true,
        });
        for dev in DEVICES {
            if let Ok(m) = std::fs::metadata(host(&format!("dev/{dev}"))) {
                if m.file_type().is_char_device() {
                    let path = PathBuf::from(format!("/dev/{dev}"));
                    steps.push(MountStep::Bind {
                        source: path.clone(),
                        target: path,
                        node: NodeKind::File,
                        read_only: false,
                        recursive: false,
                        devices: true,
                    });
                }
            }
        }
        steps.push(MountStep::Devpts {
            target: "/dev/pts".into(),
        });
        for (link, to) in [
            ("/dev/ptmx", "pts/ptmx"),
            ("/dev/fd", "/proc/self/fd"),
            ("/dev/stdin", "/proc/self/fd/0"),
            ("/dev/stdout", "/proc/self/fd/1"),
            ("/dev/stderr", "/proc/self/fd/2"),
        ] {
            steps.push(MountStep::Symlink {
                target: link.into(),
                points_to: to.into(),
            });
        }
        steps.push(MountStep::Tmpfs {
            target: "/dev/shm".into(),
            size_bytes: profile.tmp_size_bytes,
            mode: 0o1777,
            read_only: false,
        });
        steps.push(MountStep::Proc {
            target: "/proc".into(),
        });
        steps.push(MountStep::Rebind {
            anchor: "/proc".into(),
            relative: "sys".into(),
            read_only: true,
            reason: RebindReason::KernelInterface,
        });
        steps.push(MountStep::Tmpfs {
            target: "/tmp".into(),
            size_bytes: profile.tmp_size_bytes,
            mode: 0o1777,
            read_only: false,
        });
        steps.push(MountStep::Symlink {
            target: "/var/tmp".into(),
            points_to: "/tmp".into(),
        });
        let mut file_contents = None;
        if let Some(cert) = profile.relay().and_then(|r| r.ca_cert.as_ref()) {
            let text = crate::profile::read_ca_cert(cert)?;
            steps.push(MountStep::File {
                target: crate::profile::RELAY_CA_CERT.into(),
                len: text.len() as u64,
                mode: 0o444,
            });
            file_contents = Some(text.into_bytes());
        }
        // After /tmp (so a path under /tmp stays visible), before the workspace.
        for extra in &profile.read_only_paths {
            let path = extra.canonicalize()?;
            // Inside the sandbox some paths are links the plan itself creates (/var/tmp ->
            // /tmp). Building a bind target below one would follow it, so refuse clearly.
            let under_link = steps.iter().find_map(|st| match st {
                MountStep::Symlink { target, .. } if path.starts_with(target) => {
                    Some(target.clone())
                }
                _ => None,
            });
            if let Some(link) = under_link {
                return Err(SandboxError::Profile {
                    field: "read_only_paths",
                    message: format!(
                        "{} lies under {}, which inside the sandbox is a link the sandbox creates",
                        path.display(),
                        link.display()
                    ),
                    help: format!("move it to a directory outside {}", link.display()),
                });
            }
            let node = if path.is_dir() {
                NodeKind::Dir
            } else {
                NodeKind::File
            };
            steps.push(MountStep::Bind {
                source: path.clone(),
                target: path,
                node,
                read_only: true,
                recursive: true,
                devices: false,
            });
        }
        Ok(MountPlan {
            steps,
            file_contents,
        })
    }

    /// The workspace overlay step, when the workspace is seen through one.
    pub fn overlay(&self) -> Option<&MountStep> {
        self.steps
            .iter()
            .find(|s| matches!(s, MountStep::Overlay { .. }))
    }

    /// Steps that produce mounts, with the targets the sandbox must show.
    pub fn mounts(&self) -> impl Iterator<Item = &MountStep> {
        self.steps.iter().filter(|s| s.is_mount())
    }
}

/// The workspace's steps, last in every plan: the run's own workspace (or its overlay) and
/// the protected paths in it.
fn workspace_steps(
    profile: &SandboxProfile,
    workspace: &Path,
    host_root: &Path,
) -> Result<Vec<MountStep>, SandboxError> {
    let mut steps = Vec::new();
    if let Some(overlay) = &profile.workspace_overlay {
        // The commit decision holds changes to git metadata and protected paths, so
        // nothing of them is bound read-only: the whole workspace is read-only below
        // the overlay.
        steps.push(MountStep::Overlay {
            target: workspace.to_path_buf(),
            lower: workspace.to_path_buf(),
            upper: overlay.upper.clone(),
            work: overlay.work.clone(),
        });
    } else {
        steps.push(MountStep::Bind {
            source: workspace.to_path_buf(),
            target: workspace.to_path_buf(),
            node: NodeKind::Dir,
            read_only: false,
            recursive: false,
            devices: false,
        });
        steps.extend(protected_steps(profile, workspace, host_root)?);
    }
    Ok(steps)
}

pub(crate) fn ro_bind(path: &str, node: NodeKind) -> MountStep {
    MountStep::Bind {
        source: path.into(),
        target: path.into(),
        node,
        read_only: true,
        recursive: true,
        devices: false,
    }
}

/// Pins for the ancestors of every protected path, then the protected paths themselves.
fn protected_steps(
    profile: &SandboxProfile,
    workspace: &Path,
    host_root: &Path,
) -> Result<Vec<MountStep>, SandboxError> {
    let host_ws = host_root.join(workspace.strip_prefix("/").unwrap_or(workspace));
    let mut pins: Vec<PathBuf> = Vec::new();
    let mut protected: Vec<PathBuf> = Vec::new();
    // A `.git` *file* points git at a repository elsewhere (a linked worktree, a
    // submodule's checkout): rewriting it would point the host's git at one the sandbox
    // made, so it is bound read-only itself.
    if std::fs::symlink_metadata(host_ws.join(".git")).is_ok_and(|m| m.is_file()) {
        protected.push(PathBuf::from(".git"));
    }
    let required = profile.all_protected_paths();
    let optional = crate::profile::GIT_PROTECTED_IF_PRESENT
        .iter()
        .map(PathBuf::from)
        .filter(|p| !required.contains(p));
    let candidates: Vec<(PathBuf, bool)> = required
        .iter()
        .cloned()
        .map(|p| (p, true))
        .chain(optional.map(|p| (p, false)))
        .collect();
    'paths: for (rel, must_exist) in candidates {
        // Walk the path: every component must be a real directory (no symlink), the last
        // one must exist, or the whole path must be absent with an absent parent.
        let mut so_far = PathBuf::new();
        let comps: Vec<_> = rel.components().collect();
        for (i, comp) in comps.iter().enumerate() {
            so_far.push(comp);
            let last = i + 1 == comps.len();
            match std::fs::symlink_metadata(host_ws.join(&so_far)) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(SandboxError::Profile {
                        field: "protected_paths",
                        message: format!(
                            "{} in the workspace is a symlink, so {} cannot be protected",
                            so_far.display(),
                            rel.display()
                        ),
                        help: format!(
                            "inspect {} and replace the symlink with the real directory or file",
                            workspace.join(&so_far).display()
                        ),
                    });
                }
                Ok(m) if !last && !m.is_dir() => continue 'paths, // e.g. a `.git` file of a worktree
                Ok(_) => {}
                Err(_) if i == 0 => continue 'paths, // nothing of it exists: nothing to protect
                Err(_) if !must_exist => continue 'paths, // protected only when present
                Err(_) => {
                    return Err(SandboxError::Profile {
                        field: "protected_paths",
                        message: format!(
                            "{} does not exist in the workspace but its parent does, so the sandbox could create it",
                            rel.display()
                        ),
                        help: format!(
                            "create it (for a directory: mkdir {}) so it can be bound read-only, or remove it from protected_paths",
                            workspace.join(&rel).display()
                        ),
                    });
                }
            }
        }
        let mut ancestor = PathBuf::new();
        for comp in comps.iter().take(comps.len() - 1) {
            ancestor.push(comp);
            if !pins.contains(&ancestor) {
                pins.push(ancestor.clone());
            }
        }
        if !protected.contains(&rel) {
            protected.push(rel);
        }
    }
    // Pins are rebound first (outermost first): a later pin would hide the read-only
    // mounts below it.
    pins.sort_by_key(|p| p.components().count());
    protected.sort_by_key(|p| p.components().count());
    let mut steps: Vec<MountStep> = pins
        .into_iter()
        .filter(|p| !protected.contains(p))
        .map(|relative| MountStep::Rebind {
            anchor: workspace.to_path_buf(),
            relative,
            read_only: false,
            reason: RebindReason::Pin,
        })
        .collect();
    steps.extend(protected.into_iter().map(|relative| MountStep::Rebind {
        anchor: workspace.to_path_buf(),
        relative,
        read_only: true,
        reason: RebindReason::Protected,
    }));
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_for(ws: &Path) -> Result<MountPlan, SandboxError> {
        MountPlan::for_profile(&SandboxProfile::new(ws), ws)
    }

    #[test]
    fn root_is_read_only_and_workspace_is_writable_at_the_same_path() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        let plan = plan_for(&ws).unwrap();
        assert!(
            matches!(&plan.steps[0], MountStep::Tmpfs { target, read_only: true, .. } if target == Path::new("/"))
        );
        let ws_step = plan.steps.iter().find(|s| s.target() == ws).unwrap();
        assert!(
            matches!(ws_step, MountStep::Bind { source, read_only: false, .. } if source == &ws)
        );
        // Nothing from the host's home or sockets; /sys absent.
        for s in &plan.steps {
            let t = s.target();
            assert!(
                !t.starts_with("/sys") && !t.starts_with("/run") && !t.starts_with("/home")
                    || t.starts_with(&ws),
                "{t:?}"
            );
        }
        assert!(plan.steps.iter().any(|s| matches!(s, MountStep::Rebind { relative, read_only: true, .. } if relative == Path::new("sys"))));
        assert!(!plan
            .steps
            .iter()
            .any(|s| s.target() == Path::new("/etc/shadow")));
    }

    #[test]
    fn a_read_only_path_under_a_link_the_sandbox_creates_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        let tool = tempfile::Builder::new().tempdir_in("/var/tmp").unwrap();
        let mut profile = SandboxProfile::new(&ws);
        profile.read_only_paths.push(tool.path().to_path_buf());
        let err = MountPlan::for_profile(&profile, &ws).expect_err("must be refused");
        assert!(err.to_string().contains("/var/tmp"), "{err}");
    }

    #[test]
    fn protected_paths_are_pinned_then_bound_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        std::fs::write(ws.join(".git/config"), "").unwrap();
        let plan = plan_for(&ws).unwrap();
        let rebinds: Vec<_> = plan
            .steps
            .iter()
            .filter_map(|s| match s {
                MountStep::Rebind {
                    relative,
                    read_only,
                    reason,
                    ..
                } => Some((relative.clone(), *read_only, *reason)),
                _ => None,
            })
            .filter(|(_, _, r)| *r != RebindReason::KernelInterface)
            .collect();
        assert_eq!(
            rebinds,
            vec![
                (PathBuf::from(".git"), false, RebindReason::Pin),
                (PathBuf::from(".git/hooks"), true, RebindReason::Protected),
                (PathBuf::from(".git/config"), true, RebindReason::Protected),
            ]
        );
    }

    #[test]
    fn i2_every_git_entry_that_runs_code_or_sets_config_is_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        for d in [
            ".git/hooks",
            ".git/info",
            ".git/modules/sub/hooks",
            ".git/worktrees/wt",
        ] {
            std::fs::create_dir_all(ws.join(d)).unwrap();
        }
        for f in [".git/config", ".git/config.worktree", ".git/commondir"] {
            std::fs::write(ws.join(f), "").unwrap();
        }
        let plan = plan_for(&ws).unwrap();
        let read_only: Vec<PathBuf> = plan
            .steps
            .iter()
            .filter_map(|s| match s {
                MountStep::Rebind {
                    relative,
                    read_only: true,
                    reason: RebindReason::Protected,
                    ..
                } => Some(relative.clone()),
                _ => None,
            })
            .collect();
        for want in [
            ".git/hooks",
            ".git/config",
            ".git/config.worktree",
            ".git/commondir",
            ".git/info",
            ".git/modules",
            ".git/worktrees",
        ] {
            assert!(
                read_only.contains(&PathBuf::from(want)),
                "{want}: {read_only:?}"
            );
        }
        // Absent optional entries are not an error (no remotes/ nor branches/ here).
        assert!(!read_only.contains(&PathBuf::from(".git/remotes")));
    }

    #[test]
    fn i2_a_git_file_at_the_top_is_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        std::fs::write(ws.join(".git"), "gitdir: /elsewhere/.git/worktrees/x\n").unwrap();
        let plan = plan_for(&ws).unwrap();
        assert!(plan.steps.iter().any(|s| matches!(s,
            MountStep::Rebind { relative, read_only: true, reason: RebindReason::Protected, .. }
                if relative == Path::new(".git"))));
    }

    #[test]
    fn symlinked_protected_path_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::write(ws.join(".git/config"), "").unwrap();
        std::os::unix::fs::symlink("/etc", ws.join(".git/hooks")).unwrap();
        let err = plan_for(&ws).unwrap_err().to_string();
        assert!(err.contains("symlink"), "{err}");
    }

    #[test]
    fn missing_protected_path_under_existing_parent_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        let err = plan_for(&ws).unwrap_err().to_string();
        assert!(err.contains(".git/config does not exist"), "{err}");
        assert!(err.contains("help:"), "{err}");
    }

    #[test]
    fn overlay_plan_binds_nothing_of_git_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        // Without the overlay this is refused (.git/config missing under an existing .git).
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        assert!(plan_for(&ws).is_err());
        let runs = tempfile::tempdir().unwrap();
        let mut profile = SandboxProfile::new(&ws);
        profile.protected_paths.push(".envrc".into());
        let overlay = crate::WorkspaceOverlay::create(runs.path(), "r", 4242, 4242).unwrap();
        profile.workspace_overlay = Some(overlay.clone());
        let plan = MountPlan::for_profile(&profile, &ws).unwrap();
        let below_ws: Vec<_> = plan
            .steps
            .iter()
            .filter(|s| s.target().starts_with(&ws))
            .collect();
        assert_eq!(
            below_ws,
            vec![&MountStep::Overlay {
                target: ws.clone(),
                lower: ws.clone(),
                upper: overlay.upper.clone(),
                work: overlay.work.clone(),
            }]
        );
        let text = plan.to_string();
        assert_eq!(text.lines().count(), plan.steps.len() + 2, "{text}");
        assert!(
            text.contains("userxattr,redirect_dir=nofollow,metacopy=off"),
            "{text}"
        );
        assert!(text.contains("commit decision holds them"), "{text}");
    }

    #[test]
    fn plan_prints_every_step() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        let plan = plan_for(&ws).unwrap();
        let text = plan.to_string();
        assert_eq!(text.lines().count(), plan.steps.len() + 1);
        assert!(text.contains("/usr") && text.contains("/proc/sys"));
    }
}
