//! `kill -9` at every step of a commit: after the next open the workspace holds none of
//! the commit or all of it, never part, and the open says which.
//!
//! The test runs itself again as a child process (same binary, same test name, with the
//! step to die at in the environment); the child commits and kills itself with SIGKILL
//! right after step k.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;

use airlock_workspace::{ChangeSet, ChangeSetOptions, Recovery, Workspace};

use super::fixture::{fx, meta};

const STEP: &str = "AIRLOCK_WORKSPACE_TEST_DIE_AT";
const BASE: &str = "AIRLOCK_WORKSPACE_TEST_BASE";

#[derive(Debug, PartialEq, Eq, Clone)]
enum Item {
    File(Vec<u8>, u32),
    Dir,
    Link(std::path::PathBuf),
}

fn snapshot(root: &Path) -> BTreeMap<String, Item> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let md = std::fs::symlink_metadata(&p).unwrap();
            let item = if md.file_type().is_symlink() {
                Item::Link(std::fs::read_link(&p).unwrap())
            } else if md.is_dir() {
                stack.push(p.clone());
                Item::Dir
            } else {
                Item::File(std::fs::read(&p).unwrap(), md.permissions().mode() & 0o777)
            };
            out.insert(rel, item);
        }
    }
    out
}

fn child(step: usize, base: &Path) {
    let (ws, _) = Workspace::open(&base.join("ws"), &base.join("state")).unwrap();
    let cs = ChangeSet::compute(
        &base.join("ws"),
        &base.join("upper"),
        &ChangeSetOptions::default(),
    )
    .unwrap();
    let mut n = 0usize;
    ws.commit_observed(&cs, &base.join("upper"), meta("crash"), &mut |_| {
        if n == step {
            let _ = Command::new("kill")
                .args(["-9", &std::process::id().to_string()])
                .status();
            loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
        n += 1;
    })
    .unwrap();
}

#[test]
fn kill_9_at_every_commit_step_leaves_none_or_all_of_it() {
    if let (Ok(step), Ok(base)) = (std::env::var(STEP), std::env::var(BASE)) {
        child(step.parse().unwrap(), Path::new(&base));
        return;
    }
    let mut saw_finished = false;
    let mut saw_untouched = false;
    for step in 0.. {
        let f = fx();
        f.put("mod.txt", b"before\n");
        f.put("del.txt", b"delete me\n");
        f.put("tree/a", b"a");
        f.put("tree/b/c", b"c");
        f.put("mv-from", b"moved content");
        f.overlay(
            "echo after > mod.txt; rm del.txt; rm -r tree; mkdir tree; echo new > tree/n; \
             mv mv-from mv-to; mkdir -p add/deep; echo x > add/deep/x; ln -s mod.txt link",
        );
        let before = snapshot(&f.ws);
        let base = f.ws.parent().unwrap();
        let status = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "suite::crash::kill_9_at_every_commit_step_leaves_none_or_all_of_it",
                "--test-threads=1",
                "-q",
            ])
            .env(STEP, step.to_string())
            .env(BASE, base)
            .output()
            .unwrap();
        let killed = status.status.signal() == Some(9);
        assert!(
            killed || status.status.success(),
            "child failed at step {step}: {}",
            String::from_utf8_lossy(&status.stdout)
        );
        let (ws, recovery) = Workspace::open(&f.ws, &f.state).unwrap();
        let now = snapshot(&f.ws);
        // The full result, made by a clean commit in a twin directory.
        let g = fx();
        for (p, c) in [
            ("mod.txt", &b"before\n"[..]),
            ("del.txt", b"delete me\n"),
            ("tree/a", b"a"),
            ("tree/b/c", b"c"),
            ("mv-from", b"moved content"),
        ] {
            g.put(p, c);
        }
        g.overlay(
            "echo after > mod.txt; rm del.txt; rm -r tree; mkdir tree; echo new > tree/n; \
             mv mv-from mv-to; mkdir -p add/deep; echo x > add/deep/x; ln -s mod.txt link",
        );
        let cs = g.compute();
        g.open().commit(&cs, &g.upper, meta("clean")).unwrap();
        let after = snapshot(&g.ws);
        if now == before {
            saw_untouched = true;
            assert!(
                !matches!(recovery, Some(Recovery::Finished { .. })),
                "step {step}: recovery says finished but the workspace is untouched"
            );
        } else {
            assert_eq!(
                now, after,
                "step {step}: the workspace holds part of the commit (recovery: {recovery:?})"
            );
            saw_finished |= matches!(recovery, Some(Recovery::Finished { .. }));
        }
        // Recovery happens once; the next open finds nothing to do.
        drop(ws);
        let (_, again) = Workspace::open(&f.ws, &f.state).unwrap();
        assert_eq!(again, None, "step {step}");
        if !killed {
            assert_eq!(now, after, "a commit that ran to the end is complete");
            assert!(step > 5, "the commit has more than five steps ({step})");
            break;
        }
    }
    assert!(
        saw_finished && saw_untouched,
        "both outcomes were exercised"
    );
}

#[test]
fn a_crash_then_an_owner_edit_rolls_the_commit_back_and_keeps_the_edit() {
    let f = fx();
    f.put("a.txt", b"a before\n");
    f.put("z.txt", b"z before\n");
    f.overlay("echo a after > a.txt; echo z after > z.txt");
    let base = f.ws.parent().unwrap();
    // Steps: locked 0, prior saved 1, new saved 2, journaled 3, first write 4: die after
    // a.txt is written and before z.txt is.
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "suite::crash::kill_9_at_every_commit_step_leaves_none_or_all_of_it",
            "--test-threads=1",
            "-q",
        ])
        .env(STEP, "4")
        .env(BASE, base)
        .output()
        .unwrap();
    assert_eq!(
        out.status.signal(),
        Some(9),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(
        f.read("a.txt").unwrap(),
        b"a after\n",
        "the first write landed"
    );
    assert_eq!(f.read("z.txt").unwrap(), b"z before\n");
    // Before anything reopens the workspace, the owner edits the file not yet written.
    f.put("z.txt", b"owner's edit\n");
    let (ws, recovery) = Workspace::open(&f.ws, &f.state).unwrap();
    match &recovery {
        Some(Recovery::RolledBack { reason, .. }) => assert!(reason.contains("z.txt"), "{reason}"),
        other => panic!("expected a roll-back, got {other:?}"),
    }
    assert_eq!(
        f.read("a.txt").unwrap(),
        b"a before\n",
        "what was written is undone"
    );
    assert_eq!(
        f.read("z.txt").unwrap(),
        b"owner's edit\n",
        "the owner's edit is kept"
    );
    let list = ws.checkpoints().unwrap();
    assert_eq!(list[0].status, airlock_workspace::Status::RolledBack);
    assert!(
        ws.undo(1, false, meta("undo")).is_err(),
        "a rolled-back commit is not undone"
    );
}
