//! `[host] max_sandboxes`: the host's one limit on the sandboxes it runs at once.
//!
//! Every sandbox the host starts for a command holds a slot for as long as it lives: an
//! `exec` from the exec socket, a scheduled task's pre-check (both through
//! [`crate::service::exec`]), and each shell call of a session living in the host (a
//! `run`, a chat, a channel's or a scheduled task's turn, and their sub-agents, through
//! [`crate::agent_executors`]). Past the limit a start waits in one queue of
//! `max_queued`, in order; past the queue it is refused with an error naming the limit
//! ([`NoSlot`]).
//!
//! The slot is taken where the sandbox is started, not by whoever asked for it, and the
//! service finds this host's slots through [`for_home`] (as it finds the host's audit
//! writer: `crate::service::record_log`) rather than through every signature between a
//! channel's message and a shell call. A process that is not the host (a command with no
//! host) has no limit here.
//!
//! Why this cannot deadlock: a slot is held only while its own sandbox is being prepared
//! and runs (an `exec` also while its Gate asks the operator on the client's terminal),
//! and nothing that holds one waits for another slot or for another session. A session
//! holds none between its calls, so a parent waiting for its sub-agent holds none, and
//! the sub-agent's shell call waits only for sandboxes that end by themselves (each has
//! its time limit). A held commit is settled after the slot is given back. A waiter also
//! stops waiting when its run is given up (its client went away, its session was killed)
//! and when the host's stop has run past its grace ([`SandboxSlots::stop_waiting`]).
//!
//! The pool's prepared sandboxes (`[host] sandbox_pool`) hold no slot while they wait:
//! they run nothing, and their number is bounded by the pool's size. A run that takes
//! one has taken its slot first.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use crate::home::Home;

/// How often a waiter looks whether its run was given up.
const LOOK_EVERY: Duration = Duration::from_millis(100);

#[derive(Default)]
struct Counts {
    running: usize,
    waiting: usize,
    /// Set past the stop's grace: nobody waits any more.
    stopped: bool,
}

/// See the module documentation.
pub struct SandboxSlots {
    state: Mutex<Counts>,
    freed: Condvar,
    pub max_running: usize,
    pub max_queued: usize,
}

/// One sandbox's slot; given back when dropped.
pub struct SandboxSlot(Arc<SandboxSlots>);

impl Drop for SandboxSlot {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.running = s.running.saturating_sub(1);
        drop(s);
        // Every waiter looks: the first in line is not known here, and each one whose
        // run was given up must leave the queue too.
        self.0.freed.notify_all();
    }
}

/// Why a sandbox got no slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoSlot {
    /// The queue was full: refused at once.
    Full {
        running: usize,
        waiting: usize,
        max_running: usize,
        max_queued: usize,
    },
    /// The run was given up while it waited (its client went away, its session was
    /// killed).
    GivenUp,
    /// The host's stop ran past its grace while it waited.
    Stopping,
}

impl NoSlot {
    /// The `[host]` key to raise, when a limit refused it.
    pub fn limit(&self) -> Option<&'static str> {
        match self {
            NoSlot::Full { .. } => Some("host.max_queued"),
            _ => None,
        }
    }

    /// What failed, without the help line.
    pub fn error(&self) -> String {
        match self {
            NoSlot::Full {
                running,
                waiting,
                max_running,
                max_queued,
            } => format!(
                "too many sandboxes: {running} are running (host.max_sandboxes = {max_running}) and {waiting} waiting (host.max_queued = {max_queued})"
            ),
            NoSlot::GivenUp => "the run was stopped while it waited for a sandbox".into(),
            NoSlot::Stopping => "the host stopped before a sandbox was free".into(),
        }
    }

    /// How to go on.
    pub fn help(&self) -> &'static str {
        match self {
            NoSlot::Full { .. } => {
                "try again when runs have finished, or raise the limits in [host] of airlock.toml"
            }
            NoSlot::GivenUp => "nothing ran",
            NoSlot::Stopping => "nothing ran; run it again once the host is back, or without it",
        }
    }
}

impl std::fmt::Display for NoSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}\nhelp: {}", self.error(), self.help())
    }
}

impl std::error::Error for NoSlot {}

