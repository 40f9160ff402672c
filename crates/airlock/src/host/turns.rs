//! The agent turns running in the host, each with the flag that ends it
//! ([`airlock_agent::agent::AgentConfig::abandoned`]): a run's client that goes away sets
//! its own, and a stopping host sets them all once its grace (`[host] stop_grace_secs`)
//! is over, so that every turn still running ends as a killed turn does, with its
//! records, before the host signs its last checkpoint.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

#[derive(Default)]
pub struct Turns {
    flags: Mutex<Vec<Weak<AtomicBool>>>,
}

impl Turns {
    /// A new turn's flag, registered (it is forgotten once the turn drops it).
    pub fn flag(&self) -> Arc<AtomicBool> {
        let flag = Arc::new(AtomicBool::new(false));
        let mut flags = self.flags.lock().unwrap_or_else(|p| p.into_inner());
        flags.retain(|f| f.strong_count() > 0);
        flags.push(Arc::downgrade(&flag));
        flag
    }

    /// End every turn still running; how many there were.
    pub fn end_all(&self) -> usize {
        let flags = self.flags.lock().unwrap_or_else(|p| p.into_inner());
        let mut ended = 0;
        for flag in flags.iter().filter_map(Weak::upgrade) {
            if !flag.swap(true, Ordering::AcqRel) {
                ended += 1;
            }
        }
        ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ending_all_sets_the_flags_of_the_turns_still_running() {
        let turns = Turns::default();
        let running = turns.flag();
        let done = turns.flag();
        drop(done);
        let gone_by_itself = turns.flag();
        gone_by_itself.store(true, Ordering::Release);
        assert_eq!(turns.end_all(), 1);
        assert!(running.load(Ordering::Acquire));
        assert_eq!(turns.end_all(), 0);
    }
}
