//! The web page `airlock serve` serves (`docs/web.md`): sessions, approvals with the exact
//! payload and its provenance, the audit timeline, and the kill switch on every page.
//!
//! It is one more client of the host's services, in the host's own process: every
//! decision goes through [`crate::service`] with the web principal attached (the owner,
//! via `web`, and the login's id), exactly as the socket's API calls them for the
//! command line. Locally it listens on loopback, over plain HTTP, and a login is a
//! one-time link from `airlock web` ([`auth`]). Remotely (`[web] public_name`, see
//! [`settings`]) it is served over TLS ([`tls`]) for that name, and a login and every
//! approval is a passkey assertion ([`passkeys`], [`remote`]). Every request passes
//! [`guard`]; every value a model, tool or sender wrote is shown through [`untrusted`].
//!
//! Modules: [`settings`] (`[web]` checked), [`connections`] (the listener: how many
//! connections at once, and the deadline on a request's headers), [`auth`] (links and
//! logins, kept across restarts), [`guard`] (Host/Origin, headers, login and CSRF
//! extractors), [`layout`] (the frame and kill switch), [`tls`], [`passkeys`], [`admin`]
//! (revoking a passkey, ending every login) and [`remote`] (the page served remotely),
//! [`untrusted`] (showing untrusted text), [`chart`] (small SVG charts), and one module
//! per page or action:
//! [`sessions`], [`start`] (new work), [`dataflow`], [`approvals`], [`audit`],
//! [`budgets`], [`memory`], [`config_page`] (settings), [`kill`], [`login`], [`assets`], and
//! [`stream`] (the model's reply as it comes), [`live`] (a session live in the host,
//! attached to: what it says as it says it, and its next message); [`reads`] limits the pages read a minute.

pub mod admin;
pub mod approvals;
pub mod assets;
pub mod audit;
pub mod auth;
pub mod budgets;
pub mod chart;
pub mod config_page;
pub mod connections;
pub mod dataflow;
pub mod guard;
pub mod kill;
pub mod layout;
pub mod live;
pub mod login;
pub mod memory;
pub mod passkeys;
pub mod reads;
pub mod remote;
pub mod sessions;
pub mod settings;
pub mod start;
pub mod stream;
pub mod tls;
pub mod untrusted;

use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::host::Host;

/// The page's bound listener and its logins, made when the host starts (so a bad `[web]`
/// stops the start) and served once the host runs.
pub struct Web {
    pub bound: settings::Bound,
    pub logins: Arc<auth::Logins>,
    /// The owner's passkeys, when the page is served remotely.
    pub passkeys: Option<Arc<passkeys::Passkeys>>,
    /// `[web] reads_per_minute`.
    reads_per_minute: u32,
    /// `[web] max_connections`.
    max_connections: usize,
    tls: Option<(Arc<rustls::ServerConfig>, Arc<tls::Certificate>)>,
    listener: Mutex<Option<std::net::TcpListener>>,
}

impl Web {
    /// Check `[web]`, load its TLS files and passkeys, and bind its address; `None` when
    /// the page is off.
    pub fn prepare(
        section: &crate::config::WebSection,
        state_dir: &std::path::Path,
    ) -> anyhow::Result<Option<Web>> {
        let Some(s) = settings::check(section)? else {
            return Ok(None);
        };
        let tls = s.remote.as_ref().map(tls::server_config).transpose()?;
        let listener = std::net::TcpListener::bind(s.listen).map_err(|e| {
            anyhow::anyhow!(
                "cannot listen on web.listen = {} for the web page: {e}\nhelp: choose another port in [web] listen (port 0 picks a free one), or stop what uses it",
                s.listen
            )
        })?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (bound, passkeys) = match &s.remote {
            None => (settings::Bound::at(addr), None),
            Some(r) => {
                let bound = settings::Bound::remote(addr, &r.name, r.public_port);
                let keys = passkeys::Passkeys::open(state_dir, &r.name, &bound.base_url)?;
                (bound, Some(Arc::new(keys)))
            }
        };
        Ok(Some(Web {
            bound,
            logins: Arc::new(auth::Logins::kept(s.session, state_dir)),
            passkeys,
            reads_per_minute: s.reads_per_minute,
            max_connections: s.max_connections,
            tls,
            listener: Mutex::new(Some(listener)),
        }))
    }