impl SandboxSlots {
    pub fn new(max_running: usize, max_queued: usize) -> Arc<SandboxSlots> {
        Arc::new(SandboxSlots {
            state: Mutex::new(Counts::default()),
            freed: Condvar::new(),
            max_running,
            max_queued,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot now, or after waiting in the queue until one is free. `given_up` is asked
    /// while it waits: once it says yes, the wait ends with [`NoSlot::GivenUp`].
    pub fn enter(self: &Arc<Self>, given_up: &dyn Fn() -> bool) -> Result<SandboxSlot, NoSlot> {
        let mut s = self.lock();
        if s.stopped {
            return Err(NoSlot::Stopping);
        }
        if s.running >= self.max_running {
            if s.waiting >= self.max_queued {
                return Err(NoSlot::Full {
                    running: s.running,
                    waiting: s.waiting,
                    max_running: self.max_running,
                    max_queued: self.max_queued,
                });
            }
            s.waiting += 1;
            let why = loop {
                if s.stopped {
                    break Some(NoSlot::Stopping);
                }
                if s.running < self.max_running {
                    break None;
                }
                if given_up() {
                    break Some(NoSlot::GivenUp);
                }
                s = self
                    .freed
                    .wait_timeout(s, LOOK_EVERY)
                    .map(|(s, _)| s)
                    .unwrap_or_else(|p| p.into_inner().0);
            };
            s.waiting -= 1;
            if let Some(why) = why {
                return Err(why);
            }
        }
        s.running += 1;
        Ok(SandboxSlot(self.clone()))
    }

    /// Sandboxes running, and starts waiting for one.
    pub fn counts(&self) -> (usize, usize) {
        let s = self.lock();
        (s.running, s.waiting)
    }

    /// The stop's grace is over: every start still waiting, and any later one, is
    /// refused ([`NoSlot::Stopping`]); the sandboxes running keep their slots.
    pub fn stop_waiting(&self) {
        self.lock().stopped = true;
        self.freed.notify_all();
    }
}

/// The host's slots, for its state dir; set once by the host at its start.
static HOST_SLOTS: OnceLock<(PathBuf, Weak<SandboxSlots>)> = OnceLock::new();

/// Count every sandbox this process starts for `home`'s state dir against `slots`.
pub fn limit_through_host(home: &Home, slots: &Arc<SandboxSlots>) {
    let _ = HOST_SLOTS.set((home.state.clone(), Arc::downgrade(slots)));
}

/// The slots of the host this process is, when it is the host of `home`'s state dir.
pub fn for_home(home: &Home) -> Option<Arc<SandboxSlots>> {
    let (state, slots) = HOST_SLOTS.get()?;
    (*state == home.state).then(|| slots.upgrade()).flatten()
}

/// A slot for a sandbox about to start for `home`: `Ok(None)` when this process is not
/// its host (no limit applies), else a slot as [`SandboxSlots::enter`] gives one.
pub fn enter_for(home: &Home, given_up: &dyn Fn() -> bool) -> Result<Option<SandboxSlot>, NoSlot> {
    match for_home(home) {
        Some(slots) => slots.enter(given_up).map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    const NEVER: &dyn Fn() -> bool = &|| false;

    #[test]
    fn past_the_running_limit_a_start_waits_and_past_the_queue_it_is_refused_by_name() {
        let slots = SandboxSlots::new(1, 1);
        let first = slots.enter(NEVER).unwrap();
        let waiter = {
            let slots = slots.clone();
            std::thread::spawn(move || slots.enter(NEVER).map(|_| ()))
        };
        while slots.counts() != (1, 1) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let refused = slots.enter(NEVER).err().unwrap();
        assert_eq!(refused.limit(), Some("host.max_queued"));
        assert!(
            refused.to_string().contains("host.max_sandboxes = 1"),
            "{refused}"
        );
        drop(first);
        assert_eq!(waiter.join().unwrap(), Ok(()));
        assert_eq!(slots.counts(), (0, 0));
    }

    #[test]
    fn a_waiter_leaves_the_queue_when_its_run_is_given_up_or_the_host_stops() {
        let slots = SandboxSlots::new(1, 2);
        let _held = slots.enter(NEVER).unwrap();
        let gone = Arc::new(AtomicBool::new(false));
        let given_up = {
            let (slots, gone) = (slots.clone(), gone.clone());
            std::thread::spawn(move || slots.enter(&|| gone.load(Ordering::Acquire)).err())
        };
        let stopped = {
            let slots = slots.clone();
            std::thread::spawn(move || slots.enter(NEVER).err())
        };
        while slots.counts() != (1, 2) {
            std::thread::sleep(Duration::from_millis(5));
        }
        gone.store(true, Ordering::Release);
        assert_eq!(given_up.join().unwrap(), Some(NoSlot::GivenUp));
        slots.stop_waiting();
        assert_eq!(stopped.join().unwrap(), Some(NoSlot::Stopping));
        assert_eq!(slots.counts(), (1, 0));
    }
}
