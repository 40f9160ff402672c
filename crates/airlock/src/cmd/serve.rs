//! `airlock serve` and `airlock status`.

use crate::home::Home;
use crate::service::status::{store_status, StatusReport};

pub fn serve() -> anyhow::Result<i32> {
    crate::host::serve(Home::from_env()?)
}

pub fn status(as_json: bool) -> anyhow::Result<i32> {
    use airlock_core::terminal_text::{escape_json_text, escape_line};
    let home = Home::from_env()?;
    let report: StatusReport = crate::host::client::through_host_or(
        &home,
        |host| host.get("/v1/status"),
        || {
            store_status(
                &home,
                None,
                crate::config::load(&home.config_file())
                    .ok()
                    .map(|c| c.budget.per_day),
            )
        },
    )?;
    if as_json {
        crate::out!("{}", escape_json_text(&serde_json::to_string(&report)?));
        return Ok(0);
    }
    match &report.host {
        Some(h) => {
            crate::out!(
                "host: running, pid {}, version {}, since {}, socket {}",
                h.pid,
                escape_line(&h.version),
                utc(h.started_at),
                escape_line(&h.socket)
            );
            crate::out!(
                "runs: {} running (of {}), {} waiting (of {})",
                h.runs_active,
                h.max_sandboxes,
                h.runs_waiting,
                h.max_queued
            );
            crate::out!(
                "sandbox pool: {} ready (of {}, {} staged ahead); {} runs took one ({} staged ahead), {} built their own, {} discarded{}",
                h.pool.ready,
                h.pool.size,
                h.pool.staged,
                h.pool.taken,
                h.pool.staged_taken,
                h.pool.missed,
                h.pool.discarded,
                h.pool
                    .last_error
                    .as_deref()
                    .map(|e| format!("; last build failed: {}", escape_line(e)))
                    .unwrap_or_default()
            );
            for p in &h.pool.profiles {
                crate::out!(
                    "  profile {}: {} ready (share {}); {} runs took one, {} built their own",
                    escape_line(&p.profile),
                    p.ready,
                    p.share,
                    p.taken,
                    p.missed
                );
            }
            crate::out!(
                "agent sessions through the host: {} (of {})",
                h.sessions_running,
                h.max_sessions
            );
            for s in &h.live_sessions {
                crate::out!(
                    "  chat {}: {}, {}",
                    escape_line(&s.id),
                    if s.attached { "attached" } else { "detached" },
                    if s.busy {
                        "a turn is running".to_string()
                    } else {
                        format!("idle {} s", s.idle_secs)
                    }
                );
            }
            for id in &h.runs {
                crate::out!("  run {}: a task is running", escape_line(id));
            }
            for p in &h.policies {
                crate::out!(
                    "policy {}: {} (loaded {})",
                    p.profile,
                    escape_line(&p.hash),
                    utc(p.loaded_at)
                );
                if let Some(why) = &p.refused_edit {
                    crate::out!("  last edit refused, still in force: {}", escape_line(why));
                }
            }
            if let Some(why) = &h.config_refused_edit {
                crate::out!(
                    "config: last edit refused, the one before it is in force: {}",
                    escape_line(why)
                );
            }
        }
        None => {
            crate::out!("host: not running (commands run embedded; start one with `airlock serve`)")
        }
    }
    crate::out!("sessions active: {}", report.sessions.len());
    for s in &report.sessions {
        crate::out!(
            "  {}  {}{}",
            escape_line(&s.id),
            escape_line(&s.principal),
            if s.tainted { "  tainted" } else { "" }
        );
    }
    crate::out!("approvals pending: {}", report.approvals_pending);
    for c in &report.channels {
        match &c.error {
            Some(e) => crate::out!("channel {}: {}", escape_line(&c.name), escape_line(e)),
            None => crate::out!(
                "channel {}: {}, {} chat(s)",
                escape_line(&c.name),
                match (&c.owner, c.pairing_pending) {
                    (Some(o), _) => format!("owner id {}", escape_line(o)),
                    (None, true) => "a pairing code waits to be sent".into(),
                    (None, false) => "not paired (airlock channel pair)".into(),
                },
                c.chats
            ),
        }
    }
    if let Some(b) = &report.budget_today {
        let of = |used: u64, limit: Option<u64>| match limit {
            Some(l) => format!("{used} of {l}"),
            None => format!("{used} (no limit)"),
        };
        crate::out!(
            "budget today (UTC, all sessions): turns {}, input tokens {}, output tokens {}, cost {} micro-dollars, tool calls {}",
            of(b.used.turns, b.limits.turns),
            of(b.used.input_tokens, b.limits.input_tokens),
            of(b.used.output_tokens, b.limits.output_tokens),
            of(b.used.cost_micros, b.limits.cost_micros),
            of(b.used.tool_calls, b.limits.tool_calls),
        );
    }
    if report.corrupt_rows > 0 {
        crate::out!("store rows that could not be read: {}", report.corrupt_rows);
    }
    Ok(0)
}

/// A unix time as UTC, to the second (`2026-12-03T16:20:51Z`).
fn utc(unix_secs: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix_secs);
    humantime::format_rfc3339_seconds(t).to_string()
}
