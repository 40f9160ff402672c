//! What a host finds at start when the last one (or an embedded command) died mid-run.
//!
//! - A run whose `airlock exec` process is gone but whose session is still active was
//!   interrupted (its process tree went with it: see [`super::exec`]). Its session is
//!   marked finished and the run recorded as interrupted; the audit log already holds its
//!   decision, and the missing execution record is what says it never reported an end.
//! - An approval request whose waiting process is gone is marked orphaned, as any command
//!   that lists the queue does; requests whose waiter still lives stay pending.
//!
//! - A run's socket dir (`state/run/<id>`) or workspace layers (`state/runs/<id>`) that
//!   no run holds any more is removed: what runs staged ahead (which are not sessions)
//!   or runs killed before they registered leave when the host is killed. See
//!   [`sweep_unclaimed`].
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
    /// Run dirs and layers no run held, removed.
    pub swept: usize,
}

/// How old a run's dir must be before a sweep may take it for left behind: a run being
/// set up by another process right now (an embedded `airlock exec`) registers within
/// milliseconds of making it.
const UNCLAIMED_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

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
    // Found first, recorded, and only then marked finished: a host that dies between
    // the two finds them again at its next start and records them again, rather than
    // having changed their state with no record saying why.
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
        interrupted.push(s.id);
    }
    if !interrupted.is_empty() || orphaned > 0 {
        audit.record_system(
            cfg,
            "recovery",
            "host-recovery",
            json!({"interrupted": interrupted, "orphaned_approvals": orphaned}),
        )?;
    }
    for id in &interrupted {
        store
            .finish_session(id, now)
            .map_err(|e| anyhow::anyhow!("cannot mark session `{id}` finished: {e}"))?;
        let _ = std::fs::remove_dir_all(home.state.join("run").join(id));
    }
    let active: std::collections::HashSet<String> = store
        .list_sessions(Some(SessionStatus::Active))
        .map_err(|e| anyhow::anyhow!("cannot list the sessions: {e}"))?
        .items
        .into_iter()
        .map(|s| s.id)
        .collect();
    let swept = sweep_unclaimed(home, &active, UNCLAIMED_AFTER);
    Ok(Recovered {
        interrupted,
        orphaned,
        swept,
    })
}

/// The runs this process registered (`state/run/<id>` holding its pid) and has not
/// ended: at the host's stop, those its end interrupts. The next start finds them as
/// [`recover`] does, since their registration names a process that is gone.
pub fn runs_of_this_process(home: &Home) -> Vec<String> {
    let me = std::process::id();
    let mut ids: Vec<String> = std::fs::read_dir(home.state.join("run"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    std::fs::read_to_string(e.path().join(EXEC_PID_FILE))
                        .ok()
                        .and_then(|t| t.trim().parse::<u32>().ok())
                        == Some(me)
                })
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

/// Remove the run dirs (`state/run/<id>`) and workspace layers (`state/runs/<id>`) that
/// no run holds: not an active session's, not registered by a live process, and older
/// than `older_than`. Returns how many were removed; one that cannot be removed is left
/// (and logged), never an error: the host starts anyway.
pub(crate) fn sweep_unclaimed(
    home: &Home,
    active: &std::collections::HashSet<String>,
    older_than: std::time::Duration,
) -> usize {
    let old = |p: &std::path::Path| {
        std::fs::symlink_metadata(p)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > older_than)
    };
    let registered = |dir: &std::path::Path| {
        std::fs::read_to_string(dir.join(EXEC_PID_FILE))
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
            .is_some_and(is_running)
    };
    let entries = |dir: std::path::PathBuf| -> Vec<(String, std::path::PathBuf)> {
        std::fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut swept = 0;
    for (id, path) in entries(home.state.join("run")) {
        if active.contains(&id) || registered(&path) || !old(&path) {
            continue;
        }
        match std::fs::remove_dir_all(&path) {
            Ok(()) => swept += 1,
            Err(e) => {
                tracing::warn!(dir = %path.display(), error = %e, "a left run dir could not be removed")
            }
        }
    }
    for (id, path) in entries(home.state.join(crate::transaction::RUNS_DIR)) {
        let run_dir = home.state.join("run").join(&id);
        if active.contains(&id) || run_dir.exists() || !old(&path) {
            continue;
        }
        let layers = airlock_sandbox::WorkspaceOverlay {
            upper: path.join("upper"),
            work: path.join("work"),
        };
        match layers.remove() {
            Ok(()) => swept += 1,
            Err(e) => {
                tracing::warn!(dir = %path.display(), error = %e, "a left run's layers could not be removed")
            }
        }
    }
    swept
}
