//! A task's own per-day budget (`airlock tasks add --budget-per-day`): what its runs of
//! one calendar day (in the task's time zone) spent together, and what the next run may
//! still spend. Pure functions of the task and an instant, so they are tested without a
//! clock.
//!
//! What a day spent is counted in the task itself ([`DayUsage`]), each run as it is
//! kept ([`count_run`], called by [`super::store::push_run`]): the run history keeps only
//! the last [`super::store::MAX_RUNS_KEPT`] runs, fewer than a day may hold, so a sum
//! over it would forget the day's first runs and let the task spend past its budget.
//!
//! The owner's per-day budget (`[budget.per_day]`) applies on top, in the store, as for
//! every session; this one keeps one task from eating the owner's whole day.

use airlock_core::schedule::Schedule;
use airlock_store::{Counter, Limits, Usage};
use serde::{Deserialize, Serialize};

use super::store::{Run, Task};

/// What a task's runs of one calendar day spent together, as the budget's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DayUsage {
    /// The day's start in the task's zone (unix seconds).
    pub day: i64,
    pub used: Usage,
}

/// What `task`'s runs started on the day of `now` (in its zone) spent, as the budget's
/// counters: `turns` counts the runs in which the model was woken (each is one turn).
pub fn used_today(task: &Task, schedule: &Schedule, now: i64) -> Usage {
    let today = schedule.day_start(now);
    match &task.day_usage {
        Some(d) if d.day == today => d.used,
        Some(_) => Usage::default(),
        // A tasks file from before the count was kept: what the history holds.
        None => from_history(task, today),
    }
}

/// Count `run`, which has ended, in its task's day (the day it started on). Called
/// before the run joins the history.
pub fn count_run(task: &mut Task, schedule: &Schedule, run: &Run) {
    let day = schedule.day_start(run.started_at);
    let mut used = match &task.day_usage {
        Some(d) if d.day == day => d.used,
        // A run of a day already past (the clock went back): today's count stands.
        Some(d) if d.day > day => return,
        Some(_) => Usage::default(),
        None => from_history(task, day),
    };
    used.saturating_add_assign(&usage_of(run));
    task.day_usage = Some(DayUsage { day, used });
}

/// What the runs in the history that started at or after `since` spent.
fn from_history(task: &Task, since: i64) -> Usage {
    let mut used = Usage::default();
    for run in task.runs.iter().filter(|r| r.started_at >= since) {
        used.saturating_add_assign(&usage_of(run));
    }
    used
}

/// What one run spent, as the budget's counters.
fn usage_of(run: &Run) -> Usage {
    let u = &run.usage;
    let wall_secs = run.ended_at.unwrap_or(run.started_at) - run.started_at;
    Usage {
        turns: u64::from(u.model_calls > 0),
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        tool_calls: u.tool_calls,
        cost_micros: u.cost_micros,
        wall_ms: u64::try_from(wall_secs).unwrap_or(0).saturating_mul(1000),
    }
}

