//! The host's scheduler: it wakes every [`TICK`] (or when a command changed a task),
//! starts the runs that are due ([`crate::tasks::plan`] decides), and keeps each run's
//! outcome, usage, held actions and audit range in the task's history.
//!
//! Each run is a session of its own, in this process, like a chat's turn:
//! - the record that starts it, `task-run-start`, is by `system:scheduler` on behalf of
//!   the task's owner; everything the model proposes in it is by `agent:<run-session>`,
//!   as in any session;
//! - its budget is the task's per-run budget (counters it leaves out fall back to
//!   `[budget] per_session`), lowered to what the task's own per-day budget leaves
//!   ([`crate::tasks::day_budget`]; a run whose day is spent is skipped), and every run
//!   counts against the owner's per-day budget;
//! - a task with a pre-check runs it first ([`super::task_check`]): the model is woken
//!   only when it exits 0;
//! - an action held during the run is put to the owner as a card in their chat on the
//!   task's channel (else it waits in the approvals queue and on the web page) for the
//!   task's approval timeout, and is then denied; the model goes on without it, or the
//!   run ends there (`--on-held end`), and the run's history lists what was held and
//!   what became of it;
//! - a task proposed by a tainted session gives its prompt to every run as untrusted
//!   content, so every run is tainted from its first step;
//! - the kill switch pauses every task (`crate::service::kill`) and kills the running
//!   ones' sessions with the rest; a run picked just before it looks at its task again
//!   once its session is in the store, and ends there without waking the model when the
//!   task was paused or cancelled since;
//! - a run that fails or panics is kept as a failed run, and its task may run again.
//!
//! Results go to the run history (`airlock tasks history`) and, with `deliver_to`, to the
//! owner's chat on that channel (never another chat), through the running channel; a
//! task that pauses itself after failures says so there too.

use std::collections::HashSet;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde_json::json;

use airlock_agent::agent::{Outcome, TurnInput};
use airlock_audit::AuditEvent;
use airlock_core::{Attribution, Principal, Via};
use airlock_store::{ApprovalStatus, BudgetStore, SessionStore, Timestamp};

use super::Host;
use crate::agent_host::{provider_config, AgentHost, HostOptions};
use crate::service::caller::Notices;
use crate::tasks::day_budget;
use crate::tasks::plan::{self, AfterRun, RunEnd, Trigger};
use crate::tasks::store::{self, Held, OnHeld, Run, RunUsage, Task};

use super::task_check;

/// How often the scheduler looks for due tasks.
pub const TICK: Duration = Duration::from_secs(1);

/// Longest report kept in a run's history.
const MAX_REPORT_BYTES: usize = 8 * 1024;

use crate::proxy_fetch::cut;
use crate::tasks::clock::now;

/// The scheduler's shared state: its wake-up bell and the tasks running now.
#[derive(Default)]
pub struct Scheduler {
    bell: Mutex<bool>,
    rung: Condvar,
    running: Mutex<HashSet<String>>,
}

impl Scheduler {
    /// Look at the tasks now rather than at the next tick (a command changed one).
    pub fn wake(&self) {
        *self.bell.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.rung.notify_all();
    }

    /// Task runs under way.
    pub fn runs_in_flight(&self) -> usize {
        self.running.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn sleep(&self) {
        let guard = self.bell.lock().unwrap_or_else(|p| p.into_inner());
        let (mut rung, _) = self
            .rung
            .wait_timeout_while(guard, TICK, |rung| !*rung)
            .unwrap_or_else(|p| p.into_inner());
        *rung = false;
    }
}

/// Start the scheduler's thread (once the host serves).
pub fn start(host: &Arc<Host>) -> anyhow::Result<()> {
    catch_up(host)?;
    let host = host.clone();
    std::thread::Builder::new()
        .name("airlock-scheduler".into())
        .spawn(move || loop {
            if host.stopping.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            if let Err(e) = tick(&host) {
                tracing::error!(error = %format!("{e:#}"), "the scheduler's tick failed");
            }
            host.scheduler.sleep();
        })?;
    Ok(())
}

/// At the start: runs missed while no host ran run once now or are skipped, as each
/// task says; recorded when any were.
fn catch_up(host: &Host) -> anyhow::Result<()> {
    let now = now();
    let missed: Vec<(String, &'static str)> = store::update(&host.home, |all| {
        let mut missed = Vec::new();
        for t in all.tasks.values_mut() {
            let Ok(schedule) = t.parsed() else { continue };
            if plan::on_start(&mut t.state, &schedule, t.missed, now) {
                missed.push((
                    t.id.clone(),
                    match t.missed {
                        plan::Missed::RunOnce => "run once now",
                        plan::Missed::Skip => "skipped",
                    },
                ));
            }
        }
        Ok(missed)
    })?;
    for (task, what) in missed {
        record(
            host,
            "scheduler",
            "task-runs-missed",
            json!({"task": task, "missed_runs": what}),
        );
    }
    Ok(())
}

