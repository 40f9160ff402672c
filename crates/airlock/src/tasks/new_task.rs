//! Making a task: the checks every new task passes, whoever proposes it (the owner at the
//! command line, or the model through an approved `task.schedule`), and the words a
//! person reads about it.

use airlock_core::schedule::{in_words, Schedule};
use airlock_store::Limits;

use super::plan::{self, Missed, State};
use super::store::{self, Check, OnHeld, Task};
use crate::config::Config;

/// Longest prompt a task may carry.
pub const MAX_PROMPT_BYTES: usize = 16 * 1024;

/// What a task is made from.
#[derive(Debug, Clone)]
pub struct NewTask {
    /// A cron expression, or a time (RFC 3339, or a local `YYYY-MM-DD HH:MM`).
    pub schedule: String,
    /// `None`: `[tasks] time_zone`.
    pub time_zone: Option<String>,
    pub prompt: String,
    pub deliver_to: Option<String>,
    pub budget: Limits,
    pub created_by: String,
    pub tainted: bool,
    pub taint_sources: Vec<String>,
    pub approval_timeout_secs: Option<u64>,
    pub missed: Option<Missed>,
    /// The task's own per-day budget (see [`super::day_budget`]).
    pub budget_per_day: Limits,
    pub on_held: OnHeld,
    /// A pre-check command and its time limit in seconds (`None`: the default).
    pub check: Option<(String, Option<u64>)>,
}

/// Longest pre-check command line.
pub const MAX_CHECK_BYTES: usize = 4 * 1024;
/// A pre-check's time limit when none is given, and the most it may have.
pub const DEFAULT_CHECK_TIMEOUT_SECS: u64 = 60;
pub const MAX_CHECK_TIMEOUT_SECS: u64 = 600;

/// Check `new` and make its task (not yet stored).
pub fn make(cfg: &Config, new: NewTask, now: i64) -> anyhow::Result<Task> {
    let zone = new
        .time_zone
        .clone()
        .unwrap_or_else(|| cfg.tasks.time_zone.clone());
    let schedule = Schedule::parse(&new.schedule, &zone)?;
    if !schedule.is_recurring() && schedule.next_after(now).is_none() {
        anyhow::bail!(
            "{} is in the past\nhelp: give a time to come, or a cron expression",
            schedule.local(schedule.next_after(i64::MIN).unwrap_or(0))
        );
    }
    plan::check_interval(&schedule, &cfg.tasks.rules(), now).map_err(anyhow::Error::msg)?;
    if new.prompt.trim().is_empty() {
        anyhow::bail!("the task has no prompt\nhelp: say what each run should do with --prompt");
    }
    if new.prompt.len() > MAX_PROMPT_BYTES {
        anyhow::bail!(
            "the prompt is {} bytes, more than the {MAX_PROMPT_BYTES} a task may carry\nhelp: keep the instructions in a workspace file and ask the task to read it",
            new.prompt.len()
        );
    }
    if let Some(d) = &new.deliver_to {
        check_destination(d)?;
    }
    let check = new.check.map(pre_check).transpose()?;
    Ok(Task {
        id: store::new_id()?,
        schedule: schedule.spec(),
        time_zone: zone,
        prompt: new.prompt,
        deliver_to: new.deliver_to,
        budget: new.budget,
        owner: "owner".into(),
        created_by: new.created_by,
        created_at: now,
        tainted: new.tainted,
        taint_sources: new.taint_sources,
        approval_timeout_secs: new
            .approval_timeout_secs
            .unwrap_or(cfg.tasks.approval_timeout_secs),
        missed: new.missed.unwrap_or(cfg.tasks.missed),
        budget_per_day: new.budget_per_day,
        on_held: new.on_held,
        check,
        state: State::new(&schedule, now),
        runs: Vec::new(),
        run_count: 0,
        day_usage: None,
    })
}

/// A pre-check's command line and time limit, checked.
fn pre_check((command, timeout): (String, Option<u64>)) -> anyhow::Result<Check> {
    if command.trim().is_empty() {
        anyhow::bail!("the pre-check is empty\nhelp: give --check a command line, or leave it out");
    }
    if command.len() > MAX_CHECK_BYTES || command.contains('\0') {
        anyhow::bail!(
            "the pre-check must be one command line of at most {MAX_CHECK_BYTES} bytes\nhelp: put a longer check in a workspace script and run that"
        );
    }
    let timeout_secs = timeout.unwrap_or(DEFAULT_CHECK_TIMEOUT_SECS);
    if !(1..=MAX_CHECK_TIMEOUT_SECS).contains(&timeout_secs) {
        anyhow::bail!(
            "a pre-check's time limit of {timeout_secs} s is out of range\nhelp: give --check-timeout between 1 and {MAX_CHECK_TIMEOUT_SECS} seconds"
        );
    }
    Ok(Check {
        command,
        timeout_secs,
    })
}

