//! What every request to the page passes before a handler sees it, and what every answer
//! carries:
//! - its `Host` must be one of the page's own addresses, and its `Origin`, when it has one,
//!   the page's own origin (a state change must have one): a page of another site, or a
//!   name rebound to 127.0.0.1, gets a 403 and nothing else;
//! - served remotely with no passkey enrolled yet, it answers only enrolment;
//! - past `[web] reads_per_minute` a request gets 429 with `Retry-After` ([`super::reads`]);
//! - every answer has a strict Content-Security-Policy (no inline script, no framing), is
//!   never cached, sends no referrer to another origin, and has no CORS header (no other origin may read it);
//! - a handler that needs a login takes [`LoggedIn`]; one that changes state takes
//!   [`Checked`], which is a login plus a form whose CSRF token is that login's. A login
//!   holds only in the regime that opened it ([`login_of`]): served remotely, one opened
//!   by a passkey that is still enrolled; on loopback, one opened by a link.

use std::sync::Arc;

use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::de::DeserializeOwned;

use std::net::{IpAddr, Ipv4Addr};

use axum::extract::ConnectInfo;

use super::auth::WebLogin;
use super::reads::{Peer, Reader};
use super::WebState;

/// The policy every answer carries: own-origin scripts, styles and images only, no
/// inline script or style, forms only to itself, never framed.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The login cookie's name.
pub const COOKIE: &str = "airlock_web";

/// Check `Host` and `Origin`, then add the security headers to the answer.
pub async fn check_request(
    State(web): State<Arc<WebState>>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = match refusal(&web, request.method(), request.headers()) {
        Some(why) => {
            tracing::warn!(why = %why, "web: refused a request");
            (StatusCode::FORBIDDEN, why).into_response()
        }
        None if !enrolment_open(&web, request.uri().path()) => {
            let mut r = super::remote::welcome_page(&web);
            *r.status_mut() = StatusCode::FORBIDDEN;
            r
        }
        None => match too_many_reads(&web, &request) {
            Some(refused) => refused,
            None => next.run(request).await,
        },
    };
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // Not `no-referrer`: under it a browser sends `Origin: null` with the page's own
    // forms, and the Origin check above needs the real one. Nothing leaves the origin.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if web.bound.is_remote() {
        // Served over TLS for a public name: never again over plain HTTP there.
        h.insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=31536000"),
        );
    }
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    response
}

/// The 429 for a request past `[web] reads_per_minute` of its login (of its address
/// before a login), if it is; the paths of [`super::reads::UNLIMITED`] are never counted.
fn too_many_reads(web: &WebState, request: &Request) -> Option<Response> {
    if super::reads::UNLIMITED.contains(&request.uri().path()) {
        return None;
    }
    let reader = match login_of(web, request.headers()) {
        Some(login) => Reader::Login(login.id),
        None => {
            let ip = request
                .extensions()
                .get::<ConnectInfo<Peer>>()
                .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0 .0);
            Reader::address(ip)
        }
    };
    let wait = web.reads.take(reader.clone()).err()?;
    tracing::warn!(reader = ?reader, "web: refused a request past web.reads_per_minute");
    let mut r = (
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "too many requests: more than {} pages a minute (web.reads_per_minute = {}); try again in {wait} s\nhelp: wait a moment, or raise web.reads_per_minute in airlock.toml; the kill switch works meanwhile",
            web.reads.per_minute(),
            web.reads.per_minute()
        ),
    )
        .into_response();
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(wait));
    Some(r)
}

/// The paths the page served remotely answers before a passkey is enrolled: enrolment,
/// the page saying how to enrol, and the files those pages load.
const ENROLMENT_ONLY: [&str; 5] = [
    "/enroll",
    "/enroll/finish",
    "/welcome",
    "/static/web.css",
    "/static/web.js",
];

/// Whether `path` may be served now: anything locally or once a passkey is enrolled;
/// until then, remotely, only enrolment.
fn enrolment_open(web: &WebState, path: &str) -> bool {
    match &web.passkeys {
        None => true,
        Some(keys) => keys.enrolled() > 0 || ENROLMENT_ONLY.contains(&path),
    }
}

/// Why a request is refused before it is looked at, if it is.
fn refusal(web: &WebState, method: &Method, headers: &HeaderMap) -> Option<String> {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    match host {
        Some(h) if web.bound.hosts.iter().any(|a| a == h) => {}
        _ => {
            return Some(format!(
                "this page answers only to {} (the Host header names another address)",
                web.bound.hosts.join(" or ")
            ))
        }
    }
    match headers.get(header::ORIGIN).map(|v| v.to_str()) {
        Some(Ok(o)) if web.bound.origins.iter().any(|a| a == o) => None,
        Some(_) => Some("a request from another site's page is refused".into()),
        None if method == Method::GET || method == Method::HEAD => None,
        None => Some("a change without an Origin header is refused".into()),
    }
}

