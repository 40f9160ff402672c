//! Logging in with a one-time link, and out. Each is recorded in the audit log as the
//! owner's act through the web (a refused link too, with why).

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use maud::html;
use serde::Deserialize;
use serde_json::json;

use super::guard::{cookie_of, Checked, HasCsrf, COOKIE};
use super::layout;
use super::WebState;
use crate::service::decider::Decider;

#[derive(Debug, Deserialize)]
pub struct LinkQuery {
    #[serde(default)]
    token: String,
}

/// `GET /login?token=…`: the link `airlock web` printed.
pub async fn login(State(web): State<Arc<WebState>>, Query(q): Query<LinkQuery>) -> Response {
    if web.passkeys.is_some() {
        // Served remotely, a login is a passkey's; no link opens one.
        return super::remote::welcome_page(&web);
    }
    match web.logins.redeem(&q.token) {
        Err(why) => {
            // Any page the browser opens can send it here with a guess; each refusal is
            // recorded, up to the host's request rate, so guesses cannot flood the log.
            if web.host.rate.take("web-login-refused") {
                web.record("web-login-refused", None, json!({"why": why.as_str()}))
                    .await;
            }
            let page = layout::bare(
                "This login link cannot be used",
                html! {
                    p class="error" id="login-refused" {
                        "The link is " (why.as_str()) ". A link works once, within a minute."
                    }
                    p { "Run " code { "airlock web" } " for a new one." }
                },
            );
            (StatusCode::FORBIDDEN, Html(page.into_string())).into_response()
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "web: cannot open a login");
            (StatusCode::INTERNAL_SERVER_ERROR, "cannot open a login").into_response()
        }
        Ok(Ok((cookie, login))) => {
            // A login that cannot be recorded does not happen.
            if !web
                .record(
                    "web-login",
                    Some(&login.id),
                    json!({"expires_in_secs": web.logins.session_ttl().as_secs()}),
                )
                .await
            {
                web.logins.logout(&cookie);
                return (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the login could not be recorded in the audit log, so it was not made; see the host's log",
                )
                    .into_response();
            }
            // A page, not a redirect, moves on to `/`: the next request is then made from
            // this site, so the SameSite=Strict cookie goes with it however the link was
            // opened.
            let page = layout::bare(
                "Logged in",
                html! {
                    meta http-equiv="refresh" content="0; url=/";
                    p { "Logged in. " a href="/" id="continue" { "Continue" } }
                },
            );
            (
                [(
                    header::SET_COOKIE,
                    web.cookie(&cookie, web.logins.session_ttl().as_secs()),
                )],
                Html(page.into_string()),
            )
                .into_response()
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct LogoutForm {
    #[serde(default)]
    csrf: String,
}

impl HasCsrf for LogoutForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /logout`: the session ends here and in the browser.
pub async fn logout(
    State(web): State<Arc<WebState>>,
    headers: HeaderMap,
    Checked(login, _): Checked<LogoutForm>,
) -> Response {
    if let Some(c) = cookie_of(&headers) {
        web.logins.logout(&c);
    }
    web.record("web-logout", Some(&login.id), json!({})).await;
    let page = layout::bare(
        "Logged out",
        html! { p id="logged-out" {
            @if web.bound.is_remote() {
                "Logged out. " a href="/welcome" { "Log in again" } " with your passkey."
            } @else {
                "Logged out. Run " code { "airlock web" } " to log in again."
            }
        } },
    );
    (
        [(header::SET_COOKIE, web.cookie("", 0))],
        Html(page.into_string()),
    )
        .into_response()
}

/// `GET /welcome`: where a browser without a login lands.
pub async fn welcome(State(web): State<Arc<WebState>>) -> Response {
    if web.passkeys.is_some() {
        return super::remote::welcome_page(&web);
    }
    let page = layout::bare(
        "Log in",
        html! {
            p id="not-logged-in" {
                "Run " code { "airlock web" } " on the machine the host runs on: it prints a login link that works once, within a minute."
            }
        },
    );
    (StatusCode::UNAUTHORIZED, Html(page.into_string())).into_response()
}

impl WebState {
    /// The `Set-Cookie` value for `value`, lasting `max_age` seconds (0 removes it).
    pub(super) fn cookie(&self, value: &str, max_age: u64) -> String {
        // `Secure` under TLS (the page served remotely); locally it is plain HTTP, where a
        // browser would never send a `Secure` cookie back.
        let secure = if self.bound.is_remote() {
            "; Secure"
        } else {
            ""
        };
        format!("{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}")
    }

    /// Append a record of a login event as the owner's act through the web; whether it
    /// was recorded.
    pub(super) async fn record(
        &self,
        kind: &'static str,
        login: Option<&str>,
        detail: serde_json::Value,
    ) -> bool {
        let home = self.host.home.clone();
        let who = Decider::web(login.unwrap_or("-"));
        // A record about one session (a message sent to it) is that session's, so the
        // timeline's session filter finds it; the rest belong to no session.
        let session = detail
            .get("session")
            .and_then(|s| s.as_str())
            .unwrap_or("-")
            .to_string();
        let done = tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
            let cfg = crate::config::load(&home.config_file())?;
            let mut log = crate::service::record_log::RecordLog::open(&home, &cfg)?;
            let mut detail = detail;
            detail["decided_by"] = who.detail();
            log.append(
                airlock_audit::AuditEvent::by(kind, &session, &who.attribution())
                    .with_detail(detail),
            )
            .map_err(|e| anyhow::anyhow!("{e}"))?;
            log.close().map_err(|e| anyhow::anyhow!("{e}"))?;
            Ok(())
        })
        .await;
        match done.map_err(anyhow::Error::from) {
            Ok(Ok(())) => true,
            Ok(Err(e)) | Err(e) => {
                tracing::error!(error = %e, kind, "web: cannot record a login event");
                false
            }
        }
    }
}
