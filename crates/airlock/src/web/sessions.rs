//! The sessions: the list (the store's active sessions and the host's live chats), and one
//! session's transcript, each tool call with the Gate's decision and what it returned.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{Html, IntoResponse, Response};
use maud::{html, Markup};

use airlock_store::{MessageRole, SessionStore, TranscriptEntry, TranscriptEvent};

use super::guard::LoggedIn;
use super::layout::{self, csrf};
use super::untrusted;
use super::WebState;
use crate::service::status::{self, StatusReport};

pub async fn list(State(web): State<Arc<WebState>>, LoggedIn(login): LoggedIn) -> Response {
    let home = web.host.home.clone();
    let report = tokio::task::spawn_blocking(move || status::store_status(&home, None, None)).await;
    let live = web.host.live.status();
    let chrome = web.chrome().await;
    let body = match report {
        Ok(Ok(r)) => overview(&login, &r, &live),
        Ok(Err(e)) => html! { p class="error" { (untrusted::block(&format!("{e:#}"))) } },
        Err(e) => html! { p class="error" { (e.to_string()) } },
    };
    Html(layout::page("Sessions", &login, &chrome, body).into_string()).into_response()
}

fn overview(
    login: &super::auth::WebLogin,
    r: &StatusReport,
    live: &[crate::host::sessions::LiveSessionStatus],
) -> Markup {
    html! {
        form method="post" action="/sessions/start" class="start" {
            (csrf(login))
            label for="new-prompt" { "New task" }
            textarea name="prompt" id="new-prompt" rows="2" maxlength="16384" required {}
            button type="submit" id="start" { "Start" }
        }
        p {
            a href="/approvals" { (r.approvals_pending) " approval(s) waiting" }
        }
        @if let Some(b) = &r.budget_today {
            p class="budget" {
                "Today: " (b.used.turns) " turns, " (b.used.tool_calls) " tool calls"
                @if let Some(l) = b.limits.turns { " (limit " (l) " turns)" }
            }
        }
        @if r.sessions.is_empty() {
            p id="no-sessions" { "No active sessions." }
        } @else {
            table class="sessions" {
                thead { tr { th { "Session" } th { "Principal" } th { "Tainted" } th { "Live" } th {} } }
                tbody {
                    @for s in &r.sessions {
                        @let l = live.iter().find(|l| l.id == s.id);
                        tr data-session=(s.id) {
                            td { a href=(format!("/sessions/{}", s.id)) { (untrusted::line(&s.id)) } }
                            td { (untrusted::line(&s.principal)) }
                            td { @if s.tainted { span class="tainted" { "tainted" } } @else { "clean" } }
                            td {
                                @match l {
                                    Some(l) if l.busy => "turn running",
                                    Some(l) if l.attached => "attached",
                                    Some(_) => "idle",
                                    None => "—",
                                }
                            }
                            td { (kill_button(login, &s.id)) }
                        }
                    }
                }
            }
        }
    }
}

/// A button that kills one session.
pub fn kill_button(login: &super::auth::WebLogin, id: &str) -> Markup {
    html! {
        form method="post" action="/kill" class="inline" {
            (csrf(login))
            input type="hidden" name="session" value=(id);
            button type="submit" class="danger kill-session" { "Kill" }
        }
    }
}

pub async fn one(
    State(web): State<Arc<WebState>>,
    LoggedIn(login): LoggedIn,
    Path(id): Path<String>,
) -> Response {
    let home = web.host.home.clone();
    let sid = id.clone();
    let read = tokio::task::spawn_blocking(move || {
        airlock_store::validate_id("session", &sid).map_err(|e| anyhow::anyhow!("{e}"))?;
        let store = crate::service::approvals::open_store(&home)?;
        let record = store
            .get_session(&sid)
            .map_err(|e| anyhow::anyhow!("cannot read session `{sid}`: {e}"))?;
        let transcript = store
            .transcript(&sid)
            .map_err(|e| anyhow::anyhow!("cannot read the transcript of `{sid}`: {e}"))?;
        anyhow::Ok((record, transcript))
    })
    .await;
    let chrome = web.chrome().await;
    let live = web.host.live.status().into_iter().find(|l| l.id == id);
    let body = match read {
        Ok(Ok((record, transcript))) => html! {
            p class="meta" {
                "Status: " (record.status.as_str())
                " · principal " (untrusted::line(&record.gate.principal.to_string()))
                @if record.gate.taint.is_tainted() { " · " span class="tainted" { "tainted" } }
            }
            p { a href=(format!("/sessions/{id}/flow")) id="flow-link" { "Data flow" } }
            (kill_button(&login, &id))
            div id="transcript" data-length=(transcript.len()) data-session=(id) {
                (transcript_view(&transcript))
            }
            @if let Some(l) = &live {
                (live_view(&login, &id, l))
            } @else if record.status.as_str() == "active" {
                form method="post" action="/sessions/start" class="start" {
                    (csrf(&login))
                    input type="hidden" name="session" value=(id);
                    label for="next-prompt" { "Message" }
                    textarea name="prompt" id="next-prompt" rows="2" maxlength="16384" required {}
                    button type="submit" id="send" { "Send" }
                }
            }
        },
        Ok(Err(e)) => html! { p class="error" { (untrusted::block(&format!("{e:#}"))) } },
        Err(e) => html! { p class="error" { (e.to_string()) } },
    };
    Html(layout::page(&format!("Session {id}"), &login, &chrome, body).into_string())
        .into_response()
}

