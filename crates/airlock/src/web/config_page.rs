//! Settings, read-only: the policy profile and the policies loaded, the egress rules, the
//! names of the secrets with the hosts they are bound to (never a value), and the host's
//! limits. Each is changed at the command line, on the record.
//!
//! Served remotely it also lists the enrolled passkeys, each with a Revoke button: the
//! form carries the CSRF token and a fresh assertion of a passkey, whose challenge is
//! bound to the passkey being revoked ([`super::remote::check_approval`]), and the
//! revocation goes through [`super::admin`] as `airlock web --revoke-passkey`.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{Html, IntoResponse, Response};
use maud::{html, Markup};
use serde::Deserialize;

use super::auth::WebLogin;
use super::guard::{Checked, HasCsrf, LoggedIn};
use super::layout::{self, csrf};
use super::passkeys::PasskeyInfo;
use super::untrusted;
use super::WebState;

pub async fn page(State(web): State<Arc<WebState>>, LoggedIn(login): LoggedIn) -> Response {
    let cfg = web.host.warm.config();
    let policies = web.host.warm.policy_status();
    let config_dir = web.host.home.config.clone();
    let read = tokio::task::spawn_blocking(move || {
        let rules = airlock_proxy::NetRules::load(&config_dir)
            .map_err(|e| anyhow::anyhow!("cannot read the net rules: {e}"));
        let secrets = airlock_proxy::secrets::store::SecretStore::new(&config_dir)
            .list()
            .map_err(|e| anyhow::anyhow!("cannot list the secrets: {e}"));
        (rules, secrets)
    })
    .await;
    let chrome = web.chrome().await;
    let passkeys = web.passkeys.as_ref().map(|k| k.list());
    let body = html! {
        @if let Some(list) = &passkeys { (passkeys_view(&login, list)) }
        p { "Read-only here; change these with " code { "airlock net" } ", " code { "airlock secret" } " and the files in the config dir." }
        h2 { "Policy" }
        p { "Profile: " code { (untrusted::line(&cfg.policy.profile)) } }
        ul {
            @for p in &policies {
                li {
                    code { (untrusted::line(&p.profile)) } " " code { (untrusted::line(&p.hash)) }
                    @if let Some(e) = &p.refused_edit { br; span class="error" { "Last edit refused: " (untrusted::line(e)) } }
                }
            }
        }
        @match &read {
            Ok((rules, secrets)) => {
                h2 { "Egress rules" }
                @match rules {
                    Ok(r) if r.rules.is_empty() && r.allow_private.is_empty() => p id="no-net-rules" { "None: every request is denied." },
                    Ok(r) => ul class="net-rules" {
                        @for rule in &r.rules { li { code { "net.rule." (rule.id) } " " (untrusted::line(&rule.describe())) } }
                        @for a in &r.allow_private { li { "allow-private " code { (a) } } }
                    },
                    Err(e) => p class="error" { (untrusted::line(&format!("{e:#}"))) },
                }
                h2 { "Secrets" }
                @match secrets {
                    Ok(list) if list.is_empty() => p { "None." },
                    Ok(list) => table class="secrets" {
                        thead { tr { th { "Name" } th { "Bound to" } th { "Sent as" } } }
                        tbody {
                            @for s in list {
                                tr {
                                    td { code { (untrusted::line(&s.name)) } }
                                    td { (untrusted::line(&s.binding.display())) }
                                    td { (untrusted::line(&s.header.display())) }
                                }
                            }
                        }
                    },
                    Err(e) => p class="error" { (untrusted::line(&format!("{e:#}"))) },
                }
            }
            Err(e) => p class="error" { (e.to_string()) },
        }
        h2 { "Host" }
        ul {
            li { "Sandboxes at once: " (cfg.host.max_sandboxes) ", queued: " (cfg.host.max_queued) }
            li { "Sessions at once: " (cfg.host.max_sessions) }
            li { "Requests per principal a minute: " (cfg.host.requests_per_minute) }
            li { "Approval requests per session at once: " (cfg.approvals.max_pending_per_session) }
        }
    };
    Html(layout::page("Settings", &login, &chrome, body).into_string()).into_response()
}

