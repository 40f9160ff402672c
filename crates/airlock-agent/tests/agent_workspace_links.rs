//! A symlink in the workspace that points outside cannot be read, written or listed
//! through the file tools, even though the Gate (which judges the path lexically) allows
//! the call: the kernel resolves every path beneath the workspace root.

mod agent_support;

use agent_support::{args, tool_results_sent, Harness};
use airlock_agent::agent::Outcome;
use airlock_agent::provider::ProviderKind;
use airlock_agent::scripted::{ScriptedModel, Step};
use airlock_core::DecisionKind;
use serde_json::json;

#[tokio::test]
async fn links_out_of_the_workspace_are_never_followed() {
    let mut h = Harness::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "TOP-SECRET").unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        h.workspace.join("file-link"),
    )
    .unwrap();
    std::os::unix::fs::symlink(outside.path(), h.workspace.join("dir-link")).unwrap();
    // A link that stays inside works.
    h.write("notes.txt", "inside");
    std::os::unix::fs::symlink("notes.txt", h.workspace.join("alias")).unwrap();

    let model = ScriptedModel::start([
        Step::tool_call("r1", "read_file", args(json!({"path": "file-link"}))),
        Step::tool_call(
            "r2",
            "read_file",
            args(json!({"path": "dir-link/secret.txt"})),
        ),
        Step::tool_call(
            "w1",
            "write_file",
            args(json!({"path": "file-link", "content": "pwned"})),
        ),
        Step::tool_call(
            "w2",
            "write_file",
            args(json!({"path": "dir-link/new.txt", "content": "pwned"})),
        ),
        Step::tool_call(
            "e1",
            "edit_file",
            args(json!({"path": "file-link", "old_text": "TOP", "new_text": "X"})),
        ),
        Step::tool_call("l1", "list_dir", args(json!({"path": "dir-link"}))),
        Step::tool_call("ok", "read_file", args(json!({"path": "alias"}))),
        Step::text("done"),
    ])
    .await
    .unwrap();
    let report = h
        .run(&model, ProviderKind::Openai, true, "look around")
        .await;
    assert!(
        matches!(report.outcome, Outcome::Completed { .. }),
        "{:?}",
        report.outcome
    );

    let (escapes, inside) = report.tool_calls.split_at(report.tool_calls.len() - 1);
    for call in escapes {
        assert!(call.is_error, "{call:?}");
        assert!(
            call.result.contains("leaves the workspace")
                || call.result.contains("is a symbolic link"),
            "{}: {}",
            call.call_id,
            call.result
        );
    }
    // The Gate allowed the reads and writes (lexically inside); the tools refused them.
    assert_eq!(escapes[0].decision, Some(DecisionKind::Allow));
    assert_eq!(escapes[2].decision, Some(DecisionKind::Allow));
    assert_eq!(inside[0].result, "inside");

    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "TOP-SECRET"
    );
    assert!(!outside.path().join("new.txt").exists());
    assert!(tool_results_sent(&model)
        .iter()
        .all(|t| !t.contains("TOP-SECRET")));
    h.assert_audit_verifies();
}

#[tokio::test]
async fn absolute_paths_only_inside_the_workspace() {
    let mut h = Harness::new();
    h.write("notes.txt", "inside");
    let abs = h.workspace.join("notes.txt").display().to_string();
    let model = ScriptedModel::start([
        Step::tool_call("a1", "read_file", args(json!({ "path": abs }))),
        Step::tool_call("a2", "read_file", args(json!({"path": "/etc/hostname"}))),
        Step::tool_call(
            "a3",
            "read_file",
            args(json!({"path": "sub/../../outside"})),
        ),
        Step::text("done"),
    ])
    .await
    .unwrap();
    let report = h.run(&model, ProviderKind::Anthropic, true, "read").await;
    assert_eq!(report.tool_calls[0].result, "inside");
    assert_eq!(report.tool_calls[1].decision, Some(DecisionKind::Deny));
    assert_eq!(report.tool_calls[2].decision, Some(DecisionKind::Deny));
}

