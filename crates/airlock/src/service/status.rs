//! What `airlock status` shows: the host (when one runs), the sessions that are active,
//! the approvals waiting, and the policy in force (`GET /v1/status`).

use serde::{Deserialize, Serialize};

use airlock_store::{
    ApprovalDecisions, BudgetStore, Limits, SessionStatus, SessionStore, Timestamp, Usage,
};

use crate::home::Home;

/// The whole status, as the API returns it and the command prints it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusReport {
    /// The running host; `None` when the command ran embedded.
    pub host: Option<HostStatus>,
    pub sessions: Vec<SessionLine>,
    pub approvals_pending: usize,
    /// Today's (UTC) use of the per-day budget by every session, and its limits.
    #[serde(default)]
    pub budget_today: Option<BudgetToday>,
    /// Rows of the store that could not be read (each also quarantined by the store).
    pub corrupt_rows: usize,
    /// The configured chat channels.
    #[serde(default)]
    pub channels: Vec<ChannelLine>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChannelLine {
    pub name: String,
    /// The owner's platform id, once paired.
    pub owner: Option<String>,
    /// A pairing code waits to be sent.
    pub pairing_pending: bool,
    /// Chats with a session.
    pub chats: usize,
    /// Why the channel's files do not read, if they do not.
    pub error: Option<String>,
}

/// Each configured channel as its files say.
fn channel_lines(home: &Home) -> Vec<ChannelLine> {
    match crate::channels::load_config(home) {
        Err(e) => vec![ChannelLine {
            name: "channels.toml".into(),
            owner: None,
            pairing_pending: false,
            chats: 0,
            error: Some(format!("{e:#}")),
        }],
        Ok(file) => file
            .chats()
            .map(|(kind, _)| match crate::channels::read_state(home, kind) {
                Ok(s) => ChannelLine {
                    name: kind.into(),
                    owner: s.owner,
                    pairing_pending: s.pairing.is_some(),
                    chats: s.chats.len(),
                    error: None,
                },
                Err(e) => ChannelLine {
                    name: kind.into(),
                    owner: None,
                    pairing_pending: false,
                    chats: 0,
                    error: Some(format!("{e:#}")),
                },
            })
            .collect(),
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BudgetToday {
    pub used: Usage,
    /// `[budget.per_day]` as in force (a counter without a limit is absent).
    pub limits: Limits,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostStatus {
    pub pid: u32,
    pub version: String,
    pub started_at: u64,
    pub socket: String,
    /// Each profile the host keeps loaded: its hash and when it was (re)loaded.
    pub policies: Vec<PolicyStatus>,
    /// The last edit of `airlock.toml` that was refused; the config before it is in force.
    pub config_refused_edit: Option<String>,
    /// Sandboxes running now (execs, tasks' pre-checks, sessions' shell calls), starts
    /// waiting for one, and the limits (`[host]`).
    pub runs_active: usize,
    pub runs_waiting: usize,
    pub max_sandboxes: usize,
    pub max_queued: usize,
    /// Agent sessions (`run`, `chat`) the host serves now, and the limit.
    #[serde(default)]
    pub sessions_running: usize,
    #[serde(default)]
    pub max_sessions: usize,
    /// The chats that live in the host, attached to a client or not.
    #[serde(default)]
    pub live_sessions: Vec<crate::host::sessions::LiveSessionStatus>,
    /// The sessions an `airlock run` drives in the host now (a terminal's or the web
    /// page's).
    #[serde(default)]
    pub runs: Vec<String>,
    /// The pool of sandboxes built ahead of runs.
    #[serde(default)]
    pub pool: crate::host::pool::PoolStatus,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PolicyStatus {
    pub profile: String,
    /// `sha256:` over the sources in force, in load order.
    pub hash: String,
    pub loaded_at: u64,
    /// The last edit that was refused, with the file and line the error names; the policy
    /// above stays in force until an edit loads.
    pub refused_edit: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionLine {
    pub id: String,
    pub principal: String,
    pub tainted: bool,
    /// Unix seconds.
    pub updated_at: u64,
}

/// The store's part of the status (sessions and approvals).
/// What the store says, with the host's part when one serves. `per_day` is the
/// `[budget.per_day]` in force (the host's warm config, or the file read embedded); `None`
/// when the config does not load, and today's use is then not shown.
pub fn store_status(
    home: &Home,
    host: Option<HostStatus>,
    per_day: Option<airlock_store::Limits>,
) -> anyhow::Result<StatusReport> {
    let store = crate::service::approvals::open_store(home)?;
    let sessions = store
        .list_sessions(Some(SessionStatus::Active))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let approvals = store
        .pending_approvals(Timestamp::now())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let budget_today = match (store.day_usage(Timestamp::now()), per_day) {
        (Ok(used), Some(limits)) => Some(BudgetToday { used, limits }),
        _ => None,
    };
    Ok(StatusReport {
        host,
        budget_today,
        corrupt_rows: sessions.corrupt.len() + approvals.corrupt.len(),
        sessions: sessions
            .items
            .into_iter()
            .map(|s| SessionLine {
                id: s.id,
                principal: s.principal,
                tainted: s.tainted,
                updated_at: s.updated_at.as_unix_secs(),
            })
            .collect(),
        approvals_pending: approvals.items.len(),
        channels: channel_lines(home),
    })
}
