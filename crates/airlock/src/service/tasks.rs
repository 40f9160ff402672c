//! `airlock tasks …` and the host's `/v1/tasks/…`: add, list, show, pause, resume,
//! run-now, cancel and history of scheduled tasks. Each change is one update of the task
//! store and one audit record naming the operator.

use serde::{Deserialize, Serialize};
use serde_json::json;

use airlock_core::schedule::{in_words, Schedule};

use crate::home::Home;
use crate::tasks::day_budget;
use crate::tasks::new_task::{self, NewTask};
use crate::tasks::plan::{self, Missed, Status};
use crate::tasks::store::{self, OnHeld, Run, Task};
use crate::{config, service::fault};

/// `airlock tasks add`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddInput {
    /// A cron expression, or a time for a task that runs once.
    pub schedule: String,
    #[serde(default)]
    pub time_zone: Option<String>,
    pub prompt: String,
    #[serde(default)]
    pub deliver_to: Option<String>,
    #[serde(default)]
    pub budget: Option<String>,
    #[serde(default)]
    pub approval_timeout_secs: Option<u64>,
    #[serde(default)]
    pub missed: Option<Missed>,
    /// The task's own budget over its runs of one day (`tool_calls=100,cost=2`).
    #[serde(default)]
    pub budget_per_day: Option<String>,
    /// What a run does when a held action is not approved.
    #[serde(default)]
    pub on_held: Option<OnHeld>,
    /// A command run in the sandbox before each run wakes the model.
    #[serde(default)]
    pub check: Option<String>,
    #[serde(default)]
    pub check_timeout_secs: Option<u64>,
}

/// A task as the commands show it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskView {
    pub id: String,
    /// `active`, `paused by the kill switch`, `done`, …
    pub status: String,
    pub schedule: String,
    pub time_zone: String,
    /// The schedule in words.
    pub description: String,
    /// The next runs: the date in the task's zone and how far off it is.
    pub next_runs: Vec<String>,
    pub prompt: String,
    pub deliver_to: String,
    pub budget_per_run: String,
    /// The task's own per-day budget, and what its runs spent today.
    pub budget_per_day: String,
    /// When a held action is not approved: `the run goes on without it` or `the run ends`.
    pub on_held: String,
    /// The pre-check command and its time limit, if any.
    pub check: Option<String>,
    pub runs_per_day: usize,
    pub created_by: String,
    pub tainted: bool,
    pub failures: u32,
    pub last_run: Option<Run>,
}

/// A task id (JSON string) with what to do.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskAct {
    pub id: String,
    pub act: Act,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Act {
    Show,
    Pause,
    Resume,
    RunNow,
    Cancel,
}

/// Every task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Listing {
    pub tasks: Vec<TaskView>,
}

use crate::tasks::clock::now;

/// The view of `task` at `now`.
pub fn view(task: &Task, now: i64) -> TaskView {
    let parsed = task.parsed().ok();
    let status = match &task.state.status {
        Status::Active => "active".to_string(),
        Status::Paused { why, .. } => why.words().to_string(),
        Status::Done => "done".into(),
        Status::Cancelled { .. } => "cancelled".into(),
    };
    let active = task.state.status == Status::Active;
    let next_runs = match (&parsed, task.state.next_due) {
        (Some(s), Some(first)) if active => std::iter::once(first)
            .chain(s.next_runs(first, 2))
            .map(|t| format!("{} ({})", s.local(t), in_words(now, t)))
            .collect(),
        _ => Vec::new(),
    };
    TaskView {
        id: task.id.clone(),
        status,
        schedule: task.schedule.clone(),
        time_zone: task.time_zone.clone(),
        description: parsed.as_ref().map(Schedule::describe).unwrap_or_default(),
        next_runs,
        prompt: task.prompt.clone(),
        deliver_to: task
            .deliver_to
            .clone()
            .unwrap_or_else(|| "the run history (airlock tasks history)".into()),
        budget_per_run: store::budget_words(&task.budget),
        budget_per_day: day_budget_words(task, parsed.as_ref(), now),
        on_held: task.on_held.words().into(),
        check: task
            .check
            .as_ref()
            .map(|c| format!("{} (at most {} s)", c.command, c.timeout_secs)),
        runs_per_day: parsed
            .as_ref()
            .map_or(0, |s| new_task::runs_per_day(s, now, 1500)),
        created_by: task.created_by.clone(),
        tainted: task.tainted,
        failures: task.state.failures,
        last_run: task.runs.last().cloned(),
    }
}

/// The task's own daily budget and today's use, or that it has none.
fn day_budget_words(task: &Task, schedule: Option<&Schedule>, now: i64) -> String {
    if task.budget_per_day == Default::default() {
        return "none of its own; the owner's per-day budget applies".into();
    }
    let limit = store::budget_words(&task.budget_per_day);
    match schedule {
        Some(s) => {
            let u = day_budget::used_today(task, s, now);
            format!(
                "{limit}; today so far: turns {}, tool_calls {}, output_tokens {}, cost ${:.2}",
                u.turns,
                u.tool_calls,
                u.output_tokens,
                u.cost_micros as f64 / 1e6
            )
        }
        None => limit,
    }
}