fn record(host: &Host, session: &str, kind: &str, detail: serde_json::Value) {
    if let Err(e) = append(host, session, kind, detail) {
        tracing::error!(error = %format!("{e:#}"), kind, "a scheduler record failed");
    }
}

/// Append a record by `system:scheduler` on the owner's behalf; its sequence number.
fn append(
    host: &Host,
    session: &str,
    kind: &str,
    detail: serde_json::Value,
) -> anyhow::Result<u64> {
    let log = host.audit.log(&host.warm.config())?;
    let who = Attribution::system("scheduler", Principal::Owner, Via::internal());
    let receipt = crate::service::exec::lock(&log)
        .append(AuditEvent::by(kind, session, &who).with_detail(detail))
        .map_err(|e| anyhow::anyhow!("the scheduler's `{kind}` record failed: {e}"))?;
    Ok(receipt.seq)
}

/// Start every run that is due now.
fn tick(host: &Arc<Host>) -> anyhow::Result<()> {
    let now = now();
    let busy: HashSet<String> = host
        .scheduler
        .running
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let due = |t: &Task| !busy.contains(&t.id) && plan::due(&t.state, now).is_some();
    // Read first: the file is rewritten only when something starts.
    if !store::read(&host.home)?.tasks.values().any(due) {
        return Ok(());
    }
    let starting: Vec<(Task, Trigger, u64, super::exec::SessionSlot)> =
        store::update(&host.home, |all| {
            let mut starting = Vec::new();
            for t in all.tasks.values_mut() {
                if busy.contains(&t.id) {
                    continue;
                }
                let Some(trigger) = plan::due(&t.state, now) else {
                    continue;
                };
                let Ok(schedule) = t.parsed() else { continue };
                // A run is a session like any other: past `[host] max_sessions` it waits
                // for the next tick, still due.
                let Some(slot) = host.sessions.enter() else {
                    tracing::info!(task = %t.id, "a due task waits for a session slot");
                    break;
                };
                plan::started(&mut t.state, &schedule, trigger, now);
                t.run_count += 1;
                starting.push((t.clone(), trigger, t.run_count, slot));
            }
            Ok(starting)
        })?;
    for (task, trigger, number, slot) in starting {
        let marked = Running::mark(host, &task.id);
        let picked = task.clone();
        let h = host.clone();
        let spawned = std::thread::Builder::new()
            .name("airlock-task-run".into())
            .spawn(move || {
                // Dropped last, however the run ends: the task may run again.
                let _marked = marked;
                let _slot = slot;
                let id = task.id.clone();
                let kept = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run_and_keep(&h, task, trigger, number, now)
                }));
                if kept.is_err() {
                    tracing::error!(task = %id, "keeping a task run's outcome panicked");
                }
            });
        if let Err(e) = spawned {
            // The run is marked started in the store already (its place in flight went
            // with the closure): it is kept as a failed run, which backs off as failures
            // do, rather than dropped without a trace.
            tracing::error!(task = %picked.id, error = %e, "cannot start a thread for a task run");
            let mut run = new_run(&picked, trigger, number, now);
            run.outcome = format!("failed: cannot start a thread for the run: {e}");
            keep_run(host, &picked, run);
        }
    }
    Ok(())
}

/// A task's place among the scheduler's runs in flight, given back when dropped (a run
/// that ends, fails or panics), so that the task runs again and a stopping host does not
/// wait for it.
struct Running {
    host: Arc<Host>,
    id: String,
}

impl Running {
    fn mark(host: &Arc<Host>, id: &str) -> Running {
        host.scheduler
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string());
        Running {
            host: host.clone(),
            id: id.to_string(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.host
            .scheduler
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

/// A run as it starts: nothing done yet.
fn new_run(task: &Task, trigger: Trigger, number: u64, started_at: i64) -> Run {
    Run {
        number,
        session: String::new(),
        trigger,
        started_at,
        ended_at: None,
        outcome: String::new(),
        ok: false,
        tainted: task.tainted,
        usage: RunUsage::default(),
        audit_from: None,
        audit_to: None,
        held: Vec::new(),
        report: String::new(),
        delivered: None,
        check: None,
    }
}

/// Run `task` once and keep what happened. A run that panics is kept as a failed one.
fn run_and_keep(host: &Host, task: Task, trigger: Trigger, number: u64, started_at: i64) {
    let mut run = new_run(&task, trigger, number, started_at);
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_once(host, &task, &mut run)
    }));
    match ran {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            run.outcome = format!("failed: {e:#}");
            run.ok = false;
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(task = %task.id, panic = %what, "a task run panicked");
            run.outcome = "failed: the run failed unexpectedly (see the host's log)".into();
            run.ok = false;
        }
    }
    keep_run(host, &task, run);
}

