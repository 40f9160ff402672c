//! `[host] max_sandboxes` counts every sandbox the host starts: a session's shell call
//! waits in the same queue as the exec socket's runs (and fills it), and a session whose
//! sub-agent runs shell calls while the parent waits for it does not deadlock at a limit
//! of one.

use std::process::Stdio;

use airlock_agent::scripted::{ScriptedModel, Step};

use super::super::exec_fixture::{fixture, report_ok, scripted_command, Fixture};
use super::super::host_fixture::Host;
use super::super::{exec, verify};
use super::{background_exec, init, status, wait_for};

/// An `airlock run --json` through the host, started in the background.
fn start_run(f: &Fixture, model: &ScriptedModel, prompt: &str) -> std::process::Child {
    scripted_command(&f.home, model)
        .current_dir(&f.ws)
        .args(["run", "--json", "--approval-timeout", "5", prompt])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_shell_call_takes_a_slot_of_max_sandboxes_and_waits_in_its_queue() {
    let f = fixture();
    init(&f, "\n[host]\nmax_sandboxes = 1\nmax_queued = 1\n");
    let host = Host::start(&f.home);
    // The one slot, held by an exec until its client goes away.
    let mut first = background_exec(&f, "sleep 300");
    wait_for("the exec to hold the slot", || {
        status(&f)["host"]["runs_active"] == 1
    });
    let model = ScriptedModel::start([
        Step::tool_call("c1", "shell", r#"{"command":"echo from-the-agent"}"#),
        Step::text("Said it."),
    ])
    .await
    .unwrap();
    let agent = start_run(&f, &model, "Say it");
    // The session's shell call is a sandbox like any other: it waits for the slot.
    let waiting = {
        let home = f.home.clone();
        tokio::task::spawn_blocking(move || {
            wait_for("the session's shell call to queue", || {
                super::status_of(&home)["host"]["runs_waiting"] == 1
            })
        })
    };
    waiting.await.unwrap();
    // The queue is full with it: one more exec is refused by the limit's name.
    let third = exec(&f, &[], "echo third");
    assert_eq!(third.status.code(), Some(1), "{third:?}");
    let err = String::from_utf8_lossy(&third.stderr);
    assert!(
        err.contains("host.max_queued = 1") && err.contains("host.max_sandboxes = 1"),
        "{err}"
    );
    assert!(third.stdout.is_empty(), "the refused run did not run");
    // The exec's client goes away, its run ends, and the call gets the slot.
    first.kill().unwrap();
    let _ = first.wait();
    let o = tokio::task::spawn_blocking(move || agent.wait_with_output().unwrap())
        .await
        .unwrap();
    let r = report_ok(&o);
    let call = &r["tool_calls"][0];
    assert_eq!(call["executed"], true, "{r:#}");
    assert!(
        call["result"]
            .as_str()
            .is_some_and(|t| t.contains("from-the-agent")),
        "{r:#}"
    );
    assert_eq!(status(&f)["host"]["runs_active"], 0);
    drop(host);
    assert!(verify(&f.home).status.success());
}

/// A parent that starts a sub-agent, waits for it while the child runs a shell call, and
/// then runs its own, all at a limit of one sandbox: the parent holds no slot while it
/// waits, so its child's call is not stuck behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agents_shell_call_never_waits_on_a_slot_its_parent_holds() {
    let f = fixture();
    init(&f, "\n[host]\nmax_sandboxes = 1\nmax_queued = 1\n");
    let host = Host::start(&f.home);
    let model = ScriptedModel::start([
        Step::tool_call(
            "p1",
            "spawn_agent",
            r#"{"name":"helper","instructions":"[child-slots] say hello","tools":["shell"]}"#,
        ),
        Step::tool_call("p2", "wait_agent", r#"{"id":"helper"}"#),
        Step::tool_call("p3", "shell", r#"{"command":"echo parent-after"}"#),
        Step::text("Both done."),
    ])
    .await
    .unwrap();
    model.route(
        "[child-slots]",
        [
            Step::tool_call("c1", "shell", r#"{"command":"echo from-the-child"}"#),
            Step::text("the child said hello"),
        ],
    );
    let agent = start_run(&f, &model, "Split the job");
    let o = tokio::task::spawn_blocking(move || {
        let mut agent = agent;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while agent.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                let _ = agent.kill();
                panic!("the session never ended: a sandbox slot deadlock");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        agent.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let r = report_ok(&o);
    let calls = r["tool_calls"].as_array().unwrap();
    let result = |i: usize| calls[i]["result"].as_str().unwrap_or("").to_string();
    assert!(result(0).contains("started sub-agent"), "{r:#}");
    assert_eq!(result(1), "the child said hello", "{r:#}");
    assert!(result(2).contains("parent-after"), "{r:#}");
    // The child's own call ran in its sandbox.
    let child = super::records_of(&f, "echo from-the-child");
    assert!(
        child
            .iter()
            .any(|(kind, rec)| kind == "execution" && rec["status"] == 0),
        "{child:?}"
    );
    drop(host);
    assert!(verify(&f.home).status.success());
}
