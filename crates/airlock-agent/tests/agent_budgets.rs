//! Every limit stops the run with the typed outcome, naming the `airlock.toml` key that
//! raises it. The model has no way to move any of them.

mod agent_support;

use std::time::Duration;

use agent_support::{args, Harness};
use airlock_agent::agent::{LimitKind, LimitScope, Outcome, PriceTable, TurnReport};
use airlock_agent::provider::ProviderKind;
use airlock_agent::scripted::{Reply, ScriptedModel, Step};
use airlock_store::{BudgetStore, Counter, Timestamp};
use serde_json::json;

fn read(id: &str, path: &str) -> Step {
    Step::tool_call(id, "read_file", args(json!({ "path": path })))
}

async fn run(h: &mut Harness, steps: Vec<Step>) -> (TurnReport, ScriptedModel) {
    h.write("a.txt", "a");
    h.write("b.txt", "b");
    h.write("c.txt", "c");
    let model = ScriptedModel::start(steps).await.unwrap();
    let report = h
        .run(&model, ProviderKind::Openai, true, "read the files")
        .await;
    (report, model)
}

fn expect_budget(outcome: &Outcome, counter: Counter, scope: LimitScope) -> (u64, u64, String) {
    match outcome {
        Outcome::BudgetExhausted {
            which: LimitKind::Budget(c),
            scope: s,
            limit,
            used,
            help,
        } if *c == counter && *s == scope => {
            let table = if scope == LimitScope::Day {
                "per_day"
            } else {
                "per_session"
            };
            assert!(
                help.contains(&format!("`{}` under `[budget.{table}]`", counter.as_str())),
                "{help}"
            );
            (*limit, *used, help.clone())
        }
        other => panic!("expected {counter:?} exhausted ({scope:?}), got {other:?}"),
    }
}

#[tokio::test]
async fn turns_limit_stops_the_run() {
    let mut h = Harness::new();
    h.config.budget.per_session.turns = Some(2);
    let (report, model) = run(
        &mut h,
        vec![
            read("1", "a.txt"),
            read("2", "b.txt"),
            read("3", "c.txt"),
            Step::text("done"),
        ],
    )
    .await;
    let (limit, used, _) = expect_budget(&report.outcome, Counter::Turns, LimitScope::Session);
    assert_eq!((limit, used), (2, 2));
    assert_eq!(
        model.requests().len(),
        2,
        "the third model call was never made"
    );
    h.assert_audit_verifies();
}

#[tokio::test]
async fn daily_turns_limit_names_the_daily_key() {
    let mut h = Harness::new();
    h.config.budget.per_day.turns = Some(1);
    let (report, model) = run(&mut h, vec![read("1", "a.txt"), Step::text("done")]).await;
    expect_budget(&report.outcome, Counter::Turns, LimitScope::Day);
    assert_eq!(model.requests().len(), 1);
}

#[tokio::test]
async fn input_token_limit_stops_the_run() {
    let mut h = Harness::new();
    h.config.budget.per_session.input_tokens = Some(3000);
    let steps = vec![
        Step::Reply(
            Reply::default()
                .with_tool_call("1", "read_file", args(json!({"path": "a.txt"})))
                .with_usage(2900, 5),
        ),
        read("2", "b.txt"),
        Step::text("done"),
    ];
    let (report, model) = run(&mut h, steps).await;
    let (limit, used, _) =
        expect_budget(&report.outcome, Counter::InputTokens, LimitScope::Session);
    assert_eq!((limit, used), (3000, 2900));
    assert_eq!(model.requests().len(), 1);
}

