//! The host's pool of prepared sandboxes (`[host] sandbox_pool`).
//!
//! A pooled sandbox is built only as far as nothing depends on a run
//! ([`airlock_sandbox::Sandbox::build_pooled`]: the helper, its namespaces, PID 1 and the
//! mount plan's fixed steps). A run that takes one attaches its own workspace (with its
//! per-run overlay), working directory, environment and proxy socket before the sandbox
//! attests, and the attestation is checked against the run's whole profile
//! ([`airlock_sandbox::PooledSandbox::attach`]). Each sandbox serves one run and is never
//! used again.
//!
//! The pool builds for the sandbox profile runs last asked for (its base: the run's own
//! parts are not looked at). A run whose profile has another base (a config edit, another
//! CA) finds no fitting sandbox: the stale ones are discarded, the run builds its own from
//! nothing, and the pool refills for the new base. A config reload discards them too, and
//! so does a sandbox that died while it waited. An empty pool never makes a run wait.
//!
//! One thread, which lives as long as the host, builds the sandboxes. No sandbox outlives
//! the host: each helper ends its sandbox when its control socket to the host closes,
//! which the kernel does when the host dies, pooled or not.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use airlock_sandbox::{PooledSandbox, SandboxProfile};

use crate::home::Home;

/// How often the builder looks for sandboxes that died and for a changed config, when
/// nothing wakes it.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// How long the builder waits after a failed build before it tries again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// What `airlock status` shows of the pool.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct PoolStatus {
    /// Sandboxes built and waiting for a run.
    pub ready: usize,
    /// How many the pool keeps (`[host] sandbox_pool`).
    pub size: usize,
    /// Runs that took a pooled sandbox, and that built their own.
    pub taken: u64,
    pub missed: u64,
    /// Pooled sandboxes discarded unused (stale, dead or at the host's stop).
    pub discarded: u64,
    /// Why the last build failed, if it did.
    pub last_error: Option<String>,
}

/// What the pool builds for.
#[derive(Clone)]
struct Template {
    profile: SandboxProfile,
    /// `profile.base()`: runs with an equal base are served by the same sandboxes.
    base: SandboxProfile,
    /// [`airlock_sandbox::pool_key`] of `profile`, computed by the builder (it reads the
    /// host's files, so never on a run's critical path); `None` until then.
    key: Option<String>,
    /// Changes whenever the base does: a build for an older one is discarded.
    generation: u64,
    /// The config the run that showed it was made under.
    config: Arc<crate::config::Config>,
}

#[derive(Default)]
struct State {
    template: Option<Template>,
    generation: u64,
    ready: Vec<PooledSandbox>,
    stopping: bool,
    status: PoolStatus,
}

/// See the module documentation.
pub struct SandboxPool {
    state: Mutex<State>,
    wake: Condvar,
}

impl SandboxPool {
    /// An empty pool; [`SandboxPool::start_builder`] starts filling it.
    pub fn new() -> Arc<SandboxPool> {
        Arc::new(SandboxPool {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        })
    }

