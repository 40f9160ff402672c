use std::os::unix::fs::{MetadataExt, PermissionsExt};

use super::*;

fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

#[test]
fn create_makes_private_layers_owned_by_the_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("state/runs");
    let o = WorkspaceOverlay::create(&runs, "run-1", 4242, 4243).unwrap();
    let runs = runs.canonicalize().unwrap();
    assert_eq!(o.upper, runs.join("run-1/upper"));
    assert_eq!(o.work, runs.join("run-1/work"));
    let (uid, gid) = if euid() == 0 {
        (4242, 4243)
    } else {
        (euid(), nix::unistd::getegid().as_raw())
    };
    for d in [runs.join("run-1"), o.upper.clone(), o.work.clone()] {
        let m = std::fs::symlink_metadata(&d).unwrap();
        assert!(m.is_dir(), "{}", d.display());
        assert_eq!(m.mode() & 0o7777, 0o700, "{}", d.display());
        assert_eq!((m.uid(), m.gid()), (uid, gid), "{}", d.display());
    }
    assert_eq!(std::fs::read_dir(&o.upper).unwrap().count(), 0);
}

#[test]
fn create_refuses_a_run_that_exists_and_names_that_are_not_plain() {
    let dir = tempfile::tempdir().unwrap();
    let o = WorkspaceOverlay::create(dir.path(), "r", 4242, 4242).unwrap();
    std::fs::write(o.upper.join("left-over"), "x").unwrap();
    let err = WorkspaceOverlay::create(dir.path(), "r", 4242, 4242).unwrap_err();
    assert!(err.to_string().contains("exists"), "{err}");
    // The earlier run's layer is untouched by the refusal.
    assert!(o.upper.join("left-over").exists());
    for bad in ["", ".", "..", "a/b", "a,b", "a:b", "new\nline"] {
        let err = WorkspaceOverlay::create(dir.path(), bad, 4242, 4242).unwrap_err();
        assert!(err.to_string().contains("help:"), "{bad:?}: {err}");
    }
    let err = WorkspaceOverlay::create(dir.path(), "s", 0, 4242).unwrap_err();
    assert!(err.to_string().contains("must not be 0"), "{err}");
}

#[test]
fn create_does_not_follow_a_symlink_at_the_run_directory() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let runs = dir.path().join("runs");
    std::fs::create_dir(&runs).unwrap();
    std::os::unix::fs::symlink(&elsewhere, runs.join("r")).unwrap();
    let err = WorkspaceOverlay::create(&runs, "r", 4242, 4242).unwrap_err();
    assert!(err.to_string().contains("exists"), "{err}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    // A runs dir that is itself a symlink is refused too.
    std::os::unix::fs::symlink(&elsewhere, dir.path().join("runs-link")).unwrap();
    let err = WorkspaceOverlay::create(&dir.path().join("runs-link"), "q", 4242, 4242)
        .unwrap_err()
        .to_string();
    assert!(err.contains("symlink"), "{err}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

#[test]
fn remove_deletes_deep_and_locked_trees_and_never_follows_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let o = WorkspaceOverlay::create(dir.path(), "r", 4242, 4242).unwrap();
    // Outside the layers: what a symlink in the upper layer points at must survive.
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("keep"), "kept").unwrap();
    std::os::unix::fs::symlink(&outside, o.upper.join("link-to-outside")).unwrap();
    std::os::unix::fs::symlink(outside.join("keep"), o.upper.join("file-link")).unwrap();
    // Deeper than the usual 1024-descriptor soft limit a recursive walk would need, built by descriptor
    // (its path is far longer than PATH_MAX).
    let mut fd = open_dir(None, &o.upper).unwrap();
    for _ in 0..1500 {
        mkdir_0700(&fd, Path::new("d")).unwrap();
        fd = open_dir(Some(&fd), Path::new("d")).unwrap();
    }
    std::fs::write(format!("/proc/self/fd/{}/deepest", fd_raw(&fd)), "x").unwrap();
    drop(fd);
    // Directories without any permission, as overlayfs' own work/work.
    std::fs::create_dir_all(o.upper.join("locked/inner")).unwrap();
    std::fs::write(o.upper.join("locked/inner/f"), "x").unwrap();
    for d in ["locked/inner", "locked"] {
        std::fs::set_permissions(o.upper.join(d), std::fs::Permissions::from_mode(0o000)).unwrap();
    }
    std::fs::create_dir(o.work.join("work")).unwrap();
    std::fs::set_permissions(o.work.join("work"), std::fs::Permissions::from_mode(0o000)).unwrap();

    o.remove().unwrap();
    assert!(!o.upper.exists() && !o.work.exists());
    assert!(
        !dir.path().join("r").exists(),
        "the emptied run dir is removed"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("keep")).unwrap(),
        "kept"
    );
    // Removing again is not an error.
    o.remove().unwrap();
}

fn fd_raw(fd: &OwnedFd) -> i32 {
    std::os::fd::AsRawFd::as_raw_fd(fd)
}

#[test]
fn validate_wants_sibling_layers_outside_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let ws = root.join("ws");
    std::fs::create_dir(&ws).unwrap();
    let o = WorkspaceOverlay::create(&root.join("runs"), "r", 4242, 4242).unwrap();
    o.validate(&ws).unwrap();
    let inside = WorkspaceOverlay::create(&ws, "r", 4242, 4242).unwrap();
    let err = inside.validate(&ws).unwrap_err().to_string();
    assert!(err.contains("overlap") && err.contains("help:"), "{err}");
    let apart = WorkspaceOverlay {
        upper: o.upper.clone(),
        work: root.join("runs"),
    };
    let err = apart.validate(&ws).unwrap_err().to_string();
    assert!(err.contains("side by side"), "{err}");
    let relative = WorkspaceOverlay {
        upper: "runs/r/upper".into(),
        work: "runs/r/work".into(),
    };
    assert!(relative.validate(&ws).is_err());
}

#[test]
fn overlay_profiles_round_trip_and_refuse_unknown_fields() {
    let o = WorkspaceOverlay {
        upper: "/s/runs/r/upper".into(),
        work: "/s/runs/r/work".into(),
    };
    let json = serde_json::to_string(&o).unwrap();
    assert_eq!(serde_json::from_str::<WorkspaceOverlay>(&json).unwrap(), o);
    let err = serde_json::from_str::<WorkspaceOverlay>(
        r#"{"upper":"/a/upper","work":"/a/work","lower":"/"}"#,
    )
    .unwrap_err();
    assert!(err.to_string().contains("unknown field"), "{err}");
    // An older profile without the field still reads, as "no overlay".
    let p: crate::SandboxProfile = serde_json::from_str(r#"{"workspace":"/x"}"#).unwrap();
    assert!(p.workspace_overlay.is_none());
}