/// Keep a run that has ended: its end record, its place in the task's history, and what
/// its end does to the schedule (a backoff, a pause after too many failures).
fn keep_run(host: &Host, task: &Task, mut run: Run) {
    let (number, started_at) = (run.number, run.started_at);
    let ended = now().max(started_at);
    run.ended_at = Some(ended);
    let session = if run.session.is_empty() {
        "scheduler".to_string()
    } else {
        run.session.clone()
    };
    match append(
        host,
        &session,
        "task-run-end",
        json!({"task": task.id, "run": number, "outcome": run.outcome, "ok": run.ok,
               "tainted": run.tainted, "usage": run.usage, "held": run.held,
               "check": run.check.as_ref().map(|c| json!({"exit": c.exit, "woke": c.woke}))}),
    ) {
        Ok(seq) => run.audit_to = Some(seq),
        Err(e) => tracing::error!(error = %format!("{e:#}"), "the run's end record failed"),
    }
    let rules = host.warm.config().tasks.rules();
    let end = if run.ok {
        RunEnd::Succeeded
    } else {
        RunEnd::Failed
    };
    let after = store::update(&host.home, |all| {
        let t = all.get_mut(&task.id)?;
        let schedule = t.parsed()?;
        let after = plan::finished(&mut t.state, &schedule, &rules, end, started_at, ended);
        store::push_run(t, &schedule, run.clone());
        Ok(after)
    });
    match after {
        Ok(AfterRun::AutoPaused) => {
            let help = format!(
                "see `airlock tasks history {}`, then `airlock tasks resume {}`",
                task.id, task.id
            );
            let told = task.deliver_to.as_deref().map(|d| {
                deliver(
                    host,
                    d,
                    &format!(
                        "Task {} failed {} times in a row and is paused: {}\n{help}",
                        task.id, rules.max_failures, run.outcome
                    ),
                )
            });
            record(
                host,
                &session,
                "task-auto-paused",
                json!({"task": task.id, "failures": rules.max_failures, "help": help,
                       "owner_told": told}),
            )
        }
        Ok(AfterRun::BackedOff(wait)) => {
            tracing::warn!(task = %task.id, wait_secs = wait.as_secs(), "a task run failed; backing off")
        }
        Ok(_) => {}
        Err(e) => {
            tracing::error!(task = %task.id, error = %format!("{e:#}"), "keeping a run's outcome")
        }
    }
}