/// The enrolled passkeys, each with its Revoke form.
fn passkeys_view(login: &WebLogin, list: &[PasskeyInfo]) -> Markup {
    let when = |secs: u64| {
        humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs),
        )
        .to_string()
    };
    html! {
        h2 { "Passkeys" }
        p { "Revoking one asks a passkey (this one or another) to sign the revocation. With none left, this address serves only enrolment." }
        table class="passkeys" {
            thead { tr { th { "Id" } th { "Name" } th { "Enrolled" } th { "Last used" } th {} } }
            tbody {
                @for p in list {
                    tr class="passkey" id=(format!("passkey-{}", p.id)) {
                        td { code { (p.id) } }
                        td { (untrusted::line(&p.label)) }
                        td { (when(p.enrolled_at)) }
                        td { @match p.last_used { Some(t) => (when(t)), None => "never" } }
                        td {
                            form method="post" action="/settings/passkeys/revoke" class="decide"
                                data-passkey="required" data-subject=(revoke_subject(&p.id)) {
                                (csrf(login))
                                input type="hidden" name="id" value=(p.id);
                                input type="hidden" name="hash" value=(p.id);
                                input type="hidden" name="ceremony" value="";
                                input type="hidden" name="assertion" value="";
                                button type="submit" name="decision" value="revoke" class="deny" { "Revoke" }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// What the assertion that revokes passkey `id` names as its request.
fn revoke_subject(id: &str) -> String {
    format!("passkey-revoke:{id}")
}

#[derive(Debug, Deserialize)]
pub struct RevokeForm {
    #[serde(default)]
    csrf: String,
    id: String,
    #[serde(default)]
    ceremony: String,
    #[serde(default)]
    assertion: String,
}

impl HasCsrf for RevokeForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /settings/passkeys/revoke`: revoke one passkey, with a fresh passkey assertion
/// bound to it.
pub async fn revoke_passkey(
    State(web): State<Arc<WebState>>,
    Checked(login, form): Checked<RevokeForm>,
) -> Response {
    if web.passkeys.is_none() {
        return web
            .outcome_page(
                &login,
                "Refused",
                false,
                "this page is served on loopback, with login links: it has no passkeys to revoke\nhelp: `airlock web --passkeys` lists the passkeys file's, and `airlock web --revoke-passkey ID` revokes one",
                "/settings",
            )
            .await;
    }
    if let Some(refused) = web.owner_rate_refused(&login, "/settings").await {
        return refused;
    }
    // The challenge is bound to the id revoked, as subject and as payload.
    let subject = revoke_subject(&form.id);
    let signed = super::remote::Signed {
        subject: &subject,
        hash: &form.id,
        decision: "revoke",
        scope: "",
        duration: "",
        ceremony: &form.ceremony,
        assertion: &form.assertion,
    };
    if let Some(refused) =
        super::remote::signed_or_refused(&web, &login, signed, "a passkey revocation", "/settings")
            .await
    {
        return refused;
    }
    let host = web.host.clone();
    let who = crate::service::decider::Decider::web(&login.id);
    let done = tokio::task::spawn_blocking(move || {
        super::admin::revoke(host.web.as_ref(), &host.home, &form.id, &who)
    })
    .await;
    let (ok, message) = match done {
        Ok(Ok(r)) if r.remaining == 0 => (
            true,
            format!(
                "Revoked passkey {} ({}). No passkey is enrolled now: this address serves only enrolment until `airlock web --enroll` enrols one.",
                r.passkey.id, r.passkey.label
            ),
        ),
        Ok(Ok(r)) => (
            true,
            format!(
                "Revoked passkey {} ({}); {} still enrolled.",
                r.passkey.id, r.passkey.label, r.remaining
            ),
        ),
        Ok(Err(e)) => (false, format!("{e:#}")),
        Err(e) => (false, e.to_string()),
    };
    web.outcome_page(
        &login,
        if ok { "Done" } else { "Refused" },
        ok,
        &message,
        "/settings",
    )
    .await
}
