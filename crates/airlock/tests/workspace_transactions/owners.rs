//! A root host working on someone's directory: the run can change and delete that owner's
//! files (the sandbox sees them as its own), and what a commit or an undo writes belongs to
//! the owner, never to root. Two runs in a row show it: the second changes what the first
//! committed.

use std::os::unix::fs::MetadataExt;

use crate::support::*;

const OWNER: u32 = 4321;

fn owner_of(f: &Fixture, name: &str) -> (u32, u32) {
    let m = std::fs::symlink_metadata(f.ws.join(name)).unwrap();
    (m.uid(), m.gid())
}

#[test]
fn a_root_hosts_runs_change_the_owners_files_and_commits_keep_them_the_owners() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: an ordinary user's files are its own and so is what it writes");
        return;
    }
    let f = home_with(1, "");
    put(
        &f.ws,
        &[
            ("notes.md", "one\n"),
            ("old.txt", "old\n"),
            ("src/a.rs", "a\n"),
        ],
    );
    for entry in ["", "notes.md", "old.txt", "src", "src/a.rs"] {
        std::os::unix::fs::lchown(f.ws.join(entry), Some(OWNER), Some(OWNER)).unwrap();
    }

    let o = exec(
        &f,
        "echo two >> notes.md && rm old.txt && echo b > src/b.rs && mkdir docs && echo d > docs/d.md",
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("committed as checkpoint"), "{}", text(&o));
    assert_eq!(read(&f.ws, "notes.md").as_deref(), Some("one\ntwo\n"));
    assert!(read(&f.ws, "old.txt").is_none());
    for name in ["notes.md", "src/b.rs", "docs", "docs/d.md"] {
        assert_eq!(owner_of(&f, name), (OWNER, OWNER), "{name}");
    }

    // The next run changes what the last one committed.
    let o = exec(&f, "echo three >> notes.md && echo c >> src/b.rs");
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        read(&f.ws, "notes.md").as_deref(),
        Some("one\ntwo\nthree\n")
    );
    assert_eq!(read(&f.ws, "src/b.rs").as_deref(), Some("b\nc\n"));

    // Undo writes the owner's files back as the owner's.
    let undo = airlock_in(&f, &["undo", "2"]);
    assert!(undo.status.success(), "{}", text(&undo));
    assert_eq!(read(&f.ws, "old.txt").as_deref(), Some("old\n"));
    assert_eq!(read(&f.ws, "notes.md").as_deref(), Some("one\n"));
    assert!(read(&f.ws, "src/b.rs").is_none());
    for name in ["notes.md", "old.txt"] {
        assert_eq!(owner_of(&f, name), (OWNER, OWNER), "{name}");
    }
}

/// A root-owned workspace (the common case as root, and what every other transaction test
/// uses): files written by a commit stay root's, and a later run can still change them.
#[test]
fn a_root_owned_workspace_stays_root_owned_and_changeable() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let f = home_with(1, "");
    put(&f.ws, &[("a.txt", "a\n")]);
    let o = exec(&f, "echo b > b.txt && echo more >> a.txt");
    assert!(o.status.success(), "{}", text(&o));
    let o = exec(&f, "echo c >> b.txt && rm a.txt");
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(read(&f.ws, "b.txt").as_deref(), Some("b\nc\n"));
    assert!(read(&f.ws, "a.txt").is_none());
    assert_eq!(owner_of(&f, "b.txt"), (0, 0));
}
