//! The audit timeline: the last records of the log, newest first, filtered by session,
//! principal, kind and decision, under the result of verifying the whole chain and its
//! last signed checkpoint. It reads through the same services as `airlock audit tail` and
//! `airlock audit verify`.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::{Html, IntoResponse, Response};
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::Value;

use super::guard::LoggedIn;
use super::layout;
use super::untrusted;
use super::WebState;
use crate::service::audit::{self as service, TailInput, TailLine};

/// Records read when the query does not say.
const DEFAULT_RECORDS: usize = 200;
/// The most records one page reads.
const MAX_RECORDS: usize = 5000;

/// The filters, from the query string; an empty one matches everything.
#[derive(Debug, Default, Deserialize)]
pub struct Filters {
    #[serde(default)]
    session: String,
    #[serde(default)]
    principal: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    decision: String,
    #[serde(default)]
    n: Option<usize>,
}

impl Filters {
    fn keeps(&self, r: &Value) -> bool {
        let is = |field: &str, want: &str| want.is_empty() || r[field].as_str() == Some(want);
        is("session", &self.session)
            && is("principal", &self.principal)
            && is("kind", &self.kind)
            && is("decision", &self.decision)
    }
}

pub async fn timeline(
    State(web): State<Arc<WebState>>,
    LoggedIn(login): LoggedIn,
    Query(filters): Query<Filters>,
) -> Response {
    let home = web.host.home.clone();
    let n = filters.n.unwrap_or(DEFAULT_RECORDS).min(MAX_RECORDS);
    let read = tokio::task::spawn_blocking(move || {
        let verified = service::verify(&home);
        let mut lines = Vec::new();
        let tailed = service::tail(&home, &TailInput { n }, |l| {
            lines.push(l);
            Ok(())
        });
        (verified, tailed.map(|()| lines))
    })
    .await;
    let chrome = web.chrome().await;
    let body = match read {
        Ok((verified, lines)) => html! {
            (verify_view(&verified))
            (filter_form(&filters, n))
            @match lines {
                Ok(lines) => (records_view(&filters, &lines)),
                Err(e) => p class="error" { (untrusted::block(&format!("{e:#}"))) },
            }
        },
        Err(e) => html! { p class="error" { (e.to_string()) } },
    };
    Html(layout::page("Audit", &login, &chrome, body).into_string()).into_response()
}

fn verify_view(v: &anyhow::Result<airlock_audit::VerifyReport>) -> Markup {
    html! {
        @match v {
            Ok(r) => @match &r.problem {
                None => p class="ok" id="verify" {
                    "Chain verified: " (r.records) " records, " (r.checkpoints) " signed checkpoints"
                    @if let Some(s) = r.last_checkpoint_seq { "; the last signed checkpoint covers record #" (s) }
                    @if r.unsigned_tail > 0 { "; " (r.unsigned_tail) " records after it are not signed yet" }
                    "."
                },
                Some(p) => p class="error" id="verify" { "Verification FAILED: " (untrusted::line(&p.to_string())) },
            },
            Err(e) => p class="error" id="verify" { "Cannot verify: " (untrusted::line(&format!("{e:#}"))) },
        }
    }
}

fn filter_form(f: &Filters, n: usize) -> Markup {
    html! {
        form method="get" action="/audit" class="filters" {
            label { "Session " input type="text" name="session" value=(f.session); }
            label { "Principal " input type="text" name="principal" value=(f.principal); }
            label { "Kind " input type="text" name="kind" value=(f.kind); }
            label { "Decision "
                select name="decision" {
                    @for d in ["", "allow", "ask", "deny"] {
                        option value=(d) selected[f.decision == d] { @if d.is_empty() { "any" } @else { (d) } }
                    }
                }
            }
            label { "Last " input type="number" name="n" min="1" max=(MAX_RECORDS) value=(n); " records" }
            button type="submit" { "Filter" }
        }
    }
}

fn records_view(f: &Filters, lines: &[TailLine]) -> Markup {
    html! {
        table class="audit" {
            thead { tr { th { "#" } th { "Time" } th { "Kind" } th { "Session" } th { "Who" } th { "Decision" } th { "What" } } }
            tbody {
                @for l in lines.iter().rev() {
                    @match l {
                        TailLine::Record(r) if f.keeps(r) => tr class="record" data-kind=(r["kind"].as_str().unwrap_or("")) {
                            td { (r["seq"]) }
                            td { (untrusted::line(r["time"].as_str().unwrap_or(""))) }
                            td { (untrusted::line(r["kind"].as_str().unwrap_or(""))) }
                            td { (untrusted::line(r["session"].as_str().unwrap_or(""))) }
                            td {
                                (untrusted::line(r["principal"].as_str().unwrap_or("")))
                                @if let Some(v) = r["via"].as_str() { " via " (untrusted::line(v)) }
                            }
                            td { (untrusted::line(r["decision"].as_str().unwrap_or(""))) }
                            td { (untrusted::line(&what(r))) }
                        },
                        TailLine::Record(_) => {},
                        TailLine::Unreadable { offset, bytes, reason } => tr class="unreadable" {
                            td colspan="7" { "Line at byte " (offset) " (" (bytes) " bytes) is not a record: " (untrusted::line(reason)) }
                        },
                        TailLine::Error(e) => tr class="error" { td colspan="7" { (untrusted::line(e)) } },
                    }
                }
            }
        }
    }
}

/// The action of a record, or its detail, in one line.
fn what(r: &Value) -> String {
    if !r["action"].is_null() {
        r["action"].to_string()
    } else if !r["detail"].is_null() {
        r["detail"].to_string()
    } else {
        String::new()
    }
}
