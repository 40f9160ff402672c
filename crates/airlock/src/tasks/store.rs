//! The tasks and their run history, in `<state>/tasks/tasks.json`.
//!
//! One small file, changed under a lock beside it and replaced atomically (written to a
//! temporary file, synced, renamed), as the channels' state is: a crash leaves the old
//! file or the new one, never half of one. Each task keeps its last [`MAX_RUNS_KEPT`]
//! runs; the audit log keeps everything.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use airlock_core::schedule::Schedule;
use airlock_store::Limits;

use super::day_budget::DayUsage;
use super::plan::{Missed, State, Trigger};
use crate::home::Home;

/// Runs kept per task.
pub const MAX_RUNS_KEPT: usize = 50;

/// One scheduled task.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Task {
    pub id: String,
    /// The cron expression or the instant, as [`Schedule::spec`] gives it.
    pub schedule: String,
    pub time_zone: String,
    pub prompt: String,
    /// `<channel>` or `<channel>:<chat>`: where the run's result is sent (the owner's
    /// chat on that channel only). `None`: the run history only.
    pub deliver_to: Option<String>,
    /// Each run's own budget (a counter left out falls back to `[budget] per_session`);
    /// every run also counts against the owner's per-day budget.
    pub budget: Limits,
    /// Whose authority the runs act under.
    pub owner: String,
    /// Who made it: `owner` (the command line) or `agent:<session>` (the `schedule_task`
    /// tool, approved).
    pub created_by: String,
    pub created_at: i64,
    /// Proposed by a session that had seen untrusted content: every run reads the prompt
    /// as untrusted content, so every run is tainted from its first step.
    pub tainted: bool,
    /// What had tainted the proposing session.
    #[serde(default)]
    pub taint_sources: Vec<String>,
    /// How long an action held during a run waits for the owner; then it is denied and
    /// the run goes on without it.
    pub approval_timeout_secs: u64,
    pub missed: Missed,
    /// The task's own per-day budget, over all its runs of one calendar day in its time
    /// zone (a counter left out: no daily cap of the task's own). The owner's per-day
    /// budget applies on top.
    #[serde(default)]
    pub budget_per_day: Limits,
    /// What a run does when an action it held is not approved.
    #[serde(default)]
    pub on_held: OnHeld,
    /// A command run in the sandbox before the model is woken; its exit status says
    /// whether to wake it.
    #[serde(default)]
    pub check: Option<Check>,
    pub state: State,
    #[serde(default)]
    pub runs: Vec<Run>,
    /// Runs started so far (numbers the runs).
    #[serde(default)]
    pub run_count: u64,
    /// What the runs of the task's latest day spent, for its per-day budget (the history
    /// above keeps too few runs to sum). `None` until a run is kept (and in a file from
    /// before it was counted): the history is all there is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub day_usage: Option<DayUsage>,
}

impl Task {
    /// The task's schedule (it was checked when the task was made).
    pub fn parsed(&self) -> anyhow::Result<Schedule> {
        Schedule::parse(&self.schedule, &self.time_zone).map_err(|e| {
            anyhow::anyhow!("task {}: its stored schedule does not parse: {e}", self.id)
        })
    }
}

/// What a run does when an action held during it is denied, or nobody answers within
/// the task's approval timeout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum OnHeld {
    /// The model is told the action was not run, and goes on without it.
    #[default]
    Continue,
    /// The run ends there; its report says which action was not approved.
    End,
}

impl OnHeld {
    pub fn words(self) -> &'static str {
        match self {
            OnHeld::Continue => "the run goes on without it",
            OnHeld::End => "the run ends",
        }
    }
}

/// A task's pre-check: a command the Gate decides and the sandbox runs before the model
/// is woken. Exit 0 wakes the model; exit 1 means "nothing to do" and the run ends
/// without a model call; anything else (a refusal, a timeout, a crash) fails the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// One command line, as `airlock exec` takes it.
    pub command: String,
    /// The longest it may run.
    pub timeout_secs: u64,
}

/// What a run's pre-check did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckResult {
    pub exit: i32,
    /// Whether the model was woken.
    pub woke: bool,
    /// Its standard output and error, cut to [`CHECK_OUTPUT_KEPT`] bytes.
    pub output: String,
}

/// How much of a pre-check's output a run keeps (the rest is read and dropped).
pub const CHECK_OUTPUT_KEPT: usize = 4 * 1024;

/// An action held during a run, and what became of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Held {
    pub approval: String,
    pub summary: String,
    /// `approved`, `denied`, `expired` (nobody answered in time) or `pending`.
    pub outcome: String,
}

