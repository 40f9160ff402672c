//! The model's reply as it comes, for a session's page: the runs the page starts write
//! each piece of the reply as a JSON line (`airlock run --json --stream-events`); the host
//! keeps the reply so far per session and sends it to the page as server-sent events
//! (`GET /sessions/{id}/stream`). The session's transcript stays the record; this is only
//! the view while the model types.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::BufRead;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use tokio::sync::broadcast;

use super::guard::LoggedIn;
use super::WebState;

/// Replies kept at once; past it, finished ones are dropped.
const MAX_REPLIES: usize = 64;

#[derive(Debug, Clone)]
enum Piece {
    Text(String),
    Done,
}

/// One session's reply in progress.
pub struct Reply {
    /// The text so far, and whether it is finished; senders hold this lock while they send,
    /// so a new listener gets the text so far and then exactly what follows.
    state: Mutex<(String, bool)>,
    tx: broadcast::Sender<Piece>,
}

impl Reply {
    fn lock(&self) -> std::sync::MutexGuard<'_, (String, bool)> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, text: &str) {
        let mut st = self.lock();
        st.0.push_str(text);
        let _ = self.tx.send(Piece::Text(text.to_string()));
    }

    fn finish(&self) {
        let mut st = self.lock();
        st.1 = true;
        let _ = self.tx.send(Piece::Done);
    }

    fn subscribe(&self) -> (String, bool, broadcast::Receiver<Piece>) {
        let st = self.lock();
        (st.0.clone(), st.1, self.tx.subscribe())
    }
}

/// The replies of the runs the page started, by session.
#[derive(Default)]
pub struct Streams {
    replies: Mutex<HashMap<String, Arc<Reply>>>,
}

impl Streams {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Reply>>> {
        self.replies.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn begin(&self, session: &str) -> Arc<Reply> {
        let reply = Arc::new(Reply {
            state: Mutex::new((String::new(), false)),
            tx: broadcast::channel(1024).0,
        });
        let mut m = self.map();
        if m.len() >= MAX_REPLIES {
            m.retain(|_, r| !r.lock().1);
        }
        m.insert(session.to_string(), reply.clone());
        reply
    }

    fn get(&self, session: &str) -> Option<Arc<Reply>> {
        self.map().get(session).cloned()
    }

    /// A new, empty reply for `session`, before its run starts, so that the page does not
    /// show the session's last reply meanwhile; [`Streams::follow`] fills it.
    pub fn expect(&self, session: &str) -> Arc<Reply> {
        self.begin(session)
    }

    /// Read a run's event lines to their end (blocking): the session it names, then each
    /// piece of the reply; anything else (its final report) is not the reply. `expected`
    /// is the reply made for a session named beforehand; it is finished at the end whatever
    /// the run printed.
    pub fn follow(&self, out: impl std::io::Read, expected: Option<Arc<Reply>>) {
        let mut reply: Option<Arc<Reply>> = expected;
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if let Some(id) = v["session"].as_str() {
                let same = reply
                    .as_ref()
                    .is_some_and(|r| self.get(id).is_some_and(|now| Arc::ptr_eq(r, &now)));
                if !same {
                    if let Some(r) = reply.take() {
                        r.finish();
                    }
                    reply = Some(self.begin(id));
                }
            } else if let (Some(r), Some(t)) = (&reply, v["delta"].as_str()) {
                r.push(t);
            }
        }
        if let Some(r) = reply {
            r.finish();
        }
    }
}

/// `GET /sessions/{id}/stream`: the reply so far, then each piece as it comes (`text`
/// events, JSON strings), then `done`. `204` when no run the page started is streaming
/// for it (an `EventSource` does not reconnect after that).
pub async fn stream(
    State(web): State<Arc<WebState>>,
    LoggedIn(_): LoggedIn,
    Path(id): Path<String>,
) -> Response {
    let Some(reply) = web.streams.get(&id) else {
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
    Sse::new(events.map(Ok::<_, Infallible>))
        .keep_alive(KeepAlive::default())
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_s_lines_become_the_session_s_reply() {
        let streams = Streams::default();
        let lines = "{\"session\":\"s-1\"}\n{\"delta\":\"Hel\"}\nnot json\n{\"delta\":\"lo\\n<b>\"}\n{\"outcome\":\"completed\"}\n";
        streams.follow(lines.as_bytes(), None);
        let (text, done, _) = streams.get("s-1").unwrap().subscribe();
        assert_eq!(text, "Hello\n<b>");
        assert!(done);
        assert!(streams.get("s-2").is_none());
        // A run for a session named beforehand fills the reply made for it, and finishes
        // it even when it printed nothing.
        let r = streams.expect("s-1");
        assert_eq!(r.subscribe().0, "");
        streams.follow(
            "{\"session\":\"s-1\"}\n{\"delta\":\"Again\"}\n".as_bytes(),
            Some(r.clone()),
        );
        assert!(Arc::ptr_eq(&r, &streams.get("s-1").unwrap()));
        assert_eq!(r.subscribe().0, "Again");
        let r = streams.expect("s-3");
        streams.follow("".as_bytes(), Some(r.clone()));
        assert!(r.subscribe().1);
    }
}
