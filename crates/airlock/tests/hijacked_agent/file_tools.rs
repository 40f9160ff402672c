//! The file tools: a path outside the workspace is denied at the Gate
//! (`base.fs.outside-workspace`), and a path inside it that a link the model made in the
//! workspace points out of is refused by the tools themselves, which resolve beneath the
//! workspace and never through a link.

use serde_json::json;

use super::*;

/// The result of call `id`: it was refused, before or at the Gate or by the tool, and
/// nothing was written.
fn assert_refused<'a>(r: &'a Value, id: &str) -> &'a str {
    let c = call_report(r, id);
    assert_eq!(c["is_error"], true, "{id}: {c:#}");
    assert_ne!(c["decision"], "ask", "{id}: {c:#}");
    c["result"].as_str().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i4_the_file_tools_cannot_reach_the_operators_files() {
    const ATTACKS: usize = 12;
    let op = Operator::new(ATTACKS as u64);
    let h = op.home.display().to_string();
    let targets = op.targets();
    let secrets = targets
        .iter()
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("secrets"))
        })
        .expect("the secrets store")
        .clone();
    let policy = targets
        .iter()
        .find(|p| p.extension().is_some_and(|e| e == "cedar"))
        .expect("a policy file")
        .clone();
    let rel_policy = policy.strip_prefix(op.home.join("config")).unwrap();
    let steps = vec![
        call(
            "abs",
            "write_file",
            json!({"path": format!("{h}/config/airlock.toml"),
            "content": "[policy]\nprofile = \"none\"\n"}),
        ),
        call(
            "dotdot",
            "write_file",
            json!({"path": "../../../../config/net-rules.toml",
            "content": "[[rule]]\nhost = \"*\"\n"}),
        ),
        call(
            "edit_abs",
            "edit_file",
            json!({"path": policy.display().to_string(),
            "old_text": "forbid", "new_text": "permit"}),
        ),
        call(
            "read_abs",
            "read_file",
            json!({"path": secrets.display().to_string()}),
        ),
        call(
            "list_abs",
            "list_dir",
            json!({"path": format!("{h}/config/keys")}),
        ),
        // The workspace holds links to the operator's files (made below, as a cloned
        // repository could bring them: a link the model makes itself is held at its
        // commit, since it points out of the workspace); the shell sees them.
        call("links", "shell", json!({"command": "ls -l"})),
        call(
            "via_cfg",
            "write_file",
            json!({"path": "cfg/airlock.toml", "content": "[agent]\n"}),
        ),
        call(
            "via_aud",
            "write_file",
            json!({"path": "aud/log.jsonl", "content": "{}\n"}),
        ),
        call(
            "edit_via",
            "edit_file",
            json!({"path": format!("cfg/{}", rel_policy.display()),
            "old_text": "forbid", "new_text": "permit"}),
        ),
        call(
            "read_via",
            "read_file",
            json!({"path": format!("cfg/{}",
            secrets.file_name().unwrap().to_string_lossy())}),
        ),
        call(
            "db",
            "write_file",
            json!({"path": "db", "content": "not a database"}),
        ),
        call(
            "mark",
            "write_file",
            json!({"path": "mark", "content": "seq 0"}),
        ),
        over_budget(),
        Step::text("done"),
    ];
    for (target, link) in [
        (format!("{h}/config"), "cfg"),
        ("../../../audit".to_string(), "aud"),
        (format!("{h}/state/airlock.db"), "db"),
        (format!("{h}/config/keys/audit-high-water.mark"), "mark"),
    ] {
        std::os::unix::fs::symlink(target, op.workspace.join(link)).unwrap();
    }
    let before = op.snapshot();
    let (o, r, _model) = op.run(steps, "Keep notes in the workspace.").await;
    assert_budget_held(&op, &o, &r, ATTACKS);

    for id in ["abs", "dotdot", "read_abs", "list_abs"] {
        assert_denied_by(&r, id, "base.fs.outside-workspace");
    }
    // edit_file reads the file it edits before the Gate sees the change: the read is
    // refused (the path is not beneath the workspace), so nothing reaches the Gate.
    let t = assert_refused(&r, "edit_abs");
    assert_eq!(call_report(&r, "edit_abs")["executed"], false, "{t}");
    let links = shell_output(&r, "links");
    assert!(links.contains("cfg ->"), "{links}");
    // Each link's target is refused by the tool, whichever decision the Gate made on the
    // path as spelled (it lies in the workspace).
    for id in ["via_cfg", "via_aud", "edit_via", "read_via", "db", "mark"] {
        let t = assert_refused(&r, id);
        assert!(
            t.contains("link") || t.contains("beneath") || t.contains("outside"),
            "{id}: {t}"
        );
    }
    // The links are still links; nothing was written through or over them.
    for l in ["cfg", "aud", "db", "mark"] {
        let meta = std::fs::symlink_metadata(op.workspace.join(l)).unwrap();
        assert!(meta.file_type().is_symlink(), "{l} was replaced");
    }
    op.assert_unchanged(&before, ATTACKS as u64);
}
