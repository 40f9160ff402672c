//! Commits: the workspace ends up as the merged view was, and nothing outside it is
//! touched, whatever links the run or anyone else left.

use std::os::unix::fs::PermissionsExt;

use airlock_workspace::{ChangeSetOptions, Status, WorkspaceError};

use super::fixture::{fx, meta};

#[test]
fn a_commit_makes_the_workspace_what_the_run_saw() {
    let f = fx();
    f.put("a.txt", b"old\n");
    f.put("d/x", b"x");
    f.put("gone", b"bye");
    f.overlay(
        "echo new > a.txt; mkdir -p n/m && echo deep > n/m/f; rm gone; rm -r d; mkdir d; \
         echo y > d/y; ln -s a.txt link; chmod 600 a.txt",
    );
    let cs = f.compute();
    let ws = f.open();
    let id = ws.commit(&cs, &f.upper, meta("run 1")).unwrap().unwrap();
    assert_eq!(f.read("a.txt").unwrap(), b"new\n");
    assert_eq!(
        std::fs::metadata(f.ws.join("a.txt"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    assert_eq!(f.read("n/m/f").unwrap(), b"deep\n");
    assert_eq!(f.read("gone"), None);
    assert_eq!(f.read("d/x"), None);
    assert_eq!(f.read("d/y").unwrap(), b"y\n");
    assert_eq!(
        std::fs::read_link(f.ws.join("link")).unwrap().to_str(),
        Some("a.txt")
    );
    // Nothing left behind: no temporary files.
    let names: Vec<_> = std::fs::read_dir(&f.ws)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| !n.to_string_lossy().starts_with(".airlock-tmp")),
        "{names:?}"
    );
    let list = ws.checkpoints().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].id, id);
    assert_eq!(list[0].status, Status::Committed);
    assert_eq!(list[0].principal, "agent:s1");
    // The same change set again finds nothing to do: the workspace is its `after`.
    assert!(
        ws.commit(&cs, &f.upper, meta("again")).is_err(),
        "before no longer matches"
    );
}

#[test]
fn an_empty_change_set_makes_no_checkpoint() {
    let f = fx();
    f.put("a", b"x");
    f.overlay("cat a > /dev/null; touch a");
    let cs = f.compute();
    assert!(cs.is_empty());
    let ws = f.open();
    assert_eq!(ws.commit(&cs, &f.upper, meta("noop")).unwrap(), None);
    assert!(ws.checkpoints().unwrap().is_empty());
}

#[test]
fn a_file_the_owner_edits_after_the_change_set_is_computed_is_not_overwritten() {
    let f = fx();
    f.put("a.txt", b"v1");
    f.overlay("echo run > a.txt; echo b > b.txt");
    let cs = f.compute();
    f.put("a.txt", b"owner edit while the approval was pending");
    let ws = f.open();
    let err = ws.commit(&cs, &f.upper, meta("late")).unwrap_err();
    assert!(matches!(err, WorkspaceError::Conflict { .. }), "{err}");
    assert_eq!(
        f.read("a.txt").unwrap(),
        b"owner edit while the approval was pending"
    );
    assert_eq!(f.read("b.txt"), None);
}

#[test]
fn an_upper_layer_changed_after_the_decision_is_refused() {
    let f = fx();
    f.overlay("echo decided > a.txt");
    let cs = f.compute();
    std::fs::write(f.upper.join("a.txt"), b"swapped after approval").unwrap();
    let ws = f.open();
    let err = ws.commit(&cs, &f.upper, meta("swap")).unwrap_err();
    assert!(matches!(err, WorkspaceError::UpperChanged { .. }), "{err}");
    assert_eq!(f.read("a.txt"), None);
}

