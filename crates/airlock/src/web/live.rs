//! A session that lives in the host (`airlock chat` through the host, or one the page
//! keeps talking to), attached to from its page: `GET /sessions/{id}/live` streams what
//! the session says as it says it (what it said lately first), whoever runs its turn, as
//! server-sent events; `POST /sessions/{id}/say` sends it its next message while no
//! terminal is attached (the attached terminal holds its input; the page watches
//! alongside). A session never runs two turns at once: a message sent while one runs is
//! refused, saying so ([`crate::host::sessions::LiveSessions::say`]).
//!
//! What streams is the session's own text, untrusted: each piece is sent with its hidden
//! characters (terminal escapes, bidi overrides, zero-width) made visible as `\u{…}`
//! tokens, and the page's script only ever sets it as text.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::broadcast;

use super::guard::{Checked, HasCsrf, LoggedIn};
use super::untrusted;
use super::WebState;

/// `GET /sessions/{id}/live`: `text` events (JSON strings), what the session said lately
/// then each piece as it comes; `done` when the session closes (or the page fell too far
/// behind: it reloads). `204` when the session does not live in the host.
pub async fn stream(
    State(web): State<Arc<WebState>>,
    LoggedIn(_): LoggedIn,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
) -> Response {
    let Some((recent, rx)) = web.host.live.watch(&id) else {
        return StatusCode::NO_CONTENT.into_response();
    };
    enum At {
        First(String, broadcast::Receiver<String>),
        Live(broadcast::Receiver<String>),
        End,
    }
    let text = |t: &str| {
        Event::default()
            .event("text")
            .data(json!(untrusted::shown_as_text(t)).to_string())
    };
    let events = futures_util::stream::unfold(At::First(recent, rx), move |at| async move {
        match at {
            At::First(t, rx) => Some((text(&t), At::Live(rx))),
            At::Live(mut rx) => match rx.recv().await {
                Ok(t) => Some((text(&t), At::Live(rx))),
                Err(_) => Some((Event::default().event("done").data(""), At::End)),
            },
            At::End => None,
        }
    });
    use futures_util::StreamExt;
    // Ends with the login: a stream opened before a logout sends nothing after it.
    let events = super::guard::while_logged_in(web.clone(), headers, events);
    Sse::new(events.map(Ok::<_, Infallible>))
        .keep_alive(KeepAlive::default())
        .into_response()
}

#[derive(Deserialize)]
pub struct SayForm {
    pub csrf: String,
    pub prompt: String,
}

impl HasCsrf for SayForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /sessions/{id}/say`: the live session's next message, counted against the
/// owner's `[host] requests_per_minute` like a new run; back to the session's page, where
/// the reply streams.
pub async fn say(
    State(web): State<Arc<WebState>>,
    Path(id): Path<String>,
    Checked(login, form): Checked<SayForm>,
) -> Response {
    let back = format!("/sessions/{id}");
    if !web.host.rate.take("owner") {
        let (error, help) = web.host.rate.refusal("owner");
        return refused(&web, &login, &format!("{error}\nhelp: {help}"), &back).await;
    }
    let host = web.host.clone();
    let (sid, prompt) = (id.clone(), form.prompt.clone());
    let sent = tokio::task::spawn_blocking(move || host.live.say(&host, &sid, &prompt))
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
    match sent {
        Ok(()) => {
            tracing::info!(login = %login.id, session = %id, "web: a message to a live session");
            web.record(
                "web-message",
                Some(&login.id),
                json!({ "session": id, "chars": form.prompt.chars().count() }),
            )
            .await;
            Redirect::to(&back).into_response()
        }
        Err(why) => refused(&web, &login, &why, &back).await,
    }
}

/// The message was not sent: `409` with why and what to do.
async fn refused(web: &WebState, login: &super::auth::WebLogin, why: &str, back: &str) -> Response {
    let mut r = web.outcome_page(login, "Not sent", false, why, back).await;
    *r.status_mut() = StatusCode::CONFLICT;
    r
}