/// One run: what the task's day leaves it, its pre-check, then a new session, its start
/// record, one turn, and what it spent and held.
fn run_once(host: &Host, task: &Task, run: &mut Run) -> anyhow::Result<()> {
    let home = &host.home;
    // Picked before a kill switch or a pause: nothing runs, not even the pre-check.
    if let Some(why) = withdrawn(host, task)? {
        run.ok = why.ok();
        run.outcome = why.outcome();
        return Ok(());
    }
    let mut cfg = (*host.warm.current_config()).clone();
    // The task's own budget per run, lowered to what its own per-day budget leaves; every
    // run also counts against the owner's day.
    let used = day_budget::used_today(task, &task.parsed()?, run.started_at);
    match day_budget::next_run_limits(
        &task.budget,
        &cfg.budget.per_session,
        &task.budget_per_day,
        &used,
    ) {
        Ok(limits) => cfg.budget.per_session = limits,
        Err(why) => {
            // Not a failure: the task did what its owner allowed today.
            run.ok = true;
            run.outcome = format!("skipped: {why}");
            return Ok(());
        }
    }
    if let Some(check) = &task.check {
        run.audit_from = Some(append(
            host,
            "scheduler",
            "task-run-check",
            json!({"task": task.id, "run": run.number, "command": check.command,
                   "timeout_secs": check.timeout_secs}),
        )?);
        let result = task_check::run(host, &task.id, check)?;
        let exit = result.exit;
        run.check = Some(result);
        if exit == task_check::NOTHING_TO_DO {
            run.ok = true;
            run.outcome =
                "nothing to do: the pre-check exited 1, so the model was not woken".into();
            return Ok(());
        }
        anyhow::ensure!(
            exit == 0,
            "the pre-check exited {exit} (0 wakes the model, 1 means nothing to do; 126 is a check the Gate refused, and one it would hold is refused too, as nobody is there to ask)"
        );
    }
    let provider_cfg = provider_config(home, &cfg, Default::default())?;
    let notes = crate::service::caller::Attachable::new();
    let audit = host.audit.log(&cfg)?;
    #[cfg(debug_assertions)]
    debug_hold();
    let mut agent = AgentHost::open(
        home.clone(),
        cfg,
        &provider_cfg,
        HostOptions {
            session: None,
            approval_timeout: Some(task.approval_timeout_secs),
            profile: None,
            channel: "scheduler".into(),
            messages_to: Some(Notices::Attachable(notes.clone())),
            notices: Notices::Attachable(notes.clone()),
            workspace: None,
            egress: Default::default(),
            child: None,
            audit: Some(audit),
        },
    )?;
    run.session = agent.session_id.clone();
    // The session is in the store now, where `airlock kill --all` finds it. The kill
    // switch pauses the tasks before it lists the sessions, so either that listing finds
    // this one (and the turn below ends as killed), or the pause is seen here and the
    // model is never woken.
    match withdrawn(host, task) {
        Ok(None) => {}
        stopped => {
            // Never used: finished, so that no empty session stays active (a killed
            // one stays killed).
            let _ = agent.store().finish_session(&run.session, Timestamp::now());
            let _ = agent.close();
            if let Some(why) = stopped? {
                run.ok = why.ok();
                run.outcome = why.outcome();
            }
            return Ok(());
        }
    }
    if task.on_held == OnHeld::End {
        agent = agent.ending_on_unapproved();
    }
    // A stopping host past its grace ends the run as a kill would, with its records.
    agent = agent.abandoned_when(host.turns.flag());
    // A new session: held for the run, so that no chat or run takes a turn of it beside.
    let _hold = host
        .driven
        .claim(&run.session, crate::service::driven::Driver::Task)?;
    let start = append(
        host,
        &run.session,
        "task-run-start",
        json!({"task": task.id, "run": run.number, "trigger": run.trigger,
               "created_by": task.created_by, "tainted": task.tainted,
               "budget_per_run": store::budget_words(&task.budget)}),
    );
    run.audit_from = match start {
        Ok(seq) => run.audit_from.or(Some(seq)),
        Err(e) => {
            let _ = agent.close();
            return Err(e);
        }
    };
    // Nobody watches a scheduled run: what it holds is put to the owner as a card in
    // their chat on the task's channel. Without one, or while that channel is down, it
    // waits in the approvals queue (and on the web page) for the approval timeout.
    let cards = task.deliver_to.as_deref().and_then(|d| {
        let (channel, chat) = split_destination(d);
        let approver = host
            .outbox
            .owner_approver(channel, chat)
            .map_err(|e| tracing::warn!(error = %format!("{e:#}"), "a task run's held actions wait in the approvals queue"))
            .ok()?;
        crate::inline_approvals::InlineApprovals::start(
            home,
            &run.session,
            agent.shared_audit(),
            approver,
        )
        .map_err(|e| tracing::warn!(error = %format!("{e:#}"), "watching a task run's approvals"))
        .ok()
    });
    let source = format!(
        "a scheduled task ({}) proposed after untrusted content",
        task.id
    );
    let input = if task.tainted {
        TurnInput::Untrusted {
            source: &source,
            text: &task.prompt,
        }
    } else {
        TurnInput::Owner(&task.prompt)
    };
    // The reply as it comes, for the run session's web page.
    let streaming = host.replies.begin(&agent.session_id);
    let mut on_stream = |event| streaming.take(event);
    let report = agent.run_turn_from(input, Some(&mut on_stream));
    drop(streaming);
    if let Some(cards) = cards {
        cards.stop();
    }
    let spent = agent
        .store()
        .budget_state(&run.session, Timestamp::now())
        .map(|s| s.session)
        .ok();
    let mut held_ids: Vec<String> = report
        .as_ref()
        .map(|r| {
            r.tool_calls
                .iter()
                .filter_map(|c| c.approval_id.clone())
                .collect()
        })
        .unwrap_or_default();
    // A run that ended at a held action has no tool result for it.
    if let Ok(airlock_agent::agent::TurnReport {
        outcome: Outcome::Unapproved {
            request: Some(id), ..
        },
        ..
    }) = &report
    {
        if !held_ids.contains(id) {
            held_ids.push(id.clone());
        }
    }
    run.held = held_actions(home, &held_ids);
    run.tainted = agent
        .store()
        .get_session(&run.session)
        .map(|s| s.gate.taint.is_tainted())
        .unwrap_or(task.tainted);
    let notes = notes.take();
    agent.close()?;
    let report = report?;
    if let Some(u) = spent {
        run.usage = RunUsage {
            model_calls: u64::from(report.model_calls),
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            tool_calls: u.tool_calls,
            cost_micros: u.cost_micros,
        };
    }
    run.outcome = report.outcome.summary();
    // Ending at an action the owner did not approve is what the task asked for, not a
    // failure to back off from.
    run.ok = matches!(
        report.outcome,
        Outcome::Completed { .. } | Outcome::Unapproved { .. }
    );
    let mut text = notes;
    if let Outcome::Completed { text: t } = &report.outcome {
        text.push_str(t);
    }
    run.report = cut(text, MAX_REPORT_BYTES);
    run.delivered = Some(match &task.deliver_to {
        Some(d) => deliver(
            host,
            d,
            &format!(
                "Task {} (run {}): {}\n\n{}",
                task.id, run.number, run.outcome, run.report
            ),
        ),
        None => "kept in the run history".into(),
    });
    Ok(())
}

