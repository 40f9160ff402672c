//! The host's HTTP/JSON API, version 1 (`docs/api.md`).
//!
//! Every route is under `/v1/`. Every error is a JSON object `{"error": …, "help": …}` with
//! a status that says whose fault it is (400 the request, 403 the caller, 404 the route,
//! 429 a limit, named in the error, 500 the host). Every connection's peer must be the operator ([`check_peer`]).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;

use super::socket::Peer;
use super::Host;
use crate::service::check::{self, CheckRequest};
use crate::service::decider::Decider;
use crate::service::replay;
use crate::service::status::{self, HostStatus};

/// An error as the API returns it.
pub struct ApiError {
    status: StatusCode,
    error: String,
    help: String,
}

impl ApiError {
    pub fn new(status: StatusCode, error: impl Into<String>, help: impl Into<String>) -> Self {
        ApiError {
            status,
            error: error.into(),
            help: help.into(),
        }
    }

    fn bad_request(e: anyhow::Error) -> Self {
        // The message already carries its own `help:` line where the service has one.
        ApiError::new(StatusCode::BAD_REQUEST, format!("{e:#}"), "")
    }

    fn internal(e: anyhow::Error) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}"), "")
    }

    /// A service's error: the host's own fault (its store, log or config) is a 500,
    /// anything else the caller's request (400).
    fn from_service(e: anyhow::Error) -> Self {
        if crate::service::is_fault(&e) {
            ApiError::internal(e)
        } else {
            ApiError::bad_request(e)
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": self.error, "help": self.help});
        (self.status, Json(body)).into_response()
    }
}

/// A request body of type `T`, with an error that names what is wrong with it (axum's own
/// rejection is plain text).
fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("the request body is not a valid request: {e}"),
            "send a JSON object as docs/api.md shows for this route",
        )
    })
}

/// The most a request body may hold: the largest action, and room for the rest.
const MAX_BODY_BYTES: usize = airlock_core::action::MAX_ACTION_JSON_BYTES + 64 * 1024;

pub fn router(host: Arc<Host>) -> Router {
    Router::new()
        .route("/v1/status", get(status_route))
        .route("/v1/check", post(check_route))
        .route("/v1/replay", post(replay_route))
        .route("/v1/approvals/approve", post(approve_route))
        .route("/v1/approvals/deny", post(deny_route))
        .route("/v1/kill", post(kill_route))
        .route("/v1/approvals", get(list_approvals_route))
        .route("/v1/approvals/show", post(show_approval_route))
        .route("/v1/audit/tail", post(audit_tail_route))
        .route("/v1/memory/act", post(memory_act_route))
        .route("/v1/web/login", post(web_login_route))
        .route("/v1/web/enroll", post(web_enrol_route))
        .route("/v1/web/passkeys", get(web_passkeys_route))
        .route("/v1/web/passkeys/revoke", post(web_revoke_passkey_route))
        .route("/v1/web/logout-all", post(web_logout_all_route))
        .route("/v1/tasks", get(list_tasks_route))
        .route("/v1/tasks/add", post(add_task_route))
        .route("/v1/tasks/act", post(task_act_route))
        .route("/v1/tasks/history", post(task_history_route))
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "no such route",
                "the routes are listed in docs/api.md",
            )
        })
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            host.clone(),
            check_peer,
        ))
        .with_state(host)
}

/// Refuse every caller whose uid is not the operator's, before its request is looked at.
async fn check_peer(
    State(host): State<Arc<Host>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    request: Request,
    next: Next,
) -> Response {
    if peer.uid != Some(host.operator_uid) {
        tracing::warn!(uid = ?peer.uid, pid = ?peer.pid, "refused a caller that is not the operator");
        let who = peer
            .uid
            .map(|u| format!("uid {u}"))
            .unwrap_or_else(|| "a caller without credentials".into());
        return ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "{who} is not this host's operator (uid {})",
                host.operator_uid
            ),
            "only the user the host runs as may use it",
        )
        .into_response();
    }
    // The socket's one principal so far is the owner; later clients name theirs.
    if !host.rate.take("owner") {
        let (error, help) = host.rate.refusal("owner");
        return ApiError::new(StatusCode::TOO_MANY_REQUESTS, error, help).into_response();
    }
    next.run(request).await
}