#[tokio::test]
async fn hard_links_are_not_written_through() {
    let mut h = Harness::new();
    // A file outside the workspace on the same filesystem, hard-linked in.
    let outside = h.state.path().join("outside.txt");
    std::fs::write(&outside, "original").unwrap();
    std::fs::hard_link(&outside, h.workspace.join("hard")).unwrap();
    let model = ScriptedModel::start([
        Step::tool_call(
            "w",
            "write_file",
            args(json!({"path": "hard", "content": "pwned"})),
        ),
        Step::text("done"),
    ])
    .await
    .unwrap();
    let report = h.run(&model, ProviderKind::Openai, true, "write").await;
    assert!(report.tool_calls[0].is_error);
    assert!(
        report.tool_calls[0].result.contains("hard links"),
        "{}",
        report.tool_calls[0].result
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "original");
}

/// What a command left in the workspace is never followed by a host-side read: a hard
/// link to a host file is not read (nor used to show a diff for an edit), and a FIFO does
/// not hang the host.
#[tokio::test]
async fn hard_links_and_fifos_are_not_read_through() {
    let mut h = Harness::new();
    let outside = h.state.path().join("host-secret.txt");
    std::fs::write(&outside, "TOP-SECRET").unwrap();
    std::fs::hard_link(&outside, h.workspace.join("hard")).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(h.workspace.join("pipe"))
        .status()
        .unwrap();
    assert!(made.success());
    let model = ScriptedModel::start([
        Step::tool_call("r1", "read_file", args(json!({"path": "hard"}))),
        Step::tool_call("r2", "read_file", args(json!({"path": "pipe"}))),
        Step::tool_call(
            "w3",
            "write_file",
            args(json!({"path": "pipe", "content": "x"})),
        ),
        Step::text("done"),
    ])
    .await
    .unwrap();
    let report = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        h.run(&model, ProviderKind::Openai, true, "read them"),
    )
    .await
    .expect("a read of a FIFO hung the host");
    assert!(report.tool_calls[0].is_error);
    assert!(
        report.tool_calls[0].result.contains("other hard links"),
        "{}",
        report.tool_calls[0].result
    );
    assert!(report.tool_calls[1].is_error);
    assert!(
        report.tool_calls[1].result.contains("not a regular file"),
        "{}",
        report.tool_calls[1].result
    );
    // A write into the FIFO (allowed or refused by the Gate) never blocks either.
    assert!(report.tool_calls[2].is_error, "{:?}", report.tool_calls[2]);
    let write = &report.tool_calls[2].result;
    assert!(
        write.contains("No such device or address") || write.contains("not a regular file"),
        "{write}"
    );
    let sent = tool_results_sent(&model);
    assert!(sent.iter().all(|r| !r.contains("TOP-SECRET")), "{sent:?}");
}

/// The file tools write on the host, outside the sandbox: no entry of `.git` that git
/// executes or takes config from may be written through them.
#[tokio::test]
async fn git_config_entries_are_not_written_by_the_file_tools() {
    let mut h = Harness::new();
    std::fs::create_dir_all(h.workspace.join(".git/modules/sub")).unwrap();
    let model = ScriptedModel::start([
        Step::tool_call(
            "w1",
            "write_file",
            args(json!({"path": ".git/commondir", "content": "../evil\n"})),
        ),
        Step::tool_call(
            "w2",
            "write_file",
            args(json!({"path": ".git/config.worktree", "content": "[core]\n"})),
        ),
        Step::tool_call(
            "w3",
            "write_file",
            args(json!({"path": ".git/modules/sub/config", "content": "[core]\n"})),
        ),
        Step::text("done"),
    ])
    .await
    .unwrap();
    let report = h.run(&model, ProviderKind::Openai, true, "write").await;
    for (call, path) in report.tool_calls.iter().zip([
        ".git/commondir",
        ".git/config.worktree",
        ".git/modules/sub/config",
    ]) {
        assert_eq!(call.decision, Some(DecisionKind::Deny), "{path}: {call:?}");
        assert!(!h.workspace.join(path).exists(), "{path} was written");
    }
}
