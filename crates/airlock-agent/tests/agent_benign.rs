//! A benign multi-step task completes through the real Gate, audit log, store and file
//! tools, with the scripted model speaking each real wire format.

mod agent_support;

use agent_support::{args, tool_results_sent, Harness};
use airlock_agent::agent::Outcome;
use airlock_agent::provider::ProviderKind;
use airlock_agent::scripted::{ScriptedModel, Step};
use airlock_core::DecisionKind;
use airlock_store::{SessionStore, TranscriptEvent};
use serde_json::json;

async fn benign_task(kind: ProviderKind, stream: bool) {
    let mut h = Harness::new();
    h.write("notes.txt", "alpha\nbeta\ngamma\n");
    let model = ScriptedModel::start([
        Step::tool_call("c1", "list_dir", args(json!({"path": "."}))),
        Step::tool_call("c2", "read_file", args(json!({"path": "notes.txt"}))),
        Step::tool_call("c3", "shell", args(json!({"command": "wc -l notes.txt"}))),
        Step::tool_call(
            "c4",
            "write_file",
            args(json!({"path": "summary.txt", "content": "3 lines: alpha beta gamma\n"})),
        ),
        Step::tool_call(
            "c5",
            "edit_file",
            args(json!({"path": "summary.txt", "old_text": "3 lines", "new_text": "three lines"})),
        ),
        Step::text("Done: summary.txt holds the summary."),
    ])
    .await
    .unwrap();

    let report = h
        .run(&model, kind, stream, "Summarise notes.txt into summary.txt")
        .await;

    match &report.outcome {
        Outcome::Completed { text } => assert_eq!(text, "Done: summary.txt holds the summary."),
        other => panic!("expected completion, got {other:?}"),
    }
    assert_eq!(report.model_calls, 6);
    assert_eq!(report.tool_calls.len(), 5);
    for c in &report.tool_calls {
        assert_eq!(c.decision, Some(DecisionKind::Allow), "{c:?}");
        assert!(c.executed && !c.is_error, "{c:?}");
    }
    // The file really changed, through the real file tools.
    assert_eq!(
        std::fs::read_to_string(h.workspace.join("summary.txt")).unwrap(),
        "three lines: alpha beta gamma\n"
    );
    // Results reached the model over the wire: the listing, the file content and the
    // shell output the executor produced.
    let sent = tool_results_sent(&model);
    assert!(sent.iter().any(|t| t.contains("notes.txt")), "{sent:?}");
    assert!(sent.iter().any(|t| t == "alpha\nbeta\ngamma\n"), "{sent:?}");
    assert!(sent.iter().any(|t| t == "ran: wc -l notes.txt"), "{sent:?}");
    // Only the shell went to the binary's executors, with a Gate-minted token.
    let shell = h.exec.calls_of("shell");
    assert_eq!(shell.len(), 1);
    assert_eq!(shell[0].action["command"], "wc -l notes.txt");
    assert!(shell[0].action_hash.starts_with("sha256:"));

    // The transcript holds every step, and results taint the session.
    let transcript = h.store.transcript(&h.session_id).unwrap();
    let results = transcript
        .iter()
        .filter(|e| {
            matches!(
                e.event,
                TranscriptEvent::Result {
                    untrusted: true,
                    ..
                }
            )
        })
        .count();
    assert_eq!(results, 5);
    assert!(h
        .store
        .get_session(&h.session_id)
        .unwrap()
        .gate
        .taint
        .is_tainted());
    // Each decision and execution is in the audit log, and the chain verifies.
    let kinds = h.audit_kinds();
    assert_eq!(
        kinds.iter().filter(|k| *k == "decision").count(),
        5,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| *k == "execution").count(),
        5,
        "{kinds:?}"
    );
    h.assert_audit_verifies();
    // Budget was charged in the store: 6 model calls, 5 tool calls, reported tokens.
    let budget = airlock_store::BudgetStore::budget_state(
        &h.store,
        &h.session_id,
        airlock_store::Timestamp::now(),
    )
    .unwrap();
    assert_eq!(budget.session.turns, 6);
    assert_eq!(budget.session.tool_calls, 5);
    assert_eq!(budget.session.input_tokens, 6 * 42);
}

#[tokio::test]
async fn benign_task_openai_streaming() {
    benign_task(ProviderKind::Openai, true).await;
}

#[tokio::test]
async fn benign_task_anthropic() {
    benign_task(ProviderKind::Anthropic, false).await;
}

#[tokio::test]
async fn invalid_arguments_and_denials_go_back_to_the_model() {
    let mut h = Harness::new();
    let model = ScriptedModel::start([
        Step::tool_call("c1", "read_file", "{\"path\": \"notes"),
        Step::tool_call("c2", "read_file", args(json!({"path": "../../etc/passwd"}))),
        Step::tool_call("c3", "no_such_tool", args(json!({}))),
        Step::text("I could not read those."),
    ])
    .await
    .unwrap();
    let report = h
        .run(&model, ProviderKind::Anthropic, true, "read things")
        .await;
    assert!(
        matches!(report.outcome, Outcome::Completed { .. }),
        "{:?}",
        report.outcome
    );
    let [bad_json, outside, unknown] = &report.tool_calls[..] else {
        panic!("{:?}", report.tool_calls)
    };
    assert!(bad_json.is_error && bad_json.decision.is_none());
    assert!(
        bad_json.result.contains("could not be used"),
        "{}",
        bad_json.result
    );
    assert_eq!(outside.decision, Some(DecisionKind::Deny));
    assert!(
        outside.result.contains("base.fs.outside-workspace"),
        "{}",
        outside.result
    );
    assert!(!outside.executed);
    assert!(
        unknown.result.contains("no tool named"),
        "{}",
        unknown.result
    );
    let sent = tool_results_sent(&model);
    assert!(
        sent.iter().any(|t| t.contains("base.fs.outside-workspace")),
        "{sent:?}"
    );
    // A refusal is the host's own word: the session stays untainted.
    assert!(!h
        .store
        .get_session(&h.session_id)
        .unwrap()
        .gate
        .taint
        .is_tainted());
    h.assert_audit_verifies();
}

#[tokio::test]
async fn streamed_text_reaches_the_terminal_sink() {
    use airlock_agent::agent::Agent;
    use airlock_agent::provider::{connect, StreamEvent};
    let h = Harness::new();
    let model = ScriptedModel::start([Step::text("streamed hello")])
        .await
        .unwrap();
    let provider = connect(&model.config(ProviderKind::Anthropic, true)).unwrap();
    let mut text = String::new();
    let mut sink = |e: StreamEvent| {
        if let StreamEvent::TextDelta(t) = e {
            text.push_str(&t);
        }
    };
    let mut agent = Agent {
        config: &h.config,
        provider: provider.as_ref(),
        gate: &h.gate,
        audit: &h.audit,
        store: &h.store,
        executors: &h.exec,
        on_stream: Some(&mut sink),
    };
    let report = agent.run_turn(&h.session_id, "hi").await.unwrap();
    assert!(matches!(report.outcome, Outcome::Completed { .. }));
    assert_eq!(text, "streamed hello");
}