/// The next run's limits: each counter of `per_run` (or, left out there, of `fallback`,
/// the per-session budget), lowered to what `per_day` leaves after `used`. `Err` names
/// the first counter of the day that is used up, so the run is not started.
pub fn next_run_limits(
    per_run: &Limits,
    fallback: &Limits,
    per_day: &Limits,
    used: &Usage,
) -> Result<Limits, String> {
    let mut limits = Limits::default();
    for c in Counter::ALL {
        let run = per_run.get(c).or(fallback.get(c));
        let limit = match per_day.get(c) {
            None => run,
            Some(day) => {
                let spent = used.get(c);
                let left = day.saturating_sub(spent);
                if left == 0 {
                    return Err(format!(
                        "the task's per-day budget of {} is used up ({spent} of {day} today)",
                        c.as_str()
                    ));
                }
                Some(run.map_or(left, |r| r.min(left)))
            }
        };
        limits.set(c, limit);
    }
    Ok(limits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::store::{sample_run, sample_task, RunUsage};

    fn task_with_runs(runs: &[(i64, u64, u64)]) -> (Task, Schedule) {
        let runs = runs
            .iter()
            .enumerate()
            .map(|(n, (at, model_calls, tool_calls))| {
                let usage = RunUsage {
                    model_calls: *model_calls,
                    tool_calls: *tool_calls,
                    ..Default::default()
                };
                sample_run(n as u64, *at, usage)
            })
            .collect();
        let task = sample_task("Europe/Berlin", runs);
        let s = task.parsed().unwrap();
        (task, s)
    }

    // 2026-12-05 00:00 in Berlin is 2026-12-04T23:00:00Z.
    const MIDNIGHT: i64 = 1_796_425_200;

    #[test]
    fn only_the_runs_of_the_tasks_own_calendar_day_count() {
        let (task, s) = task_with_runs(&[
            (MIDNIGHT - 60, 1, 7), // the day before, in Berlin
            (MIDNIGHT + 60, 1, 3),
            (MIDNIGHT + 3600, 0, 0), // a pre-check that did not wake the model
            (MIDNIGHT + 7200, 2, 4),
        ]);
        let used = used_today(&task, &s, MIDNIGHT + 10_000);
        assert_eq!(used.turns, 2);
        assert_eq!(used.tool_calls, 7);
        assert_eq!(used.wall_ms, 3 * 2000);
    }

    #[test]
    fn i7_a_day_of_more_runs_than_the_history_keeps_still_counts_every_run() {
        use crate::tasks::store::{push_run, MAX_RUNS_KEPT};
        let (mut task, s) = task_with_runs(&[]);
        // More runs in one day than the history keeps (every five minutes, as the minimum
        // interval allows), each waking the model once and making two tool calls.
        let runs = MAX_RUNS_KEPT as i64 + 30;
        for n in 0..runs {
            let usage = RunUsage {
                model_calls: 1,
                tool_calls: 2,
                ..Default::default()
            };
            push_run(
                &mut task,
                &s,
                sample_run(n as u64, MIDNIGHT + n * 300, usage),
            );
        }
        assert_eq!(task.runs.len(), MAX_RUNS_KEPT);
        let used = used_today(&task, &s, MIDNIGHT + runs * 300);
        assert_eq!(used.turns, runs as u64);
        assert_eq!(used.tool_calls, 2 * runs as u64);
        // A per-day budget of as many turns is spent: the next run does not start.
        let per_day = Limits {
            turns: Some(runs as u64),
            ..Default::default()
        };
        let e =
            next_run_limits(&Limits::default(), &Limits::default(), &per_day, &used).unwrap_err();
        assert!(e.contains("turns"), "{e}");
        // The next day starts from nothing.
        let next_day = MIDNIGHT + 86_400 + 60;
        assert_eq!(used_today(&task, &s, next_day), Usage::default());
        push_run(
            &mut task,
            &s,
            sample_run(
                999,
                next_day,
                RunUsage {
                    model_calls: 1,
                    ..Default::default()
                },
            ),
        );
        assert_eq!(used_today(&task, &s, next_day + 60).turns, 1);
    }

    #[test]
    fn a_tasks_file_from_before_the_count_picks_it_up_from_its_history() {
        let (mut task, s) = task_with_runs(&[(MIDNIGHT + 60, 1, 3), (MIDNIGHT + 120, 1, 4)]);
        assert_eq!(task.day_usage, None);
        let usage = RunUsage {
            model_calls: 1,
            tool_calls: 5,
            ..Default::default()
        };
        crate::tasks::store::push_run(&mut task, &s, sample_run(2, MIDNIGHT + 180, usage));
        let used = used_today(&task, &s, MIDNIGHT + 240);
        assert_eq!((used.turns, used.tool_calls), (3, 12));
    }

    #[test]
    fn a_run_gets_at_most_what_the_day_leaves_and_none_when_it_is_spent() {
        let per_run = Limits {
            tool_calls: Some(10),
            ..Default::default()
        };
        let fallback = Limits {
            output_tokens: Some(5000),
            ..Default::default()
        };
        let per_day = Limits {
            tool_calls: Some(12),
            turns: Some(3),
            ..Default::default()
        };
        let mut used = Usage {
            turns: 1,
            tool_calls: 8,
            ..Default::default()
        };
        let l = next_run_limits(&per_run, &fallback, &per_day, &used).unwrap();
        assert_eq!(l.tool_calls, Some(4), "lowered to what the day leaves");
        assert_eq!(l.turns, Some(2));
        assert_eq!(l.output_tokens, Some(5000), "the per-session fallback");
        assert_eq!(l.input_tokens, None);
        used.tool_calls = 12;
        let e = next_run_limits(&per_run, &fallback, &per_day, &used).unwrap_err();
        assert!(e.contains("tool_calls") && e.contains("12 of 12"), "{e}");
        let no_day = next_run_limits(&per_run, &fallback, &Limits::default(), &used).unwrap();
        assert_eq!(no_day.tool_calls, Some(10));
    }
}
