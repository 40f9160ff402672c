//! The page served remotely: enrolling a passkey, logging in with one, and the challenge
//! an approval's assertion signs. The ceremonies themselves are [`super::passkeys`]'; the
//! browser's half is in `static/web.js` (it passes the options to
//! `navigator.credentials` and posts the answer back).
//!
//! Every route here answers 404 when the page is served locally, where logins are links.
//! Each enrolment, login and refusal is recorded in the audit log as the owner's act
//! through the web.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::json;
use webauthn_rs::prelude::{PublicKeyCredential, RegisterPublicKeyCredential};

use super::guard::{Checked, HasCsrf};
use super::layout;
use super::passkeys::{ApprovalAsked, Passkeys, Refused};
use super::WebState;

fn not_here() -> Response {
    (StatusCode::NOT_FOUND, "no such page").into_response()
}

fn refused(e: &Refused) -> Response {
    let status = match e {
        Refused::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::FORBIDDEN,
    };
    (status, Json(json!({ "error": e.to_string() }))).into_response()
}

impl WebState {
    fn keys(&self) -> Option<&Arc<Passkeys>> {
        self.passkeys.as_ref()
    }
}

/// A page that asks the authenticator: `body` has the button the script answers to.
fn passkey_page(title: &str, body: Markup) -> Markup {
    layout::with_script(
        title,
        html! {
            (body)
            p id="passkey-status" class="status" {}
        },
    )
}

#[derive(Debug, Deserialize)]
pub struct LinkQuery {
    #[serde(default)]
    token: String,
}

