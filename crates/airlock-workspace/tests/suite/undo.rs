//! Undo and restore: across commits and sessions, refusing to overwrite changes made
//! outside Airlock unless forced, each itself a checkpoint, within the retention limit.

use airlock_workspace::{CommitMeta, Retention, Workspace, WorkspaceError};

use super::fixture::{fx, meta, Fx};

fn run(f: &mut Fx, ws: &Workspace, script: &str, session: &str) -> airlock_workspace::CheckpointId {
    f.next_run();
    f.overlay(script);
    let cs = f.compute();
    let m = CommitMeta {
        session: session.into(),
        principal: format!("agent:{session}"),
        note: script.into(),
    };
    ws.commit(&cs, &f.upper, m).unwrap().unwrap()
}

#[test]
fn undo_restores_a_file_an_unattended_commit_overwrote() {
    let mut f = fx();
    f.put("notes.md", b"the owner's notes\n");
    let ws = f.open();
    run(
        &mut f,
        &ws,
        "echo overwritten > notes.md; echo junk > junk",
        "s1",
    );
    assert_eq!(f.read("notes.md").unwrap(), b"overwritten\n");
    let report = ws.undo(1, false, meta("undo")).unwrap();
    assert_eq!(f.read("notes.md").unwrap(), b"the owner's notes\n");
    assert_eq!(f.read("junk"), None);
    assert_eq!(report.reverted.len(), 1);
    assert!(
        report.checkpoint.is_some(),
        "the undo is itself a checkpoint"
    );
    // ... so it can be taken back.
    ws.restore(report.checkpoint.unwrap(), false, meta("redo"))
        .unwrap();
    assert_eq!(f.read("notes.md").unwrap(), b"overwritten\n");
    assert_eq!(f.read("junk").unwrap(), b"junk\n");
}

#[test]
fn undo_n_goes_back_across_sessions() {
    let mut f = fx();
    f.put("a", b"0\n");
    let ws = f.open();
    run(&mut f, &ws, "echo 1 > a", "s1");
    run(
        &mut f,
        &ws,
        "echo 2 > a; rm -f nothing; mkdir d; echo x > d/x",
        "s2",
    );
    run(&mut f, &ws, "echo 3 > a; rm -r d", "s3");
    // A new handle (another command) sees the same history.
    drop(ws);
    let ws = f.open();
    assert_eq!(ws.checkpoints().unwrap().len(), 3);
    ws.undo(2, false, meta("undo 2")).unwrap();
    assert_eq!(f.read("a").unwrap(), b"1\n");
    assert!(!f.ws.join("d").exists());
    ws.undo(1, false, meta("undo 1")).unwrap();
    assert_eq!(f.read("a").unwrap(), b"0\n");
    let err = ws.undo(1, false, meta("undo more")).unwrap_err();
    assert!(
        matches!(err, WorkspaceError::NothingToUndo { available: 0, .. }),
        "{err}"
    );
    let list = ws.checkpoints().unwrap();
    assert!(
        list.iter()
            .filter(|c| c.restore_of.is_none())
            .all(|c| c.undone),
        "{list:?}"
    );
}

#[test]
fn a_restore_over_files_changed_outside_airlock_refuses_without_force() {
    let mut f = fx();
    f.put("a.txt", b"orig\n");
    f.put("b.txt", b"orig b\n");
    let ws = f.open();
    let id = run(&mut f, &ws, "echo agent > a.txt; echo agent > b.txt", "s1");
    // The owner edits one of them by hand afterwards.
    f.put("b.txt", b"owner's hand edit\n");
    let err = ws.restore(id, false, meta("restore")).unwrap_err();
    match &err {
        WorkspaceError::ChangedOutside { paths } => assert_eq!(paths, &vec!["b.txt".to_string()]),
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("--force"), "{err}");
    assert_eq!(f.read("a.txt").unwrap(), b"agent\n", "nothing restored");
    assert_eq!(f.read("b.txt").unwrap(), b"owner's hand edit\n");
    let report = ws.restore(id, true, meta("restore --force")).unwrap();
    assert_eq!(report.forced, vec!["b.txt".to_string()]);
    assert_eq!(f.read("a.txt").unwrap(), b"orig\n");
    assert_eq!(f.read("b.txt").unwrap(), b"orig b\n");
    // The forced-over edit is in the restore's checkpoint, so it is not lost.
    let last = ws.checkpoints().unwrap().last().unwrap().id;
    ws.restore(last, false, meta("take back")).unwrap();
    assert_eq!(f.read("b.txt").unwrap(), b"owner's hand edit\n");
}

