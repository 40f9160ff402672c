//! `airlock serve`: the long-running host (`docs/architecture.md`, "The host").
//!
//! One process per state dir ([`lock`]) keeps the policy and config loaded and warm
//! ([`warm`]) and answers the versioned API ([`api`]) on a UNIX socket that only the
//! operator can reach ([`socket`]). The command line finds it through the lock and talks to
//! it ([`client`]); when no host holds the state dir, commands run embedded, calling the
//! same services ([`crate::service`]).
//!
//! It runs in the foreground and logs with `tracing` to stderr (`RUST_LOG` filters).
//! `SIGTERM` or `SIGINT` stops it: it accepts no new connection, lets the requests in
//! flight finish, removes its socket and records its stop.

pub mod api;
pub mod audit_writer;
pub mod channels;
pub mod chat_limits;
pub mod client;
pub mod exec;
pub mod exec_client;
pub mod exec_wire;
pub mod lock;
pub mod pool;
pub mod rate;
pub mod recovery;
pub mod run;
pub mod sandbox_slots;
pub mod scheduler;
pub mod sessions;
pub mod socket;
pub mod task_check;
pub mod turns;
pub mod warm;

use std::sync::Arc;
use std::time::Duration;

use crate::home::Home;

/// What every request handler shares.
pub struct Host {
    pub home: Home,
    pub warm: warm::Warm,
    /// The only uid the API answers (the one the host runs as).
    pub operator_uid: u32,
    pub started_at: u64,
    /// Sandboxes at once and the queue before them (`[host]` at start), for every
    /// sandbox the host starts ([`sandbox_slots`]).
    pub admission: Arc<sandbox_slots::SandboxSlots>,
    /// Agent sessions (`run`, `chat`) at once (`[host] max_sessions` at start).
    pub sessions: Arc<exec::SessionSlots>,
    /// The chat sessions that live in the host, attached to a client or not.
    pub live: sessions::LiveSessions,
    /// The sessions a live chat or a run drives now, one driver each.
    pub driven: Arc<crate::service::driven::Driven>,
    /// The model's reply as it comes, per session, for the web page (every turn here).
    pub replies: Arc<crate::service::replies::Replies>,
    /// The agent turns running here, which a stop past its grace ends.
    pub turns: turns::Turns,
    /// The store connection for the sessions of the `exec` runs the host makes.
    pub run_store: airlock_store::SqliteStore,
    /// Requests per principal (`[host] requests_per_minute`).
    pub rate: rate::RateLimits,
    /// Set on a stop signal: new runs are refused while those in flight finish.
    pub stopping: std::sync::atomic::AtomicBool,
    /// The web page, when `[web] listen` is set (`docs/web.md`).
    pub web: Option<crate::web::Web>,
    /// The one audit writer every run in the host appends through.
    pub audit: Arc<audit_writer::HostAudit>,
    /// Sandboxes built ahead of runs (`[host] sandbox_pool`).
    pub pool: Arc<pool::SandboxPool>,
    /// Scheduled tasks: the runs in flight and the bell that wakes the scheduler.
    pub scheduler: scheduler::Scheduler,
    /// The chat channels running here, for what the host sends on its own.
    pub outbox: channels::Outbox,
}

impl Host {
    /// The kill switch as the host pulls it, for every client (the socket's `/v1/kill`,
    /// the web page): the service kills the sessions and records `who`'s act, and the
    /// chats that live here end too (their clients are told). Blocking.
    pub fn kill(
        &self,
        input: &crate::service::kill::KillInput,
        who: &crate::service::decider::Decider,
    ) -> anyhow::Result<crate::service::kill::KillReport> {
        if input.all {
            // Runs staged ahead are not sessions anyone started: they go, rather than
            // being reported (and left behind) as killed sessions.
            self.pool.discard_staged();
        }
        let report = crate::service::kill::kill_sessions_as(&self.home, input, who)?;
        let ids: Vec<String> = report.killed.iter().map(|k| k.id.clone()).collect();
        self.live.killed(&ids);
        Ok(report)
    }
}

/// How long a stopping host waits, once its grace is over and it has ended the turns
/// still running, for them to write their records.
const END_WAIT: Duration = Duration::from_secs(5);

