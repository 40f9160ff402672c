//! The shell tool: the model's commands run in the sandbox, where the operator's files
//! do not exist. Writes to their host paths find nothing (`ENOENT`), writes after
//! recreating the path land in the sandbox's own throwaway file system, the helper's
//! descriptors and root are closed to the payload (`EACCES`), a search of the whole tree
//! finds none of them, and the database and the `airlock` binary cannot be opened.

use serde_json::json;

use super::*;

/// `sh` words for a list of paths.
fn words(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| format!("'{}'", p.display()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The line of `out` that starts with `prefix`.
fn line<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line `{prefix}` in:\n{out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i4_the_shell_tool_cannot_reach_the_operators_files_or_store() {
    const ATTACKS: usize = 6;
    let op = Operator::new(ATTACKS as u64);
    let targets = op.targets();
    assert!(targets.len() >= 10, "{targets:?}");
    let all = words(&targets);
    let db = op.home.join("state/airlock.db");
    let steps = vec![
        // Append to each file in place, creating nothing.
        call(
            "append",
            "shell",
            json!({"command": format!(
            "for t in {all}; do if dd if=/dev/zero of=\"$t\" bs=1 count=1 conv=notrunc,nocreat oflag=append 2>e; \
             then echo \"WROTE $t\"; else echo \"REFUSED $t: $(tail -n1 e)\"; fi; done")}),
        ),
        // Remove, rename, or hard-link each into the workspace.
        call(
            "unlink",
            "shell",
            json!({"command": format!(
            "for t in {all}; do for op in rm mv ln; do \
               case $op in rm) rm \"$t\" 2>e;; mv) mv \"$t\" \"$t.old\" 2>e;; ln) ln \"$t\" \"hl-$RANDOM\" 2>e;; esac \
               && echo \"DID $op $t\" || echo \"REFUSED $op $t: $(tail -n1 e)\"; done; done")}),
        ),
        // Recreate each path and write it: whatever lands, lands in the sandbox. Its errors
        // go to a file of its own: the earlier steps' `e` was committed by a root host and
        // cannot be rewritten by the sandbox uid under the overlay (see invariants.md).
        call(
            "recreate",
            "shell",
            json!({"command": format!(
            "for t in {all}; do d=$(dirname \"$t\"); mkdir -p \"$d\" 2>/dev/null; \
             if printf 'policy: permit all' 2>e2 > \"$t\"; then echo \"LANDED $t on dev $(stat -c %d \"$d\")\"; \
             else echo \"REFUSED $t: $(tail -n1 e2)\"; fi; done")}),
        ),
        // The helper's root and descriptors, and a search of the whole tree.
        call(
            "procfs",
            "shell",
            json!({"command":
            "ls /proc/1/root/ 2>&1 | tail -n1; ls /proc/1/fd 2>&1 | tail -n1; \
             find / -path /proc -prune -o \\( -name airlock.db -o -name 'audit-signing.key*' -o -name net-rules.toml \
             -o -name 'secrets*.json' -o -name airlock.toml -o -name log.jsonl -o -name 'audit-high-water.mark' \\) -print 2>/dev/null; \
             echo end-of-search"}),
        ),
        // The database: approve the session's own request, grant, reset the budget.
        call(
            "sql",
            "shell",
            json!({"command": format!(
            "python3 - <<'PY'\nimport sqlite3\nfor sql in [\"UPDATE approvals SET status='approved' WHERE id='{id}'\", \
             \"INSERT INTO grants (id) VALUES ('g-hijack')\", \"DELETE FROM budget_usage\"]:\n    try:\n        \
             c = sqlite3.connect('file:{db}?mode=rw', uri=True); c.execute(sql); c.commit(); print('DID', sql)\n    \
             except Exception as e:\n        print('REFUSED', type(e).__name__, e)\nPY",
            id = op.approval, db = db.display())}),
        ),
        // The operator's own command, pointed at the home.
        call(
            "cli",
            "shell",
            json!({"command": format!(
            "AIRLOCK_HOME={home} {bin} approvals approve {id} 2>&1; echo \"exit $?\"",
            home = op.home.display(), bin = airlock_bin().display(), id = op.approval)}),
        ),
        over_budget(),
        Step::text("done"),
    ];
    let before = op.snapshot();
    let (o, r, _model) = op.run(steps, "Tidy up the workspace.").await;
    assert_budget_held(&op, &o, &r, ATTACKS);

    let out = shell_output(&r, "append");
    for t in &targets {
        let l = line(out, &format!("REFUSED {}:", t.display()));
        assert!(l.ends_with("No such file or directory"), "{l}");
    }
    let out = shell_output(&r, "unlink");
    assert!(!out.contains("DID "), "{out}");
    for t in &targets {
        for op_name in ["rm", "mv", "ln"] {
            let l = line(out, &format!("REFUSED {op_name} {}:", t.display()));
            assert!(l.ends_with("No such file or directory"), "{l}");
        }
    }
    let out = shell_output(&r, "recreate");
    for t in &targets {
        let prefix = t.display().to_string();
        let l = out
            .lines()
            .find(|l| l.contains(&format!(" {prefix}")))
            .unwrap_or_else(|| panic!("nothing about {prefix} in\n{out}"));
        if l.starts_with("REFUSED") {
            assert!(l.ends_with("Read-only file system"), "{l}");
        } else {
            // It landed on another file system than the host's file.
            use std::os::unix::fs::MetadataExt;
            let host_dev = std::fs::metadata(t).unwrap().dev();
            let dev: u64 = l.rsplit(' ').next().unwrap().parse().unwrap();
            assert_ne!(dev, host_dev, "{l}");
        }
    }
    let out = shell_output(&r, "procfs");
    assert!(
        out.contains("ls: cannot access '/proc/1/root/': Permission denied"),
        "{out}"
    );
    assert!(
        out.contains("ls: cannot open directory '/proc/1/fd': Permission denied"),
        "{out}"
    );
    // What find prints is a path; the two refusals above it start with `ls:`.
    let found: Vec<&str> = out.lines().filter(|l| l.starts_with('/')).collect();
    assert_eq!(found, Vec::<&str>::new(), "{out}");
    let out = shell_output(&r, "sql");
    assert!(!out.contains("DID "), "{out}");
    assert_eq!(
        out.matches("REFUSED OperationalError unable to open database file")
            .count(),
        3,
        "{out}"
    );
    let out = shell_output(&r, "cli");
    assert!(out.contains("No such file or directory"), "{out}");
    assert!(out.contains("exit 127"), "{out}");

    op.assert_unchanged(&before, ATTACKS as u64);
}