/// The cookie's value in a request, if it has one.
pub fn cookie_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| {
            let (k, v) = kv.trim().split_once('=')?;
            (k == COOKIE).then(|| v.to_string())
        })
}

/// The live login a request's cookie names, if it holds on this page: served remotely,
/// only a login opened by a passkey that is enrolled now (one revoked while no host ran
/// leaves its logins in the kept file; a link's login from when the page was served on
/// loopback has none); on loopback, only a link's login (the page cannot check a
/// passkey there). A login that no longer holds is ended.
pub fn login_of(web: &WebState, headers: &HeaderMap) -> Option<WebLogin> {
    let cookie = cookie_of(headers)?;
    let login = web.logins.session(&cookie)?;
    let holds = match (&web.passkeys, &login.passkey) {
        (Some(keys), Some(passkey)) => keys.is_enrolled(passkey),
        (None, None) => true,
        (Some(_), None) | (None, Some(_)) => false,
    };
    if holds {
        return Some(login);
    }
    web.logins.logout(&cookie);
    tracing::warn!(
        login = %login.id,
        passkey = ?login.passkey,
        "web: ended a login whose passkey is not enrolled on this page (revoked, or the page's regime changed)"
    );
    None
}

/// How often a stream that sends nothing looks again at the login that opened it.
const LOGIN_RECHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// `events`, for as long as the login the request `headers` carry holds ([`login_of`]):
/// looked at before each event and every [`LOGIN_RECHECK`] while none comes, so a stream
/// opened before a logout, `--logout-all` or a passkey's revocation ends with it rather
/// than going on sending the session's words.
pub fn while_logged_in<S, T>(
    web: Arc<WebState>,
    headers: HeaderMap,
    events: S,
) -> impl futures_util::Stream<Item = T>
where
    S: futures_util::Stream<Item = T> + Send + 'static,
{
    use futures_util::StreamExt;
    let state = (Box::pin(events), web, headers);
    futures_util::stream::unfold(state, |(mut events, web, headers)| async move {
        loop {
            login_of(&web, &headers)?;
            // Waiting on `next` again after a tick loses nothing: the stream keeps the
            // event it was making.
            tokio::select! {
                next = events.next() => return next.map(|e| (e, (events, web, headers))),
                _ = tokio::time::sleep(LOGIN_RECHECK) => {}
            }
        }
    })
}

/// A request from a logged-in browser.
pub struct LoggedIn(pub WebLogin);

/// The answer to a request that needs a login and has none: the page that says how to
/// get one (a redirect for a page, a 401 for a change).
pub struct NotLoggedIn(Method);

impl IntoResponse for NotLoggedIn {
    fn into_response(self) -> Response {
        if self.0 == Method::GET {
            Redirect::to("/welcome").into_response()
        } else {
            (
                StatusCode::UNAUTHORIZED,
                "not logged in: run `airlock web` for a login link",
            )
                .into_response()
        }
    }
}

impl FromRequestParts<Arc<WebState>> for LoggedIn {
    type Rejection = NotLoggedIn;

    async fn from_request_parts(
        parts: &mut Parts,
        web: &Arc<WebState>,
    ) -> Result<Self, Self::Rejection> {
        login_of(web, &parts.headers)
            .map(LoggedIn)
            .ok_or_else(|| NotLoggedIn(parts.method.clone()))
    }
}

/// A form that carries the login's CSRF token in its `csrf` field.
pub trait HasCsrf {
    fn csrf(&self) -> &str;
}

/// A state change: a logged-in request whose form carries that login's CSRF token.
pub struct Checked<T>(pub WebLogin, pub T);

impl<T> FromRequest<Arc<WebState>> for Checked<T>
where
    T: DeserializeOwned + HasCsrf + Send,
{
    type Rejection = Response;

    async fn from_request(req: Request, web: &Arc<WebState>) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = req.into_parts();
        let LoggedIn(login) = LoggedIn::from_request_parts(&mut parts, web)
            .await
            .map_err(IntoResponse::into_response)?;
        let req = Request::from_parts(parts, body);
        let Form(form) = Form::<T>::from_request(req, web).await.map_err(|e| {
            (
                StatusCode::BAD_REQUEST,
                format!("the form is not what this page sends: {e}"),
            )
                .into_response()
        })?;
        if !login.csrf_matches(form.csrf()) {
            tracing::warn!(login = %login.id, "web: refused a change without this login's CSRF token");
            return Err((
                StatusCode::FORBIDDEN,
                "the form's CSRF token is missing or not this login's: reload the page and try again",
            )
                .into_response());
        }
        Ok(Checked(login, form))
    }
}
