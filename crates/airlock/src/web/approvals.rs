//! The approvals page: each held action with its exact payload, why it is held and by
//! which policy, where its arguments appear in untrusted content, and the forms to decide
//! it. The decision form carries the hash of the payload drawn on the page; the service
//! refuses it if the request now holds another ([`crate::service::approvals::approve_as`]).
//! Served remotely, an approval also carries a passkey assertion whose challenge is bound
//! to that request and hash ([`super::remote::check_approval`]); the page's script asks the
//! passkey when Approve is pressed.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{Html, IntoResponse, Response};
use maud::{html, Markup};
use serde::Deserialize;

use airlock_store::ApprovalPreview;

use super::guard::{Checked, HasCsrf, LoggedIn};
use super::layout::{self, csrf};
use super::untrusted;
use super::WebState;
use crate::service::approvals::{self as service, ApprovalView, ApproveInput, DenyInput, Scope};
use crate::service::decider::Decider;
use crate::service::evidence::{self, Source};

/// The grant lengths the form offers (the CLI's `--for` takes any up to the cap).
const GRANT_LENGTHS: [&str; 5] = ["15m", "1h", "8h", "1d", "7d"];

pub async fn list(State(web): State<Arc<WebState>>, LoggedIn(login): LoggedIn) -> Response {
    let home = web.host.home.clone();
    let read = tokio::task::spawn_blocking(move || {
        let listing = service::list(&home, &())?;
        let shown: Vec<(ApprovalView, anyhow::Result<Vec<Source>>)> = listing
            .pending
            .into_iter()
            .map(|v| {
                let e = evidence::for_action(&home, &v.session_id, &v.payload);
                (v, e)
            })
            .collect();
        anyhow::Ok((listing.now_ms, shown, listing.orphaned, listing.corrupt))
    })
    .await;
    let chrome = web.chrome().await;
    let body = match read {
        Ok(Ok((now_ms, pending, orphaned, corrupt))) => html! {
            @if pending.is_empty() {
                p id="no-approvals" { "Nothing is waiting for your approval." }
            }
            @for (v, ev) in &pending {
                (card(&login, v, ev, now_ms, web.bound.is_remote()))
            }
            @if !orphaned.is_empty() {
                h2 { "Orphaned" }
                p { "Their sessions stopped waiting; they can no longer be approved." }
                ul {
                    @for v in &orphaned {
                        li { code { (untrusted::line(&v.id)) } " — " (untrusted::line(&v.action_kind)) }
                    }
                }
            }
            @if !corrupt.is_empty() {
                p class="error" { (corrupt.len()) " request(s) could not be read; the store quarantined them." }
            }
        },
        Ok(Err(e)) => html! { p class="error" { (untrusted::block(&format!("{e:#}"))) } },
        Err(e) => html! { p class="error" { (e.to_string()) } },
    };
    Html(layout::page("Approvals", &login, &chrome, body).into_string()).into_response()
}

/// One held action.
fn card(
    login: &super::auth::WebLogin,
    v: &ApprovalView,
    evidence: &anyhow::Result<Vec<Source>>,
    now_ms: i64,
    passkey: bool,
) -> Markup {
    let secs_left = (v.expires_at_ms - now_ms).max(0) / 1000;
    html! {
        section class="approval" id=(format!("approval-{}", v.id)) data-id=(v.id) {
            h2 {
                span class="kind" { (untrusted::line(&v.action_kind)) }
                " in session "
                a href=(format!("/sessions/{}", v.session_id)) { (untrusted::line(&v.session_id)) }
            }
            p class="meta" {
                "Request " code { (untrusted::line(&v.id)) }
                " · expires in " (secs_left) " s"
            }
            (preview(&v.preview))
            h3 { "Why it is held" }
            ul class="reasons" {
                @for r in &v.reasons {
                    li { (untrusted::line(r)) }
                }
            }
            p class="policies" {
                "Deciding policy: "
                @if v.policies.is_empty() {
                    "none named (the default: ask)"
                } @else {
                    @for (i, p) in v.policies.iter().enumerate() {
                        @if i > 0 { ", " }
                        code { (untrusted::line(p)) }
                    }
                }
            }
            h3 { "Where its arguments appear in untrusted content" }
            (provenance(evidence))
            details class="payload" {
                summary { "The exact payload that runs if approved" }
                pre class="payload-json" { (untrusted::block(&v.payload)) }
            }
            p class="hash" { "Payload hash: " code class="payload-hash" { (v.payload_hash) } }
            (decide_form(login, v, passkey))
        }
    }
}