/// A destination is `<channel>` or `<channel>:<chat>`, with a chat platform's name. The
/// result only ever goes to the owner's own chat there (checked when it is sent).
pub fn check_destination(d: &str) -> anyhow::Result<()> {
    let channel = d.split_once(':').map_or(d, |(c, _)| c);
    if !["telegram", "slack", "discord"].contains(&channel) || d.len() > 200 {
        anyhow::bail!(
            "cannot deliver to `{}`\nhelp: write `telegram`, `slack` or `discord`, optionally with `:<chat id>` of the owner's chat; leave --deliver-to out to keep results in the run history",
            airlock_core::terminal_text::escape_line(d)
        );
    }
    Ok(())
}

/// The next `n` runs as lines: the date in the task's zone and how far it is.
pub fn next_runs_words(schedule: &Schedule, after: i64, n: usize) -> Vec<String> {
    schedule
        .next_runs(after, n)
        .into_iter()
        .map(|t| format!("{} ({})", schedule.local(t), in_words(after, t)))
        .collect()
}

/// How many runs fall in the 24 hours after `now`, at most `cap`.
pub fn runs_per_day(schedule: &Schedule, now: i64, cap: usize) -> usize {
    schedule
        .next_runs(now, cap)
        .into_iter()
        .filter(|t| *t <= now + 86_400)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(schedule: &str) -> NewTask {
        NewTask {
            schedule: schedule.into(),
            time_zone: Some("Europe/Berlin".into()),
            prompt: "summarise my inbox".into(),
            deliver_to: Some("telegram".into()),
            budget: Limits::default(),
            created_by: "owner".into(),
            tainted: false,
            taint_sources: vec![],
            approval_timeout_secs: None,
            missed: None,
            budget_per_day: Limits::default(),
            on_held: OnHeld::Continue,
            check: None,
        }
    }

    #[test]
    fn a_task_is_checked_before_it_is_made() {
        let cfg = Config::default();
        let now = 1_767_225_600; // 2026-01-01T00:00:00Z
        let t = make(&cfg, new("0 8 * * *"), now).unwrap();
        assert!(t.id.starts_with("t-"));
        assert_eq!(t.state.next_due, Some(now + 7 * 3600));
        assert_eq!(t.approval_timeout_secs, cfg.tasks.approval_timeout_secs);
        let e = make(&cfg, new("* * * * *"), now).unwrap_err().to_string();
        assert!(e.contains("minimum interval"), "{e}");
        let e = make(&cfg, new("2020-01-01 08:00"), now)
            .unwrap_err()
            .to_string();
        assert!(e.contains("in the past"), "{e}");
        let mut bad = new("0 8 * * *");
        bad.deliver_to = Some("https://evil.example/".into());
        assert!(make(&cfg, bad, now)
            .unwrap_err()
            .to_string()
            .contains("cannot deliver"));
        let mut empty = new("0 8 * * *");
        empty.prompt = " ".into();
        assert!(make(&cfg, empty, now).is_err());
        let mut checked = new("0 8 * * *");
        checked.check = Some(("test -s /workspace/new".into(), None));
        let t = make(&cfg, checked, now).unwrap();
        let c = t.check.unwrap();
        assert_eq!(c.timeout_secs, DEFAULT_CHECK_TIMEOUT_SECS);
        let mut slow = new("0 8 * * *");
        slow.check = Some(("true".into(), Some(3600)));
        let e = make(&cfg, slow, now).unwrap_err().to_string();
        assert!(e.contains("--check-timeout"), "{e}");
        let mut blank = new("0 8 * * *");
        blank.check = Some(("  ".into(), None));
        assert!(make(&cfg, blank, now).is_err());
        let s = Schedule::parse("0 8 * * *", "Europe/Berlin").unwrap();
        let lines = next_runs_words(&s, now, 3);
        assert_eq!(lines.len(), 3);
        assert!(
            lines[0].starts_with("Thu 2026-01-01 08:00 CET") && lines[0].ends_with("(in 7 hours)"),
            "{lines:?}"
        );
        assert_eq!(runs_per_day(&s, now, 100), 1);
    }
}