async fn status_route(
    State(host): State<Arc<Host>>,
) -> Result<Json<status::StatusReport>, ApiError> {
    // One snapshot, so the two counts agree with each other.
    let (runs_active, runs_waiting) = host.admission.counts();
    let info = HostStatus {
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        started_at: host.started_at,
        socket: super::socket::socket_path(&host.home).display().to_string(),
        policies: host.warm.policy_status(),
        config_refused_edit: host.warm.config_refused_edit(),
        runs_active,
        runs_waiting,
        max_sandboxes: host.admission.max_running,
        max_queued: host.admission.max_queued,
        sessions_running: host.sessions.running(),
        max_sessions: host.sessions.max,
        live_sessions: host.live.status(),
        runs: host.driven.driven_by(crate::service::driven::Driver::Run),
        pool: host.pool.status(),
    };
    let home = host.home.clone();
    let per_day = Some(host.warm.config().budget.per_day);
    tokio::task::spawn_blocking(move || status::store_status(&home, Some(info), per_day))
        .await
        .map_err(|e| ApiError::internal(anyhow::anyhow!("{e}")))?
        .map(Json)
        .map_err(ApiError::internal)
}

async fn check_route(
    State(host): State<Arc<Host>>,
    body: Bytes,
) -> Result<Json<check::CheckReport>, ApiError> {
    let req: CheckRequest = parse(&body)?;
    if !req.workspace.is_absolute() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "workspace {} is not an absolute path",
                req.workspace.display()
            ),
            "send the workspace as an absolute path",
        ));
    }
    tokio::task::spawn_blocking(move || {
        let cfg = host.warm.config();
        let profile = crate::policies::pick_profile(req.profile.as_deref(), &cfg.policy.profile)
            .map_err(ApiError::bad_request)?;
        let (gate, _) = host.warm.gate(profile).map_err(ApiError::internal)?;
        let gate = gate.with_config(check::gate_config(&cfg, req.workspace.clone()));
        check::evaluate(&gate, profile.name(), &req.action).map_err(ApiError::bad_request)
    })
    .await
    .map_err(|e| ApiError::internal(anyhow::anyhow!("{e}")))?
    .map(Json)
}

async fn replay_route(
    State(host): State<Arc<Host>>,
    body: Bytes,
) -> Result<Json<replay::ReplayOutput>, ApiError> {
    let req: replay::ReplayRequest = parse(&body)?;
    tokio::task::spawn_blocking(move || {
        let cfg = host.warm.config();
        let profile = crate::policies::pick_profile(req.profile.as_deref(), &cfg.policy.profile)
            .map_err(ApiError::bad_request)?;
        let (gate, _) = host.warm.gate(profile).map_err(ApiError::internal)?;
        let gate = gate.with_config(replay::gate_config());
        if !req.traces.is_absolute() {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("traces {} is not an absolute path", req.traces.display()),
                "send the trace file as an absolute path",
            ));
        }
        let (file, _) = crate::operator_file::open(&req.traces, crate::operator_file::TRACE_FILE)
            .map_err(|e| ApiError::bad_request(e.into()))?;
        let mut out = Vec::new();
        let mut output = replay::replay(
            &gate,
            profile.name(),
            &mut std::io::BufReader::new(file),
            &mut out,
            req.json,
            &mut |_| {},
        )
        .map_err(ApiError::bad_request)?;
        output.stdout = String::from_utf8(out).map_err(|e| ApiError::internal(e.into()))?;
        Ok(output)
    })
    .await
    .map_err(|e| ApiError::internal(anyhow::anyhow!("{e}")))?
    .map(Json)
}

/// Run a blocking service on the home for the caller: its report, or its error told as
/// the caller's (400) or the host's (500) by [`ApiError::from_service`].
async fn serve_blocking<I, T>(
    host: &Host,
    input: I,
    service: fn(&crate::home::Home, &I) -> anyhow::Result<T>,
) -> Result<Json<T>, ApiError>
where
    I: Send + 'static,
    T: Send + 'static,
{
    let home = host.home.clone();
    tokio::task::spawn_blocking(move || service(&home, &input))
        .await
        .map_err(|e| ApiError::internal(anyhow::anyhow!("{e}")))?
        .map(Json)
        .map_err(ApiError::from_service)
}

/// Approve a held request as the owner (the caller's uid was checked): the same service as
/// `airlock approvals approve` embedded. A request that cannot be decided (unknown, already
/// decided, another hash) is the caller's error; a store or audit log that fails, the
/// host's.
async fn approve_route(
    State(host): State<Arc<Host>>,
    body: Bytes,
) -> Result<Json<crate::service::approvals::Approved>, ApiError> {
    let input: crate::service::approvals::ApproveInput = parse(&body)?;
    tracing::info!(request = %input.id, "approving through the host");
    serve_blocking(&host, input, crate::service::approvals::approve).await
}

