//! A session's data flow as a picture made on the server (SVG, no script): each source of
//! untrusted content on the left, each action on the right in the order they happened,
//! the moment the session became tainted, and a line from a source to every later action
//! whose arguments it mentions, the action coloured by the Gate's decision
//! ([`crate::service::evidence::flow`]).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{Html, IntoResponse, Response};
use maud::{html, Markup};

use airlock_core::terminal_text::escape_line;

use super::guard::LoggedIn;
use super::layout;
use super::untrusted;
use super::WebState;
use crate::service::evidence::{self, Flow};

const ROW: i64 = 30;
const LABEL_CHARS: usize = 38;

pub async fn page(
    State(web): State<Arc<WebState>>,
    LoggedIn(login): LoggedIn,
    Path(id): Path<String>,
) -> Response {
    let home = web.host.home.clone();
    let sid = id.clone();
    let read = tokio::task::spawn_blocking(move || {
        airlock_store::validate_id("session", &sid).map_err(|e| anyhow::anyhow!("{e}"))?;
        evidence::flow(&home, &sid)
    })
    .await;
    let chrome = web.chrome().await;
    let body = match read {
        Ok(Ok(flow)) => html! {
            p { a href=(format!("/sessions/{id}")) { "Transcript" } }
            @if flow.sources.is_empty() {
                p id="clean" { "No untrusted content entered this session: it is clean." }
            }
            (picture(&flow))
            @if flow.left_out > 0 { p { (flow.left_out) " more items are not drawn." } }
        },
        Ok(Err(e)) => html! { p class="error" { (untrusted::block(&format!("{e:#}"))) } },
        Err(e) => html! { p class="error" { (e.to_string()) } },
    };
    Html(layout::page(&format!("Data flow of {id}"), &login, &chrome, body).into_string())
        .into_response()
}

/// Where each item sits: one row per transcript position among the items drawn.
fn rows(flow: &Flow) -> Vec<i64> {
    let mut seqs: Vec<i64> = flow
        .sources
        .iter()
        .map(|s| s.seq)
        .chain(flow.actions.iter().map(|a| a.seq))
        .collect();
    seqs.sort_unstable();
    seqs.dedup();
    seqs
}

fn y_of(rows: &[i64], seq: i64) -> i64 {
    rows.binary_search(&seq).unwrap_or(0) as i64 * ROW + 30
}

fn short(text: &str) -> String {
    let t = escape_line(text);
    if t.chars().count() > LABEL_CHARS {
        format!("{}…", t.chars().take(LABEL_CHARS).collect::<String>())
    } else {
        t
    }
}

/// The colour of a decision: the last word counts (`ask → deny` is a denial), and a held
/// call that was let through is amber, not green.
fn colour(decision: Option<&str>) -> &'static str {
    let Some(d) = decision else { return "#5b6470" };
    match d.rsplit(' ').next() {
        Some("deny") => "#b3261e",
        Some("allow") if d.starts_with("ask") => "#c58a00",
        Some("allow") => "#1e6b34",
        Some("ask") => "#c58a00",
        _ => "#5b6470",
    }
}

/// The SVG. Labels are escaped text nodes; nothing of the session becomes markup.
pub fn picture(flow: &Flow) -> Markup {
    let rows = rows(flow);
    let height = rows.len() as i64 * ROW + 50;
    // The line sits just above the first untrusted source's row, and its label above it on
    // the sources' side, where nothing is drawn before the first source.
    let taint_y = flow.tainted_at.map(|s| {
        let i = rows.partition_point(|r| *r < s) as i64;
        i * ROW + 22
    });
    html! {
        svg class="flow" xmlns="http://www.w3.org/2000/svg" width="100%" viewBox=(format!("0 0 660 {height}"))
            role="img" {
            text x="10" y="16" font-size="12" font-weight="bold" { "Untrusted sources" }
            text x="360" y="16" font-size="12" font-weight="bold" { "Actions (Gate decision)" }
            @if let Some(y) = taint_y {
                line x1="0" y1=(y) x2="660" y2=(y) stroke="#b3261e" stroke-dasharray="4 3" {}
                text x="10" y=(y - 3) font-size="10" fill="#b3261e" { "tainted from here" }
            }
            @for a in &flow.actions {
                @for s in &a.influenced_by {
                    @if let Some(src) = flow.sources.get(*s) {
                        line class="influence" x1="300" y1=(y_of(&rows, src.seq) + 8) x2="360" y2=(y_of(&rows, a.seq) + 8)
                            stroke=(colour(a.decision.as_deref())) stroke-width="2" {}
                    }
                }
            }
            @for s in &flow.sources {
                g class="source" {
                    rect x="10" y=(y_of(&rows, s.seq) - 4) width="290" height="22" rx="4" fill="#fdecea" stroke="#b3261e" {}
                    text x="16" y=(y_of(&rows, s.seq) + 11) font-size="11" { (short(&s.label)) }
                }
            }
            @for a in &flow.actions {
                g class="action" data-decision=(a.decision.as_deref().unwrap_or("")) {
                    rect x="360" y=(y_of(&rows, a.seq) - 4) width="290" height="22" rx="4" fill="#fff"
                        stroke=(colour(a.decision.as_deref())) stroke-width="2" {}
                    text x="366" y=(y_of(&rows, a.seq) + 11) font-size="11" {
                        (short(&a.label)) " (" (a.decision.as_deref().unwrap_or("undecided")) ")"
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::evidence::{FlowAction, FlowSource};

    #[test]
    fn a_source_is_joined_to_the_actions_it_influenced_and_labels_are_text() {
        let flow = Flow {
            sources: vec![FlowSource {
                seq: 3,
                label: "fetch <script>x</script>".into(),
            }],
            tainted_at: Some(3),
            actions: vec![
                FlowAction {
                    seq: 2,
                    label: "fetch https://a".into(),
                    decision: Some("allow".into()),
                    influenced_by: vec![],
                },
                FlowAction {
                    seq: 5,
                    label: "send_message bob".into(),
                    decision: Some("ask".into()),
                    influenced_by: vec![0],
                },
            ],
            left_out: 0,
        };
        let svg = picture(&flow).into_string();
        assert_eq!(svg.matches("class=\"influence\"").count(), 1, "{svg}");
        assert!(svg.contains("&lt;script&gt;"), "{svg}");
        assert!(svg.contains("tainted from here"), "{svg}");
        assert!(svg.contains("(ask)"), "{svg}");
    }
}
