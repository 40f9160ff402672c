//! Garbage, truncated and failing provider responses end the turn with a typed error,
//! lose no committed state, keep the audit chain valid, and the session goes on afterwards.

mod agent_support;

use agent_support::{args, tool_results_sent, Harness};
use airlock_agent::agent::Outcome;
use airlock_agent::provider::ProviderKind;
use airlock_agent::scripted::{Fault, Reply, ScriptedModel, Step, StreamCut};
use airlock_store::SessionStore;
use serde_json::json;

fn faults() -> Vec<(&'static str, Vec<Step>, bool)> {
    let reply =
        Reply::default().with_tool_call("x1", "read_file", args(json!({"path": "notes.txt"})));
    vec![
        (
            "garbage",
            vec![Step::Fault(Fault::Garbage(b"<html>502 oops".to_vec()))],
            false,
        ),
        (
            "truncated stream",
            vec![Step::Fault(Fault::Truncated {
                reply: reply.clone(),
                after_events: 2,
                cut: StreamCut::Close,
            })],
            true,
        ),
        (
            "aborted stream",
            vec![Step::Fault(Fault::Truncated {
                reply: reply.clone(),
                after_events: 2,
                cut: StreamCut::Abort,
            })],
            true,
        ),
        (
            "bad key",
            vec![Step::status(401, "invalid x-api-key")],
            false,
        ),
    ]
}

#[tokio::test]
async fn provider_faults_end_the_turn_and_lose_nothing() {
    for kind in [ProviderKind::Openai, ProviderKind::Anthropic] {
        for (name, steps, stream) in faults() {
            let mut h = Harness::new();
            h.write("notes.txt", "kept");
            // A good first turn, committed.
            let model = ScriptedModel::start([
                Step::tool_call("c1", "read_file", args(json!({"path": "notes.txt"}))),
                Step::text("read it"),
            ])
            .await
            .unwrap();
            let ok = h.run(&model, kind, stream, "read notes.txt").await;
            assert!(
                matches!(ok.outcome, Outcome::Completed { .. }),
                "{name}: {:?}",
                ok.outcome
            );
            let before = h.store.transcript(&h.session_id).unwrap();
            let taint_before = h.store.get_session(&h.session_id).unwrap().gate.taint;

            // The faulty turn.
            model.push(steps);
            let bad = h.run(&model, kind, stream, "and again").await;
            let err = match &bad.outcome {
                Outcome::ProviderFailed(e) => e.to_string(),
                other => panic!("{kind} {name}: expected a provider failure, got {other:?}"),
            };
            assert!(!err.is_empty());
            assert!(
                h.exec.calls().is_empty(),
                "{name}: nothing ran from a broken reply"
            );
            let after = h.store.transcript(&h.session_id).unwrap();
            assert_eq!(
                after.len(),
                before.len() + 1,
                "{name}: only the user message was added"
            );
            assert_eq!(
                &after[..before.len()],
                &before[..],
                "{name}: committed state unchanged"
            );
            let taint_after = h.store.get_session(&h.session_id).unwrap().gate.taint;
            // Taint is kept (the new user message only adds trusted text).
            let (a, b) = (
                serde_json::to_value(&taint_after).unwrap(),
                serde_json::to_value(&taint_before).unwrap(),
            );
            assert_eq!(a["tainted"], true);
            assert_eq!(a["first_untrusted_source"], b["first_untrusted_source"]);
            assert!(h.audit_kinds().contains(&"provider_error".to_string()));
            h.assert_audit_verifies();

            // The session carries on with its full history.
            model.push([Step::text("back again")]);
            let again = h.run(&model, kind, stream, "third time").await;
            assert!(
                matches!(again.outcome, Outcome::Completed { .. }),
                "{name}: {:?}",
                again.outcome
            );
            let last = model.requests().pop().unwrap();
            let body = String::from_utf8_lossy(&last.body).to_string();
            assert!(
                body.contains("read notes.txt") && body.contains("and again"),
                "{body}"
            );
            assert!(tool_results_sent(&model).iter().any(|t| t == "kept"));
        }
    }
}