/// Deny a held request as the owner: the same service as `airlock approvals deny`.
async fn deny_route(
    State(host): State<Arc<Host>>,
    body: Bytes,
) -> Result<Json<crate::service::approvals::Denied>, ApiError> {
    let input: crate::service::approvals::DenyInput = parse(&body)?;
    tracing::info!(request = %input.id, "denying through the host");
    serve_blocking(&host, input, crate::service::approvals::deny).await
}

/// The kill switch, as the owner: the same service as `airlock kill` embedded.
async fn kill_route(
    State(host): State<Arc<Host>>,
    body: Bytes,
) -> Result<Json<crate::service::kill::KillReport>, ApiError> {
    let input: crate::service::kill::KillInput = parse(&body)?;
    tracing::warn!(session = ?input.session, all = input.all, "kill through the host");
    tokio::task::spawn_blocking(move || host.kill(&input, &Decider::cli()))
        .await
        .map_err(|e| ApiError::internal(anyhow::anyhow!("{e}")))?
        .map(Json)
        .map_err(ApiError::from_service)
}

/// The queue, as `airlock approvals list` shows it (the same service embedded).
async fn list_approvals_route(
    State(host): State<Arc<Host>>,
) -> Result<Json<crate::service::approvals::ApprovalsListing>, ApiError> {
    tracing::info!("listing approvals through the host");
    serve_blocking(&host, (), crate::service::approvals::list).await
}

/// One held request by id (a JSON string), as `airlock approvals show` shows it.
async fn show_approval_route(
    State(host): State<Arc<Host>>,
    body: Bytes,
) -> Result<Json<crate::service::approvals::ApprovalShown>, ApiError> {
    let id: String = parse(&body)?;
    tracing::info!(request = %id, "showing an approval through the host");
    serve_blocking(&host, id, |home, id: &String| {
        crate::service::approvals::show(home, id)
    })
    .await
}

/// The last records of the audit log, streamed as JSON lines while they are read (the
/// same service as `airlock audit tail` embedded). The answer is under way before the log
/// is read to its end, so an error after the start is its last line, `{"error": …}`.
async fn audit_tail_route(
    State(host): State<Arc<Host>>,
    body: Bytes,
) -> Result<axum::response::Response, ApiError> {
    use crate::service::audit::{TailInput, TailLine, MAX_TAIL};
    let input: TailInput = parse(&body)?;
    tracing::info!(n = input.n, "audit tail through the host");
    if input.n > MAX_TAIL {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("n = {} asks for more than {MAX_TAIL} records", input.n),
            format!("ask for {MAX_TAIL} or fewer"),
        ));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    let home = host.home.clone();
    tokio::task::spawn_blocking(move || {
        let send = |line: &TailLine| -> anyhow::Result<()> {
            let mut text = serde_json::to_vec(line)?;
            text.push(b'\n');
            tx.blocking_send(Bytes::from(text))
                .map_err(|_| anyhow::anyhow!("the reader went away"))
        };
        if let Err(e) = crate::service::audit::tail(&home, &input, |line| send(&line)) {
            let _ = send(&TailLine::Error(format!("{e:#}")));
        }
    });
    let lines = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
    });
    axum::response::Response::builder()
        .header("content-type", "application/x-ndjson")
        .body(axum::body::Body::from_stream(lines))
        .map_err(|e| ApiError::internal(anyhow::anyhow!("{e}")))
}

/// An operator's change to the agent's memory: the same service as `airlock memory
/// approve|reject|rollback|purge|schema add` embedded.
async fn memory_act_route(
    State(host): State<Arc<Host>>,
    body: Bytes,
) -> Result<Json<crate::service::memory::MemoryActed>, ApiError> {
    let act: crate::service::memory::MemoryAct = parse(&body)?;
    // The act's kind only: a schema's text can be long.
    let kind = serde_json::to_value(&act)
        .ok()
        .and_then(|v| v["act"].as_str().map(str::to_string))
        .unwrap_or_default();
    tracing::info!(act = %kind, "memory change through the host");
    serve_blocking(&host, act, crate::service::memory::act).await
}

/// Every scheduled task, as `airlock tasks list` shows them.
async fn list_tasks_route(
    State(host): State<Arc<Host>>,
) -> Result<Json<crate::service::tasks::Listing>, ApiError> {
    serve_blocking(&host, (), crate::service::tasks::list).await
}