    /// A new one-time login link (the page served locally only: remotely a login is a
    /// passkey's).
    pub fn login_link(&self) -> anyhow::Result<LoginLink> {
        if self.passkeys.is_some() {
            anyhow::bail!(
                "the web page at {} logs in with a passkey, not a link\nhelp: open it and log in with your passkey; to enrol one, run `airlock web --enroll`",
                self.bound.base_url
            );
        }
        let token = self.logins.new_link()?;
        Ok(LoginLink {
            url: format!("{}/login?token={token}", self.bound.base_url),
            expires_in_secs: auth::LINK_TTL.as_secs(),
        })
    }
}

impl Web {
    /// A new one-time enrolment link (the page served remotely only).
    pub fn enrol_link(&self) -> anyhow::Result<LoginLink> {
        let Some(keys) = &self.passkeys else {
            anyhow::bail!(
                "passkeys are for the web page served remotely, and this host serves it on loopback with login links\nhelp: run `airlock web` for a login link; to serve the page remotely set web.public_name, web.tls_cert and web.tls_key (docs/web.md)"
            );
        };
        let token = keys.new_enrol_link()?;
        Ok(LoginLink {
            url: format!("{}/enroll?token={token}", self.bound.base_url),
            expires_in_secs: passkeys::ENROL_LINK_TTL.as_secs(),
        })
    }
}

/// What `POST /v1/web/login` answers (`airlock web` prints it).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LoginLink {
    pub url: String,
    pub expires_in_secs: u64,
}

/// What every handler of the page shares.
pub struct WebState {
    pub host: Arc<Host>,
    pub bound: settings::Bound,
    pub logins: Arc<auth::Logins>,
    pub passkeys: Option<Arc<passkeys::Passkeys>>,
    /// Pages read per login or address (`[web] reads_per_minute`).
    pub reads: reads::Reads,
}

/// Serve the page until the host stops. Nothing when it is off.
pub async fn serve(host: Arc<Host>) -> anyhow::Result<()> {
    let Some(web) = host.web.as_ref() else {
        return Ok(());
    };
    let Some(listener) = web
        .listener
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
    else {
        return Ok(());
    };
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let state = Arc::new(WebState {
        host: host.clone(),
        bound: web.bound.clone(),
        logins: web.logins.clone(),
        passkeys: web.passkeys.clone(),
        reads: reads::Reads::new(web.reads_per_minute),
    });
    tracing::info!(url = %state.bound.base_url, "serving the web page");
    let tls = web.tls.as_ref().map(|(config, cert)| {
        tokio::spawn(cert.clone().watch());
        tokio_rustls::TlsAcceptor::from(config.clone())
    });
    let slots = connections::Slots::new(web.max_connections);
    let max = web.max_connections;
    let app = router(state.clone());
    // Told only the 1st, 2nd, 4th … refusal of each limit, so a flood of connections
    // leaves a few records, not one synced record each; one task writes them, in order.
    let (refused, mut to_record) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some((why, count)) = to_record.recv().await {
            let why: connections::Full = why;
            let detail =
                serde_json::json!({"limit": why.reason(), "count": count, "max_connections": max});
            state.record("web-connection-refused", None, detail).await;
        }
    });
    let refused = move |why, count| {
        let _ = refused.send((why, count));
    };
    connections::serve(listener, app, tls, slots, refused).await;
    Ok(())
}

