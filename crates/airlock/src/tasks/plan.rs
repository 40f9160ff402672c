//! The scheduler's rules, as pure functions of a task's state and an instant passed in:
//! when a task is due, what a run's end does to it (exponential backoff, auto-pause after
//! too many failures), what a host start does with runs missed while it was down, and the
//! kill switch's pause. No clock is read here and nothing is stored, so the tests drive
//! them with any instants they like.

use std::time::Duration;

use airlock_core::schedule::Schedule;
use serde::{Deserialize, Serialize};

/// What to do with runs missed while no host ran (`[tasks] missed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Missed {
    /// However many were missed, run once at the start.
    #[default]
    RunOnce,
    /// Run none of them; wait for the next time the schedule names.
    Skip,
}

/// The scheduler's limits (`[tasks]` in airlock.toml).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// The shortest time between two runs of a recurring task.
    pub min_interval: Duration,
    /// Failures in a row after which a task pauses itself.
    pub max_failures: u32,
    /// The wait after a first failure; it doubles with each further one.
    pub backoff_base: Duration,
    /// The longest wait after failures.
    pub backoff_max: Duration,
}

/// Whether a task may fire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Status {
    Active,
    /// Paused by `why` (the owner, the kill switch, too many failures); nothing fires
    /// until the owner resumes it.
    Paused {
        why: PauseReason,
        at: i64,
    },
    /// A one-off task that ran, or a task whose schedule has no further time.
    Done,
    Cancelled {
        at: i64,
    },
}

/// Why a task is paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseReason {
    Owner,
    KillSwitch,
    Failures,
}

impl PauseReason {
    pub fn words(self) -> &'static str {
        match self {
            PauseReason::Owner => "paused by the owner",
            PauseReason::KillSwitch => "paused by the kill switch",
            PauseReason::Failures => "paused after too many failures in a row",
        }
    }
}

/// A task's scheduling state, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    #[serde(flatten)]
    pub status: Status,
    /// When it runs next (unix seconds); `None` once nothing is left to run.
    pub next_due: Option<i64>,
    /// Failed runs in a row.
    pub failures: u32,
    /// When the last run started.
    pub last_started: Option<i64>,
    /// The owner asked for a run now (`airlock tasks run-now`): it runs at the next tick,
    /// paused or not, and the schedule is left as it was.
    #[serde(default)]
    pub run_requested: bool,
}

impl State {
    /// A new task's state: active, due at the schedule's first time after `now`.
    pub fn new(schedule: &Schedule, now: i64) -> State {
        State {
            status: Status::Active,
            next_due: schedule.next_after(now),
            failures: 0,
            last_started: None,
            run_requested: false,
        }
    }
}

/// Why a run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    Schedule,
    /// A run missed while no host ran, made up once at the start.
    Missed,
    RunNow,
}

/// Whether the task should run at `now`, and why.
pub fn due(state: &State, now: i64) -> Option<Trigger> {
    if state.run_requested && !matches!(state.status, Status::Cancelled { .. }) {
        return Some(Trigger::RunNow);
    }
    match (&state.status, state.next_due) {
        (Status::Active, Some(t)) if t <= now => Some(Trigger::Schedule),
        _ => None,
    }
}

/// Refuse a recurring schedule that fires more often than `rules` let it.
pub fn check_interval(schedule: &Schedule, rules: &Rules, now: i64) -> Result<(), String> {
    match schedule.shortest_gap(now) {
        Some(gap) if gap < rules.min_interval => Err(format!(
            "{:?} runs as often as every {} s, more often than the minimum interval of {} s\nhelp: choose a schedule with more time between runs, or lower [tasks] min_interval_secs in airlock.toml",
            schedule.spec(),
            gap.as_secs(),
            rules.min_interval.as_secs()
        )),
        _ => Ok(()),
    }
}

/// A run starts at `now`: the schedule moves past it.
pub fn started(state: &mut State, schedule: &Schedule, trigger: Trigger, now: i64) {
    state.last_started = Some(now);
    if trigger == Trigger::RunNow {
        state.run_requested = false;
        return;
    }
    // Moved now, so a run that outlives the next time does not start twice; [`finished`]
    // applies the minimum interval and any backoff.
    state.next_due = schedule.next_after(now);
}

