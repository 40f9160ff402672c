//! `PolicyEngine`: loading, the summary `airlock policy check` prints, and the outcome it
//! reads from Cedar's answer (entities and context built per request).

use airlock_core::policy::{PolicyEngine, PolicyError, PolicySource};
use airlock_core::DecisionKind;
use serde_json::json;

fn engine(text: &str) -> Result<PolicyEngine, PolicyError> {
    PolicyEngine::load(&[PolicySource {
        name: "local/t.cedar".into(),
        text: text.into(),
    }])
}

const MIXED: &str = r#"
@id("p1") permit (principal, action == Airlock::Action::"memory.read", resource);
@id("p2") permit (principal, action == Airlock::Action::"memory.write", resource) when { context.memory.kind == "recall" };
@id("a1") @ask("pinned needs review") permit (principal, action == Airlock::Action::"memory.write", resource) when { context.memory.kind == "pinned" };
@id("f1") @reason("no secrets scope") @help("use another scope") forbid (principal, action, resource == Airlock::Target::"memory:secrets");
@id("f2") forbid (principal, action == Airlock::Action::"memory.write", resource) when { context.session.tainted && context.memory.kind == "pinned" && context.session.principal_role != "owner" };
"#;

fn memory_ctx(kind: &str, tainted: bool, role: &str) -> serde_json::Value {
    json!({
        "session": {"tainted": tainted, "principal_role": role},
        "provenance": {"security_args": [], "untraced": [], "contested": []},
        "memory": {"scope": "notes", "key": "k", "kind": kind},
    })
}

#[test]
fn the_summary_counts_each_effect_once() {
    let e = engine(MIXED).unwrap();
    let s = e.summary(vec!["local/t.cedar".into()]);
    assert_eq!((s.permits, s.asks, s.forbids), (2, 1, 2));
    assert_eq!(s.ids, ["a1", "f1", "f2", "p1", "p2"]);
    assert_eq!(s.files, ["local/t.cedar"]);
}

#[test]
fn a_policy_without_an_id_is_named_by_its_file() {
    // Without `@id` the line cannot be found (`errors::policy_line` looks for the id), so
    // the name is `<file>:1`.
    let e = engine("\npermit (principal, action == Airlock::Action::\"memory.read\", resource);")
        .unwrap();
    let s = e.summary(vec![]);
    assert_eq!(s.ids, ["local/t.cedar:1"]);
    let o = e
        .evaluate(
            "s",
            "owner",
            "memory.read",
            "memory:notes",
            memory_ctx("any", false, "owner"),
        )
        .unwrap();
    assert_eq!(o.decision, DecisionKind::Allow);
    assert_eq!(o.policies, ["local/t.cedar:1"]);
    assert_eq!(o.reasons, ["policy local/t.cedar:1"]);
}

