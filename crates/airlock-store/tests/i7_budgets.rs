//! Invariant I7 in the store: budgets cannot be overshot, not even by concurrent
//! sub-agents on separate connections, and nothing the agent holds can reset them.

mod common;

use std::sync::{Arc, Barrier};
use std::thread;

use airlock_store::*;
use common::*;

fn tool_call() -> Usage {
    Usage {
        tool_calls: 1,
        cost_micros: 7,
        ..Usage::default()
    }
}

#[test]
fn concurrent_charges_on_separate_connections_never_overshoot() {
    const LIMIT: u64 = 40;
    const THREADS: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let id = open(dir.path())
        .create_session(&NewSession::owner(), T0)
        .unwrap()
        .id()
        .to_string();
    let limits = BudgetLimits {
        per_session: Limits {
            tool_calls: Some(LIMIT),
            ..Limits::default()
        },
        per_day: Limits::default(),
    };
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (path, id, barrier) = (dir.path().to_path_buf(), id.clone(), barrier.clone());
            thread::spawn(move || {
                // Each thread is its own "process": its own connection to the file.
                let store = open(&path);
                barrier.wait();
                let mut ok = 0u64;
                loop {
                    match store.charge(&id, &tool_call(), &limits, T0) {
                        Ok(_) => ok += 1,
                        Err(ChargeError::Exhausted(e)) => {
                            assert_eq!((e.which, e.limit), (Counter::ToolCalls, LIMIT));
                            return ok;
                        }
                        Err(ChargeError::Store(e)) => panic!("store error under contention: {e}"),
                    }
                }
            })
        })
        .collect();
    let total: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(
        total, LIMIT,
        "exactly the limit's worth of charges succeeded"
    );
    let state = open(dir.path()).budget_state(&id, T0).unwrap();
    assert_eq!(state.session.tool_calls, LIMIT);
    assert_eq!(state.session.cost_micros, 7 * LIMIT);
    assert_eq!(state.day_usage.tool_calls, LIMIT);
}

#[test]
fn sub_agents_in_other_sessions_share_the_daily_budget() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(dir.path()));
    let ids: Vec<String> = (0..4)
        .map(|_| {
            store
                .create_session(&NewSession::owner(), T0)
                .unwrap()
                .id()
                .to_string()
        })
        .collect();
    let limits = BudgetLimits {
        per_session: Limits::default(),
        per_day: Limits {
            turns: Some(25),
            ..Limits::default()
        },
    };
    let turn = Usage {
        turns: 1,
        ..Usage::default()
    };
    let handles: Vec<_> = ids
        .iter()
        .cloned()
        .map(|id| {
            let store = store.clone();
            thread::spawn(move || {
                (0..20)
                    .filter(|_| store.charge(&id, &turn, &limits, T0).is_ok())
                    .count()
            })
        })
        .collect();
    let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(total, 25);
    // The next UTC day starts from zero.
    let tomorrow = at(24 * 3600);
    let s = store.charge(&ids[0], &turn, &limits, tomorrow).unwrap();
    assert_eq!((s.day, s.day_usage.turns), (tomorrow.utc_day(), 1));
}

#[test]
fn exhaustion_is_typed_charges_nothing_and_says_how_to_raise_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let id = store
        .create_session(&NewSession::owner(), T0)
        .unwrap()
        .id()
        .to_string();
    let limits = BudgetLimits {
        per_session: Limits {
            input_tokens: Some(1000),
            output_tokens: Some(100),
            ..Limits::default()
        },
        per_day: Limits::default(),
    };
    store
        .charge(
            &id,
            &Usage {
                input_tokens: 900,
                output_tokens: 10,
                ..Usage::default()
            },
            &limits,
            T0,
        )
        .unwrap();
    let err = store
        .charge(
            &id,
            &Usage {
                turns: 1,
                input_tokens: 101,
                output_tokens: 10,
                ..Usage::default()
            },
            &limits,
            T0,
        )
        .unwrap_err();
    let ChargeError::Exhausted(e) = err else {
        panic!("expected exhaustion, got {err}")
    };
    assert_eq!(
        (e.scope, e.which, e.limit, e.used, e.requested),
        (BudgetScope::Session, Counter::InputTokens, 1000, 900, 101)
    );
    assert!(e.to_string().contains("help:"), "{e}");
    let s = store.budget_state(&id, T0).unwrap();
    assert_eq!(
        (
            s.session.turns,
            s.session.input_tokens,
            s.session.output_tokens
        ),
        (0, 900, 10),
        "a refused charge adds nothing"
    );
}

#[test]
fn spending_recorded_after_the_fact_blocks_later_charges() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let id = store
        .create_session(&NewSession::owner(), T0)
        .unwrap()
        .id()
        .to_string();
    let limits = BudgetLimits {
        per_session: Limits {
            output_tokens: Some(500),
            ..Limits::default()
        },
        per_day: Limits::default(),
    };
    // The provider reported more output than was reserved.
    store
        .record_spent(
            &id,
            &Usage {
                output_tokens: 800,
                ..Usage::default()
            },
            T0,
        )
        .unwrap();
    let err = store
        .charge(&id, &Usage::default(), &limits, T0)
        .unwrap_err();
    assert!(
        matches!(
            err,
            ChargeError::Exhausted(BudgetExhausted {
                which: Counter::OutputTokens,
                used: 800,
                ..
            })
        ),
        "{err}"
    );
}

#[test]
fn only_the_operator_api_resets_and_it_leaves_a_record() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let id = store
        .create_session(&NewSession::owner(), T0)
        .unwrap()
        .id()
        .to_string();
    let limits = BudgetLimits {
        per_session: Limits {
            turns: Some(1),
            ..Limits::default()
        },
        per_day: Limits::default(),
    };
    let turn = Usage {
        turns: 1,
        ..Usage::default()
    };
    store.charge(&id, &turn, &limits, T0).unwrap();
    assert!(store.charge(&id, &turn, &limits, T0).is_err());
    // Reopening (a restart) does not reset anything.
    drop(store);
    let store = open(dir.path());
    assert!(store.charge(&id, &turn, &limits, T0).is_err());
    let before = store
        .operator_reset_session_budget(&id, "owner", at(5))
        .unwrap();
    assert_eq!(before.turns, 1);
    store.charge(&id, &turn, &limits, at(6)).unwrap();
    let logged: (String, String, String) = raw(dir.path())
        .query_row(
            "SELECT scope, target, operator FROM budget_resets",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(logged, ("session".into(), id, "owner".into()));
}

#[test]
fn a_killed_session_cannot_charge() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let id = store
        .create_session(&NewSession::owner(), T0)
        .unwrap()
        .id()
        .to_string();
    store.kill_session(&id, "owner", T0).unwrap();
    let err = store
        .charge(&id, &tool_call(), &BudgetLimits::default(), T0)
        .unwrap_err();
    assert!(
        matches!(err, ChargeError::Store(StoreError::SessionKilled { .. })),
        "{err}"
    );
}

#[test]
fn absurd_amounts_are_refused_not_wrapped() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let id = store
        .create_session(&NewSession::owner(), T0)
        .unwrap()
        .id()
        .to_string();
    let err = store
        .record_spent(
            &id,
            &Usage {
                cost_micros: u64::MAX,
                ..Usage::default()
            },
            T0,
        )
        .unwrap_err();
    assert!(
        matches!(err, StoreError::InvalidInput { field: "usage", .. }),
        "{err}"
    );
    assert_eq!(store.budget_state(&id, T0).unwrap().session.cost_micros, 0);
}
