//! `airlock tasks add|list|show|pause|resume|run-now|cancel|history`: the operator's
//! side of scheduled tasks ([`crate::service::tasks`]). With a host serving the state dir
//! the command goes through it; without one it changes the store itself, and the next
//! host to start runs what is due.
//!
//! Prompts and reports may come from the model or a web page: every line shown is
//! escaped before it reaches the terminal.

use clap::Subcommand;

use airlock_core::terminal_text::escape_line;

use crate::home::Home;
use crate::service::tasks::{self as service, Act, AddInput, Listing, TaskAct, TaskView};
use crate::tasks::plan::Missed;
use crate::tasks::store::OnHeld;

/// `airlock tasks …`
#[derive(Debug, Subcommand)]
pub enum TasksCommand {
    /// Add a task: a prompt run on a schedule, each run a session of its own.
    Add(Box<AddArgs>),
    /// Every task, with its next run.
    List {
        #[arg(long)]
        json: bool,
    },
    /// One task: schedule in words, the next three runs, prompt, destination, budget.
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Pause a task until it is resumed.
    Pause {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Resume a paused task (by the owner, the kill switch or failures) at its next time.
    Resume {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Run a task at once (the host runs it within a second or two), leaving its schedule.
    RunNow {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Cancel a task for good; its history stays.
    Cancel {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// A task's runs: outcome, usage, what was held, the audit range.
    History {
        id: String,
        #[arg(long)]
        json: bool,
    },
}

/// `airlock tasks add` (boxed: far larger than the other commands).
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("when").required(true).args(["cron", "at"])))]
pub struct AddArgs {
    /// A cron expression: `minute hour day-of-month month day-of-week`
    /// (`0 8 * * MON-FRI` is 08:00 on weekdays).
    #[arg(long, value_name = "EXPR")]
    cron: Option<String>,
    /// Run once, at this time: RFC 3339 (`2026-12-05T08:00:00Z`) or a local
    /// `2026-12-05 08:00` in the task's time zone.
    #[arg(long, value_name = "TIME")]
    at: Option<String>,
    /// What each run is asked to do.
    #[arg(long)]
    prompt: String,
    /// Send each run's result to the owner's chat on this channel
    /// (`telegram`, `telegram:<chat>`); without it, results stay in the history.
    #[arg(long, value_name = "CHANNEL[:CHAT]")]
    deliver_to: Option<String>,
    /// Each run's budget: `tool_calls=20,output_tokens=20000,wall=10m,cost=0.50`.
    /// Every run also counts against the owner's per-day budget.
    #[arg(long)]
    budget: Option<String>,
    /// The schedule's time zone (an IANA name; default `[tasks] time_zone`).
    #[arg(long, value_name = "ZONE")]
    tz: Option<String>,
    /// Seconds an action held during a run waits for the owner before it is denied.
    #[arg(long, value_name = "SECS")]
    approval_timeout: Option<u64>,
    /// Runs missed while no host ran: `run-once` at the start, or `skip`.
    #[arg(long, value_enum)]
    missed: Option<Missed>,
    /// The task's own budget over its runs of one day (same counters as --budget);
    /// a run is not started once a counter is spent, and gets at most what is left.
    #[arg(long, value_name = "BUDGET")]
    budget_per_day: Option<String>,
    /// When an action held during a run is denied or times out: `continue` without
    /// it (the default), or `end` the run there.
    #[arg(long, value_enum)]
    on_held: Option<OnHeld>,
    /// A command run in the sandbox (decided by the Gate) before the model is woken:
    /// exit 0 wakes it, exit 1 ends the run with nothing to do, anything else fails
    /// the run. Its output is kept in the run history, not shown to the model.
    #[arg(long, value_name = "COMMAND")]
    check: Option<String>,
    /// The pre-check's time limit in seconds (default 60, at most 600).
    #[arg(long, value_name = "SECS", requires = "check")]
    check_timeout: Option<u64>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: TasksCommand) -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    match cmd {
        TasksCommand::Add(args) => {
            let AddArgs {
                cron,
                at,
                prompt,
                deliver_to,
                budget,
                tz,
                approval_timeout,
                missed,
                budget_per_day,
                on_held,
                check,
                check_timeout,
                json,
            } = *args;
            let input = AddInput {
                schedule: cron.or(at).unwrap_or_default(),
                time_zone: tz,
                prompt,
                deliver_to,
                budget,
                approval_timeout_secs: approval_timeout,
                missed,
                budget_per_day,
                on_held,
                check,
                check_timeout_secs: check_timeout,
            };
            let shown: TaskView = crate::host::client::through_host_or(
                &home,
                |host| host.post("/v1/tasks/add", &input),
                || service::add(&home, &input),
            )?;
            if json {
                crate::out!("{}", serde_json::to_string_pretty(&shown)?);
            } else {
                crate::out!("added task {}", escape_line(&shown.id));
                print_task(&shown)?;
            }
            Ok(0)
        }
        TasksCommand::List { json } => {
            let listing: Listing = crate::host::client::through_host_or(
                &home,
                |host| host.get("/v1/tasks"),
                || service::list(&home, &()),
            )?;
            if json {
                crate::out!("{}", serde_json::to_string_pretty(&listing)?);
                return Ok(0);
            }
            if listing.tasks.is_empty() {
                crate::out!("no scheduled tasks");
                return Ok(0);
            }
            for t in &listing.tasks {
                crate::out!(
                    "{:<12} {:<34} {}  next: {}",
                    escape_line(&t.id),
                    escape_line(&t.status),
                    escape_line(&t.description),
                    escape_line(t.next_runs.first().map_or("-", String::as_str))
                );
            }
            Ok(0)
        }
        TasksCommand::Show { id, json } => {
            let shown = act(&home, id, Act::Show)?;
            if json {
                crate::out!("{}", serde_json::to_string_pretty(&shown)?);
            } else {
                print_task(&shown)?;
            }
            Ok(0)
        }
        TasksCommand::Pause { id, json } => done(act(&home, id, Act::Pause)?, "paused", json),
        TasksCommand::Resume { id, json } => done(act(&home, id, Act::Resume)?, "resumed", json),
        TasksCommand::RunNow { id, json } => {
            let running = crate::host::lock::running_host(&home).is_some();
            let shown = act(&home, id, Act::RunNow)?;
            let what = if running {
                "will run now"
            } else {
                "will run when the host starts (no host is running: `airlock serve`)"
            };
            done(shown, what, json)
        }
        TasksCommand::Cancel { id, json } => done(act(&home, id, Act::Cancel)?, "cancelled", json),
        TasksCommand::History { id, json } => {
            let shown = history(&home, &id)?;
            if json {
                crate::out!("{}", serde_json::to_string_pretty(&shown)?);
                return Ok(0);
            }
            if shown.is_empty() {
                crate::out!("task {} has not run yet", escape_line(&id));
            }
            for r in &shown {
                crate::out!(
                    "run {} ({:?}) session {}: {}{}",
                    r.number,
                    r.trigger,
                    escape_line(&r.session),
                    escape_line(&r.outcome),
                    if r.tainted { " [tainted]" } else { "" }
                );
                crate::out!(
                    "  usage: {} model call(s), {} input / {} output tokens, {} tool call(s); audit records {}..{}",
                    r.usage.model_calls,
                    r.usage.input_tokens,
                    r.usage.output_tokens,
                    r.usage.tool_calls,
                    r.audit_from.map_or("?".into(), |n| n.to_string()),
                    r.audit_to.map_or("?".into(), |n| n.to_string())
                );
                for h in &r.held {
                    crate::out!(
                        "  held: {} ({})",
                        escape_line(&h.summary),
                        escape_line(&h.outcome)
                    );
                }
                if let Some(d) = &r.delivered {
                    crate::out!("  delivered: {}", escape_line(d));
                }
                for line in r.report.lines().take(20) {
                    crate::out!("  | {}", escape_line(line));
                }
            }
            Ok(0)
        }
    }
}