#[test]
fn duplicate_ids_and_asks_on_forbids_are_refused() {
    let dup = r#"@id("x") permit (principal, action, resource); @id("x") permit (principal, action, resource);"#;
    assert!(matches!(engine(dup), Err(PolicyError::DuplicateId { .. })));
    let ask_forbid = r#"@id("y") @ask("?") forbid (principal, action, resource);"#;
    assert!(matches!(
        engine(ask_forbid),
        Err(PolicyError::AskOnForbid { .. })
    ));
    // An ask on a permit is fine.
    assert!(engine(r#"@id("z") @ask("?") permit (principal, action, resource);"#).is_ok());
}

#[test]
fn the_outcome_follows_the_deciding_rules() {
    let e = engine(MIXED).unwrap();
    let ev = |kind: &str, res: &str, ctx| e.evaluate("s1", "owner", kind, res, ctx).unwrap();
    let o = ev(
        "memory.write",
        "memory:notes",
        memory_ctx("recall", false, "owner"),
    );
    assert_eq!(
        (o.decision, o.policies.clone()),
        (DecisionKind::Allow, vec!["p2".to_string()])
    );
    assert_eq!(o.reasons, ["policy p2"]);
    let o = ev(
        "memory.write",
        "memory:notes",
        memory_ctx("pinned", false, "owner"),
    );
    assert_eq!(o.decision, DecisionKind::Ask);
    assert_eq!(o.policies, ["a1"]);
    assert_eq!(o.reasons, ["pinned needs review"]);
    // A forbid names itself and how to allow.
    let o = ev(
        "memory.read",
        "memory:secrets",
        memory_ctx("any", false, "owner"),
    );
    assert_eq!(o.decision, DecisionKind::Deny);
    assert_eq!(o.policies, ["f1"]);
    assert_eq!(o.reasons, ["no secrets scope\nhelp: use another scope"]);
    // The principal's role and the session's taint reach the context.
    let o = ev(
        "memory.write",
        "memory:notes",
        memory_ctx("pinned", true, "user"),
    );
    assert_eq!(
        (o.decision, o.policies.clone()),
        (DecisionKind::Deny, vec!["f2".to_string()])
    );
    assert_eq!(o.reasons, ["policy f2"]);
}

#[test]
fn the_role_the_gate_passes_is_the_one_policies_see() {
    // `principal.role` comes from the entities built per request, not from the context.
    let e = engine(
        r#"@id("owner-only") permit (principal, action == Airlock::Action::"memory.read", resource) when { principal.owner.role == "owner" && principal in Airlock::Agent::"agent" };"#,
    )
    .expect("the schema gives a session its owner and its agent");
    let ctx = memory_ctx("any", false, "owner");
    let owner = e
        .evaluate("s", "owner", "memory.read", "memory:notes", ctx.clone())
        .unwrap();
    let user = e
        .evaluate("s", "user", "memory.read", "memory:notes", ctx)
        .unwrap();
    assert_eq!(owner.decision, DecisionKind::Allow);
    assert_eq!(user.decision, DecisionKind::Deny);
}

#[test]
fn no_rule_means_deny_with_help_for_that_kind_of_action() {
    let e = engine(MIXED).unwrap();
    let net = json!({
        "session": {"tainted": false, "principal_role": "owner"},
        "provenance": {"security_args": [], "untraced": [], "contested": []},
        "net": {"valid": true, "invalid_reason": "", "method": "GET", "scheme": "https", "host": "x.example",
                "port": 443, "path": "/", "ip_literal": false, "body_bytes": 0,
                "host_traced": false},
    });
    let o = e
        .evaluate("s", "owner", "net.request", "host:x.example", net)
        .unwrap();
    assert_eq!(o.decision, DecisionKind::Deny);
    assert!(o.policies.is_empty());
    assert!(o.reasons[0].starts_with("no policy permits this net.request action (deny by default)\nhelp: allow the host with `airlock net allow"), "{:?}", o.reasons);
    let o = e
        .evaluate(
            "s",
            "owner",
            "memory.read",
            "memory:other",
            memory_ctx("any", false, "owner"),
        )
        .unwrap();
    assert_eq!(
        o.decision,
        DecisionKind::Allow,
        "p1 allows every memory read"
    );
    let e2 = engine(
        r#"@id("n") permit (principal, action == Airlock::Action::"memory.read", resource);"#,
    )
    .unwrap();
    let o = e2
        .evaluate(
            "s",
            "owner",
            "memory.write",
            "memory:notes",
            memory_ctx("recall", false, "owner"),
        )
        .unwrap();
    assert_eq!(o.decision, DecisionKind::Deny);
    assert!(
        o.reasons[0].contains("no policy permits this memory.write action"),
        "{:?}",
        o.reasons
    );
    assert!(
        o.reasons[0].contains("policy/local/") && o.reasons[0].contains("airlock policy check"),
        "{:?}",
        o.reasons
    );
    let exec = json!({
        "session": {"tainted": false, "principal_role": "owner"},
        "provenance": {"security_args": [], "untraced": [], "contested": []},
        "shell": airlock_core::facts::shell_context(&airlock_core::shell::normalize("ls")),
        "cwd": {"normalized": "/w", "in_workspace": true, "protected": false, "staged": false},
    });
    let o = e2
        .evaluate("s", "owner", "exec", "workspace", exec)
        .unwrap();
    assert_eq!(o.decision, DecisionKind::Deny);
    assert!(
        o.reasons[0].contains("help: add a permit for this command"),
        "{:?}",
        o.reasons
    );
}
