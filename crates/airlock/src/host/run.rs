//! `airlock run` in the host: a session for one task, run as a task of the host's own
//! process ([`crate::service::run`], the code `airlock run` runs embedded), for a client
//! on the exec socket or for a task the web page starts.
//!
//! It appends through the host's one audit writer, so its records and the host's are one
//! chain with one writer, and the host's signed checkpoints cover them. What it says goes
//! to the client's own descriptors (the page: a pipe it reads the reply from). A client
//! that goes away ends the turn as a kill would: the model call or tool call in flight is
//! dropped (a sandbox with it), a held action leaves the queue as withdrawn, and the turn
//! ends `killed`, but the session itself is not marked killed and `--session` resumes it.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use airlock_agent::provider::{EnvOverrides, ProviderConfig};

use super::exec::while_connected;
use super::exec_wire::{AgentRequest, AGENT_ENV};
use super::Host;
use crate::agent_host::provider_config;
use crate::config::Config;
use crate::service::caller::Notices;
use crate::service::replies::Streaming;
use crate::service::run::{RunPlace, RunTask};

/// What a client's request sets up for its session: the host's config now in force, and
/// the model and egress proxies with the client's own overrides (never the host's).
pub(super) struct ClientSetup {
    pub cfg: Config,
    pub provider_cfg: ProviderConfig,
    pub egress: crate::agent_executors::EgressExtras,
}

impl ClientSetup {
    pub(super) fn of(host: &Host, req: &AgentRequest) -> anyhow::Result<ClientSetup> {
        crate::service::exec::absolute("cwd", &req.cwd)?;
        if let Some(w) = &req.workspace {
            crate::service::exec::absolute("workspace", w)?;
        }
        for (name, _) in &req.env {
            anyhow::ensure!(
                AGENT_ENV.contains(&name.as_str()),
                "the request passes the variable {name:?}, which the host does not take from a client"
            );
        }
        // Only the client's values of the model's variables count, never the host's own.
        let env = EnvOverrides::from_lookup(|name| {
            req.env
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        });
        let cfg = (*host.warm.current_config()).clone();
        let provider_cfg = provider_config(&host.home, &cfg, env)?;
        Ok(ClientSetup {
            cfg,
            provider_cfg,
            egress: crate::agent_executors::client_egress(&req.env)?,
        })
    }
}

/// `req`'s task, to be run with [`run_task`].
fn task_of(req: &AgentRequest) -> anyhow::Result<RunTask> {
    anyhow::ensure!(!req.chat, "a chat request is not a run");
    let Some(prompt) = req.prompt.clone() else {
        anyhow::bail!("a run request needs its prompt");
    };
    Ok(RunTask {
        session: req.session.clone(),
        approval_timeout: req.approval_timeout,
        profile: req.profile.clone(),
        json: req.json,
        stream_events: req.json && req.stream_events,
        workspace: req.workspace.clone(),
        prompt,
    })
}

/// Run `req` to its end, saying its output on `out` and its notices on `notices`; it
/// ends early once `abandoned` is set. Its reply goes to the host's replies as it comes,
/// into `reply` when one was begun for it. A panic in it is the host's error, not its end.
pub(crate) fn run_task(
    host: &Host,
    req: &AgentRequest,
    out: Notices,
    notices: Notices,
    abandoned: Option<Arc<AtomicBool>>,
    reply: Option<Streaming>,
) -> anyhow::Result<i32> {
    let task = task_of(req)?;
    // A session something else drives is refused before the model is even looked at.
    if let Some(id) = &task.session {
        host.driven.check(id)?;
    }
    let setup = ClientSetup::of(host, req)?;
    let place = RunPlace {
        out,
        notices,
        audit: Some(host.audit.log(&setup.cfg)?),
        abandoned,
        egress: setup.egress,
        driven: Some(host.driven.clone()),
        replies: Some(host.replies.clone()),
        reply,
    };
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        crate::service::run::run(&host.home, setup.cfg, &setup.provider_cfg, &task, place)
    }))
    .unwrap_or_else(|_| {
        Err(anyhow::anyhow!(
            "the run failed unexpectedly (see the host's log)"
        ))
    })
}

/// Serve `airlock run` for the client on `stream`, whose standard streams are `fds`.
pub(super) fn serve_run(
    host: &Host,
    req: &AgentRequest,
    fds: [OwnedFd; 3],
    stream: &UnixStream,
) -> anyhow::Result<i32> {
    // A run reads nothing: its approvals wait in the queue.
    let [_stdin, stdout, stderr] = fds;
    // Set when the client goes away, or when a stopping host's grace is over.
    let abandoned = host.turns.flag();
    while_connected(
        stream,
        || abandoned.store(true, Ordering::Release),
        |_| {
            run_task(
                host,
                req,
                Notices::Client(Arc::new(File::from(stdout))),
                Notices::Client(Arc::new(File::from(stderr))),
                Some(abandoned.clone()),
                None,
            )
        },
    )?
}