/// Add a task for the owner.
pub fn add(home: &Home, input: &AddInput) -> anyhow::Result<TaskView> {
    let cfg = config::load(&home.config_file()).map_err(fault)?;
    let budget = match &input.budget {
        Some(b) => store::parse_budget(b)?,
        None => Default::default(),
    };
    let budget_per_day = match &input.budget_per_day {
        Some(b) => store::parse_budget(b)?,
        None => Default::default(),
    };
    let now = now();
    let task = new_task::make(
        &cfg,
        NewTask {
            schedule: input.schedule.clone(),
            time_zone: input.time_zone.clone(),
            prompt: input.prompt.clone(),
            deliver_to: input.deliver_to.clone(),
            budget,
            created_by: "owner".into(),
            tainted: false,
            taint_sources: vec![],
            approval_timeout_secs: input.approval_timeout_secs,
            missed: input.missed,
            budget_per_day,
            on_held: input.on_held.unwrap_or_default(),
            check: input.check.clone().map(|c| (c, input.check_timeout_secs)),
        },
        now,
    )?;
    store_new(home, task, now)
}

/// Store a new task (checked by [`new_task::make`]) with its `task-added` record.
pub fn store_new(home: &Home, task: Task, now: i64) -> anyhow::Result<TaskView> {
    let shown = view(&task, now);
    store::update(home, |all| {
        all.tasks.insert(task.id.clone(), task.clone());
        Ok(())
    })
    .map_err(fault)?;
    crate::config_audit::record(
        home,
        "task-added",
        json!({"task": task.id, "schedule": task.schedule, "time_zone": task.time_zone,
               "description": shown.description, "prompt": task.prompt,
               "deliver_to": task.deliver_to, "created_by": task.created_by,
               "tainted": task.tainted, "budget_per_run": shown.budget_per_run,
               "budget_per_day": store::budget_words(&task.budget_per_day),
               "on_held": task.on_held, "check": task.check}),
    )
    .map_err(fault)?;
    Ok(shown)
}

/// Every task.
pub fn list(home: &Home, _: &()) -> anyhow::Result<Listing> {
    let all = store::read(home).map_err(fault)?;
    let now = now();
    Ok(Listing {
        tasks: all.tasks.values().map(|t| view(t, now)).collect(),
    })
}

/// One act on one task; the task as it is after it.
pub fn act(home: &Home, input: &TaskAct) -> anyhow::Result<TaskView> {
    let now = now();
    if input.act == Act::Show {
        let all = store::read(home).map_err(fault)?;
        return Ok(view(all.get(&input.id)?, now));
    }
    let shown = store::update(home, |all| {
        let task = all.get_mut(&input.id)?;
        let schedule = task.parsed()?;
        let done = |r: Result<(), String>| r.map_err(|e| anyhow::anyhow!("task {}: {e}", task.id));
        match input.act {
            Act::Show => {}
            Act::Pause => done(plan::pause(&mut task.state, now))?,
            Act::Resume => done(plan::resume(&mut task.state, &schedule, now))?,
            Act::RunNow => {
                if matches!(task.state.status, Status::Cancelled { .. }) {
                    anyhow::bail!("task {}: it was cancelled; add it again to run it", task.id);
                }
                if matches!(
                    task.state.status,
                    Status::Paused {
                        why: plan::PauseReason::KillSwitch,
                        ..
                    }
                ) {
                    anyhow::bail!("task {}: it is paused by the kill switch\nhelp: `airlock tasks resume {}` first", task.id, task.id);
                }
                task.state.run_requested = true;
            }
            Act::Cancel => {
                if matches!(task.state.status, Status::Cancelled { .. }) {
                    anyhow::bail!("task {}: it was cancelled already", task.id);
                }
                task.state.status = Status::Cancelled { at: now };
                task.state.run_requested = false;
                task.state.next_due = None;
            }
        }
        Ok(view(task, now))
    })?;
    let kind = match input.act {
        Act::Pause => "task-paused",
        Act::Resume => "task-resumed",
        Act::RunNow => "task-run-requested",
        Act::Cancel => "task-cancelled",
        Act::Show => unreachable!("show returned above"),
    };
    crate::config_audit::record(home, kind, json!({"task": input.id})).map_err(fault)?;
    Ok(shown)
}

/// The kill switch's part: every active task pauses, and stays paused until the owner
/// resumes it. The ids paused.
pub fn pause_all_for_kill(home: &Home) -> anyhow::Result<Vec<String>> {
    let now = now();
    store::update(home, |all| {
        Ok(all
            .tasks
            .values_mut()
            .filter_map(|t| plan::kill(&mut t.state, now).then(|| t.id.clone()))
            .collect())
    })
}

/// A task's runs, oldest first.
pub fn history(home: &Home, id: &str) -> anyhow::Result<Vec<Run>> {
    let all = store::read(home).map_err(fault)?;
    Ok(all.get(id)?.runs.clone())
}