/// Add a task for the owner: the same service as `airlock tasks add` embedded. The
/// scheduler sees it at its next tick.
async fn add_task_route(
    State(host): State<Arc<Host>>,
    body: Bytes,
) -> Result<Json<crate::service::tasks::TaskView>, ApiError> {
    let input: crate::service::tasks::AddInput = parse(&body)?;
    tracing::info!("adding a task through the host");
    serve_blocking(&host, input, crate::service::tasks::add).await
}

/// Show, pause, resume, run now or cancel a task.
async fn task_act_route(
    State(host): State<Arc<Host>>,
    body: Bytes,
) -> Result<Json<crate::service::tasks::TaskView>, ApiError> {
    let input: crate::service::tasks::TaskAct = parse(&body)?;
    tracing::info!(task = %input.id, act = ?input.act, "a task act through the host");
    let answer = serve_blocking(&host, input, crate::service::tasks::act).await;
    host.scheduler.wake();
    answer
}

/// A task's run history (the id as a JSON string).
async fn task_history_route(
    State(host): State<Arc<Host>>,
    body: Bytes,
) -> Result<Json<Vec<crate::tasks::store::Run>>, ApiError> {
    let id: String = parse(&body)?;
    serve_blocking(&host, id, |home, id: &String| {
        crate::service::tasks::history(home, id)
    })
    .await
}

/// A one-time login link for the web page (`airlock web`): only the operator reaches this
/// socket, so whoever asks here is the owner.
async fn web_login_route(
    State(host): State<Arc<Host>>,
) -> Result<Json<crate::web::LoginLink>, ApiError> {
    let Some(web) = host.web.as_ref() else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "this host serves no web page ([web] listen is not set)",
            "add `[web]` with `listen = \"127.0.0.1:7464\"` to airlock.toml and restart the host",
        ));
    };
    tracing::info!("a web login link was made");
    web.login_link().map(Json).map_err(web_refusal)
}

/// A one-time passkey enrolment link for the web page served remotely
/// (`airlock web --enroll`): as for a login link, whoever reaches this socket is the owner.
async fn web_enrol_route(
    State(host): State<Arc<Host>>,
) -> Result<Json<crate::web::LoginLink>, ApiError> {
    let Some(web) = host.web.as_ref() else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "this host serves no web page ([web] listen is not set)",
            "set [web] listen, public_name, tls_cert and tls_key in airlock.toml and restart the host (docs/web.md)",
        ));
    };
    tracing::info!("a web passkey enrolment link was made");
    web.enrol_link().map(Json).map_err(web_refusal)
}

/// The web page's enrolled passkeys (`airlock web --passkeys`): the running page's, or the
/// file's when this host does not serve the page remotely.
async fn web_passkeys_route(
    State(host): State<Arc<Host>>,
) -> Result<Json<Vec<crate::web::passkeys::PasskeyInfo>>, ApiError> {
    tokio::task::spawn_blocking(move || crate::web::admin::list(host.web.as_ref(), &host.home))
        .await
        .map_err(|e| ApiError::internal(anyhow::anyhow!("{e}")))?
        .map(Json)
        .map_err(web_refusal)
}

/// Revoke one passkey (`airlock web --revoke-passkey ID`, the body is the id as a JSON
/// string): the running page accepts it no more from this moment, and the logins it
/// opened end. Recorded as the owner's act at the command line.
async fn web_revoke_passkey_route(
    State(host): State<Arc<Host>>,
    body: Bytes,
) -> Result<Json<crate::web::passkeys::Revoked>, ApiError> {
    let id: String = parse(&body)?;
    tokio::task::spawn_blocking(move || {
        crate::web::admin::revoke(host.web.as_ref(), &host.home, &id, &Decider::cli())
    })
    .await
    .map_err(|e| ApiError::internal(anyhow::anyhow!("{e}")))?
    .map(Json)
    .map_err(web_refusal)
}

/// End every login of the web page (`airlock web --logout-all`); how many ended. Recorded
/// as the owner's act at the command line.
async fn web_logout_all_route(State(host): State<Arc<Host>>) -> Result<Json<usize>, ApiError> {
    tokio::task::spawn_blocking(move || {
        crate::web::admin::end_all_logins(host.web.as_ref(), &host.home, &Decider::cli())
    })
    .await
    .map_err(|e| ApiError::internal(anyhow::anyhow!("{e}")))?
    .map(Json)
    .map_err(web_refusal)
}

/// A link the page's regime does not make: a bad request, with the help the error carries.
fn web_refusal(e: anyhow::Error) -> ApiError {
    let text = e.to_string();
    let (error, help) = text.split_once("\nhelp: ").unwrap_or((&text, ""));
    ApiError::new(StatusCode::BAD_REQUEST, error, help)
}