/// One run of a task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    pub number: u64,
    pub session: String,
    pub trigger: Trigger,
    pub started_at: i64,
    pub ended_at: Option<i64>,
    /// `completed`, `failed: …`, `killed`, `limit reached: …`, `provider failed: …`.
    pub outcome: String,
    pub ok: bool,
    pub tainted: bool,
    pub usage: RunUsage,
    /// The audit records of the run lie between these sequence numbers (the run's own
    /// start and end records, by `system:scheduler`).
    pub audit_from: Option<u64>,
    pub audit_to: Option<u64>,
    #[serde(default)]
    pub held: Vec<Held>,
    /// The run's final text (cut), as it was delivered or kept.
    #[serde(default)]
    pub report: String,
    /// Where the report went: `telegram:<chat>`, or why it stayed here.
    #[serde(default)]
    pub delivered: Option<String>,
    /// The pre-check, when the task has one.
    #[serde(default)]
    pub check: Option<CheckResult>,
}

/// What a run spent.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunUsage {
    pub model_calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub tool_calls: u64,
    pub cost_micros: u64,
}

/// Every task, by id.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Tasks {
    #[serde(default)]
    pub tasks: BTreeMap<String, Task>,
}

impl Tasks {
    /// The task `id`, or an error naming how to find the ids.
    pub fn get_mut(&mut self, id: &str) -> anyhow::Result<&mut Task> {
        self.tasks.get_mut(id).ok_or_else(|| no_task(id))
    }

    pub fn get(&self, id: &str) -> anyhow::Result<&Task> {
        self.tasks.get(id).ok_or_else(|| no_task(id))
    }
}

fn no_task(id: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "no task `{}`\nhelp: `airlock tasks list` shows the tasks and their ids",
        airlock_core::terminal_text::escape_line(id)
    )
}

pub fn path(home: &Home) -> PathBuf {
    home.state.join("tasks").join("tasks.json")
}

/// Read every task.
pub fn read(home: &Home) -> anyhow::Result<Tasks> {
    read_at(&path(home))
}

fn read_at(path: &Path) -> anyhow::Result<Tasks> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            anyhow::anyhow!(
                "{} is not a tasks file: {e}\nhelp: restore it from a backup, or move it away to start with no tasks",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Tasks::default()),
        Err(e) => Err(anyhow::anyhow!("cannot read {}: {e}", path.display())),
    }
}

/// Change the tasks under the lock; the change is stored only when `change` succeeds.
pub fn update<T>(
    home: &Home,
    change: impl FnOnce(&mut Tasks) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let path = path(home);
    if let Some(dir) = path.parent() {
        crate::home::create_private_dir(dir)?;
    }
    let _lock = crate::policy_change::lock_beside(&path)?;
    let mut tasks = read_at(&path)?;
    let out = change(&mut tasks)?;
    airlock_proxy::write_atomic(&path, &serde_json::to_vec_pretty(&tasks)?, 0o600)?;
    Ok(out)
}

/// A new task id: `t-` and eight random hex digits.
pub fn new_id() -> anyhow::Result<String> {
    let mut bytes = [0u8; 4];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness for a task id: {e}"))?;
    Ok(format!("t-{}", hex::encode(bytes)))
}

/// Keep a run that has ended: counted in its day's use of the task's per-day budget, and
/// in the task's history (the newest last), dropping the oldest past the cap.
pub fn push_run(task: &mut Task, schedule: &Schedule, run: Run) {
    super::day_budget::count_run(task, schedule, &run);
    task.runs.push(run);
    let extra = task.runs.len().saturating_sub(MAX_RUNS_KEPT);
    task.runs.drain(..extra);
}

/// Parse a per-run budget: `tool_calls=20,output_tokens=20000,wall=10m` (the counters of
/// `[budget]`, `wall` as a duration, `cost` in dollars).
pub fn parse_budget(text: &str) -> anyhow::Result<Limits> {
    let mut l = Limits::default();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| budget_error(part, "is not key=value"))?;
        let number = |v: &str| -> anyhow::Result<u64> {
            v.trim()
                .parse()
                .map_err(|_| budget_error(part, "needs a whole number"))
        };
        match key.trim() {
            "turns" => l.turns = Some(number(value)?),
            "input_tokens" => l.input_tokens = Some(number(value)?),
            "output_tokens" => l.output_tokens = Some(number(value)?),
            "tool_calls" => l.tool_calls = Some(number(value)?),
            "wall" => {
                let d = humantime::parse_duration(value.trim())
                    .map_err(|e| budget_error(part, &format!("is not a duration ({e})")))?;
                l.wall_ms = Some(d.as_millis() as u64);
            }
            "cost" => {
                let dollars: f64 = value
                    .trim()
                    .trim_start_matches('$')
                    .parse()
                    .map_err(|_| budget_error(part, "needs an amount in dollars"))?;
                if !(dollars.is_finite() && dollars >= 0.0) {
                    return Err(budget_error(part, "needs an amount in dollars"));
                }
                l.cost_micros = Some((dollars * 1e6).round() as u64);
            }
            _ => return Err(budget_error(part, "names no budget counter")),
        }
    }
    Ok(l)
}

