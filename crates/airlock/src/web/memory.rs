//! Memory review: each change to memory that was held for the owner (a write by a tainted
//! session to context that is always loaded, …) with the record now and the one proposed,
//! where it came from and why it was held; approve or reject, through the same service as
//! `airlock memory approve|reject`, recorded as the owner via the web.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{Html, IntoResponse, Response};
use maud::html;
use serde::Deserialize;

use super::guard::{Checked, HasCsrf, LoggedIn};
use super::layout::{self, csrf};
use super::untrusted;
use super::WebState;
use crate::service::decider::Decider;
use crate::service::memory::{self as service, MemoryAct};

pub async fn page(State(web): State<Arc<WebState>>, LoggedIn(login): LoggedIn) -> Response {
    let home = web.host.home.clone();
    let read = tokio::task::spawn_blocking(move || service::reviews(&home)).await;
    let chrome = web.chrome().await;
    let body = match read {
        Ok(Ok((items, corrupt))) => html! {
            @if items.is_empty() { p id="no-reviews" { "No memory changes are waiting for review." } }
            @for c in &items {
                section class="approval memory-change" id=(format!("change-{}", c.change)) {
                    h2 { (untrusted::line(&c.op)) " " (untrusted::line(&c.tier)) " record " code { (untrusted::line(&c.record_id)) } }
                    p class="meta" {
                        "in " (untrusted::line(&c.namespace)) " · from session "
                        a href=(format!("/sessions/{}", c.session)) { (untrusted::line(&c.session)) }
                        " (" (untrusted::line(&c.principal)) "), tool call " (untrusted::line(&c.tool_call))
                        @if c.tainted { " · " span class="tainted" { "written after untrusted content" } }
                    }
                    ul class="reasons" { @for r in &c.reasons { li { (untrusted::line(r)) } } }
                    pre class="diff" {
                        @match &c.current {
                            Some((v, text)) => {
                                span class="hunk" { "--- version " (v) } "\n"
                                @for l in text.lines() { span class="del" { "- " (untrusted::line(l)) } "\n" }
                            }
                            None => { span class="hunk" { "--- (new record)" } "\n" }
                        }
                        span class="hunk" { "+++ proposed" } "\n"
                        @match &c.proposed {
                            Some(text) => { @for l in text.lines() { span class="add" { "+ " (untrusted::line(l)) } "\n" } }
                            None => { span class="add" { "+ (forgotten)" } "\n" }
                        }
                    }
                    form method="post" action="/memory/decide" class="decide" {
                        (csrf(&login))
                        input type="hidden" name="change" value=(c.change);
                        div class="buttons" {
                            button type="submit" name="decision" value="approve" class="approve" { "Apply" }
                            button type="submit" name="decision" value="reject" class="deny" { "Reject" }
                        }
                    }
                }
            }
            @if corrupt > 0 { p class="error" { (corrupt) " held change(s) could not be read; the store quarantined them." } }
        },
        Ok(Err(e)) => html! { p class="error" { (untrusted::block(&format!("{e:#}"))) } },
        Err(e) => html! { p class="error" { (e.to_string()) } },
    };
    Html(layout::page("Memory review", &login, &chrome, body).into_string()).into_response()
}

#[derive(Debug, Deserialize)]
pub struct DecideForm {
    #[serde(default)]
    csrf: String,
    change: String,
    decision: String,
}

impl HasCsrf for DecideForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

pub async fn decide(
    State(web): State<Arc<WebState>>,
    Checked(login, form): Checked<DecideForm>,
) -> Response {
    if web.bound.is_remote() && form.decision == "approve" {
        // Served remotely every approval is a passkey assertion bound to what it approves;
        // a held memory change has no payload hash to bind yet, so it is applied elsewhere.
        return web
            .outcome_page(
                &login,
                "Refused",
                false,
                &format!(
                    "applying a held memory change is not offered on the page served remotely, where every approval must be a passkey assertion bound to a payload hash\nhelp: apply it with `airlock memory approve {}`, or from the page on loopback; rejecting it works here",
                    form.change
                ),
                "/memory",
            )
            .await;
    }
    let who = Decider::web(&login.id);
    let home = web.host.home.clone();
    let done = tokio::task::spawn_blocking(move || {
        let act = match form.decision.as_str() {
            "approve" => MemoryAct::Approve {
                change: form.change,
            },
            "reject" => MemoryAct::Reject {
                change: form.change,
            },
            other => anyhow::bail!("unknown decision {other:?}"),
        };
        service::act_as(&home, &act, &who)
    })
    .await;
    let (ok, message) = match done {
        Ok(Ok(service::MemoryActed::Approved { change, now })) => (
            true,
            format!(
                "Applied {change}: {} is now at version {}.",
                now.record_id, now.version
            ),
        ),
        Ok(Ok(service::MemoryActed::Rejected { change })) => (true, format!("Rejected {change}.")),
        Ok(Ok(other)) => (true, format!("{other:?}")),
        Ok(Err(e)) => (false, format!("{e:#}")),
        Err(e) => (false, e.to_string()),
    };
    web.outcome_page(
        &login,
        if ok { "Done" } else { "Refused" },
        ok,
        &message,
        "/memory",
    )
    .await
}