    /// Start the pool's builder thread, which reads the config in force through `config`.
    /// It builds nothing until a run has shown which profile to build for.
    pub fn start_builder(
        self: &Arc<Self>,
        home: Home,
        config: impl Fn() -> Arc<crate::config::Config> + Send + 'static,
    ) -> std::io::Result<()> {
        let pool = self.clone();
        std::thread::Builder::new()
            .name("airlock-pool".into())
            .spawn(move || pool.build_loop(&home, &config))?;
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A live pooled sandbox built for `profile`'s base, or `None` (the run then builds
    /// its own). Sandboxes built for another base are discarded, and the pool turns to
    /// building for this one. Cheap: no file is read here (the sandbox's attach checks
    /// the whole base, the host's files included, and refuses one that does not fit).
    pub fn take(
        &self,
        profile: &SandboxProfile,
        config: &Arc<crate::config::Config>,
    ) -> Option<PooledSandbox> {
        let base = profile.base();
        let mut stale = Vec::new();
        let taken = {
            let mut s = self.lock();
            if s.stopping {
                return None;
            }
            let same = s.template.as_ref().is_some_and(|t| t.base == base);
            if same {
                if let Some(t) = s.template.as_mut() {
                    t.config = config.clone();
                }
            } else {
                stale.append(&mut s.ready);
                s.generation += 1;
                s.template = Some(Template {
                    profile: profile.clone(),
                    base,
                    key: None,
                    generation: s.generation,
                    config: config.clone(),
                });
            }
            let mut taken = None;
            while let Some(sandbox) = s.ready.pop() {
                if sandbox.is_alive() {
                    taken = Some(sandbox);
                    break;
                }
                stale.push(sandbox);
            }
            s.status.discarded += stale.len() as u64;
            match taken.is_some() {
                true => s.status.taken += 1,
                false => s.status.missed += 1,
            }
            taken
        };
        self.wake.notify_all();
        // Killed and reaped outside the lock.
        drop(stale);
        taken
    }

    /// A pooled sandbox did not fit its run although the profiles' bases were equal (the
    /// host's `/etc` or the proxy's CA changed): what is pooled is discarded and the key
    /// computed again.
    pub fn mismatched(&self) {
        let stale = {
            let mut s = self.lock();
            s.generation += 1;
            let generation = s.generation;
            if let Some(t) = s.template.as_mut() {
                t.key = None;
                t.generation = generation;
            }
            std::mem::take(&mut s.ready)
        };
        self.lock().status.discarded += stale.len() as u64;
        self.wake.notify_all();
        drop(stale);
    }

    /// What `airlock status` shows.
    pub fn status(&self) -> PoolStatus {
        let s = self.lock();
        PoolStatus {
            ready: s.ready.len(),
            ..s.status.clone()
        }
    }

    /// Stop building and discard every pooled sandbox (at the host's stop).
    pub fn stop(&self) {
        let drained = {
            let mut s = self.lock();
            s.stopping = true;
            s.status.discarded += s.ready.len() as u64;
            std::mem::take(&mut s.ready)
        };
        self.wake.notify_all();
        drop(drained);
    }

    fn build_loop(&self, home: &Home, config: &dyn Fn() -> Arc<crate::config::Config>) {
        loop {
            let (template, cfg) = {
                let mut s = self.lock();
                let cfg = config();
                s.status.size = cfg.host.sandbox_pool;
                // A config reloaded since the last run may change the confinement: what
                // was built for that run's profile is discarded, and the next run shows
                // what to build for. (A run under the new config already replaced the
                // template, and discarded what did not fit it.)
                if s.template
                    .as_ref()
                    .is_some_and(|t| !Arc::ptr_eq(&t.config, &cfg))
                {
                    let stale = std::mem::take(&mut s.ready);
                    s.status.discarded += stale.len() as u64;
                    s.template = None;
                    drop(s);
                    drop(stale);
                    tracing::info!("config reloaded: pooled sandboxes discarded");
                    s = self.lock();
                }
                let dead: Vec<PooledSandbox> = {
                    let (live, dead) = std::mem::take(&mut s.ready)
                        .into_iter()
                        .partition(|p| p.is_alive());
                    s.ready = live;
                    dead
                };
                if !dead.is_empty() {
                    s.status.discarded += dead.len() as u64;
                    tracing::warn!(
                        count = dead.len(),
                        "pooled sandboxes died while waiting; discarded"
                    );
                }
                if s.stopping {
                    return;
                }
                let wanted = s.template.is_some() && s.ready.len() < cfg.host.sandbox_pool;
                if !wanted {
                    let _ = self
                        .wake
                        .wait_timeout(s, SWEEP_EVERY)
                        .unwrap_or_else(|p| p.into_inner());
                    continue;
                }
                (s.template.clone(), cfg)
            };
            let Some(template) = template else {
                continue;
            };
            if template.key.is_none() {
                let key = airlock_sandbox::pool_key(&template.profile);
                let mut s = self.lock();
                match (key, s.template.as_mut()) {
                    (Ok(key), Some(t)) if t.generation == template.generation => t.key = Some(key),
                    (Err(e), _) => {
                        s.status.last_error = Some(e.to_string());
                        s.template = None;
                    }
                    _ => {}
                }
                continue;
            }
            let built = crate::sandbox_helper::locate_for(home, &cfg)
                .and_then(|sandbox| Ok(sandbox.build_pooled(&template.profile)?));
            match built {
                Ok(sandbox) => {
                    let mut s = self.lock();
                    // Built for the base in force, from the host's files as the key saw
                    // them.
                    let fits = !s.stopping
                        && s.template.as_ref().is_some_and(|t| {
                            t.generation == template.generation && sandbox.key().ok() == t.key
                        });
                    if fits {
                        s.ready.push(sandbox);
                        s.status.last_error = None;
                    } else {
                        s.status.discarded += 1;
                        drop(s);
                        drop(sandbox);
                    }
                }
                Err(e) => {
                    let why = format!("{e:#}");
                    tracing::warn!(error = %why, "building a pooled sandbox failed; runs build their own");
                    let s = {
                        let mut s = self.lock();
                        s.status.last_error = Some(why);
                        s
                    };
                    let _ = self
                        .wake
                        .wait_timeout(s, RETRY_AFTER)
                        .unwrap_or_else(|p| p.into_inner());
                }
            }
        }
    }
}
