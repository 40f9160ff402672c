//! The kill switch's part in the loop: a killed session stops at once — during a model
//! call, a tool call or an approval wait — and never runs again.

mod agent_support;

use std::time::{Duration, Instant};

use agent_support::{args, Harness};
use airlock_agent::agent::Outcome;
use airlock_agent::provider::ProviderKind;
use airlock_agent::scripted::{Fault, ScriptedModel, Step};
use airlock_store::{ApprovalDecisions, ApprovalRequests, ApprovalStatus, SessionStore, Timestamp};
use serde_json::json;

/// Kill the session from "another terminal" after `after`, or once an approval is pending.
fn kill_later(h: &Harness, after: Duration, when_pending: bool) -> tokio::task::JoinHandle<()> {
    let operator = h.operator_store();
    let id = h.session_id.clone();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        if when_pending {
            while operator
                .pending_approvals(Timestamp::now())
                .unwrap()
                .items
                .is_empty()
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        operator
            .kill_session(&id, "owner", Timestamp::now())
            .unwrap();
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_during_a_long_command_stops_the_loop() {
    let mut h = Harness::new();
    *h.exec.shell_delay.lock().unwrap() = Duration::from_secs(60);
    let model = ScriptedModel::start([
        Step::tool_call("c1", "shell", args(json!({"command": "sleep 60"}))),
        Step::text("never reached"),
    ])
    .await
    .unwrap();
    // Kill from another terminal once the command is running.
    let operator = h.operator_store();
    let id = h.session_id.clone();
    let running = h.exec.shell_started.clone();
    let killer = tokio::spawn(async move {
        while !running.load(std::sync::atomic::Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        operator
            .kill_session(&id, "owner", Timestamp::now())
            .unwrap();
        Instant::now()
    });
    let report = h.run(&model, ProviderKind::Openai, true, "run it").await;
    let stopped = Instant::now();
    let killed_at = killer.await.unwrap();
    assert!(
        matches!(report.outcome, Outcome::Killed),
        "{:?}",
        report.outcome
    );
    // Well within the one second the kill switch promises (polled every 20 ms here).
    let latency = stopped.duration_since(killed_at);
    assert!(latency < Duration::from_secs(1), "{latency:?}");
    // The executor's future was dropped mid-run: the binary's executor kills the process
    // tree on drop.
    assert!(*h.exec.shell_abandoned.lock().unwrap());
    assert_eq!(model.requests().len(), 1, "no model call after the kill");
    h.assert_audit_verifies();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_during_a_model_call_stops_the_loop() {
    let mut h = Harness::new();
    let model = ScriptedModel::start([Step::Fault(Fault::Slow {
        delay: Duration::from_secs(8),
        then: Box::new(Step::text("late")),
    })])
    .await
    .unwrap();
    let killer = kill_later(&h, Duration::from_millis(300), false);
    let started = Instant::now();
    let report = h.run(&model, ProviderKind::Anthropic, true, "hello").await;
    killer.await.unwrap();
    assert!(
        matches!(report.outcome, Outcome::Killed),
        "{:?}",
        report.outcome
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_during_an_approval_wait_cancels_it() {
    let mut h = Harness::new();
    let model = ScriptedModel::start([
        // An unparsable command is held for approval.
        Step::tool_call("c1", "shell", args(json!({"command": "echo $(( 1 +"}))),
        Step::text("never reached"),
    ])
    .await
    .unwrap();
    let killer = kill_later(&h, Duration::ZERO, true);
    let report = h.run(&model, ProviderKind::Openai, false, "run it").await;
    killer.await.unwrap();
    assert!(
        matches!(report.outcome, Outcome::Killed),
        "{:?}",
        report.outcome
    );
    assert!(h.exec.calls().is_empty());
    // The held request was cancelled by the kill, not left pending.
    let log = std::fs::read_to_string(h.state.path().join("audit").join(airlock_audit::LOG_FILE))
        .unwrap();
    let request_id = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["kind"] == "approval_requested")
        .and_then(|v| v["detail"]["request"].as_str().map(str::to_string))
        .expect("approval request audited");
    let request = h.store.get_approval(&request_id).unwrap();
    assert_eq!(request.status, ApprovalStatus::Cancelled);
    h.assert_audit_verifies();
}

#[tokio::test]
async fn a_killed_session_never_runs_again() {
    let mut h = Harness::new();
    h.store
        .kill_session(&h.session_id, "owner", Timestamp::now())
        .unwrap();
    let model = ScriptedModel::start([Step::text("hello")]).await.unwrap();
    let report = h.run(&model, ProviderKind::Openai, true, "hello").await;
    assert!(matches!(report.outcome, Outcome::Killed));
    assert!(model.requests().is_empty());
    assert!(h.store.transcript(&h.session_id).unwrap().is_empty());
}

/// A shell call's limit leaves room for its commit to be held: the executor bounds the
/// command by the call timeout itself, and a held commit then waits under the approval
/// timeout. So a call that outlasts `call_timeout` only by waiting for the owner still
/// returns its result; one that outlasts both is stopped, naming the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_call_may_outlast_the_call_timeout_by_its_commits_approval_wait() {
    let steps = || {
        vec![
            Step::tool_call("1", "shell", args(json!({"command": "make"}))),
            Step::text("done"),
        ]
    };
    // Longer than the call timeout, well within call + approval timeouts.
    let mut h = Harness::new();
    h.config.call_timeout = Duration::from_secs(1);
    h.config.approval_timeout = Duration::from_secs(30);
    *h.exec.shell_delay.lock().unwrap() = Duration::from_secs(3);
    let model = ScriptedModel::start(steps()).await.unwrap();
    let report = h.run(&model, ProviderKind::Openai, false, "build it").await;
    let call = &report.tool_calls[0];
    assert!(!call.is_error, "{:?}", call.result);
    assert_eq!(call.result, "ran: make");
    // Past both (1 s + 1 s + the margin), the call is stopped.
    let mut h = Harness::new();
    h.config.call_timeout = Duration::from_secs(1);
    h.config.approval_timeout = Duration::from_secs(1);
    *h.exec.shell_delay.lock().unwrap() = Duration::from_secs(60);
    let model = ScriptedModel::start(steps()).await.unwrap();
    let report = h.run(&model, ProviderKind::Openai, false, "build it").await;
    let call = &report.tool_calls[0];
    assert!(call.is_error, "{:?}", call.result);
    assert!(call.result.contains("timeout"), "{}", call.result);
    assert!(
        *h.exec.shell_abandoned.lock().unwrap(),
        "the executor future was not dropped"
    );
}
