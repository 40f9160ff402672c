use super::*;

fn session() -> Value {
    json!({"tainted": false, "principal_role": "owner"})
}

fn prov() -> Value {
    json!({"security_args": [], "untraced": [], "contested": []})
}

#[test]
fn both_builtin_profiles_load_and_validate() {
    for p in Profile::all() {
        let engine = PolicyEngine::builtin(p).unwrap_or_else(|e| panic!("{}: {e}", p.name()));
        assert!(engine.summary(vec![]).ids.len() > 5);
    }
}

#[test]
fn parse_error_names_file_and_line() {
    let src = PolicySource {
        name: "policy/local/x.cedar".into(),
        text: "// c\npermit (principal, action, resource)\nwhen { oops".into(),
    };
    let err = PolicyEngine::load(&[src])
        .err()
        .expect("must fail")
        .to_string();
    assert!(err.contains("policy/local/x.cedar:"), "{err}");
}

#[test]
fn validation_error_names_file_and_line() {
    let src = PolicySource {
        name: "policy/local/y.cedar".into(),
        text: "\n\npermit (principal, action == Airlock::Action::\"exec\", resource)\nwhen { context.shell.no_such_field };".into(),
    };
    let err = PolicyEngine::load(&[src])
        .err()
        .expect("must fail")
        .to_string();
    assert!(err.contains("policy/local/y.cedar:4"), "{err}");
}

#[test]
fn duplicate_ids_are_refused() {
    let text = "@id(\"a\") permit (principal, action, resource);\n@id(\"a\") permit (principal, action, resource);";
    let err = PolicyEngine::load(&[PolicySource {
        name: "f.cedar".into(),
        text: text.into(),
    }])
    .err()
    .unwrap();
    assert!(matches!(err, PolicyError::DuplicateId { .. }), "{err}");
}

#[test]
fn deny_by_default_ask_and_forbid_beats_permit() {
    let text = r#"
@id("p") @reason("ok") permit (principal, action == Airlock::Action::"memory.read", resource);
@id("q") @ask("ask me") permit (principal, action == Airlock::Action::"memory.write", resource);
@id("r") @reason("blocked") @help("don't") forbid (principal, action == Airlock::Action::"memory.read", resource)
  when { context.memory.key == "secret" };
"#;
    let e = PolicyEngine::load(&[PolicySource {
        name: "t.cedar".into(),
        text: text.into(),
    }])
    .unwrap();
    let ctx = |key: &str| json!({"session": session(), "provenance": prov(), "memory": {"scope": "recall", "key": key, "kind": "note"}});
    let o = e
        .evaluate("s", "owner", "memory.read", "memory", ctx("k"))
        .unwrap();
    assert_eq!(
        (o.decision, o.policies.clone()),
        (DecisionKind::Allow, vec!["p".to_string()])
    );
    let o = e
        .evaluate("s", "owner", "memory.read", "memory", ctx("secret"))
        .unwrap();
    assert_eq!(o.decision, DecisionKind::Deny);
    assert_eq!(o.policies, vec!["r"]);
    assert!(o.reasons[0].contains("help: don't"));
    let o = e
        .evaluate("s", "owner", "memory.write", "memory", ctx("k"))
        .unwrap();
    assert_eq!(
        (o.decision, o.reasons.clone()),
        (DecisionKind::Ask, vec!["ask me".to_string()])
    );
    let o = e
        .evaluate(
            "s",
            "owner",
            "task.schedule",
            "t",
            json!({"session": session(), "provenance": prov()}),
        )
        .unwrap();
    assert_eq!(o.decision, DecisionKind::Deny);
    assert!(o.policies.is_empty() && o.reasons[0].contains("deny by default"));
}

/// The engine loads the JSON form of the schema; it must say exactly what the text source
/// says. Regenerate it after editing `policy/airlock.cedarschema` with
/// `AIRLOCK_REGENERATE_SCHEMA=1 cargo test -p airlock-core schema_json`.
#[test]
fn schema_json_matches_the_cedarschema_source() {
    let (fragment, _warnings) = cedar_policy::SchemaFragment::from_cedarschema_str(SCHEMA_SRC)
        .unwrap_or_else(|e| panic!("policy/airlock.cedarschema does not parse: {e:?}"));
    let expected = fragment.to_json_value().expect("schema converts to JSON");
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/policy/airlock.cedarschema.json"
    );
    if std::env::var_os("AIRLOCK_REGENERATE_SCHEMA").is_some() {
        let text = serde_json::to_string_pretty(&expected).unwrap() + "\n";
        std::fs::write(path, text).unwrap();
        return;
    }
    let embedded: Value = serde_json::from_str(SCHEMA_JSON).expect("embedded JSON schema");
    assert!(
        embedded == expected,
        "error: {path} is stale: it no longer matches policy/airlock.cedarschema\n\
         help: AIRLOCK_REGENERATE_SCHEMA=1 cargo test -p airlock-core schema_json"
    );
}
