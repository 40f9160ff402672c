//! Checkpoints and undo: a commit made unattended is reverted by `airlock undo`, and a
//! restore never silently overwrites the owner's own later edits.

use crate::support::*;

#[test]
fn undo_restores_a_file_that_an_unattended_commit_overwrote() {
    let f = home_with(1, "");
    put(&f.ws, &[("plan.md", "the owner's plan\n")]);
    let o = exec(&f, "echo 'rewritten by the run' > plan.md");
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("committed as checkpoint"), "{}", text(&o));
    assert_eq!(
        read(&f.ws, "plan.md").as_deref(),
        Some("rewritten by the run\n")
    );

    let list = airlock_in(&f, &["checkpoints", "list"]);
    assert!(list.status.success(), "{}", text(&list));
    assert!(
        String::from_utf8_lossy(&list.stdout).contains("plan.md")
            || String::from_utf8_lossy(&list.stdout).contains("exec-"),
        "{}",
        text(&list)
    );

    let undo = airlock_in(&f, &["undo"]);
    assert!(undo.status.success(), "{}", text(&undo));
    assert_eq!(
        read(&f.ws, "plan.md").as_deref(),
        Some("the owner's plan\n")
    );
    assert!(
        kinds(&f.home).iter().any(|k| k == "workspace-undo"),
        "undo was not recorded"
    );
}

#[test]
fn a_restore_over_files_changed_outside_airlock_refuses_without_force() {
    let f = home_with(1, "");
    put(&f.ws, &[("draft.txt", "v1\n")]);
    let o = exec(&f, "echo v2 > draft.txt");
    assert!(text(&o).contains("committed as checkpoint"), "{}", text(&o));
    // The owner edits the file afterwards, outside Airlock.
    std::fs::write(f.ws.join("draft.txt"), "owner's v3\n").unwrap();

    let refused = airlock_in(&f, &["undo"]);
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(text(&refused).contains("draft.txt"), "{}", text(&refused));
    assert!(text(&refused).contains("--force"), "{}", text(&refused));
    assert_eq!(read(&f.ws, "draft.txt").as_deref(), Some("owner's v3\n"));

    let forced = airlock_in(&f, &["undo", "--force"]);
    assert!(forced.status.success(), "{}", text(&forced));
    assert_eq!(read(&f.ws, "draft.txt").as_deref(), Some("v1\n"));
}