#[test]
fn a_file_added_outside_airlock_in_a_directory_the_undo_removes_is_named() {
    let mut f = fx();
    let ws = f.open();
    run(&mut f, &ws, "mkdir new && echo a > new/a", "s1");
    f.put("new/mine", b"owner file");
    let err = ws.undo(1, false, meta("undo")).unwrap_err();
    assert!(err.to_string().contains("new/mine"), "{err}");
    assert_eq!(f.read("new/mine").unwrap(), b"owner file");
}

#[test]
fn retention_prunes_the_oldest_checkpoints_and_their_contents() {
    let mut f = fx();
    f.put("a", b"v0");
    let (ws, _) = Workspace::open_with(
        &f.ws,
        &f.state,
        Retention {
            max_checkpoints: 2,
            max_bytes: u64::MAX,
        },
    )
    .unwrap();
    let first = run(&mut f, &ws, "echo v1 > a", "s1");
    run(&mut f, &ws, "echo v2 > a", "s1");
    run(&mut f, &ws, "echo v3 > a", "s1");
    let ids: Vec<_> = ws.checkpoints().unwrap().iter().map(|c| c.id).collect();
    assert_eq!(ids.len(), 2);
    assert!(!ids.contains(&first));
    let err = ws.restore(first, false, meta("too old")).unwrap_err();
    assert!(
        matches!(err, WorkspaceError::NoCheckpoint { pruned: true, .. }),
        "{err}"
    );
    // Only the contents the kept checkpoints name remain: v1..v3, not v0.
    let objects = ws.state_dir().join("objects");
    let mut n = 0;
    for shard in std::fs::read_dir(&objects).unwrap() {
        n += std::fs::read_dir(shard.unwrap().path()).unwrap().count();
    }
    assert_eq!(n, 3, "v1, v2, v3");
}

#[test]
fn show_and_diff_name_the_changes() {
    let mut f = fx();
    f.put("a.txt", b"one\ntwo\n");
    let ws = f.open();
    let id = run(
        &mut f,
        &ws,
        "printf 'one\\nTWO\\n' > a.txt; printf 'evil\\033[2J\\n' > b.txt",
        "s9",
    );
    let d = ws.show(id).unwrap();
    assert_eq!(d.info.session, "s9");
    assert_eq!((d.info.added, d.info.modified), (1, 1));
    let text = ws.diff(id).unwrap();
    assert!(text.contains("-two") && text.contains("+TWO"), "{text}");
    assert!(text.contains("+evil\\u{1b}[2J"), "{text}");
    assert!(!text.contains('\x1b'));
}

#[test]
fn retention_by_bytes_keeps_the_newest_checkpoint_whatever_its_size() {
    let mut f = fx();
    let (ws, _) = Workspace::open_with(
        &f.ws,
        &f.state,
        Retention {
            max_checkpoints: 100,
            max_bytes: 1500,
        },
    )
    .unwrap();
    run(&mut f, &ws, "head -c 1000 /dev/zero > a", "s1");
    run(&mut f, &ws, "head -c 1000 /dev/zero | tr '\\0' x > b", "s1");
    let ids: Vec<_> = ws.checkpoints().unwrap().iter().map(|c| c.id.0).collect();
    assert_eq!(ids, vec![2], "the first no longer fits beside the second");
    run(&mut f, &ws, "head -c 4000 /dev/zero | tr '\\0' y > c", "s1");
    let ids: Vec<_> = ws.checkpoints().unwrap().iter().map(|c| c.id.0).collect();
    assert_eq!(ids, vec![3], "the newest is kept even over the limit");
    // It can still be undone.
    ws.undo(1, false, meta("undo")).unwrap();
    assert_eq!(f.read("c"), None);
    assert_eq!(f.read("b").unwrap().len(), 1000);
}
