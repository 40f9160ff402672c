//! What a host finds at start when the last one (or an embedded command) died mid-run.
//!
//! - A run whose `airlock exec` process is gone but whose session is still active was
//!   interrupted (its process tree went with it: see [`super::exec`]). Its session is
//!   marked finished and the run recorded as interrupted; the audit log already holds its
//!   decision, and the missing execution record is what says it never reported an end.
//! - An approval request whose waiting process is gone is marked orphaned, as any command
//!   that lists the queue does; requests whose waiter still lives stay pending.
//!
//! A run whose pid now belongs to another live process is left alone: recovering it would
//! need certainty the pid does not give, and leaving it costs only a stale line.

use serde_json::json;

use airlock_store::{ApprovalDecisions, SessionStatus, SessionStore, Timestamp};

use crate::home::Home;
use crate::service::kill::{is_running, EXEC_PID_FILE};

/// What recovery found and did.
#[derive(Debug, Default)]
pub struct Recovered {
    pub interrupted: Vec<String>,
    pub orphaned: usize,
}

pub fn recover(
    home: &Home,
    audit: &super::audit_writer::HostAudit,
    cfg: &crate::config::Config,
) -> anyhow::Result<Recovered> {
    let store = crate::service::approvals::open_store(home)?;
    let now = Timestamp::now();
    let orphaned = store
        .orphan_abandoned(now)
        .map_err(|e| anyhow::anyhow!("cannot check who waits for the approval requests: {e}"))?;
    let active = store
        .list_sessions(Some(SessionStatus::Active))
        .map_err(|e| anyhow::anyhow!("cannot list the sessions: {e}"))?;
    let mut interrupted = Vec::new();
    for s in active.items {
        let dir = home.state.join("run").join(&s.id);
        let Ok(text) = std::fs::read_to_string(dir.join(EXEC_PID_FILE)) else {
            continue;
        };
        let Ok(pid) = text.trim().parse::<u32>() else {
            continue;
        };
        if is_running(pid) {
            continue;
        }
        store
            .finish_session(&s.id, now)
            .map_err(|e| anyhow::anyhow!("cannot mark session `{}` finished: {e}", s.id))?;
        let _ = std::fs::remove_dir_all(&dir);
        interrupted.push(s.id);
    }
    let found = Recovered {
        interrupted,
        orphaned,
    };
    if !found.interrupted.is_empty() || found.orphaned > 0 {
        audit.record_system(
            cfg,
            "recovery",
            "host-recovery",
            json!({"interrupted": found.interrupted, "orphaned_approvals": found.orphaned}),
        )?;
    }
    Ok(found)
}