/// A session live in the host, attached to: what it says as it says it (the page's script
/// fills `#live-text` from `/sessions/{id}/live`), and its next message, which the host
/// takes while no terminal is attached.
fn live_view(
    login: &super::auth::WebLogin,
    id: &str,
    l: &crate::host::sessions::LiveSessionStatus,
) -> Markup {
    html! {
        section id="live" data-session=(id) {
            h2 { "Live in the host" }
            p class="meta" id="live-state" {
                @if l.attached {
                    "A terminal is attached (" code { "airlock chat" } "): it holds the session's input, and this page follows what the session says. Leave it there (" code { "/quit" } ") to send the next message from here."
                } @else if l.busy {
                    "A turn is running; the next message can be sent when it has ended."
                } @else {
                    "No terminal is attached: the next message can be sent from here."
                }
            }
            pre id="live-text" class="streaming" {}
            form method="post" action=(format!("/sessions/{id}/say")) class="start" {
                (csrf(login))
                label for="live-prompt" { "Message" }
                textarea name="prompt" id="live-prompt" rows="2" maxlength="16384" required {}
                button type="submit" id="live-send" { "Send" }
            }
        }
    }
}

fn transcript_view(entries: &[TranscriptEntry]) -> Markup {
    html! {
        ol class="transcript" {
            @for e in entries {
                @match &e.event {
                    TranscriptEvent::Message { role, content } => {
                        li class=(format!("msg {}", role_name(role))) {
                            span class="who" { (role_name(role)) }
                            (untrusted::block(&message_text(content)))
                        }
                    }
                    TranscriptEvent::ToolCall { call_id, tool, arguments, action_hash } => {
                        li class="call" {
                            span class="who" { "tool call" }
                            code { (untrusted::line(tool)) } " "
                            (untrusted::line(&arguments.to_string()))
                            span class="hash" title=(action_hash) { " " (call_id) }
                        }
                    }
                    TranscriptEvent::Decision { decision, reasons, policies, .. } => {
                        li class=(format!("decision {}", decision.as_str())) {
                            span class="who" { "decision" }
                            strong { (decision.as_str()) }
                            @for r in reasons { " · " (untrusted::line(r)) }
                            @if !policies.is_empty() { " · policy " (untrusted::line(&policies.join(", "))) }
                        }
                    }
                    TranscriptEvent::Result { text, untrusted: from_outside, .. } => {
                        li class="result" {
                            span class="who" { "result" @if *from_outside { " (untrusted)" } }
                            div class="output" { (untrusted::block(text)) }
                        }
                    }
                }
            }
        }
    }
}

fn role_name(r: &MessageRole) -> &'static str {
    match r {
        MessageRole::User => "user",
        MessageRole::Assistant => "assistant",
        MessageRole::Tool => "tool",
    }
}

/// A message's text: a string, or the text of its content blocks.
fn message_text(content: &serde_json::Value) -> String {
    match content {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(blocks) => blocks
            .iter()
            .map(|b| match b["text"].as_str() {
                Some(t) => t.to_string(),
                None => b.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

/// `GET /sessions/{id}/length`: how many entries its transcript has (the page's script
/// polls it and redraws the page when the session has said more).
pub async fn length(
    State(web): State<Arc<WebState>>,
    LoggedIn(_): LoggedIn,
    Path(id): Path<String>,
) -> Response {
    let home = web.host.home.clone();
    let n = tokio::task::spawn_blocking(move || {
        airlock_store::validate_id("session", &id).map_err(|e| anyhow::anyhow!("{e}"))?;
        let store = crate::service::approvals::open_store(&home)?;
        store
            .transcript(&id)
            .map(|t| t.len())
            .map_err(|e| anyhow::anyhow!("{e}"))
    })
    .await;
    match n {
        Ok(Ok(n)) => n.to_string().into_response(),
        _ => (axum::http::StatusCode::NOT_FOUND, "no such session").into_response(),
    }
}
