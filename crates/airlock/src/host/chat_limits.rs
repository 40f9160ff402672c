//! How much one sender may ask of the assistant through a chat channel: a fixed
//! one-minute window per sender and chat, so that a flood (a stuck bot, a hostile group
//! member, a stranger answered as untrusted content) cannot queue turns, threads or
//! records without bound.
//!
//! Every message past the limit is dropped, and the drops are recorded, but not one
//! record each: a flood of a thousand messages would be a thousand fsynced records. The
//! 1st, 2nd, 4th, 8th, … drop of a window is recorded, each with the count so far, so
//! the log holds every drop's number in a handful of records.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const WINDOW: Duration = Duration::from_secs(60);
/// Windows kept at most; past it, the ones that ended are forgotten (and, if none has,
/// the new sender is refused: the table never grows past this).
const MAX_TRACKED: usize = 4096;

/// What to do with one message.
#[derive(Debug, PartialEq, Eq)]
pub enum Admit {
    Take,
    /// Over the limit: drop it; `record` says whether this drop is one to record, and
    /// `dropped` how many this window has dropped so far, this one included.
    Drop {
        record: bool,
        dropped: u64,
    },
}

pub struct InboundLimiter {
    per_minute: u32,
    windows: Mutex<HashMap<(String, String), Window>>,
}

struct Window {
    started: Instant,
    taken: u32,
    dropped: u64,
}

impl InboundLimiter {
    pub fn new(per_minute: u32) -> InboundLimiter {
        InboundLimiter {
            per_minute: per_minute.max(1),
            windows: Mutex::new(HashMap::new()),
        }
    }

    /// Count one message from `sender` in `chat`, at `now`.
    pub fn admit(&self, chat: &str, sender: &str, now: Instant) -> Admit {
        self.admit_as(chat, sender, now, || false)
    }

    /// [`InboundLimiter::admit`], asking `is_owner` only when the table is full: thousands
    /// of strangers filling it never lock the channel's owner out (their window is kept
    /// past the bound; there is one owner, so the table grows by a few chats at most).
    /// The owner's messages are still limited per minute like anyone's. `is_owner` may
    /// read a file; a message that finds room never calls it.
    pub fn admit_as(
        &self,
        chat: &str,
        sender: &str,
        now: Instant,
        is_owner: impl FnOnce() -> bool,
    ) -> Admit {
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let key = (chat.to_string(), sender.to_string());
        if !windows.contains_key(&key) && windows.len() >= MAX_TRACKED {
            windows.retain(|_, w| now.duration_since(w.started) < WINDOW);
            if windows.len() >= MAX_TRACKED && !is_owner() {
                // Thousands of senders at once: nobody new until a window ends.
                return Admit::Drop {
                    record: false,
                    dropped: 0,
                };
            }
        }
        let w = windows.entry(key).or_insert(Window {
            started: now,
            taken: 0,
            dropped: 0,
        });
        if now.duration_since(w.started) >= WINDOW {
            *w = Window {
                started: now,
                taken: 0,
                dropped: 0,
            };
        }
        if w.taken < self.per_minute {
            w.taken += 1;
            return Admit::Take;
        }
        w.dropped += 1;
        Admit::Drop {
            record: w.dropped.is_power_of_two(),
            dropped: w.dropped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_cut_at_the_limit_and_its_drops_are_recorded_a_log_of_times() {
        let l = InboundLimiter::new(5);
        let t0 = Instant::now();
        let mut taken = 0;
        let mut records = Vec::new();
        for _ in 0..1000 {
            match l.admit("chat", "alice", t0) {
                Admit::Take => taken += 1,
                Admit::Drop { record, dropped } => {
                    if record {
                        records.push(dropped)
                    }
                }
            }
        }
        assert_eq!(taken, 5);
        assert_eq!(records, vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 512]);
        // Another sender in the same chat has a window of its own.
        assert_eq!(l.admit("chat", "bob", t0), Admit::Take);
        // A minute later the window starts anew.
        assert_eq!(l.admit("chat", "alice", t0 + WINDOW), Admit::Take);
    }

    #[test]
    fn the_table_of_senders_never_grows_past_its_bound() {
        let l = InboundLimiter::new(1);
        let t0 = Instant::now();
        for i in 0..MAX_TRACKED {
            assert_eq!(l.admit("c", &i.to_string(), t0), Admit::Take);
        }
        assert!(matches!(l.admit("c", "one more", t0), Admit::Drop { .. }));
        assert_eq!(l.windows.lock().unwrap().len(), MAX_TRACKED);
        // The owner is never locked out by the strangers filling it, and is still
        // limited per minute.
        assert_eq!(l.admit_as("c", "owner", t0, || true), Admit::Take);
        assert!(matches!(
            l.admit_as("c", "owner", t0, || panic!("asked with room in the table")),
            Admit::Drop { .. }
        ));
        // Once the windows end, room is made.
        assert_eq!(l.admit("c", "one more", t0 + WINDOW), Admit::Take);
        assert_eq!(l.windows.lock().unwrap().len(), 1);
    }
}

/// How often the host may send to one chat: a platform throttles a bot that sends faster
/// (Telegram and Slack about one message a second per chat, Discord five in five
/// seconds), and a 429 it answers says how long to wait. Each send reserves the chat's
/// next slot; the caller sleeps until its own.
pub struct OutboundPacer {
    interval: Duration,
    next: Mutex<HashMap<String, Instant>>,
}

impl OutboundPacer {
    pub fn new(interval: Duration) -> OutboundPacer {
        OutboundPacer {
            interval,
            next: Mutex::new(HashMap::new()),
        }
    }

    /// Reserve `chat`'s next slot at or after `now`: how long to wait for it.
    pub fn reserve(&self, chat: &str, now: Instant) -> Duration {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        if next.len() >= MAX_TRACKED {
            next.retain(|_, t| *t > now);
        }
        let slot = next.get(chat).copied().filter(|t| *t > now).unwrap_or(now);
        next.insert(chat.to_string(), slot + self.interval);
        slot - now
    }

    /// The platform asked for a pause in `chat` until `until`.
    pub fn hold_until(&self, chat: &str, until: Instant) {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let t = next.entry(chat.to_string()).or_insert(until);
        *t = (*t).max(until);
    }
}

#[cfg(test)]
mod pacer_tests {
    use super::*;

    #[test]
    fn sends_to_one_chat_are_spaced_and_a_pause_asked_for_is_kept() {
        let p = OutboundPacer::new(Duration::from_secs(1));
        let t0 = Instant::now();
        assert_eq!(p.reserve("a", t0), Duration::ZERO);
        assert_eq!(p.reserve("a", t0), Duration::from_secs(1));
        assert_eq!(p.reserve("a", t0), Duration::from_secs(2));
        // Another chat has slots of its own.
        assert_eq!(p.reserve("b", t0), Duration::ZERO);
        // Later than the reserved slots: no wait.
        assert_eq!(p.reserve("a", t0 + Duration::from_secs(10)), Duration::ZERO);
        p.hold_until("b", t0 + Duration::from_secs(30));
        assert_eq!(p.reserve("b", t0), Duration::from_secs(30));
        // No interval: never a wait.
        let free = OutboundPacer::new(Duration::ZERO);
        assert_eq!(free.reserve("a", t0), Duration::ZERO);
        assert_eq!(free.reserve("a", t0), Duration::ZERO);
    }
}