fn budget_error(part: &str, why: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "budget `{}` {why}\nhelp: write counters as `tool_calls=20,output_tokens=20000,input_tokens=200000,turns=5,wall=10m,cost=0.50`",
        airlock_core::terminal_text::escape_line(part)
    )
}

/// A budget in words: `tool_calls 20, output_tokens 20000`.
pub fn budget_words(l: &Limits) -> String {
    let mut parts = Vec::new();
    let mut add = |name: &str, v: Option<u64>| {
        if let Some(v) = v {
            parts.push(format!("{name} {v}"));
        }
    };
    add("turns", l.turns);
    add("input_tokens", l.input_tokens);
    add("output_tokens", l.output_tokens);
    add("tool_calls", l.tool_calls);
    if let Some(ms) = l.wall_ms {
        parts.push(format!(
            "wall {}",
            humantime::format_duration(std::time::Duration::from_millis(ms))
        ));
    }
    if let Some(c) = l.cost_micros {
        parts.push(format!("cost ${:.2}", c as f64 / 1e6));
    }
    if parts.is_empty() {
        "the per-session budget of airlock.toml".into()
    } else {
        parts.join(", ")
    }
}

/// A task of the hourly schedule `0 * * * *` in `zone` with `runs`, for the unit tests.
#[cfg(test)]
pub(crate) fn sample_task(zone: &str, runs: Vec<Run>) -> Task {
    let s = Schedule::parse("0 * * * *", zone).unwrap();
    Task {
        id: "t-1".into(),
        schedule: s.spec(),
        time_zone: zone.into(),
        prompt: "p".into(),
        deliver_to: None,
        budget: Limits::default(),
        owner: "owner".into(),
        created_by: "owner".into(),
        created_at: 0,
        tainted: false,
        taint_sources: vec![],
        approval_timeout_secs: 60,
        missed: Missed::RunOnce,
        budget_per_day: Limits::default(),
        on_held: OnHeld::Continue,
        check: None,
        state: State::new(&s, 0),
        run_count: runs.len() as u64,
        runs,
        day_usage: None,
    }
}

/// A completed run number `number` started at `started_at`, for the unit tests.
#[cfg(test)]
pub(crate) fn sample_run(number: u64, started_at: i64, usage: RunUsage) -> Run {
    Run {
        number,
        session: format!("s-{number}"),
        trigger: Trigger::Schedule,
        started_at,
        ended_at: Some(started_at + 2),
        outcome: "completed".into(),
        ok: true,
        tainted: false,
        usage,
        audit_from: None,
        audit_to: None,
        held: vec![],
        report: String::new(),
        delivered: None,
        check: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_reads_counters_and_refuses_what_it_does_not_know() {
        let l = parse_budget("tool_calls=20, output_tokens=20000,wall=10m,cost=0.5").unwrap();
        assert_eq!(l.tool_calls, Some(20));
        assert_eq!(l.output_tokens, Some(20000));
        assert_eq!(l.wall_ms, Some(600_000));
        assert_eq!(l.cost_micros, Some(500_000));
        assert!(budget_words(&l).contains("cost $0.50"));
        let e = parse_budget("tokens=5").unwrap_err().to_string();
        assert!(
            e.contains("names no budget counter") && e.contains("help:"),
            "{e}"
        );
        assert!(parse_budget("tool_calls=many").is_err());
        assert!(parse_budget("cost=-1").is_err());
    }

    #[test]
    fn the_history_keeps_the_newest_runs() {
        let mut t = sample_task("UTC", vec![]);
        let s = t.parsed().unwrap();
        for n in 0..(MAX_RUNS_KEPT as u64 + 5) {
            push_run(&mut t, &s, sample_run(n, 0, RunUsage::default()));
        }
        assert_eq!(t.runs.len(), MAX_RUNS_KEPT);
        assert_eq!(t.runs[0].number, 5);
    }
}