/// `GET /enroll?token=…`: the link `airlock web --enroll` printed. The token is used
/// here, once; the page carries the ceremony that the button finishes.
pub async fn enrol_page(State(web): State<Arc<WebState>>, Query(q): Query<LinkQuery>) -> Response {
    let Some(keys) = web.keys() else {
        return not_here();
    };
    match keys.start_enrolment(&q.token) {
        Err(e) => {
            if web.host.rate.take("web-login-refused") {
                web.record(
                    "web-passkey-enrol-refused",
                    None,
                    json!({"why": e.to_string()}),
                )
                .await;
            }
            let page = layout::bare(
                "This enrolment link cannot be used",
                html! { p class="error" id="enrol-refused" { (e.to_string()) } },
            );
            (StatusCode::FORBIDDEN, Html(page.into_string())).into_response()
        }
        Ok((ceremony, options)) => {
            let options = match serde_json::to_string(&options) {
                Ok(o) => o,
                Err(e) => return refused(&Refused::Failed(e.into())),
            };
            let page = passkey_page(
                "Enrol a passkey",
                html! {
                    p {
                        "This enrols a passkey of this device for the Airlock page at "
                        code { (web.bound.base_url) } ". With it you log in here, and approve held actions."
                    }
                    p {
                        label for="passkey-label" { "Name it (optional, e.g. the device): " }
                        input type="text" id="passkey-label" maxlength="64";
                    }
                    button type="button" id="passkey-enrol" data-ceremony=(ceremony) data-options=(options) {
                        "Create a passkey"
                    }
                },
            );
            Html(page.into_string()).into_response()
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct EnrolAnswer {
    ceremony: String,
    credential: RegisterPublicKeyCredential,
    /// The owner's name for the passkey (optional).
    #[serde(default)]
    label: String,
}

/// `POST /enroll/finish`: the authenticator's new credential; kept once it checks out.
pub async fn enrol_finish(
    State(web): State<Arc<WebState>>,
    Json(a): Json<EnrolAnswer>,
) -> Response {
    let Some(keys) = web.keys().cloned() else {
        return not_here();
    };
    let done = tokio::task::spawn_blocking(move || {
        keys.finish_enrolment(&a.ceremony, &a.credential, &a.label)
    })
    .await
    .unwrap_or_else(|e| Err(Refused::Failed(e.into())));
    match done {
        Err(e) => {
            tracing::warn!(error = %e, "web: a passkey enrolment was refused");
            // Anyone can post here; refusals are recorded up to the host's request rate,
            // so they cannot flood the log.
            if web.host.rate.take("web-login-refused") {
                web.record(
                    "web-passkey-enrol-refused",
                    None,
                    json!({"why": e.to_string()}),
                )
                .await;
            }
            refused(&e)
        }
        Ok(()) => {
            let enrolled = web.keys().map(|k| k.enrolled()).unwrap_or(0);
            web.record("web-passkey-enrolled", None, json!({"passkeys": enrolled}))
                .await;
            Json(json!({ "ok": true, "next": "/welcome" })).into_response()
        }
    }
}

/// The remote page's way in for a browser without a login: the passkey button, or, with
/// none enrolled yet, how to enrol one.
pub fn welcome_page(web: &WebState) -> Response {
    let enrolled = web.keys().map(|k| k.enrolled()).unwrap_or(0);
    let page = if enrolled == 0 {
        layout::bare(
            "Enrol a passkey first",
            html! {
                p id="enrol-first" {
                    "No passkey is enrolled yet, so this address serves only enrolment. Run "
                    code { "airlock web --enroll" } " on the machine the host runs on and open the link it prints (it works once, within a minute)."
                }
            },
        )
    } else {
        passkey_page(
            "Log in",
            html! {
                p id="not-logged-in" { "Log in with the passkey you enrolled for this page." }
                button type="button" id="passkey-login" { "Log in with a passkey" }
            },
        )
    };
    (StatusCode::UNAUTHORIZED, Html(page.into_string())).into_response()
}

/// `POST /passkey/login`: a login ceremony's options.
pub async fn login_start(State(web): State<Arc<WebState>>) -> Response {
    let Some(keys) = web.keys() else {
        return not_here();
    };
    match keys.start_login() {
        Err(e) => refused(&e),
        Ok((ceremony, options)) => {
            Json(json!({ "ceremony": ceremony, "options": options })).into_response()
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct Assertion {
    ceremony: String,
    credential: PublicKeyCredential,
}

/// `POST /passkey/login/finish`: an enrolled passkey's assertion opens a login, whose
/// cookie is `Secure`.
pub async fn login_finish(State(web): State<Arc<WebState>>, Json(a): Json<Assertion>) -> Response {
    let Some(keys) = web.keys().cloned() else {
        return not_here();
    };
    let done = tokio::task::spawn_blocking(move || keys.finish_login(&a.ceremony, &a.credential))
        .await
        .unwrap_or_else(|e| Err(Refused::Failed(e.into())));
    let passkey = match done {
        Ok(id) => id,
        Err(e) => {
            tracing::warn!(error = %e, "web: a passkey login was refused");
            if web.host.rate.take("web-login-refused") {
                web.record("web-login-refused", None, json!({"why": e.to_string()}))
                    .await;
            }
            return refused(&e);
        }
    };
    let (cookie, login) = match web.logins.open(&passkey) {
        Ok(c) => c,
        Err(e) => return refused(&Refused::Failed(e)),
    };
    if !web
        .record(
            "web-login",
            Some(&login.id),
            json!({"with": "passkey", "passkey": passkey, "expires_in_secs": web.logins.session_ttl().as_secs()}),
        )
        .await
    {
        web.logins.logout(&cookie);
        return refused(&Refused::Failed(anyhow::anyhow!(
            "the login could not be recorded in the audit log, so it was not made; see the host's log"
        )));
    }
    (
        [(
            header::SET_COOKIE,
            web.cookie(&cookie, web.logins.session_ttl().as_secs()),
        )],
        Json(json!({ "ok": true, "next": "/" })),
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
pub struct ChallengeForm {
    #[serde(default)]
    csrf: String,
    id: String,
    #[serde(default)]
    hash: String,
    /// The decision the form will send (`approve`, `rollback`, `revoke`), and the grant's
    /// scope and duration it names (empty: none).
    #[serde(default)]
    decision: String,
    #[serde(default)]
    scope: String,
    #[serde(default)]
    duration: String,
}

impl HasCsrf for ChallengeForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /approvals/challenge`: the options of the assertion that approves request `id`
/// with the payload `hash` the page drew, as `decision` with the grant of `scope` and
/// `duration`; its challenge is bound to all of them.
pub async fn approval_challenge(
    State(web): State<Arc<WebState>>,
    Checked(login, form): Checked<ChallengeForm>,
) -> Response {
    let Some(keys) = web.keys() else {
        return not_here();
    };
    if form.hash.is_empty() || form.id.is_empty() || form.decision.is_empty() {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "the form names no request, payload hash or decision; reload the page"})),
        )
            .into_response();
    }
    let asked = ApprovalAsked {
        login_id: login.id,
        request_id: form.id,
        payload_hash: form.hash,
        decision: form.decision,
        scope: form.scope,
        duration: form.duration,
    };
    match keys.start_approval(asked) {
        Err(e) => refused(&e),
        Ok((ceremony, options)) => {
            Json(json!({ "ceremony": ceremony, "options": options })).into_response()
        }
    }
}

/// What a signed form names: its subject, the payload hash the page drew, the decision
/// and the grant's scope and duration (empty when it has none), and the passkey's
/// ceremony and assertion. Everything but the last two is bound into the challenge.
pub struct Signed<'a> {
    pub subject: &'a str,
    pub hash: &'a str,
    pub decision: &'a str,
    pub scope: &'a str,
    pub duration: &'a str,
    pub ceremony: &'a str,
    pub assertion: &'a str,
}

/// [`check_approval`] for a form of `login`'s, answered by the refusal page (back to
/// `back`) when it does not hold; `what` says in the log what was refused.
pub async fn signed_or_refused(
    web: &WebState,
    login: &super::auth::WebLogin,
    form: Signed<'_>,
    what: &str,
    back: &str,
) -> Option<axum::response::Response> {
    let why = check_approval(web, &login.id, &form).await.err()?;
    tracing::warn!(login = %login.id, subject = %form.subject, why = %why, "web: {what} without a valid passkey assertion was refused");
    Some(web.outcome_page(login, "Refused", false, &why, back).await)
}

/// Check an approval's assertion (the form's `ceremony` and `assertion`) against the
/// request, payload hash, decision and grant the form names; `Err` with why when it does
/// not hold.
pub async fn check_approval(
    web: &WebState,
    login_id: &str,
    form: &Signed<'_>,
) -> Result<(), String> {
    let Some(keys) = web.keys().cloned() else {
        return Ok(());
    };
    let (ceremony, assertion) = (form.ceremony, form.assertion);
    if ceremony.is_empty() || assertion.is_empty() {
        return Err("an approval on this page is a passkey assertion, and the form carries none\nhelp: approve with the page's Approve button, which asks your passkey".into());
    }
    let credential: PublicKeyCredential = serde_json::from_str(assertion)
        .map_err(|e| format!("the form's passkey assertion cannot be read: {e}"))?;
    let named = ApprovalAsked {
        login_id: login_id.to_string(),
        request_id: form.subject.to_string(),
        payload_hash: form.hash.to_string(),
        decision: form.decision.to_string(),
        scope: form.scope.to_string(),
        duration: form.duration.to_string(),
    };
    let ceremony = ceremony.to_string();
    tokio::task::spawn_blocking(move || keys.finish_approval(&ceremony, &credential, &named))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}
