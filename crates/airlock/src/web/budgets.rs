//! Budgets: today's use by every session against `[budget.per_day]`, and each active
//! session's use against `[budget.per_session]`, with a small chart. Read-only: the model
//! can change no budget, and neither can this page.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{Html, IntoResponse, Response};
use maud::{html, Markup};

use airlock_store::{BudgetStore, Counter, Limits, Timestamp, Usage};

use super::chart::{self, Bar};
use super::guard::LoggedIn;
use super::layout;
use super::untrusted;
use super::WebState;

pub async fn page(State(web): State<Arc<WebState>>, LoggedIn(login): LoggedIn) -> Response {
    let home = web.host.home.clone();
    let budget = web.host.warm.config().budget.clone();
    let read = tokio::task::spawn_blocking(move || {
        let report = crate::service::status::store_status(&home, None, None)?;
        let store = crate::service::approvals::open_store(&home)?;
        let now = Timestamp::now();
        let today = store
            .day_usage(now)
            .map_err(|e| anyhow::anyhow!("cannot read today's use: {e}"))?;
        let sessions: Vec<(String, Option<Usage>)> = report
            .sessions
            .iter()
            .map(|s| {
                (
                    s.id.clone(),
                    store.budget_state(&s.id, now).ok().map(|b| b.session),
                )
            })
            .collect();
        anyhow::Ok((today, sessions))
    })
    .await;
    let chrome = web.chrome().await;
    let body = match read {
        Ok(Ok((today, sessions))) => html! {
            h2 { "Today (UTC), every session" }
            (usage(&today, &budget.per_day))
            h2 { "Active sessions" }
            @if sessions.is_empty() { p { "No active sessions." } }
            @for (id, u) in &sessions {
                h3 { a href=(format!("/sessions/{id}")) { (untrusted::line(id)) } }
                @match u {
                    Some(u) => (usage(u, &budget.per_session)),
                    None => p class="error" { "Its budget cannot be read." },
                }
            }
        },
        Ok(Err(e)) => html! { p class="error" { (untrusted::block(&format!("{e:#}"))) } },
        Err(e) => html! { p class="error" { (e.to_string()) } },
    };
    Html(layout::page("Budgets", &login, &chrome, body).into_string()).into_response()
}

/// A table and chart of `used` against `limits`, one row per counter.
fn usage(used: &Usage, limits: &Limits) -> Markup {
    let bars: Vec<Bar<'_>> = Counter::ALL
        .iter()
        .map(|c| Bar {
            label: c.as_str(),
            used: used.get(*c),
            limit: limits.get(*c),
        })
        .collect();
    html! {
        div class="budget-view" {
            (chart::bars(&bars))
            table class="budget" {
                thead { tr { th { "Counter" } th { "Used" } th { "Limit" } } }
                tbody {
                    @for b in &bars {
                        tr {
                            td { (b.label) }
                            td { (b.used) }
                            td { @match b.limit { Some(l) => (l), None => "none" } }
                        }
                    }
                }
            }
        }
    }
}
