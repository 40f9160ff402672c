//! Budget counters and limits (invariant I7). The store keeps the counters and charges
//! them atomically; the agent decides what to charge and which limits apply.
//!
//! A charge is all-or-nothing: if adding the usage would take any counter, per session or
//! per UTC day, past its limit, nothing is added and [`BudgetExhausted`] names the counter.
//! There is no API that lowers a counter except the operator's, in
//! [`crate::OperatorControls`].

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::StoreError;

/// One budget counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Counter {
    Turns,
    InputTokens,
    OutputTokens,
    /// Cost in micro-units of the configured currency (1 = 0.000001).
    CostMicros,
    /// Wall time in milliseconds.
    WallMs,
    ToolCalls,
}

impl Counter {
    /// All counters, in storage order.
    pub const ALL: [Counter; 6] = [
        Counter::Turns,
        Counter::InputTokens,
        Counter::OutputTokens,
        Counter::CostMicros,
        Counter::WallMs,
        Counter::ToolCalls,
    ];

    /// The counter's name, as in the database column and the `airlock.toml` budget keys.
    pub fn as_str(self) -> &'static str {
        match self {
            Counter::Turns => "turns",
            Counter::InputTokens => "input_tokens",
            Counter::OutputTokens => "output_tokens",
            Counter::CostMicros => "cost_micros",
            Counter::WallMs => "wall_ms",
            Counter::ToolCalls => "tool_calls",
        }
    }
}

/// Amounts per counter: what a step used, or what has been used so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    pub turns: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_micros: u64,
    pub wall_ms: u64,
    pub tool_calls: u64,
}

impl Usage {
    /// The amount of one counter.
    pub fn get(&self, c: Counter) -> u64 {
        match c {
            Counter::Turns => self.turns,
            Counter::InputTokens => self.input_tokens,
            Counter::OutputTokens => self.output_tokens,
            Counter::CostMicros => self.cost_micros,
            Counter::WallMs => self.wall_ms,
            Counter::ToolCalls => self.tool_calls,
        }
    }

    /// Set one counter.
    pub fn set(&mut self, c: Counter, v: u64) {
        match c {
            Counter::Turns => self.turns = v,
            Counter::InputTokens => self.input_tokens = v,
            Counter::OutputTokens => self.output_tokens = v,
            Counter::CostMicros => self.cost_micros = v,
            Counter::WallMs => self.wall_ms = v,
            Counter::ToolCalls => self.tool_calls = v,
        }
    }

    /// Add `add` into `self`, each counter stopping at `u64::MAX`: for totals kept outside
    /// the store (a task's day count), where a wrapped sum would reopen a spent budget.
    pub fn saturating_add_assign(&mut self, add: &Usage) {
        for c in Counter::ALL {
            self.set(c, self.get(c).saturating_add(add.get(c)));
        }
    }

    /// `self + add`, refusing amounts SQLite's signed 64-bit integers cannot hold.
    pub(crate) fn checked_add(&self, add: &Usage) -> Result<Usage, StoreError> {
        let mut out = Usage::default();
        for c in Counter::ALL {
            let sum = self
                .get(c)
                .checked_add(add.get(c))
                .filter(|s| *s <= i64::MAX as u64)
                .ok_or_else(|| {
                    StoreError::invalid(
                        "usage",
                        format!("{} would exceed {}", c.as_str(), i64::MAX),
                        "charge realistic amounts; this looks like a unit mistake",
                    )
                })?;
            out.set(c, sum);
        }
        Ok(out)
    }
}

/// Limits per counter; `None` means unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    #[serde(default)]
    pub turns: Option<u64>,
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: Option<u64>,
    #[serde(default)]
    pub cost_micros: Option<u64>,
    #[serde(default)]
    pub wall_ms: Option<u64>,
    #[serde(default)]
    pub tool_calls: Option<u64>,
}

impl Limits {
    /// The limit of one counter.
    pub fn get(&self, c: Counter) -> Option<u64> {
        match c {
            Counter::Turns => self.turns,
            Counter::InputTokens => self.input_tokens,
            Counter::OutputTokens => self.output_tokens,
            Counter::CostMicros => self.cost_micros,
            Counter::WallMs => self.wall_ms,
            Counter::ToolCalls => self.tool_calls,
        }
    }

    /// Set the limit of one counter (`None`: unlimited).
    pub fn set(&mut self, c: Counter, v: Option<u64>) {
        match c {
            Counter::Turns => self.turns = v,
            Counter::InputTokens => self.input_tokens = v,
            Counter::OutputTokens => self.output_tokens = v,
            Counter::CostMicros => self.cost_micros = v,
            Counter::WallMs => self.wall_ms = v,
            Counter::ToolCalls => self.tool_calls = v,
        }
    }
}

/// The operator's limits, per session and per UTC day (all sessions together).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetLimits {
    #[serde(default)]
    pub per_session: Limits,
    #[serde(default)]
    pub per_day: Limits,
}

/// Which budget a limit belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BudgetScope {
    Session,
    Day,
}

impl BudgetScope {
    fn config_table(self) -> &'static str {
        match self {
            BudgetScope::Session => "per_session",
            BudgetScope::Day => "per_day",
        }
    }
}