/// How a run ended, as far as the schedule cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    Succeeded,
    Failed,
}

/// What [`finished`] did beyond moving the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterRun {
    Scheduled,
    /// Failed; the next try waits this long.
    BackedOff(Duration),
    /// Failed `max_failures` times in a row: paused; the owner is to be told.
    AutoPaused,
    /// Nothing is left to run.
    Done,
    /// Failed while the task was paused or cancelled: it stays as it was.
    Stopped,
}

/// A run that started at `started_at` ended at `now`.
pub fn finished(
    state: &mut State,
    schedule: &Schedule,
    rules: &Rules,
    end: RunEnd,
    started_at: i64,
    now: i64,
) -> AfterRun {
    // The next regular time, never sooner than the minimum interval after this start.
    let floor = if schedule.is_recurring() {
        started_at + rules.min_interval.as_secs() as i64 - 1
    } else {
        started_at
    };
    let regular = schedule.next_after(now.max(floor));
    match end {
        RunEnd::Succeeded => {
            state.failures = 0;
            state.next_due = regular;
            if regular.is_none() && state.status == Status::Active {
                state.status = Status::Done;
                return AfterRun::Done;
            }
            AfterRun::Scheduled
        }
        RunEnd::Failed => {
            state.failures += 1;
            // A task paused while the run went on (by the kill switch, or by its owner)
            // or cancelled stays so: a "too many failures" pause in its place would drop
            // the kill switch's refusal of `run-now`, and only the owner lifts either.
            if state.status != Status::Active {
                state.next_due = regular;
                return AfterRun::Stopped;
            }
            if state.failures >= rules.max_failures {
                state.status = Status::Paused {
                    why: PauseReason::Failures,
                    at: now,
                };
                state.next_due = regular;
                return AfterRun::AutoPaused;
            }
            let wait = backoff(rules, state.failures);
            let retry = now + wait.as_secs() as i64;
            // A one-off task is tried again after the wait; a recurring one at the later
            // of the wait and its next regular time, so a failure never makes it fire
            // more often than its schedule.
            state.next_due = Some(match regular {
                Some(r) if schedule.is_recurring() => r.max(retry),
                _ => retry,
            });
            AfterRun::BackedOff(wait)
        }
    }
}

/// The wait after `failures` failures in a row: the base, doubled for each failure after
/// the first, at most the maximum.
pub fn backoff(rules: &Rules, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(30);
    rules
        .backoff_base
        .saturating_mul(1u32 << doublings)
        .min(rules.backoff_max)
}

/// The host starts at `now`: a task whose time passed while no host ran runs once now, or
/// skips to its next time, as `missed` says. `true` when runs were missed.
pub fn on_start(state: &mut State, schedule: &Schedule, missed: Missed, now: i64) -> bool {
    let Some(due) = state.next_due else {
        return false;
    };
    if due >= now || state.status != Status::Active {
        return false;
    }
    state.next_due = match missed {
        Missed::RunOnce => Some(due),
        Missed::Skip => schedule.next_after(now),
    };
    true
}

/// Why a run that has started must end before its model is woken: the task was cancelled,
/// paused by the kill switch, or paused by its owner since the run was picked (a run-now
/// of a task the owner had paused goes on). `picked` is the task's status when the run
/// was picked, `current` its status now.
pub fn withdrawn(picked: &Status, current: &Status) -> Option<Withdrawn> {
    match current {
        Status::Cancelled { .. } => Some(Withdrawn::Cancelled),
        Status::Paused {
            why: PauseReason::KillSwitch,
            ..
        } => Some(Withdrawn::KillSwitch),
        Status::Paused { why, .. } if !matches!(picked, Status::Paused { .. }) => {
            Some(Withdrawn::Paused(*why))
        }
        _ => None,
    }
}

/// What [`withdrawn`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withdrawn {
    KillSwitch,
    Paused(PauseReason),
    Cancelled,
}

impl Withdrawn {
    /// The run's outcome in its history: a run the kill switch stopped is killed, like one
    /// whose session it killed; one its owner stopped did not run.
    pub fn outcome(self) -> String {
        match self {
            Withdrawn::KillSwitch => {
                "killed: the kill switch paused the task before the model was woken".into()
            }
            Withdrawn::Paused(why) => format!(
                "not run: the task was {} before the model was woken",
                why.words()
            ),
            Withdrawn::Cancelled => {
                "not run: the task was cancelled before the model was woken".into()
            }
        }
    }

