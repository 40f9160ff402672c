//! A task's own per-day budget (`airlock tasks add --budget-per-day`): what its runs of
//! one calendar day (in the task's time zone) spent together, and what the next run may
//! still spend. Pure functions of the run history and an instant, so they are tested
//! without a clock.
//!
//! The owner's per-day budget (`[budget.per_day]`) applies on top, in the store, as for
//! every session; this one keeps one task from eating the owner's whole day.

use airlock_core::schedule::Schedule;
use airlock_store::{Counter, Limits, Usage};

use super::store::Task;

/// What `task`'s runs started on the day of `now` (in its zone) spent, as the budget's
/// counters: `turns` counts the runs in which the model was woken (each is one turn).
pub fn used_today(task: &Task, schedule: &Schedule, now: i64) -> Usage {
    let since = schedule.day_start(now);
    let mut used = Usage::default();
    for run in task.runs.iter().filter(|r| r.started_at >= since) {
        let u = &run.usage;
        used.turns += u64::from(u.model_calls > 0);
        used.input_tokens += u.input_tokens;
        used.output_tokens += u.output_tokens;
        used.tool_calls += u.tool_calls;
        used.cost_micros += u.cost_micros;
        let wall_secs = run.ended_at.unwrap_or(run.started_at) - run.started_at;
        used.wall_ms += u64::try_from(wall_secs).unwrap_or(0) * 1000;
    }
    used
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
