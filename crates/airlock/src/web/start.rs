//! Starting work from the page: a new task, or the next message of a session. Each is an
//! `airlock run` that the host runs as a task of its own process, exactly as it runs one
//! for `airlock run` through its socket (`host::run::run_task`, a place under `[host]
//! max_sessions`, the host's one audit writer), with the model of `airlock.toml` and the
//! approval timeout of `[agent]`. What it holds waits in the approvals queue; the session's
//! page follows its transcript as it grows, and its reply as it streams (through the
//! host's replies, as every turn in the host).

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;

use super::guard::{Checked, HasCsrf};
use super::WebState;
use crate::host::exec_wire::AgentRequest;
use crate::host::Host;

/// The longest message the page takes.
const MAX_PROMPT_BYTES: usize = 16 * 1024;

#[derive(Debug, Deserialize)]
pub struct StartForm {
    #[serde(default)]
    csrf: String,
    prompt: String,
    /// Continue this session; absent: a new one.
    #[serde(default)]
    session: Option<String>,
}

impl HasCsrf for StartForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

pub async fn start(
    State(web): State<Arc<WebState>>,
    Checked(login, form): Checked<StartForm>,
) -> Response {
    let session = form.session.filter(|s| !s.is_empty());
    let back = match &session {
        Some(s) => format!("/sessions/{s}"),
        None => "/".to_string(),
    };
    if let Some(refused) = web.owner_rate_refused(&login, &back).await {
        return refused;
    }
    tracing::info!(login = %login.id, session = ?session, "web: starting a run");
    let host = web.host.clone();
    let prompt = form.prompt;
    let s = session.clone();
    let done = tokio::task::spawn_blocking(move || start_run(&host, prompt, s)).await;
    let (ok, message) = match done {
        Ok(Ok(())) => (
            true,
            match &session {
                Some(s) => format!("Sent to session {s}. Its page shows the answer as it comes."),
                None => "Started. The new session is listed on the sessions page.".to_string(),
            },
        ),
        Ok(Err(e)) => (false, format!("{e:#}")),
        Err(e) => (false, e.to_string()),
    };
    web.outcome_page(
        &login,
        if ok { "Started" } else { "Not started" },
        ok,
        &message,
        &back,
    )
    .await
}

/// Start `airlock run` for `prompt` in the host (blocking for the start only).
fn start_run(host: &Arc<Host>, prompt: String, session: Option<String>) -> anyhow::Result<()> {
    let prompt = prompt.trim().to_string();
    anyhow::ensure!(
        !prompt.is_empty(),
        "the message is empty\nhelp: type what the assistant should do"
    );
    anyhow::ensure!(
        prompt.len() <= MAX_PROMPT_BYTES,
        "the message is longer than {MAX_PROMPT_BYTES} bytes\nhelp: put long text in a file in the workspace and point at it"
    );
    if let Some(s) = &session {
        airlock_store::validate_id("session", s).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    if host.stopping.load(std::sync::atomic::Ordering::SeqCst) {
        anyhow::bail!("the host is stopping\nhelp: start it again and retry");
    }
    let Some(slot) = host.sessions.enter() else {
        anyhow::bail!(
            "too many sessions: {} are running (host.max_sessions = {})\nhelp: wait for one to end, or raise max_sessions in [host] of airlock.toml",
            host.sessions.running(),
            host.sessions.max
        );
    };
    // A next message's reply is begun now, so that the session's page does not show the
    // last one while the run starts.
    let reply = session.as_deref().map(|s| host.replies.begin(s));
    let req = AgentRequest {
        chat: false,
        session,
        approval_timeout: None,
        profile: None,
        // Its report is in the store, and its reply is watched through the host's replies.
        json: true,
        stream_events: false,
        workspace: None,
        prompt: Some(prompt),
        cwd: host.home.state.clone(),
        env: Vec::new(),
    };
    let run_host = host.clone();
    std::thread::Builder::new()
        .name("airlock-web-run".into())
        .spawn(move || {
            // What it says about itself goes to the host's log.
            let result = crate::host::run::run_task(
                &run_host,
                &req,
                crate::service::caller::Notices::Nobody,
                crate::service::caller::Notices::Stderr,
                Some(run_host.turns.flag()),
                reply,
            );
            tracing::info!(result = ?result.map_err(|e| format!("{e:#}")), "web: a run ended");
            drop(slot);
        })?;
    Ok(())
}
