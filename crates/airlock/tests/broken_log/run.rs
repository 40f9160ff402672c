//! `airlock run` on a broken log: the model's shell call and fetch run nothing and send
//! nothing, whether the log was broken before the run or while it waited for the model.

use std::time::{Duration, Instant};

use airlock_agent::scripted::{Fault, ScriptedModel, Step};

use super::*;
use crate::exec_fixture::scripted_command;

fn shell_call(h: &Home) -> Step {
    let command = format!(
        "touch marker && curl -s -o /dev/null --max-time 20 {} # {}",
        h.collector.url("/run-shell"),
        "x".repeat(5000)
    );
    Step::tool_call(
        "c1",
        "shell",
        serde_json::json!({ "command": command }).to_string(),
    )
}

fn fetch_call(h: &Home) -> Step {
    Step::tool_call(
        "c2",
        "fetch",
        serde_json::json!({ "url": h.long_url("run-fetch") }).to_string(),
    )
}

/// The owner names the fetch's URL, so it traces to trusted input after the shell's
/// output tainted the session.
fn prompt(h: &Home) -> String {
    format!("Ping the collector, then fetch {}", h.long_url("run-fetch"))
}

/// Sessions whose workspace holds the shell call's marker.
fn markers(h: &Home) -> usize {
    std::fs::read_dir(h.home.join("state/sessions"))
        .map(|dir| {
            dir.flatten()
                .filter(|s| s.path().join("workspace/marker").exists())
                .count()
        })
        .unwrap_or(0)
}

fn run_command(h: &Home, model: &ScriptedModel, setup: Option<&str>) -> std::process::Command {
    let mut cmd = scripted_command(&h.home, model);
    cmd.current_dir(&h.ws)
        .args(["run", "--json", "--approval-timeout", "1", &prompt(h)]);
    match setup {
        Some(s) => in_private_mounts(s, &cmd),
        None => cmd,
    }
}

async fn output(mut cmd: std::process::Command) -> std::process::Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// A home where one healthy run already ran its shell call and fetch.
async fn after_a_healthy_run() -> Home {
    let h = Home::new();
    // The sandbox uid must reach the session workspaces under the home (as root).
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&h.home, std::fs::Permissions::from_mode(0o755)).unwrap();
    let model = ScriptedModel::start([shell_call(&h), fetch_call(&h), Step::text("done")])
        .await
        .unwrap();
    let o = output(run_command(&h, &model, None)).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!text(&o).contains("\"is_error\":true"), "{}", text(&o));
    assert_eq!(markers(&h), 1, "the control's shell call did not run");
    assert_eq!(h.collector.hits(), 2, "the control sent nothing");
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i1_run_on_a_broken_log_runs_no_tool_call_and_sends_nothing() {
    for b in Breakage::ALL {
        if !may_mount(b) {
            continue;
        }
        let h = after_a_healthy_run().await;
        let model = ScriptedModel::start([shell_call(&h), fetch_call(&h), Step::text("done")])
            .await
            .unwrap();
        let setup = b.apply(&h);
        let o = output(run_command(&h, &model, setup.as_deref())).await;
        assert!(
            !matches!(o.status.code(), Some(0) | Some(99)),
            "{b:?}: {}",
            text(&o)
        );
        assert_eq!(markers(&h), 1, "{b:?}: the shell call ran: {}", text(&o));
        assert_eq!(h.collector.hits(), 2, "{b:?}: a request left: {}", text(&o));
        assert_told(b, &h, &o);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i1_a_log_broken_while_the_model_thinks_stops_its_tool_calls() {
    let h = after_a_healthy_run().await;
    // The model takes its time over the first answer; the log breaks meanwhile.
    let slow = Step::Fault(Fault::Slow {
        delay: Duration::from_secs(3),
        then: Box::new(shell_call(&h)),
    });
    let model = ScriptedModel::start([slow, fetch_call(&h), Step::text("done")])
        .await
        .unwrap();
    let child = run_command(&h, &model, None)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while model.requests().is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the run never called the model"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Breakage::LogIsADirectory.apply(&h);
    let o = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(markers(&h), 1, "the shell call ran: {}", text(&o));
    assert_eq!(h.collector.hits(), 2, "a request left: {}", text(&o));
    assert_told(Breakage::LogIsADirectory, &h, &o);
}
