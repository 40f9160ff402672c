//! Which sessions a conversation drives in this process, so that no session ever has two
//! at once: a chat that lives in the host drives its session for as long as it lives, an
//! `airlock run`, a chat channel's turn and a scheduled run for as long as they run. A second one (a run resuming a live chat's
//! session, a chat attaching to a session a run is driving, two runs of one session) is
//! refused with who holds it, before it opens anything: opening a session finishes or
//! rolls back a commit a crash left in its workspace, which must never meet the commit of
//! a turn that is running.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What drives a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// A chat that lives in the host (attached to a client or not).
    Chat,
    /// An `airlock run` (from a terminal or the web page).
    Run,
    /// A chat channel's turn (Telegram, Slack, Discord, a webhook).
    Channel,
    /// A scheduled task's run.
    Task,
}

/// The sessions driven now.
#[derive(Default)]
pub struct Driven {
    ids: Mutex<HashMap<String, Driver>>,
}

/// One session held by its driver; let go when dropped.
pub struct Claim {
    driven: Arc<Driven>,
    id: String,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.driven
            .ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

impl std::fmt::Debug for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Claim({})", self.id)
    }
}

impl Driven {
    /// Hold session `id` for `by`, or say who holds it (with what to do instead).
    pub fn claim(self: &Arc<Self>, id: &str, by: Driver) -> anyhow::Result<Claim> {
        let mut ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(holder) = ids.get(id) {
            return Err(held_by(id, *holder));
        }
        ids.insert(id.to_string(), by);
        Ok(Claim {
            driven: self.clone(),
            id: id.to_string(),
        })
    }

    /// Whether session `id` is free now, with [`Driven::claim`]'s refusal if not: for a
    /// refusal before the work of opening anything (the claim itself comes later).
    pub fn check(&self, id: &str) -> anyhow::Result<()> {
        match self.driver(id) {
            Some(holder) => Err(held_by(id, holder)),
            None => Ok(()),
        }
    }

    /// The sessions `by` drives now, sorted.
    pub fn driven_by(&self, by: Driver) -> Vec<String> {
        let mut ids: Vec<String> = self
            .ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(_, d)| **d == by)
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        ids
    }

    /// What drives session `id` now, if anything.
    pub fn driver(&self, id: &str) -> Option<Driver> {
        self.ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .copied()
    }
}

/// Session `id` is held by `holder`: what to do instead.
fn held_by(id: &str, holder: Driver) -> anyhow::Error {
    anyhow::anyhow!(match holder {
        Driver::Chat => format!(
            "session {id} is live in the host as a chat\nhelp: attach to it with `airlock chat --session {id}` (or send its next message from its web page once no terminal is attached)"
        ),
        Driver::Run => format!(
            "session {id} is running a task (`airlock run`) in the host\nhelp: wait for it to end (`airlock status`), or stop it with `airlock kill {id}`"
        ),
        Driver::Channel => format!(
            "session {id} is taking a turn for a chat channel in the host\nhelp: wait for the turn to end, or stop it with `airlock kill {id}`"
        ),
        Driver::Task => format!(
            "session {id} is a scheduled task's run in the host\nhelp: wait for it to end (`airlock tasks history`), or stop it with `airlock kill {id}`"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_has_one_driver_until_its_claim_is_dropped() {
        let driven = Arc::new(Driven::default());
        let chat = driven.claim("s-1", Driver::Chat).unwrap();
        let refused = driven.claim("s-1", Driver::Run).unwrap_err().to_string();
        assert!(refused.contains("live in the host as a chat"), "{refused}");
        let other = driven.claim("s-2", Driver::Run).unwrap();
        assert_eq!(driven.driven_by(Driver::Run), ["s-2"]);
        assert_eq!(driven.driven_by(Driver::Chat), ["s-1"]);
        let refused = driven.claim("s-2", Driver::Chat).unwrap_err().to_string();
        assert!(refused.contains("running a task"), "{refused}");
        assert_eq!(driven.driver("s-1"), Some(Driver::Chat));
        assert!(driven.check("s-1").is_err());
        assert!(driven.check("s-3").is_ok());
        drop(chat);
        assert_eq!(driven.driver("s-1"), None);
        let run = driven.claim("s-1", Driver::Run).unwrap();
        assert_eq!(driven.driver("s-1"), Some(Driver::Run));
        drop(run);
        drop(other);
        assert!(driven.claim("s-2", Driver::Chat).is_ok());
        let _turn = driven.claim("s-4", Driver::Channel).unwrap();
        let refused = driven.claim("s-4", Driver::Chat).unwrap_err().to_string();
        assert!(refused.contains("a turn for a chat channel"), "{refused}");
        let _task = driven.claim("s-5", Driver::Task).unwrap();
        let refused = driven.claim("s-5", Driver::Run).unwrap_err().to_string();
        assert!(refused.contains("a scheduled task's run"), "{refused}");
    }
}