#[test]
fn a_directory_swapped_for_a_link_out_is_never_written_through() {
    let f = fx();
    let outside = f.ws.parent().unwrap().join("outside");
    std::fs::create_dir(&outside).unwrap();
    f.put("d/keep", b"k");
    f.overlay("echo evil > d/planted");
    let cs = f.compute();
    // Between the decision and the commit, `d` becomes a link to a directory outside.
    std::fs::rename(f.ws.join("d"), f.ws.join("d-moved")).unwrap();
    std::os::unix::fs::symlink(&outside, f.ws.join("d")).unwrap();
    let ws = f.open();
    let err = ws.commit(&cs, &f.upper, meta("swap")).unwrap_err();
    assert!(
        matches!(
            err,
            WorkspaceError::ThroughLink { .. } | WorkspaceError::Conflict { .. }
        ),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing written outside"
    );
}

#[test]
fn a_run_that_replaces_a_link_with_a_directory_writes_inside_the_workspace() {
    let f = fx();
    let outside = f.ws.parent().unwrap().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, f.ws.join("l")).unwrap();
    f.overlay("rm l; mkdir l; echo in > l/f");
    let cs = f.compute();
    let ws = f.open();
    ws.commit(&cs, &f.upper, meta("relink")).unwrap();
    assert!(std::fs::symlink_metadata(f.ws.join("l")).unwrap().is_dir());
    assert_eq!(f.read("l/f").unwrap(), b"in\n");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
}

#[test]
fn symlinks_in_the_upper_layer_are_never_followed_when_reading_it() {
    let f = fx();
    let secret = f.ws.parent().unwrap().join("secret");
    std::fs::write(&secret, b"host secret").unwrap();
    // A link in the upper layer to a host file is committed as a link, its target shown.
    std::os::unix::fs::symlink(&secret, f.upper.join("s")).unwrap();
    let cs = f.compute();
    let r = cs.render();
    assert!(!r.contains("host secret"), "{r}");
    assert!(cs.summary().symlink_out_of_workspace);
    let e = cs
        .entries
        .iter()
        .find(|e| e.path.as_bytes() == b"s")
        .unwrap();
    assert!(matches!(
        e.after,
        Some(airlock_workspace::Node::Symlink { .. })
    ));
    let _ = ChangeSetOptions::default();
}

#[test]
fn a_link_swapped_in_above_the_written_file_is_never_followed() {
    let f = fx();
    let outside = f.ws.parent().unwrap().join("outside");
    std::fs::create_dir_all(outside.join("sub")).unwrap();
    std::fs::write(outside.join("sub/victim"), b"host file").unwrap();
    f.put("d/sub/victim", b"workspace file");
    f.overlay("echo evil > d/sub/planted; echo evil > d/sub/victim");
    let cs = f.compute();
    // `d` becomes a link to a directory outside, two levels above what the commit writes.
    std::fs::rename(f.ws.join("d"), f.ws.join("d-moved")).unwrap();
    std::os::unix::fs::symlink(&outside, f.ws.join("d")).unwrap();
    let ws = f.open();
    let err = ws.commit(&cs, &f.upper, meta("swap")).unwrap_err();
    assert!(matches!(err, WorkspaceError::ThroughLink { .. }), "{err}");
    assert_eq!(
        std::fs::read(outside.join("sub/victim")).unwrap(),
        b"host file"
    );
    assert!(
        !outside.join("sub/planted").exists(),
        "nothing written outside"
    );
}

#[test]
fn a_hard_link_to_a_file_outside_is_replaced_never_written_through() {
    let f = fx();
    let outside = f.ws.parent().unwrap().join("outside-file");
    std::fs::write(&outside, b"host content\n").unwrap();
    std::fs::hard_link(&outside, f.ws.join("linked")).unwrap();
    f.overlay("echo run > linked");
    let cs = f.compute();
    let ws = f.open();
    ws.commit(&cs, &f.upper, meta("hardlink")).unwrap();
    assert_eq!(f.read("linked").unwrap(), b"run\n");
    assert_eq!(std::fs::read(&outside).unwrap(), b"host content\n");
    // And the undo puts the old content back as a file of its own, not through the link.
    ws.undo(1, false, meta("undo")).unwrap();
    assert_eq!(f.read("linked").unwrap(), b"host content\n");
    std::fs::write(f.ws.join("linked"), b"changed by hand\n").unwrap();
    assert_eq!(
        std::fs::read(&outside).unwrap(),
        b"host content\n",
        "no longer linked"
    );
}
