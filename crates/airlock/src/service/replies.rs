//! The model's reply as it comes, per session, for whoever watches the session in the
//! host (the web page's `GET /sessions/{id}/stream`). Every turn the host runs writes
//! its reply here as it streams: a run from a terminal or from the page, a chat channel's
//! turn, a scheduled task's run. The session's transcript stays the record; this is only
//! the view while the model types.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use airlock_agent::provider::StreamEvent;

/// Replies kept at once; past it, finished ones are dropped.
const MAX_REPLIES: usize = 64;

/// One piece of a reply as a watcher gets it.
#[derive(Debug, Clone)]
pub enum Piece {
    Text(String),
    Done,
}

/// One session's reply in progress.
pub struct Reply {
    /// The text so far, and whether it is finished; writers hold this lock while they
    /// send, so a new watcher gets the text so far and then exactly what follows.
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
        if !st.1 {
            st.1 = true;
            let _ = self.tx.send(Piece::Done);
        }
    }

    /// The text so far, whether it is finished, and what follows.
    pub fn subscribe(&self) -> (String, bool, broadcast::Receiver<Piece>) {
        let st = self.lock();
        (st.0.clone(), st.1, self.tx.subscribe())
    }
}

/// The replies of the turns running in the host, by session.
#[derive(Default)]
pub struct Replies {
    replies: Mutex<HashMap<String, Arc<Reply>>>,
}

/// The writer's end of a reply: the turn's text goes in with [`Streaming::push`], and the
/// reply is finished when it is dropped, however the turn ended.
pub struct Streaming(Arc<Reply>);

impl Streaming {
    pub fn push(&self, text: &str) {
        self.0.push(text);
    }

    /// What a turn's stream says: its text goes into the reply.
    pub fn take(&self, event: StreamEvent) {
        if let StreamEvent::TextDelta(t) = event {
            self.push(&t);
        }
    }
}

impl Drop for Streaming {
    fn drop(&mut self) {
        self.0.finish();
    }
}

impl Replies {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Reply>>> {
        self.replies.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new, empty reply for `session`, in place of its last one (a watcher of that one
    /// is told it is done).
    pub fn begin(&self, session: &str) -> Streaming {
        let reply = Arc::new(Reply {
            state: Mutex::new((String::new(), false)),
            tx: broadcast::channel(1024).0,
        });
        let replaced = {
            let mut m = self.map();
            if m.len() >= MAX_REPLIES {
                m.retain(|_, r| !r.lock().1);
            }
            m.insert(session.to_string(), reply.clone())
        };
        if let Some(old) = replaced {
            old.finish();
        }
        Streaming(reply)
    }

    /// `session`'s reply, the one in progress or the last one.
    pub fn get(&self, session: &str) -> Option<Arc<Reply>> {
        self.map().get(session).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_watched_from_its_text_so_far_and_ends_with_its_writer() {
        let replies = Replies::default();
        assert!(replies.get("s-1").is_none());
        let writing = replies.begin("s-1");
        writing.push("Hel");
        let (so_far, done, mut rx) = replies.get("s-1").unwrap().subscribe();
        assert_eq!((so_far.as_str(), done), ("Hel", false));
        writing.push("lo\n<b>");
        drop(writing);
        assert!(matches!(rx.try_recv(), Ok(Piece::Text(t)) if t == "lo\n<b>"));
        assert!(matches!(rx.try_recv(), Ok(Piece::Done)));
        let (so_far, done, _) = replies.get("s-1").unwrap().subscribe();
        assert_eq!((so_far.as_str(), done), ("Hello\n<b>", true));
        // The next turn's reply replaces it; a watcher of the old one is told it is done.
        let old = replies.begin("s-2");
        let (_, _, mut old_rx) = replies.get("s-2").unwrap().subscribe();
        let new = replies.begin("s-2");
        assert!(matches!(old_rx.try_recv(), Ok(Piece::Done)));
        new.push("again");
        assert_eq!(replies.get("s-2").unwrap().subscribe().0, "again");
        drop(old);
        assert!(!replies.get("s-2").unwrap().subscribe().1);
    }
}
