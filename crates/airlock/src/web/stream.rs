//! The model's reply as it comes, for a session's page: every turn the host runs keeps
//! its reply so far in the host's [`crate::service::replies`], and this sends it to the
//! page as server-sent events (`GET /sessions/{id}/stream`). The session's transcript
//! stays the record; this is only the view while the model types.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use tokio::sync::broadcast;

use crate::service::replies::Piece;

use super::guard::LoggedIn;
use super::WebState;

/// `GET /sessions/{id}/stream`: the reply so far, then each piece as it comes (`text`
/// events, JSON strings), then `done`. `204` when no turn in the host has streamed a
/// reply for it (an `EventSource` does not reconnect after that).
pub async fn stream(
    State(web): State<Arc<WebState>>,
    LoggedIn(_): LoggedIn,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
) -> Response {
    let Some(reply) = web.host.replies.get(&id) else {
        return StatusCode::NO_CONTENT.into_response();
    };
    let (so_far, done, rx) = reply.subscribe();
    enum At {
        First(String, bool, broadcast::Receiver<Piece>),
        Live(broadcast::Receiver<Piece>),
        Done,
        End,
    }
    let text = |t: &str| {
        Event::default()
            .event("text")
            .data(serde_json::json!(t).to_string())
    };
    let events = futures_util::stream::unfold(At::First(so_far, done, rx), move |at| async move {
        let done = || Event::default().event("done").data("");
        match at {
            At::First(t, true, _) => Some((text(&t), At::Done)),
            At::First(t, false, rx) => Some((text(&t), At::Live(rx))),
            At::Live(mut rx) => match rx.recv().await {
                Ok(Piece::Text(t)) => Some((text(&t), At::Live(rx))),
                // Finished, gone, or too far behind: the page reloads the transcript.
                Ok(Piece::Done) | Err(_) => Some((done(), At::End)),
            },
            At::Done => Some((done(), At::End)),
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