/// Every route of the page.
pub fn router(state: Arc<WebState>) -> Router {
    Router::new()
        .route("/", get(sessions::list))
        .route("/sessions/{id}", get(sessions::one))
        .route("/sessions/{id}/flow", get(dataflow::page))
        .route("/sessions/{id}/length", get(sessions::length))
        .route("/sessions/{id}/stream", get(stream::stream))
        .route("/sessions/{id}/live", get(live::stream))
        .route("/sessions/{id}/say", post(live::say))
        .route("/sessions/start", post(start::start))
        .route("/budgets", get(budgets::page))
        .route("/memory", get(memory::page))
        .route("/memory/decide", post(memory::decide))
        .route("/memory/records/{id}", get(memory::record))
        .route("/memory/rollback", post(memory::rollback))
        .route("/settings", get(config_page::page))
        .route(
            "/settings/passkeys/revoke",
            post(config_page::revoke_passkey),
        )
        .route("/approvals", get(approvals::list))
        .route("/approvals/count", get(approvals::count))
        .route("/approvals/decide", post(approvals::decide))
        .route("/approvals/challenge", post(remote::approval_challenge))
        .route("/enroll", get(remote::enrol_page))
        .route("/enroll/finish", post(remote::enrol_finish))
        .route("/passkey/login", post(remote::login_start))
        .route("/passkey/login/finish", post(remote::login_finish))
        .route("/audit", get(audit::timeline))
        .route("/kill", post(kill::kill))
        .route("/login", get(login::login))
        .route("/logout", post(login::logout))
        .route("/welcome", get(login::welcome))
        .route("/static/web.css", get(assets::css))
        .route("/static/web.js", get(assets::js))
        .fallback(|| async { (StatusCode::NOT_FOUND, "no such page") })
        .layer(axum::extract::DefaultBodyLimit::max(connections::MAX_BODY))
        // Inside the guard, so a refused request's body is never waited for.
        .layer(axum::middleware::from_fn(connections::body_within_deadline))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::check_request,
        ))
        .with_state(state)
}

impl WebState {
    /// What the frame needs: the sessions the kill switch can name, and the queue's length.
    pub async fn chrome(&self) -> layout::Chrome {
        let home = self.host.home.clone();
        let live: Vec<String> = self.host.live.status().into_iter().map(|l| l.id).collect();
        let report = tokio::task::spawn_blocking(move || {
            crate::service::status::store_status(&home, None, None)
        })
        .await;
        let mut chrome = layout::Chrome::default();
        if let Ok(Ok(r)) = report {
            chrome.approvals_pending = r.approvals_pending;
            chrome.sessions = r.sessions.into_iter().map(|s| s.id).collect();
        }
        for id in live {
            if !chrome.sessions.contains(&id) {
                chrome.sessions.push(id);
            }
        }
        chrome
    }

    /// Count a decision or a new run against the owner's `[host] requests_per_minute`,
    /// as the command line's are: `None` when it may go on, or else the refusal page
    /// (429), naming the setting.
    pub async fn owner_rate_refused(&self, login: &auth::WebLogin, back: &str) -> Option<Response> {
        if self.host.rate.take("owner") {
            return None;
        }
        let (error, help) = self.host.rate.refusal("owner");
        tracing::warn!(login = %login.id, "web: refused a change past host.requests_per_minute");
        let mut refused = self
            .outcome_page(
                login,
                "Refused",
                false,
                &format!("{error}\nhelp: {help}"),
                back,
            )
            .await;
        *refused.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        Some(refused)
    }

    /// The page that says how a change went: 200 when done, 400 when refused.
    pub async fn outcome_page(
        &self,
        login: &auth::WebLogin,
        title: &str,
        ok: bool,
        message: &str,
        back: &str,
    ) -> Response {
        let chrome = self.chrome().await;
        let status = if ok {
            StatusCode::OK
        } else {
            StatusCode::BAD_REQUEST
        };
        let page = layout::page(title, login, &chrome, layout::outcome(ok, message, back));
        (status, Html(page.into_string())).into_response()
    }
}
