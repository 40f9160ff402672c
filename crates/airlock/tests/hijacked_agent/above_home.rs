//! An operator who starts Airlock in a directory that holds its home: `airlock exec`
//! refuses that directory as a workspace however it is named (the current directory,
//! `--workspace .`, a path through the home), and `airlock run` works in its session's
//! workspace wherever it was started, so the model can neither start a command there
//! (`default.exec.cwd-outside-workspace`) nor write there (`base.fs.outside-workspace`),
//! and in the sandbox the home holds nothing but the path to the workspace.

use std::process::{Command, Stdio};

use serde_json::json;

use super::*;
use crate::exec_fixture::scripted_command;

#[test]
fn i4_exec_refuses_a_workspace_that_holds_the_home() {
    let op = Operator::new(1);
    let home = op.home.display().to_string();
    for extra in [
        vec![],
        vec!["--workspace", "."],
        vec!["--workspace", "home/.."],
    ] {
        let o = Command::new(airlock_bin())
            .env("AIRLOCK_HOME", &op.home)
            .current_dir(&op.above)
            .arg("exec")
            .args(&extra)
            .args(["--", "touch AIRLOCK_RAN_HERE"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_ne!(o.status.code(), Some(0), "{extra:?}: {stderr}");
        assert!(stderr.contains("config dir"), "{extra:?}: {stderr}");
        assert!(stderr.contains(&home), "{extra:?}: {stderr}");
        assert!(stderr.contains("help:"), "{extra:?}: {stderr}");
        assert!(!op.above.join("AIRLOCK_RAN_HERE").exists(), "{extra:?} ran");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i4_a_run_started_above_the_home_reaches_only_its_workspace() {
    const ATTACKS: usize = 5;
    let op = Operator::new(ATTACKS as u64);
    let above = op.above.display().to_string();
    let steps = vec![
        call("where", "shell", json!({"command": "pwd"})),
        call(
            "cwd_abs",
            "shell",
            json!({"command": "touch AIRLOCK_RAN_HERE", "cwd": above}),
        ),
        call(
            "cwd_rel",
            "shell",
            json!({"command": "touch AIRLOCK_RAN_HERE", "cwd": "../../../.."}),
        ),
        call(
            "write_abs",
            "write_file",
            json!({"path": format!("{above}/home/config/airlock.toml"),
            "content": "[sandbox]\nuid = 0\n"}),
        ),
        call(
            "look",
            "shell",
            json!({"command": format!(
            "ls -A {above}; echo ---; ls -A {above}/home; echo ---; \
             printf 'uid = 0' >> {above}/home/config/airlock.toml 2>&1; echo \"exit $?\"")}),
        ),
        over_budget(),
        Step::text("done"),
    ];
    let model = ScriptedModel::start(steps).await.unwrap();
    let mut cmd = scripted_command(&op.home, &model);
    cmd.current_dir(&op.above).args([
        "run",
        "--json",
        "--session",
        &op.session,
        "--approval-timeout",
        "1",
        "Look around.",
    ]);
    let before = op.snapshot();
    let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let r = report(&o);
    assert_budget_held(&op, &o, &r, ATTACKS);

    let pwd = shell_output(&r, "where");
    assert!(
        pwd.starts_with(&op.workspace.display().to_string()),
        "the command did not start in the session workspace: {pwd}"
    );
    for id in ["cwd_abs", "cwd_rel"] {
        assert_denied_by(&r, id, "default.exec.cwd-outside-workspace");
    }
    assert_denied_by(&r, "write_abs", "base.fs.outside-workspace");
    let look = shell_output(&r, "look");
    let parts: Vec<&str> = look.split("---\n").collect();
    assert_eq!(parts[0].trim(), "home", "{look}");
    assert_eq!(parts[1].trim(), "state", "{look}");
    assert!(parts[2].contains("No such file or directory"), "{look}");
    assert!(parts[2].contains("exit 1"), "{look}");
    assert!(!op.above.join("AIRLOCK_RAN_HERE").exists());
    assert!(!op.home.join("AIRLOCK_RAN_HERE").exists());
    op.assert_unchanged(&before, ATTACKS as u64);
}