/// What the action does, in the shape of its kind.
fn preview(p: &ApprovalPreview) -> Markup {
    html! {
        div class="preview" {
            @match p {
                ApprovalPreview::Command { command, cwd } => {
                    p { "Command:" }
                    pre class="command" { (untrusted::line(command)) }
                    @if !cwd.is_empty() { p { "in " code { (untrusted::line(cwd)) } } }
                }
                ApprovalPreview::Http { method, url, body_preview, headers } => {
                    p { "Request:" }
                    pre class="http" {
                        (untrusted::line(method)) " " (untrusted::line(url))
                        @for (name, value) in headers {
                            "\n" (untrusted::line(name)) ": " (untrusted::line(value))
                        }
                    }
                    @if let Some(b) = body_preview {
                        p { "Body (start):" }
                        pre class="body" { (untrusted::block(b)) }
                    }
                }
                ApprovalPreview::FileDiff { path, diff } => {
                    p { "Write " code { (untrusted::line(path)) } ":" }
                    pre class="diff" {
                        @for l in diff.lines() {
                            span class=(diff_class(l)) { (untrusted::line(l)) } "\n"
                        }
                    }
                }
                ApprovalPreview::Message { channel, recipient, text } => {
                    p { "Message to " code { (untrusted::line(recipient)) } " on " (untrusted::line(channel)) ":" }
                    pre class="message" { (untrusted::block(text)) }
                }
                ApprovalPreview::Other { summary } => {
                    pre class="other" { (untrusted::block(summary)) }
                }
            }
        }
    }
}

/// A diff line's class by its first mark (the workspace's diffs indent their hunks).
fn diff_class(line: &str) -> &'static str {
    match line.trim_start_matches(' ').as_bytes().first() {
        Some(b'+') => "add",
        Some(b'-') => "del",
        Some(b'@') => "hunk",
        _ => "ctx",
    }
}

fn provenance(evidence: &anyhow::Result<Vec<Source>>) -> Markup {
    html! {
        @match evidence {
            Err(e) => p class="error" { "Cannot read the session's sources: " (untrusted::line(&format!("{e:#}"))) },
            Ok(sources) if sources.is_empty() => p class="no-provenance" {
                "No untrusted content this session read mentions its arguments."
            },
            Ok(sources) => ul class="provenance" {
                @for s in sources {
                    li {
                        span class="source" { (untrusted::line(&s.label)) }
                        ul {
                            @for m in &s.matches {
                                li {
                                    "mentions " code { (untrusted::line(&m.argument)) } ": "
                                    span class="snippet" { (untrusted::visible(&m.snippet, false, &[(m.start, m.end)])) }
                                }
                            }
                        }
                    }
                }
            },
        }
    }
}

/// Approve (alone, or with a grant) or deny, bound to the hash drawn above.
/// With `passkey` (the page served remotely) the form also has the fields the script fills
/// with the passkey's assertion before it is sent.
fn decide_form(login: &super::auth::WebLogin, v: &ApprovalView, passkey: bool) -> Markup {
    html! {
        form method="post" action="/approvals/decide" class="decide" data-passkey=[passkey.then_some("required")] {
            (csrf(login))
            input type="hidden" name="id" value=(v.id);
            input type="hidden" name="hash" value=(v.payload_hash);
            @if passkey {
                input type="hidden" name="ceremony" value="";
                input type="hidden" name="assertion" value="";
            }
            fieldset class="grant" {
                legend { "Also grant (optional)" }
                label {
                    "for "
                    select name="duration" {
                        option value="" selected { "no grant: this once" }
                        @for d in GRANT_LENGTHS { option value=(d) { (d) } }
                    }
                }
                label {
                    " covering "
                    select name="scope" {
                        option value="" selected { "this exact payload in this session" }
                        option value="session" { "matching actions in this session" }
                        option value="rule" { "matching actions held by the same rule, every session" }
                    }
                }
            }
            label { "Reason (for a denial): " input type="text" name="reason" maxlength="500"; }
            @if passkey {
                p class="passkey-note" { "Approving asks your passkey to sign this request and payload hash." }
            }
            div class="buttons" {
                button type="submit" name="decision" value="approve" class="approve" { "Approve" }
                button type="submit" name="decision" value="deny" class="deny" { "Deny" }
            }
        }
    }
}