/// Usage so far, after a charge or when asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetState {
    /// What this session has used.
    pub session: Usage,
    /// The UTC day (days since 1970-01-01) the day counters are for.
    pub day: i64,
    /// What all sessions together have used on that day.
    pub day_usage: Usage,
}

impl BudgetState {
    /// What is left before a limit, per counter; `None` where there is no limit.
    pub fn remaining(&self, limits: &BudgetLimits, c: Counter) -> Option<u64> {
        let s = limits
            .per_session
            .get(c)
            .map(|l| l.saturating_sub(self.session.get(c)));
        let d = limits
            .per_day
            .get(c)
            .map(|l| l.saturating_sub(self.day_usage.get(c)));
        match (s, d) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A charge that would take a counter past its limit. Nothing was charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub struct BudgetExhausted {
    pub scope: BudgetScope,
    pub which: Counter,
    pub limit: u64,
    /// Used before this charge.
    pub used: u64,
    /// What this charge asked for.
    pub requested: u64,
}

impl fmt::Display for BudgetExhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scope = match self.scope {
            BudgetScope::Session => "session",
            BudgetScope::Day => "daily",
        };
        write!(
            f,
            "{scope} budget exhausted: {} used {} of {}, and this step needs {} more\nhelp: the operator can raise `{}` under `[budget.{}]` in airlock.toml",
            self.which.as_str(),
            self.used,
            self.limit,
            self.requested,
            self.which.as_str(),
            self.scope.config_table(),
        )
    }
}

/// Why a charge did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ChargeError {
    /// A limit would be passed; nothing was charged.
    #[error(transparent)]
    Exhausted(#[from] BudgetExhausted),
    /// The store failed; nothing was charged.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The first counter that `used + add` would take past its limit, session scope first.
pub(crate) fn first_exceeded(
    session_used: &Usage,
    day_used: &Usage,
    add: &Usage,
    limits: &BudgetLimits,
) -> Option<BudgetExhausted> {
    let scopes = [
        (BudgetScope::Session, session_used, &limits.per_session),
        (BudgetScope::Day, day_used, &limits.per_day),
    ];
    for (scope, used, lim) in scopes {
        for c in Counter::ALL {
            let Some(limit) = lim.get(c) else { continue };
            // `used` can already exceed the limit (usage recorded after the fact, or a
            // lowered limit): then even a zero charge is refused, so an exhausted budget
            // stops everything.
            if used.get(c).saturating_add(add.get(c)) > limit {
                return Some(BudgetExhausted {
                    scope,
                    which: c,
                    limit,
                    used: used.get(c),
                    requested: add.get(c),
                });
            }
        }
    }
    None
}

impl From<rusqlite::Error> for ChargeError {
    fn from(e: rusqlite::Error) -> Self {
        ChargeError::Store(StoreError::Sqlite(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saturating_sum_stops_at_the_top_instead_of_wrapping() {
        let mut total = Usage {
            turns: 1,
            cost_micros: u64::MAX - 1,
            ..Usage::default()
        };
        total.saturating_add_assign(&Usage {
            turns: 2,
            cost_micros: 5,
            wall_ms: 7,
            ..Usage::default()
        });
        assert_eq!(total.turns, 3);
        assert_eq!(total.cost_micros, u64::MAX);
        assert_eq!(total.wall_ms, 7);
    }

    fn limits_turns(n: u64) -> BudgetLimits {
        BudgetLimits {
            per_session: Limits {
                turns: Some(n),
                ..Limits::default()
            },
            per_day: Limits::default(),
        }
    }

    #[test]
    fn reaching_the_limit_exactly_is_allowed_and_passing_it_is_not() {
        let add = Usage {
            turns: 1,
            ..Usage::default()
        };
        let used = Usage {
            turns: 2,
            ..Usage::default()
        };
        assert!(first_exceeded(&used, &Usage::default(), &add, &limits_turns(3)).is_none());
        let e = first_exceeded(&used, &Usage::default(), &add, &limits_turns(2)).unwrap();
        assert_eq!(
            (e.which, e.limit, e.used, e.requested),
            (Counter::Turns, 2, 2, 1)
        );
        assert!(e
            .to_string()
            .contains("help: the operator can raise `turns` under `[budget.per_session]`"));
    }

    #[test]
    fn an_overdrawn_budget_refuses_even_an_empty_charge() {
        let used = Usage {
            cost_micros: 11,
            ..Usage::default()
        };
        let limits = BudgetLimits {
            per_session: Limits::default(),
            per_day: Limits {
                cost_micros: Some(10),
                ..Limits::default()
            },
        };
        let e = first_exceeded(&Usage::default(), &used, &Usage::default(), &limits).unwrap();
        assert_eq!((e.scope, e.which), (BudgetScope::Day, Counter::CostMicros));
    }

    #[test]
    fn sums_that_do_not_fit_sqlite_integers_are_refused() {
        let big = Usage {
            wall_ms: i64::MAX as u64,
            ..Usage::default()
        };
        let one = Usage {
            wall_ms: 1,
            ..Usage::default()
        };
        assert!(big.checked_add(&one).is_err());
        assert!(Usage::default().checked_add(&big).is_ok());
    }
}