/// Whether `task`'s run must stop before its model is woken (the task was killed, paused
/// or cancelled since the run was picked), from the task as stored now.
fn withdrawn(host: &Host, task: &Task) -> anyhow::Result<Option<plan::Withdrawn>> {
    let all = store::read(&host.home)?;
    let now = &all.get(&task.id)?.state.status;
    Ok(plan::withdrawn(&task.state.status, now))
}

/// Debug builds only: `AIRLOCK_DEBUG_TASK_RUN=<file>` lets a test stop a run just before
/// it opens its session. While the file says `hold`, the run waits there (and leaves
/// `<file>.held` to say so); when it says `panic`, the run panics there. A release build
/// has no such variable.
#[cfg(debug_assertions)]
fn debug_hold() {
    let Some(path) = std::env::var_os("AIRLOCK_DEBUG_TASK_RUN") else {
        return;
    };
    let path = std::path::PathBuf::from(path);
    let says = |word: &str| std::fs::read_to_string(&path).is_ok_and(|s| s.trim() == word);
    if says("panic") {
        panic!("AIRLOCK_DEBUG_TASK_RUN: a task run told to panic");
    }
    if says("hold") {
        let _ = std::fs::write(path.with_extension("held"), b"");
        while says("hold") {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Send `text` to the owner's chat that `destination` (`telegram`, `telegram:<chat>`)
/// names; where it went, or why it did not.
fn deliver(host: &Host, destination: &str, text: &str) -> String {
    let (channel, chat) = split_destination(destination);
    match host.outbox.send_to_owner(channel, chat, text) {
        Ok(to) => to,
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "delivering a task's result");
            format!("not sent ({e:#}); kept in the run history")
        }
    }
}

/// `telegram:<chat>` as the channel and the chat; `telegram` as the channel alone.
fn split_destination(destination: &str) -> (&str, Option<&str>) {
    match destination.split_once(':') {
        Some((c, chat)) => (c, Some(chat)),
        None => (destination, None),
    }
}

/// What became of each action held during the run.
fn held_actions(home: &crate::home::Home, ids: &[String]) -> Vec<Held> {
    use airlock_store::ApprovalRequests;
    let Ok(store) = crate::service::approvals::open_store(home) else {
        return Vec::new();
    };
    ids.iter()
        .map(|id| {
            let (summary, outcome) = match store.get_approval(id) {
                Ok(r) => (
                    preview_line(&r.preview),
                    match r.status {
                        ApprovalStatus::Approved => "approved".to_string(),
                        ApprovalStatus::Denied => "denied (by the owner, or withdrawn when nobody answered within the task's approval timeout)".to_string(),
                        ApprovalStatus::Expired => "denied: nobody answered within the task's approval timeout".to_string(),
                        other => format!("{other:?}").to_lowercase(),
                    },
                ),
                Err(e) => (String::new(), format!("unknown: {e}")),
            };
            Held {
                approval: id.clone(),
                summary,
                outcome,
            }
        })
        .collect()
}

/// One line for a held action: what it would have done.
fn preview_line(p: &airlock_store::ApprovalPreview) -> String {
    cut(p.headline(), 300)
}