/// The decision form.
#[derive(Debug, Deserialize)]
pub struct DecideForm {
    #[serde(default)]
    csrf: String,
    id: String,
    /// The payload hash the page showed.
    #[serde(default)]
    hash: String,
    decision: String,
    #[serde(default)]
    duration: String,
    #[serde(default)]
    scope: String,
    #[serde(default)]
    reason: String,
    /// Served remotely: the passkey ceremony and its assertion (JSON) for an approval.
    #[serde(default)]
    ceremony: String,
    #[serde(default)]
    assertion: String,
}

impl HasCsrf for DecideForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// Approve or deny as the owner through the web, with the same service the command line
/// and the host's API call.
pub async fn decide(
    State(web): State<Arc<WebState>>,
    Checked(login, form): Checked<DecideForm>,
) -> Response {
    let who = Decider::web(&login.id);
    let home = web.host.home.clone();
    if let Some(refused) = web.owner_rate_refused(&login, "/approvals").await {
        return refused;
    }
    if form.decision == "approve" {
        let signed = super::remote::Signed {
            subject: &form.id,
            hash: &form.hash,
            decision: &form.decision,
            scope: &form.scope,
            duration: &form.duration,
            ceremony: &form.ceremony,
            assertion: &form.assertion,
        };
        if let Some(refused) =
            super::remote::signed_or_refused(&web, &login, signed, "an approval", "/approvals")
                .await
        {
            return refused;
        }
    }
    let done = tokio::task::spawn_blocking(move || -> anyhow::Result<String> {
        match form.decision.as_str() {
            "approve" => {
                if form.hash.is_empty() {
                    anyhow::bail!("the form names no payload hash, so it cannot say what you approved\nhelp: reload the approvals page");
                }
                let scope = match form.scope.as_str() {
                    "" => None,
                    "session" => Some(Scope::Session),
                    "rule" => Some(Scope::Rule),
                    other => anyhow::bail!("unknown grant scope {other:?}"),
                };
                let duration = (!form.duration.is_empty()).then_some(form.duration);
                if scope.is_some() && duration.is_none() {
                    anyhow::bail!("a grant's scope needs its duration\nhelp: choose how long the grant lasts, or no scope");
                }
                let approved = service::approve_as(
                    &home,
                    &ApproveInput {
                        id: form.id,
                        duration,
                        scope,
                        hash: Some(form.hash),
                    },
                    &who,
                )?;
                Ok(match approved.grant {
                    None => format!("Approved {} (payload {}).", approved.id, approved.payload_hash),
                    Some(g) => format!(
                        "Approved {} (payload {}), and granted {} for {}, reaching {} (grant {}).",
                        approved.id, approved.payload_hash, g.matches, g.lasts, g.reach, g.id
                    ),
                })
            }
            "deny" => {
                let reason = (!form.reason.trim().is_empty()).then(|| form.reason.trim().to_string());
                let denied = service::deny_as(&home, &DenyInput { id: form.id, reason }, &who)?;
                Ok(format!("Denied {}.", denied.id))
            }
            other => anyhow::bail!("unknown decision {other:?}"),
        }
    })
    .await;
    let (ok, message) = match done {
        Ok(Ok(m)) => (true, m),
        Ok(Err(e)) => (false, format!("{e:#}")),
        Err(e) => (false, e.to_string()),
    };
    tracing::info!(login = %login.id, ok, "web: an approval decision");
    web.outcome_page(
        &login,
        if ok { "Done" } else { "Refused" },
        ok,
        &message,
        "/approvals",
    )
    .await
}

/// `GET /approvals/count`: how many wait (the script polls it to refresh the list).
pub async fn count(State(web): State<Arc<WebState>>, LoggedIn(_): LoggedIn) -> Response {
    web.chrome()
        .await
        .approvals_pending
        .to_string()
        .into_response()
}