/// How often the host looks for edited policy and config files.
const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// Run the host until a stop signal.
pub fn serve(home: Home) -> anyhow::Result<i32> {
    init_logging();
    let _lock = lock::HostLock::acquire(&home)?;
    // The one writer first: every record of the host's own goes through it.
    let audit = Arc::new(audit_writer::HostAudit::new(home.clone()));
    // The services the host runs (kill, approvals, memory, configuration, the page's
    // own records) append through it too.
    crate::service::record_log::serve_through_host(&home, &audit);
    let warm = warm::Warm::load(&home, audit.clone())?;
    let recovered = recovery::recover(&home, &audit, &warm.config())?;
    if recovered.swept > 0 {
        tracing::info!(
            count = recovered.swept,
            "removed run dirs and layers the last host left"
        );
    }
    if !recovered.interrupted.is_empty() || recovered.orphaned > 0 {
        tracing::warn!(interrupted = ?recovered.interrupted, orphaned_approvals = recovered.orphaned, "recovered what the last run of the host left");
    }
    let limits = warm.config().host.clone();
    // A `[web]` the host cannot serve safely stops the start, before anything runs.
    let web = crate::web::Web::prepare(&warm.config().web, &home.state)?;
    let host = Arc::new(Host {
        home: home.clone(),
        warm,
        operator_uid: nix::unistd::geteuid().as_raw(),
        started_at: crate::runtime::now_unix(),
        admission: sandbox_slots::SandboxSlots::new(limits.max_sandboxes, limits.max_queued),
        sessions: Arc::new(exec::SessionSlots::new(limits.max_sessions)),
        live: sessions::LiveSessions::new(Duration::from_secs(limits.session_idle_secs)),
        driven: Default::default(),
        replies: Default::default(),
        turns: Default::default(),
        run_store: crate::service::exec::open_run_store(&home)?,
        rate: rate::RateLimits::new(limits.requests_per_minute),
        stopping: std::sync::atomic::AtomicBool::new(false),
        web,
        audit,
        pool: pool::SandboxPool::new(),
        scheduler: Default::default(),
        outbox: Default::default(),
    });
    // Every sandbox this process starts for the state dir takes a slot of the one limit:
    // the exec socket's runs, the tasks' pre-checks and the sessions' shell calls.
    sandbox_slots::limit_through_host(&home, &host.admission);
    host.pool.start_builder(home.clone(), {
        let host = host.clone();
        move || host.warm.config()
    })?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("airlock-host")
        .enable_all()
        .build()?;
    let result = runtime.block_on(run(host.clone()));
    // Refuse new runs, let those in flight finish (each writes its own records). Both
    // sockets go first: a command that finds the lock still held but no socket waits for
    // the lock to be free and then runs embedded (see `client::find`).
    host.stopping
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = std::fs::remove_file(exec::socket_path(&home));
    let _ = std::fs::remove_file(socket::socket_path(&home));
    // Chat clients are let go (told how to continue); their sessions close once no turn
    // runs in them.
    host.live.send_everyone_away();
    let grace = Duration::from_secs(host.warm.config().host.stop_grace_secs);
    let idle = || {
        host.live.close_idle(true);
        host.admission.counts() == (0, 0)
            && host.sessions.running() == 0
            && host.scheduler.runs_in_flight() == 0
    };
    let wait_until_idle = |within: Duration| {
        let deadline = std::time::Instant::now() + within;
        while !idle() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_until_idle(grace);
    // Past the grace, nothing waits for a sandbox any more, and the turns still running
    // end as killed turns do, with their records, before the last checkpoint is signed.
    host.admission.stop_waiting();
    let ended = host.turns.end_all();
    if ended > 0 {
        tracing::warn!(
            ended,
            "the stop's grace is over: ending the turns still running"
        );
        wait_until_idle(END_WAIT);
    }
    let path = socket::socket_path(&home);
    let _ = std::fs::remove_file(&path);
    host.pool.stop();
    // Runs still going now (an `exec` past the grace: it is not a turn to end) end with
    // this process: the stop's record names them as interrupted, and the next start
    // finishes their sessions (see `recovery`).
    let interrupted = recovery::runs_of_this_process(&home);
    if !interrupted.is_empty() {
        tracing::warn!(
            ?interrupted,
            "the stop's grace is over: runs still in flight are recorded as interrupted"
        );
    }
    // The stop's record goes through the host's writer, whose close signs the checkpoint
    // that covers every run's records, and the stop's.
    let stopped = host
        .audit
        .record_system(
            &host.warm.config(),
            "host",
            "host-stop",
            serde_json::json!({"pid": std::process::id(), "interrupted": interrupted}),
        )
        .and_then(|()| host.audit.close());
    if let Ok(holders) = &stopped {
        if *holders > 0 {
            tracing::warn!(
                holders,
                "the last checkpoint was signed while runs past the grace still held the audit log"
            );
        }
    }
    result?;
    stopped?;
    tracing::info!("stopped");
    Ok(0)
}

async fn run(host: Arc<Host>) -> anyhow::Result<()> {
    // The exec socket first: a client that sees the API socket may count on both.
    socket::check_dir(&host.home)?;
    let exec_listener = socket::bind_at(&exec::socket_path(&host.home))?;
    let listener = socket::bind(&host.home)?;
    let path = socket::socket_path(&host.home);
    std::thread::Builder::new()
        .name("airlock-exec-accept".into())
        .spawn({
            let host = host.clone();
            move || exec::listen(host, exec_listener)
        })?;
    host.audit.record_system(
        &host.warm.config(),
        "host",
        "host-start",
        serde_json::json!({"pid": std::process::id(), "socket": path.display().to_string(),
                           "policies": host.warm.policy_status(),
                           "max_sandboxes": host.admission.max_running,
                           "max_queued": host.admission.max_queued,
                           "max_sessions": host.sessions.max}),
    )?;
    tracing::info!(socket = %path.display(), pid = std::process::id(), "serving");
    channels::start(&host);
    scheduler::start(&host)?;

    std::thread::Builder::new()
        .name("airlock-session-sweep".into())
        .spawn({
            let host = host.clone();
            move || loop {
                std::thread::sleep(sessions::SWEEP_EVERY);
                if host.stopping.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                host.live.close_idle(false);
            }
        })?;
    let reloading = tokio::spawn({
        let host = host.clone();
        async move {
            let mut tick = tokio::time::interval(RELOAD_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let h = host.clone();
                let _ = tokio::task::spawn_blocking(move || h.warm.reload_changed()).await;
            }
        }
    });
    let web = tokio::spawn({
        let host = host.clone();
        async move {
            if let Err(e) = crate::web::serve(host).await {
                tracing::error!(error = %e, "the web page stopped");
            }
        }
    });
    let app = api::router(host.clone());
    let served = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<socket::Peer>(),
    )
    .with_graceful_shutdown(stop_signal())
    .await;
    reloading.abort();
    web.abort();
    served.map_err(|e| anyhow::anyhow!("serving {}: {e}", path.display()))
}

async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot listen for stop signals; stop the host with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
        _ = int.recv() => tracing::info!("SIGINT: stopping"),
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}