#[tokio::test]
async fn output_token_limit_caps_max_tokens_then_stops() {
    let mut h = Harness::new();
    h.config.budget.per_session.output_tokens = Some(10);
    let (report, model) = run(
        &mut h,
        vec![
            read("1", "a.txt"),
            read("2", "b.txt"),
            read("3", "c.txt"),
            Step::text("done"),
        ],
    )
    .await;
    // 7 output tokens per reply: the second call may only ask for the 3 left.
    let caps: Vec<u64> = model
        .requests()
        .iter()
        .map(|r| r.json().unwrap()["max_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(caps, vec![10, 3]);
    let (limit, used, _) =
        expect_budget(&report.outcome, Counter::OutputTokens, LimitScope::Session);
    assert_eq!((limit, used), (10, 14));
}

#[tokio::test]
async fn cost_limit_stops_the_run() {
    let mut h = Harness::new();
    h.config.prices = PriceTable {
        input_per_million: 10.0,
        output_per_million: 0.0,
    };
    h.config.budget.per_session.cost_micros = Some(20_000);
    let steps = vec![
        Step::Reply(
            Reply::default()
                .with_tool_call("1", "read_file", args(json!({"path": "a.txt"})))
                .with_usage(1900, 5),
        ),
        read("2", "b.txt"),
        Step::text("done"),
    ];
    let (report, model) = run(&mut h, steps).await;
    let (limit, used, _) = expect_budget(&report.outcome, Counter::CostMicros, LimitScope::Session);
    // 1900 tokens at $10 per million is 19 000 micro-dollars.
    assert_eq!((limit, used), (20_000, 19_000));
    assert_eq!(model.requests().len(), 1);
}

#[tokio::test]
async fn wall_time_limit_stops_the_run() {
    let mut h = Harness::new();
    h.config.budget.per_session.wall_ms = Some(150);
    *h.exec.shell_delay.lock().unwrap() = Duration::from_millis(400);
    let steps = vec![
        Step::tool_call("1", "shell", args(json!({"command": "sleep 1"}))),
        Step::tool_call("2", "shell", args(json!({"command": "true"}))),
        Step::text("done"),
    ];
    let (report, _model) = run(&mut h, steps).await;
    let (limit, used, _) = expect_budget(&report.outcome, Counter::WallMs, LimitScope::Session);
    assert_eq!(limit, 150);
    assert!(used >= 400, "{used}");
    assert_eq!(h.exec.calls_of("shell").len(), 1);
}

#[tokio::test]
async fn tool_call_limit_stops_the_run() {
    let mut h = Harness::new();
    h.config.budget.per_session.tool_calls = Some(1);
    let (report, _model) = run(
        &mut h,
        vec![read("1", "a.txt"), read("2", "b.txt"), Step::text("done")],
    )
    .await;
    let (limit, used, _) = expect_budget(&report.outcome, Counter::ToolCalls, LimitScope::Session);
    assert_eq!((limit, used), (1, 1));
    assert_eq!(report.tool_calls.len(), 1);
    let state = h
        .store
        .budget_state(&h.session_id, Timestamp::now())
        .unwrap();
    assert_eq!(state.session.tool_calls, 1);
}

#[tokio::test]
async fn per_tool_rate_limit_stops_the_run() {
    let mut h = Harness::new();
    h.config.tool_calls_per_minute = Some(2);
    let (report, _model) = run(
        &mut h,
        vec![
            read("1", "a.txt"),
            read("2", "b.txt"),
            read("3", "c.txt"),
            Step::text("done"),
        ],
    )
    .await;
    match &report.outcome {
        Outcome::BudgetExhausted {
            which: LimitKind::ToolRate { tool },
            limit,
            help,
            ..
        } => {
            assert_eq!(tool, "read_file");
            assert_eq!(*limit, 2);
            assert!(help.contains("`tool_calls_per_minute`"), "{help}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(report.tool_calls.len(), 2);
}

#[tokio::test]
async fn repeated_identical_action_breaker_stops_the_run() {
    let mut h = Harness::new();
    h.config.max_identical_actions = 3;
    let (report, _model) = run(
        &mut h,
        vec![
            read("1", "a.txt"),
            read("2", "a.txt"),
            read("3", "a.txt"),
            read("4", "a.txt"),
            Step::text("done"),
        ],
    )
    .await;
    match &report.outcome {
        Outcome::BudgetExhausted {
            which: LimitKind::RepeatedAction { action_hash },
            used,
            help,
            ..
        } => {
            assert!(action_hash.starts_with("sha256:"));
            assert_eq!(*used, 3);
            assert!(help.contains("`max_identical_actions`"), "{help}");
        }
        other => panic!("{other:?}"),
    }
    // The third identical proposal did not run.
    assert_eq!(report.tool_calls.len(), 2);
}