    /// Whether the run counts as a success (not a failure to back off from).
    pub fn ok(self) -> bool {
        self != Withdrawn::KillSwitch
    }
}

/// The kill switch: an active task pauses, and an asked-for run is dropped.
pub fn kill(state: &mut State, now: i64) -> bool {
    state.run_requested = false;
    if state.status == Status::Active {
        state.status = Status::Paused {
            why: PauseReason::KillSwitch,
            at: now,
        };
        return true;
    }
    false
}

/// The owner pauses a task.
pub fn pause(state: &mut State, now: i64) -> Result<(), String> {
    match state.status {
        Status::Active => {
            state.status = Status::Paused {
                why: PauseReason::Owner,
                at: now,
            };
            Ok(())
        }
        Status::Paused { .. } => Err("the task is paused already".into()),
        Status::Done | Status::Cancelled { .. } => {
            Err("the task has ended; it cannot be paused".into())
        }
    }
}

/// The owner resumes a paused task: failures are forgotten and it runs at its schedule's
/// next time after `now` (what was missed while paused does not run).
pub fn resume(state: &mut State, schedule: &Schedule, now: i64) -> Result<(), String> {
    match state.status {
        Status::Paused { .. } => {
            state.status = Status::Active;
            state.failures = 0;
            state.next_due = schedule.next_after(now);
            if state.next_due.is_none() {
                state.status = Status::Done;
            }
            Ok(())
        }
        Status::Active => Err("the task is not paused".into()),
        Status::Done | Status::Cancelled { .. } => {
            Err("the task has ended; add it again to run it".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60;
    const HOUR: i64 = 3600;

    fn rules() -> Rules {
        Rules {
            min_interval: Duration::from_secs(300),
            max_failures: 3,
            backoff_base: Duration::from_secs(60),
            backoff_max: Duration::from_secs(3600),
        }
    }

    fn at(text: &str) -> i64 {
        Schedule::once(text, "UTC").unwrap().next_after(0).unwrap()
    }

    fn utc(t: i64) -> String {
        Schedule::once("2000-01-01 00:00", "UTC").unwrap().local(t)
    }

    /// Start and end a run at `now` (a tick of the host, with an injected instant).
    fn run(state: &mut State, s: &Schedule, end: RunEnd, now: i64) -> AfterRun {
        let trigger = due(state, now).expect("not due");
        started(state, s, trigger, now);
        finished(state, s, &rules(), end, now, now + 10)
    }

    #[test]
    fn a_cron_task_fires_at_its_times_across_a_dst_change_and_not_between() {
        let s = Schedule::parse("0 8 * * *", "Europe/Berlin").unwrap();
        let mut state = State::new(&s, at("2026-03-28T00:00:00Z"));
        let mut fired = Vec::new();
        // A host ticking every minute for three days.
        let mut now = at("2026-03-28T00:00:00Z");
        while now < at("2026-03-31T00:00:00Z") {
            if due(&state, now).is_some() {
                fired.push(utc(now));
                assert_eq!(
                    run(&mut state, &s, RunEnd::Succeeded, now),
                    AfterRun::Scheduled
                );
            }
            now += MIN;
        }
        assert_eq!(
            fired,
            [
                "Sat 2026-03-28 07:00 UTC (+00:00)",
                "Sun 2026-03-29 06:00 UTC (+00:00)",
                "Mon 2026-03-30 06:00 UTC (+00:00)"
            ]
        );
    }

    #[test]
    fn failures_back_off_exponentially_then_pause_the_task() {
        let s = Schedule::parse("*/10 * * * *", "UTC").unwrap();
        let t0 = at("2026-01-01T00:00:00Z");
        let mut state = State::new(&s, t0);
        assert_eq!(state.next_due, Some(t0 + 10 * MIN));
        let r = Rules {
            backoff_base: Duration::from_secs(15 * 60),
            ..rules()
        };
        let now = t0 + 10 * MIN;
        started(&mut state, &s, Trigger::Schedule, now);
        // First failure: 15 min, later than the next regular time (10 min).
        assert_eq!(
            finished(&mut state, &s, &r, RunEnd::Failed, now, now + 5),
            AfterRun::BackedOff(Duration::from_secs(15 * 60))
        );
        assert_eq!(state.next_due, Some(now + 5 + 15 * MIN));
        let now = state.next_due.unwrap();
        started(&mut state, &s, Trigger::Schedule, now);
        assert_eq!(
            finished(&mut state, &s, &r, RunEnd::Failed, now, now),
            AfterRun::BackedOff(Duration::from_secs(30 * 60))
        );
        let now = state.next_due.unwrap();
        started(&mut state, &s, Trigger::Schedule, now);
        assert_eq!(
            finished(&mut state, &s, &r, RunEnd::Failed, now, now),
            AfterRun::AutoPaused
        );
        assert!(matches!(
            state.status,
            Status::Paused {
                why: PauseReason::Failures,
                ..
            }
        ));
        // Nothing fires while paused, however long.
        assert_eq!(due(&state, now + 100 * HOUR), None);
        // Resumed: failures forgotten, the next regular time.
        resume(&mut state, &s, now + HOUR).unwrap();
        assert_eq!(state.failures, 0);
        assert!(due(&state, state.next_due.unwrap()).is_some());
        assert_eq!(backoff(&rules(), 1), Duration::from_secs(60));
        assert_eq!(backoff(&rules(), 4), Duration::from_secs(480));
        assert_eq!(backoff(&rules(), 40), Duration::from_secs(3600));
    }

    #[test]
    fn a_success_after_failures_resets_the_count() {
        let s = Schedule::parse("0 * * * *", "UTC").unwrap();
        let t0 = at("2026-01-01T00:30:00Z");
        let mut state = State::new(&s, t0);
        let now = state.next_due.unwrap();
        run(&mut state, &s, RunEnd::Failed, now);
        assert_eq!(state.failures, 1);
        let now = state.next_due.unwrap();
        run(&mut state, &s, RunEnd::Succeeded, now);
        assert_eq!(state.failures, 0);
        assert_eq!(state.status, Status::Active);
    }

    #[test]
    fn kill_pauses_every_task_and_only_a_resume_lets_it_fire_again() {
        let s = Schedule::parse("0 * * * *", "UTC").unwrap();
        let t0 = at("2026-01-01T00:30:00Z");
        let mut tasks: Vec<State> = (0..3).map(|_| State::new(&s, t0)).collect();
        tasks[1].run_requested = true;
        for t in &mut tasks {
            kill(t, t0);
        }
        for hour in 0..48 {
            for t in &tasks {
                assert_eq!(due(t, t0 + hour * HOUR), None);
            }
        }
        // A restart of the host does not undo it.
        for t in &mut tasks {
            assert!(!on_start(t, &s, Missed::RunOnce, t0 + 48 * HOUR));
            assert_eq!(due(t, t0 + 48 * HOUR), None);
        }
        let now = t0 + 48 * HOUR;
        resume(&mut tasks[0], &s, now).unwrap();
        assert_eq!(tasks[0].next_due, Some(now + 30 * MIN));
        assert!(due(&tasks[0], now + 30 * MIN).is_some());
        assert_eq!(due(&tasks[2], now + 30 * MIN), None);
    }

    #[test]
    fn i7_a_run_the_kill_switch_stopped_leaves_the_kill_switchs_pause_in_place() {
        let s = Schedule::parse("0 * * * *", "UTC").unwrap();
        let t0 = at("2026-01-01T00:30:00Z");
        let mut state = State::new(&s, t0);
        // One failure short of the limit, then a run that the kill switch stops.
        state.failures = rules().max_failures - 1;
        let now = state.next_due.unwrap();
        started(&mut state, &s, Trigger::Schedule, now);
        assert!(kill(&mut state, now + 1));
        assert_eq!(
            finished(&mut state, &s, &rules(), RunEnd::Failed, now, now + 2),
            AfterRun::Stopped
        );
        assert_eq!(
            state.status,
            Status::Paused {
                why: PauseReason::KillSwitch,
                at: now + 1
            }
        );
        // The owner's own pause is kept the same way.
        let mut owned = State::new(&s, t0);
        owned.failures = rules().max_failures - 1;
        pause(&mut owned, t0).unwrap();
        owned.run_requested = true;
        started(&mut owned, &s, Trigger::RunNow, t0);
        finished(&mut owned, &s, &rules(), RunEnd::Failed, t0, t0);
        assert!(matches!(
            owned.status,
            Status::Paused {
                why: PauseReason::Owner,
                ..
            }
        ));
    }

    #[test]
    fn i7_a_run_stops_before_its_model_once_its_task_is_killed_paused_or_cancelled() {
        let active = Status::Active;
        let by = |why| Status::Paused { why, at: 5 };
        assert_eq!(withdrawn(&active, &active), None);
        assert_eq!(
            withdrawn(&active, &by(PauseReason::KillSwitch)),
            Some(Withdrawn::KillSwitch)
        );
        assert_eq!(
            withdrawn(&active, &by(PauseReason::Owner)),
            Some(Withdrawn::Paused(PauseReason::Owner))
        );
        assert_eq!(
            withdrawn(&active, &Status::Cancelled { at: 5 }),
            Some(Withdrawn::Cancelled)
        );
        // A run-now of a task its owner had paused goes on; the kill switch stops it.
        let owner = by(PauseReason::Owner);
        assert_eq!(withdrawn(&owner, &owner), None);
        assert_eq!(
            withdrawn(&owner, &by(PauseReason::KillSwitch)),
            Some(Withdrawn::KillSwitch)
        );
        assert!(!Withdrawn::KillSwitch.ok());
        assert!(Withdrawn::KillSwitch.outcome().starts_with("killed"));
    }

    #[test]
    fn runs_missed_while_down_run_once_or_are_skipped() {
        let s = Schedule::parse("0 * * * *", "UTC").unwrap();
        let t0 = at("2026-01-01T00:30:00Z");
        let down_until = t0 + 5 * HOUR;
        let mut once = State::new(&s, t0);
        assert!(on_start(&mut once, &s, Missed::RunOnce, down_until));
        assert_eq!(due(&once, down_until), Some(Trigger::Schedule));
        run(&mut once, &s, RunEnd::Succeeded, down_until);
        // One run made up, then the next regular time: not one per missed hour.
        assert_eq!(once.next_due, Some(at("2026-01-01T06:00:00Z")));
        let mut skip = State::new(&s, t0);
        assert!(on_start(&mut skip, &s, Missed::Skip, down_until));
        assert_eq!(due(&skip, down_until), None);
        assert_eq!(skip.next_due, Some(at("2026-01-01T06:00:00Z")));
    }

    #[test]
    fn a_schedule_more_often_than_the_minimum_interval_is_refused() {
        let every_minute = Schedule::parse("* * * * *", "UTC").unwrap();
        let e = check_interval(&every_minute, &rules(), 0).unwrap_err();
        assert!(
            e.contains("every 60 s") && e.contains("min_interval_secs"),
            "{e}"
        );
        // Irregular: mostly hourly, but two runs a minute apart.
        let bursty = Schedule::parse("0,1 9 * * *", "UTC").unwrap();
        assert!(check_interval(&bursty, &rules(), 0).is_err());
        let hourly = Schedule::parse("0 * * * *", "UTC").unwrap();
        assert!(check_interval(&hourly, &rules(), 0).is_ok());
        let once = Schedule::parse("2030-01-01 00:00", "UTC").unwrap();
        assert!(check_interval(&once, &rules(), 0).is_ok());
    }

    #[test]
    fn a_one_off_task_is_done_after_it_succeeds_and_run_now_leaves_the_schedule() {
        let s = Schedule::parse("2026-01-01 09:00", "UTC").unwrap();
        let t0 = at("2026-01-01T00:00:00Z");
        let mut state = State::new(&s, t0);
        state.run_requested = true;
        assert_eq!(due(&state, t0), Some(Trigger::RunNow));
        started(&mut state, &s, Trigger::RunNow, t0);
        finished(&mut state, &s, &rules(), RunEnd::Succeeded, t0, t0);
        assert_eq!(state.next_due, Some(at("2026-01-01T09:00:00Z")));
        assert_eq!(state.status, Status::Active);
        let now = at("2026-01-01T09:00:00Z");
        assert_eq!(run(&mut state, &s, RunEnd::Succeeded, now), AfterRun::Done);
        assert_eq!(state.status, Status::Done);
        assert_eq!(due(&state, now + HOUR), None);
    }
}
