//! Host-side writes (the file tools) go through the same change set and commit.

use std::os::unix::fs::PermissionsExt;

use airlock_workspace::{ChangeKind, ChangeSet, ChangeSetOptions, Staging};

use super::fixture::{fx, meta, rp};

#[test]
fn staged_writes_and_removals_commit_like_a_run() {
    let f = fx();
    f.put("src/main.rs", b"fn main() {}\n");
    f.put("old.txt", b"old");
    std::fs::set_permissions(f.ws.join("src"), std::fs::Permissions::from_mode(0o750)).unwrap();
    let dir = f.upper.parent().unwrap().join("stage");
    let st = Staging::new(&dir, &f.ws).unwrap();
    st.write_file(
        &rp("src/main.rs"),
        b"fn main() { println!(\"hi\"); }\n",
        0o644,
    )
    .unwrap();
    st.write_file(&rp("docs/new.md"), b"# new\n", 0o4755)
        .unwrap();
    st.remove(&rp("old.txt")).unwrap();
    let cs = ChangeSet::compute(&f.ws, st.path(), &ChangeSetOptions::default()).unwrap();
    let kinds: Vec<_> = cs
        .entries
        .iter()
        .map(|e| (e.path.display(), e.kind()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("docs".to_string(), ChangeKind::Added),
            ("docs/new.md".to_string(), ChangeKind::Added),
            ("old.txt".to_string(), ChangeKind::Deleted),
            ("src/main.rs".to_string(), ChangeKind::Modified),
        ],
        "the staged parent `src` keeps the workspace's mode, so it is no change"
    );
    let ws = f.open();
    ws.commit(&cs, st.path(), meta("write_file")).unwrap();
    assert_eq!(f.read("docs/new.md").unwrap(), b"# new\n");
    assert_eq!(
        std::fs::metadata(f.ws.join("docs/new.md"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o755
    );
    assert_eq!(f.read("old.txt"), None);
    assert!(f
        .read("src/main.rs")
        .unwrap()
        .starts_with(b"fn main() { println"));
}

#[test]
fn staged_writes_never_go_through_a_link_or_over_a_file() {
    let f = fx();
    let outside = f.ws.parent().unwrap().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, f.ws.join("out")).unwrap();
    std::os::unix::fs::symlink("real.txt", f.ws.join("alias.txt")).unwrap();
    f.put("real.txt", b"r");
    f.put("plain", b"a file");
    let st = Staging::new(&f.upper.parent().unwrap().join("stage"), &f.ws).unwrap();
    let e = st.write_file(&rp("out/x"), b"evil", 0o644).unwrap_err();
    assert!(
        matches!(e, airlock_workspace::WorkspaceError::ThroughLink { .. }),
        "{e}"
    );
    let e = st.write_file(&rp("alias.txt"), b"evil", 0o644).unwrap_err();
    assert!(
        matches!(e, airlock_workspace::WorkspaceError::ThroughLink { .. }),
        "{e}"
    );
    assert!(
        st.write_file(&rp("plain/x"), b"x", 0o644).is_err(),
        "a file is not made a directory"
    );
    let cs = ChangeSet::compute(&f.ws, st.path(), &ChangeSetOptions::default()).unwrap();
    assert!(cs.is_empty(), "{:?}", cs.entries);
    // Removing the link itself is fine.
    st.remove(&rp("out")).unwrap();
    let cs = ChangeSet::compute(&f.ws, st.path(), &ChangeSetOptions::default()).unwrap();
    assert_eq!(cs.entries.len(), 1);
    assert_eq!(cs.entries[0].kind(), ChangeKind::Deleted);
}
