//! An allow rule can never pass an `unparsed` command, even one an operator writes.

use airlock_core::action::{Action, ExecAction};
use airlock_core::facts::GateConfig;
use airlock_core::gate::{Gate, Session};
use airlock_core::policy::{PolicyEngine, PolicySource};
use airlock_core::DecisionKind;

#[test]
fn operator_allow_all_rule_does_not_pass_unparsed_commands() {
    let allow_all = PolicySource {
        name: "local/allow-all.cedar".into(),
        text:
            "@id(\"allow-all\") permit (principal, action == Airlock::Action::\"exec\", resource);"
                .into(),
    };
    let gate = Gate::new(
        PolicyEngine::load(&[allow_all]).unwrap(),
        GateConfig::new("/w"),
    );
    let decide = |cmd: &str| {
        let a = Action::Exec(ExecAction {
            command: cmd.into(),
            cwd: "/w".into(),
            env: vec![],
        });
        gate.evaluate(&Session::new("s", "owner"), &a)
    };
    assert_eq!(decide("ls -la").decision, DecisionKind::Allow);
    let e = decide("echo $( ");
    assert_eq!(e.decision, DecisionKind::Ask, "{:?}", e.reasons);
    assert!(
        e.reasons[0].contains("could not be parsed"),
        "{:?}",
        e.reasons
    );
}