fn act(home: &Home, id: String, act: Act) -> anyhow::Result<TaskView> {
    let input = TaskAct { id, act };
    crate::host::client::through_host_or(
        home,
        |host| host.post("/v1/tasks/act", &input),
        || service::act(home, &input),
    )
}

fn history(home: &Home, id: &str) -> anyhow::Result<Vec<crate::tasks::store::Run>> {
    crate::host::client::through_host_or(
        home,
        |host| host.post("/v1/tasks/history", &id),
        || service::history(home, id),
    )
}

fn done(shown: TaskView, what: &str, json: bool) -> anyhow::Result<i32> {
    if json {
        crate::out!("{}", serde_json::to_string_pretty(&shown)?);
        return Ok(0);
    }
    crate::out!("task {} {what}", escape_line(&shown.id));
    print_task(&shown)?;
    Ok(0)
}

fn print_task(t: &TaskView) -> anyhow::Result<()> {
    crate::out!("  status:      {}", escape_line(&t.status));
    crate::out!(
        "  schedule:    {} ({})",
        escape_line(&t.schedule),
        escape_line(&t.time_zone)
    );
    crate::out!("  in words:    {}", escape_line(&t.description));
    for (i, n) in t.next_runs.iter().enumerate() {
        crate::out!(
            "  {:<12} {}",
            if i == 0 { "next runs:" } else { "" },
            escape_line(n)
        );
    }
    crate::out!("  prompt:      {}", escape_line(&t.prompt));
    crate::out!("  deliver to:  {}", escape_line(&t.deliver_to));
    crate::out!(
        "  budget:      {} per run; {} run(s) in the next 24 hours, within the owner's per-day budget",
        escape_line(&t.budget_per_run),
        t.runs_per_day
    );
    crate::out!("  per day:     {}", escape_line(&t.budget_per_day));
    crate::out!(
        "  if held:     {} (when not approved)",
        escape_line(&t.on_held)
    );
    if let Some(c) = &t.check {
        crate::out!("  pre-check:   {}", escape_line(c));
    }
    crate::out!(
        "  created by:  {}{}",
        escape_line(&t.created_by),
        if t.tainted {
            " (tainted: its prompt is untrusted content in every run)"
        } else {
            ""
        }
    );
    if t.failures > 0 {
        crate::out!("  failures:    {} in a row", t.failures);
    }
    Ok(())
}
