//! `airlock kill <session>|--all`: the kill switch, from any terminal
//! ([`crate::service::kill`]).
//!
//! With a host serving the state dir the kill goes through it (`/v1/kill`), so a host's
//! own schedules and sessions hear of it. A kill switch must not depend on the host being
//! well, though: when the host cannot be reached or does not answer within
//! [`HOST_ANSWER_WAIT`], the kill runs embedded, on the same store, run dirs and log,
//! and says so.

use std::time::Duration;

use clap::Args;

use crate::home::Home;
use crate::service::kill::{kill_sessions, KillInput, KillReport};

/// How long a kill waits for a running host's answer before it acts without it.
const HOST_ANSWER_WAIT: Duration = Duration::from_secs(5);

/// `airlock kill` arguments.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["session", "all"])))]
pub struct KillArgs {
    /// The session to kill (`airlock exec` runs are `exec-…`; see `<state>/run/`).
    pub session: Option<String>,
    /// Kill every active session in the store and every running exec.
    #[arg(long)]
    pub all: bool,
}

pub fn run(args: KillArgs) -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    let input = KillInput {
        session: args.session,
        all: args.all,
    };
    let report = match crate::host::client::find_now(&home) {
        Some(host) => match host.post_within("/v1/kill", &input, HOST_ANSWER_WAIT) {
            Ok(report) => report,
            // The host answered: its refusal (an unknown session) is the answer.
            Err(crate::host::client::CallError::Answered(e)) => return Err(e),
            Err(crate::host::client::CallError::Unreachable(e)) => {
                eprintln!(
                    "airlock: the host (pid {}) did not answer ({}); killing without it",
                    host.pid,
                    airlock_core::terminal_text::escape_line(&format!("{e:#}"))
                );
                kill_sessions(&home, &input)?
            }
        },
        None => kill_sessions(&home, &input)?,
    };
    print(&report, args.all)
}

/// Say what the kill did; the exit status is 1 when a helper outlived it.
fn print(report: &KillReport, all: bool) -> anyhow::Result<i32> {
    if let Some(n) = report.grants_revoked {
        crate::out!("{n} standing grant(s) revoked");
    }
    if let Some(n) = report.tasks_paused {
        crate::out!("{n} scheduled task(s) paused; `airlock tasks resume <id>` starts each again");
    }
    let mut failures = 0;
    for k in &report.killed {
        crate::out!(
            "killed {}: {} approval(s) cancelled, {} grant(s) revoked, {} sandbox(es) killed",
            k.id,
            k.cancelled_approvals,
            k.revoked_grants,
            k.helpers_killed.len()
        );
        if !k.helpers_left.is_empty() {
            failures += 1;
            eprintln!(
                "error: sandbox helper pid(s) {:?} of `{}` were still alive after {} ms\nhelp: check `ps -o pid,stat,cmd -p …`; a process in uninterruptible sleep dies when its I/O ends",
                k.helpers_left, k.id, report.kill_wait_ms
            );
        }
    }
    if all {
        crate::out!("{} session(s) killed", report.targets);
    }
    Ok(if failures == 0 { 0 } else { 1 })
}
