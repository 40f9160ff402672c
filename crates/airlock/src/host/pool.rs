//! The host's pool of prepared sandboxes (`[host] sandbox_pool`), one group per profile.
//!
//! A pooled sandbox is built only as far as nothing depends on a run
//! ([`airlock_sandbox::Sandbox::build_pooled`]: the helper, its namespaces, PID 1 and the
//! mount plan's fixed steps). A run that takes one attaches its own workspace (with its
//! per-run overlay), working directory, environment and proxy socket before the sandbox
//! attests, and the attestation is checked against the run's whole profile
//! ([`airlock_sandbox::PooledSandbox::attach`]). Each sandbox serves one run and is never
//! used again.
//!
//! Runs are grouped by profile: the policy profile the run is decided under (`default`,
//! `strict`) and the sandbox profile's base (the run's own parts are not looked at). Each
//! group has its own sandboxes, so runs under one profile never throw away what was built
//! for another. The first run of a group shows the pool what to build for, and builds its
//! own.
//!
//! The configured size is the total over all groups, split between them: with `n`
//! groups, each keeps `size / n`, and the most recently used ones one more each, until
//! the remainder is shared out. A new group takes its share from the others (their
//! extra sandboxes are discarded at once, so the total never passes the size), and past
//! `size` groups the least recently used one is dropped. A split rather than one shared
//! LRU list: a burst of runs under one profile then cannot leave another with nothing
//! ready.
//!
//! A group whose last run was under an older config is discarded when the config
//! reloads (the confinement may have changed; its next run shows what to build), and so
//! is a sandbox that died while it waited. A sandbox that does not fit its run although
//! the bases were equal (the host's `/etc` or the proxy's CA changed) discards every
//! group's sandboxes. An empty pool never makes a run wait.
//!
//! One thread, which lives as long as the host, builds the sandboxes. While runs are in
//! flight it refills only a group that has nothing ready: a build beside a run that has
//! just taken a sandbox competes with that run's decision and attach for the cores.
//!
//! Once a run is over and no other is in flight, the builder stages the next run of the
//! same shape in one of its group's sandboxes (`crate::service::exec::ahead`): the
//! workspace attached, the payload confined and attested, waiting for a command. A
//! request of that shape takes it; any other takes a sandbox of the group as before. A
//! group holds at most one staged run, which counts against its share.
//!
//! No sandbox outlives the host: each helper ends its sandbox when its control socket to
//! the host closes, which the kernel does when the host dies, pooled or not.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use airlock_sandbox::{PooledSandbox, SandboxProfile};

use crate::egress::EgressSetup;
use crate::home::Home;
use crate::service::exec::ahead::{AheadShape, StagedRun};

/// How often the builder looks for sandboxes that died and for a changed config, when
/// nothing wakes it.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// How long the builder waits after a failed build before it tries again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// What `airlock status` shows of the pool: the totals, and each profile's group.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct PoolStatus {
    /// Sandboxes built and waiting for a run, over all profiles (staged runs included).
    pub ready: usize,
    /// Of those, runs staged ahead (see `crate::service::exec::ahead`).
    #[serde(default)]
    pub staged: usize,
    /// How many the pool keeps in all (`[host] sandbox_pool`).
    pub size: usize,
    /// Runs that took a pooled sandbox, and that built their own.
    pub taken: u64,
    pub missed: u64,
    /// Of the runs that took a pooled sandbox, those that took a run staged ahead in one.
    #[serde(default)]
    pub staged_taken: u64,
    /// Pooled sandboxes discarded unused (stale, dead, another profile's share, or at
    /// the host's stop).
    pub discarded: u64,
    /// Why the last build failed, if it did.
    pub last_error: Option<String>,
    /// One entry per profile the pool builds for, the most recently used first.
    #[serde(default)]
    pub profiles: Vec<ProfilePoolStatus>,
}

/// One profile's group of the pool.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct ProfilePoolStatus {
    /// The policy profile its runs are decided under.
    pub profile: String,
    /// Sandboxes built for it and waiting.
    pub ready: usize,
    /// Its share of the pool's size.
    pub share: usize,
    /// Its runs that took a pooled sandbox, and that built their own.
    pub taken: u64,
    pub missed: u64,
}

/// What one group builds for.
#[derive(Clone)]
struct Template {
    /// Names the group's sandboxes, so a build for a group since dropped is discarded.
    id: u64,
    profile: SandboxProfile,
    /// `profile.base()`: runs with an equal base (and policy profile) are served by the
    /// same sandboxes.
    base: SandboxProfile,
    /// [`airlock_sandbox::pool_key`] of `profile`, computed by the builder (it reads the
    /// host's files, so never on a run's critical path); `None` until then.
    key: Option<String>,
    /// The config the group's last run was made under.
    config: Arc<crate::config::Config>,
}

/// One profile's sandboxes.
struct Group {
    policy_profile: String,
    template: Template,
    ready: Vec<PooledSandbox>,
    /// A run staged ahead in one of the group's sandboxes.
    ahead: Option<StagedRun>,
    /// What the group's last run looked like: the run to stage next.
    wanted: Option<AheadShape>,
    /// When a run last asked for this group (a tick of [`State::clock`]).
    used: u64,
    taken: u64,
    missed: u64,
}

impl Group {
    /// The sandboxes it holds: ready, and staged.
    fn held(&self) -> usize {
        self.ready.len() + usize::from(self.ahead.is_some())
    }
}

/// What was taken out of the pool, to be dropped (killed and reaped) outside its lock:
/// a staged run's drop waits for its attach, which may need the lock.
#[derive(Default)]
struct Discarded {
    sandboxes: Vec<PooledSandbox>,
    staged: Vec<StagedRun>,
}

impl Discarded {
    fn len(&self) -> usize {
        self.sandboxes.len() + self.staged.len()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn group(&mut self, g: Group) {
        self.sandboxes.extend(g.ready);
        self.staged.extend(g.ahead);
    }

    fn append(&mut self, mut other: Discarded) {
        self.sandboxes.append(&mut other.sandboxes);
        self.staged.append(&mut other.staged);
    }
}

#[derive(Default)]
struct State {
    /// The most recently used first.
    groups: Vec<Group>,
    clock: u64,
    next_id: u64,
    stopping: bool,
    status: PoolStatus,
    /// Runs between their `take` and their end ([`SandboxPool::run_in_flight`]).
    in_flight: usize,
}

/// Group `index`'s share of `size` among `groups` groups, the most recently used (the
/// lowest index) first to get the remainder.
fn share(size: usize, groups: usize, index: usize) -> usize {
    if groups == 0 {
        return 0;
    }
    size / groups + usize::from(index < size % groups)
}

/// Whether a group with `ready` sandboxes (below its share) is built for while
/// `in_flight` runs are in flight (see [`State::to_build`]).
fn may_build_now(ready: usize, in_flight: usize) -> bool {
    in_flight == 0 || ready == 0
}

impl State {
    /// Order the groups by use, drop those past `size`, and discard what each holds past
    /// its share. Returns the discarded sandboxes, to be dropped outside the lock.
    fn rebalance(&mut self, size: usize) -> Discarded {
        self.groups.sort_by_key(|g| std::cmp::Reverse(g.used));
        let mut stale = Discarded::default();
        while self.groups.len() > size {
            if let Some(g) = self.groups.pop() {
                stale.group(g);
            }
        }
        let n = self.groups.len();
        for (i, g) in self.groups.iter_mut().enumerate() {
            // A staged run is kept before a plain sandbox: it is the likelier to serve.
            let keep = share(size, n, i);
            let keep_ready = keep.saturating_sub(usize::from(g.ahead.is_some()));
            if g.ready.len() > keep_ready {
                stale.sandboxes.extend(g.ready.drain(keep_ready..));
            }
            if g.held() > keep {
                stale.staged.extend(g.ahead.take());
            }
        }
        self.status.discarded += stale.len() as u64;
        stale
    }

    /// The group to build for next: the most recently used one below its share.
    fn wanting(&self, size: usize) -> Option<&Group> {
        let n = self.groups.len();
        self.groups
            .iter()
            .enumerate()
            .find(|(i, g)| g.held() < share(size, n, *i))
            .map(|(_, g)| g)
    }

    /// The group to build for now: [`State::wanting`], except that while a run is in
    /// flight only a group with nothing ready is built for. A build takes both cores'
    /// time for a few milliseconds; beside a run that has just taken a sandbox it slows
    /// that run's decision and attach, so a group that still holds one waits for the run
    /// to end (an empty group cannot wait: its next run would build its own).
    fn to_build(&self, size: usize) -> Option<&Group> {
        self.wanting(size)
            .filter(|g| may_build_now(g.ready.len(), self.in_flight))
    }

    fn group_mut(&mut self, id: u64) -> Option<&mut Group> {
        self.groups.iter_mut().find(|g| g.template.id == id)
    }

    /// The group of runs decided under `policy_profile` whose sandbox profile has `base`.
    fn group_of(&mut self, policy_profile: &str, base: &SandboxProfile) -> Option<&mut Group> {
        self.groups
            .iter_mut()
            .find(|g| g.policy_profile == policy_profile && g.template.base == *base)
    }

    /// A run to stage now, and the live sandbox of its group to stage it in: the group's
    /// wanted shape, unless what it has staged is of that shape already. A group with no
    /// sandbox ready keeps its wish for after the next build. Dead sandboxes met on the
    /// way are added to `stale`.
    fn next_to_stage(&mut self, stale: &mut Discarded) -> Option<(u64, AheadShape, PooledSandbox)> {
        for g in &mut self.groups {
            let Some(wanted) = g.wanted.take() else {
                continue;
            };
            if g.ahead.as_ref().is_some_and(|a| *a.shape() == wanted) {
                continue;
            }
            while !g.ready.is_empty() {
                let sandbox = g.ready.remove(0);
                if sandbox.is_alive() {
                    return Some((g.template.id, wanted, sandbox));
                }
                self.status.discarded += 1;
                stale.sandboxes.push(sandbox);
            }
            g.wanted = Some(wanted);
        }
        None
    }
}

/// A run in flight, for the builder's timing ([`SandboxPool::run_in_flight`]).
pub struct InFlight(Arc<SandboxPool>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.in_flight = s.in_flight.saturating_sub(1);
        drop(s);
        self.0.wake.notify_all();
    }
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

    /// A run begins: until the guard is dropped (at the run's end), the builder refills
    /// only a group with nothing ready (see [`State::to_build`]).
    pub fn run_in_flight(self: &Arc<Self>) -> InFlight {
        self.lock().in_flight += 1;
        InFlight(self.clone())
    }

    /// A live pooled sandbox built for a run decided under `policy_profile` whose sandbox
    /// profile has `profile`'s base, or `None` (the run then builds its own, and the pool
    /// starts building for this profile if it did not yet). Other profiles' sandboxes are
    /// kept, but for the share this one now takes. Cheap: no file is read here (the
    /// sandbox's attach checks the whole base, the host's files included, and refuses one
    /// that does not fit).
    pub fn take(
        &self,
        policy_profile: &str,
        profile: &SandboxProfile,
        config: &Arc<crate::config::Config>,
    ) -> Option<PooledSandbox> {
        let base = profile.base();
        let mut stale = Discarded::default();
        let taken = {
            let mut s = self.lock();
            if s.stopping {
                return None;
            }
            s.clock += 1;
            let now = s.clock;
            let found = s
                .groups
                .iter()
                .position(|g| g.policy_profile == policy_profile && g.template.base == base);
            let index = match found {
                Some(i) => i,
                None => {
                    s.next_id += 1;
                    let template = Template {
                        id: s.next_id,
                        profile: profile.clone(),
                        base,
                        key: None,
                        config: config.clone(),
                    };
                    s.groups.push(Group {
                        policy_profile: policy_profile.to_string(),
                        template,
                        ready: Vec::new(),
                        ahead: None,
                        wanted: None,
                        used: now,
                        taken: 0,
                        missed: 0,
                    });
                    s.groups.len() - 1
                }
            };
            let id = {
                let g = &mut s.groups[index];
                g.used = now;
                g.template.config = config.clone();
                g.template.id
            };
            let rebalanced = s.rebalance(config.host.sandbox_pool);
            stale.append(rebalanced);
            let mut taken = None;
            let mut dead = Vec::new();
            if let Some(g) = s.group_mut(id) {
                // Oldest first, as a queue: under steady use none is left waiting for
                // ever behind newer ones.
                while !g.ready.is_empty() {
                    let sandbox = g.ready.remove(0);
                    if sandbox.is_alive() {
                        taken = Some(sandbox);
                        break;
                    }
                    dead.push(sandbox);
                }
                match taken.is_some() {
                    true => g.taken += 1,
                    false => g.missed += 1,
                }
            }
            s.status.discarded += dead.len() as u64;
            stale.sandboxes.extend(dead);
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

    /// The run staged ahead for `shape`, if there is one that fits a run whose proxy
    /// serves with `egress` and that is alive (see `crate::service::exec::ahead`). One
    /// staged for another shape is kept: the group's next run may be of its shape.
    pub(crate) fn take_ahead(
        &self,
        shape: &AheadShape,
        egress: &EgressSetup,
        config: &Arc<crate::config::Config>,
    ) -> Option<StagedRun> {
        let mut dead = None;
        let taken = {
            let mut guard = self.lock();
            let s = &mut *guard;
            if s.stopping {
                return None;
            }
            s.clock += 1;
            let now = s.clock;
            // Staged for this shape: taken if it still fits and lives; otherwise (its
            // directories made again, the CA changed, expired, dead) it never will, and
            // goes, so that the next of this shape is staged anew.
            let (g, mut staged) = s.groups.iter_mut().find_map(|g| {
                let staged = g.ahead.take_if(|a| a.shape() == shape)?;
                Some((g, staged))
            })?;
            if staged.fits(shape, egress) && staged.is_alive() {
                g.used = now;
                g.taken += 1;
                g.template.config = config.clone();
                s.status.taken += 1;
                s.status.staged_taken += 1;
                Some(staged)
            } else {
                s.status.discarded += 1;
                dead = Some(staged);
                None
            }
        };
        self.wake.notify_all();
        drop(dead);
        taken
    }

    /// A run of `shape` is over, whose whole sandbox profile had `base`: stage the next
    /// of its shape once no run is in flight.
    pub(crate) fn want_ahead(&self, shape: AheadShape, base: &SandboxProfile) {
        if let Some(g) = self.lock().group_of(&shape.policy_profile, base) {
            g.wanted = Some(shape);
        }
        self.wake.notify_all();
    }

    /// A pooled sandbox did not fit its run although the profiles' bases were equal (the
    /// host's `/etc` or the proxy's CA changed): what is pooled is discarded and the keys
    /// computed again.
    pub fn mismatched(&self) {
        let stale = {
            let mut guard = self.lock();
            let s = &mut *guard;
            let mut stale = Discarded::default();
            for g in &mut s.groups {
                g.template.key = None;
                stale.sandboxes.append(&mut g.ready);
                stale.staged.extend(g.ahead.take());
                // Builds under way were made for the old key: a new id makes them not fit.
                s.next_id += 1;
                g.template.id = s.next_id;
            }
            s.status.discarded += stale.len() as u64;
            stale
        };
        self.wake.notify_all();
        drop(stale);
    }

    /// Discard every run staged ahead, and stage none until a run ends again: the kill
    /// switch's `--all` leaves no run waiting to be taken. (Pooled sandboxes stay: they
    /// hold nothing of any run.)
    pub fn discard_staged(&self) {
        let staged = {
            let mut guard = self.lock();
            let s = &mut *guard;
            let mut staged = Discarded::default();
            for g in &mut s.groups {
                staged.staged.extend(g.ahead.take());
                g.wanted = None;
            }
            s.status.discarded += staged.len() as u64;
            staged
        };
        drop(staged);
    }

    /// What `airlock status` shows.
    pub fn status(&self) -> PoolStatus {
        let s = self.lock();
        let n = s.groups.len();
        PoolStatus {
            ready: s.groups.iter().map(Group::held).sum(),
            staged: s.groups.iter().filter(|g| g.ahead.is_some()).count(),
            profiles: s
                .groups
                .iter()
                .enumerate()
                .map(|(i, g)| ProfilePoolStatus {
                    profile: g.policy_profile.clone(),
                    ready: g.held(),
                    share: share(s.status.size, n, i),
                    taken: g.taken,
                    missed: g.missed,
                })
                .collect(),
            ..s.status.clone()
        }
    }

    /// Stop building and discard every pooled sandbox (at the host's stop).
    pub fn stop(&self) {
        let drained = {
            let mut s = self.lock();
            s.stopping = true;
            let mut drained = Discarded::default();
            for g in &mut s.groups {
                drained.sandboxes.append(&mut g.ready);
                drained.staged.extend(g.ahead.take());
            }
            s.status.discarded += drained.len() as u64;
            drained
        };
        self.wake.notify_all();
        drop(drained);
    }

    /// Stage a run of `shape` in `sandbox` for group `id` (see
    /// `crate::service::exec::ahead`), and keep it unless the group went meanwhile.
    fn stage_ahead(
        self: &Arc<Self>,
        home: &Home,
        cfg: &crate::config::Config,
        id: u64,
        shape: AheadShape,
        sandbox: PooledSandbox,
    ) {
        let staged = match StagedRun::stage(home, cfg, shape, sandbox, self.clone()) {
            Ok(staged) => staged,
            Err(e) => {
                let why = format!("{e:#}");
                tracing::warn!(error = %why, "staging a run ahead failed");
                self.lock().status.last_error = Some(why);
                return;
            }
        };
        tracing::debug!(session = %staged.session_id(), "a run staged ahead");
        let replaced = {
            let mut s = self.lock();
            let stopping = s.stopping;
            match s.group_mut(id).filter(|_| !stopping) {
                Some(g) => g.ahead.replace(staged),
                None => Some(staged),
            }
        };
        if replaced.is_some() {
            self.lock().status.discarded += 1;
        }
        drop(replaced);
    }

    fn build_loop(self: &Arc<Self>, home: &Home, config: &dyn Fn() -> Arc<crate::config::Config>) {
        loop {
            let (template, cfg) = {
                let mut s = self.lock();
                let cfg = config();
                s.status.size = cfg.host.sandbox_pool;
                // A config reloaded since a group's last run may change the confinement:
                // what was built for it is discarded, and its next run shows what to build
                // for. (A run under the new config already brought its group up to date.)
                let (current, old): (Vec<Group>, Vec<Group>) = std::mem::take(&mut s.groups)
                    .into_iter()
                    .partition(|g| Arc::ptr_eq(&g.template.config, &cfg));
                s.groups = current;
                let mut stale = Discarded::default();
                for g in old {
                    stale.group(g);
                }
                if !stale.is_empty() {
                    tracing::info!("config reloaded: pooled sandboxes discarded");
                }
                s.status.discarded += stale.len() as u64;
                let mut dead = Discarded::default();
                let mut expired = Vec::new();
                for g in &mut s.groups {
                    let (live, gone): (Vec<_>, Vec<_>) = std::mem::take(&mut g.ready)
                        .into_iter()
                        .partition(|p| p.is_alive());
                    g.ready = live;
                    dead.sandboxes.extend(gone);
                    // A staged run unused for long, or dead, goes too.
                    if let Some(a) = &mut g.ahead {
                        if a.expired() {
                            tracing::debug!("a run staged ahead went unused; discarded");
                            expired.extend(g.ahead.take());
                        } else if !a.is_alive() {
                            dead.staged.extend(g.ahead.take());
                        }
                    }
                }
                if !dead.is_empty() {
                    s.status.discarded += dead.len() as u64;
                    tracing::warn!(
                        count = dead.len(),
                        "pooled sandboxes died while waiting; discarded"
                    );
                }
                stale.append(dead);
                s.status.discarded += expired.len() as u64;
                stale.staged.append(&mut expired);
                let rebalanced = s.rebalance(cfg.host.sandbox_pool);
                stale.append(rebalanced);
                // The next run of the last shape, staged once no run is in flight: beside a
                // run it would compete with that run for the cores.
                let staging = match s.in_flight {
                    0 if !s.stopping => s.next_to_stage(&mut stale),
                    _ => None,
                };
                if !stale.is_empty() {
                    drop(s);
                    drop(stale);
                    s = self.lock();
                }
                if s.stopping {
                    return;
                }
                if let Some((id, shape, sandbox)) = staging {
                    drop(s);
                    self.stage_ahead(home, &cfg, id, shape, sandbox);
                    continue;
                }
                let Some(template) = s
                    .to_build(cfg.host.sandbox_pool)
                    .map(|g| g.template.clone())
                else {
                    let _ = self
                        .wake
                        .wait_timeout(s, SWEEP_EVERY)
                        .unwrap_or_else(|p| p.into_inner());
                    continue;
                };
                (template, cfg)
            };
            if template.key.is_none() {
                let key = airlock_sandbox::pool_key(&template.profile);
                let mut s = self.lock();
                match key {
                    Ok(key) => {
                        if let Some(g) = s.group_mut(template.id) {
                            g.template.key = Some(key);
                        }
                    }
                    Err(e) => {
                        s.status.last_error = Some(e.to_string());
                        s.groups.retain(|g| g.template.id != template.id);
                    }
                }
                continue;
            }
            let built = crate::sandbox_helper::locate_for(home, &cfg)
                .and_then(|sandbox| Ok(sandbox.build_pooled(&template.profile)?));
            match built {
                Ok(sandbox) => {
                    let mut guard = self.lock();
                    let s = &mut *guard;
                    let size = s.status.size;
                    let n = s.groups.len();
                    // Built for a group still kept, from the host's files as its key saw
                    // them, and still within the group's share.
                    let stopping = s.stopping;
                    let place = s
                        .groups
                        .iter_mut()
                        .enumerate()
                        .find(|(_, g)| g.template.id == template.id)
                        .filter(|(i, g)| {
                            !stopping
                                && sandbox.key().ok() == g.template.key
                                && g.ready.len() < share(size, n, *i)
                        })
                        .map(|(_, g)| g);
                    match place {
                        Some(g) => {
                            g.ready.push(sandbox);
                            s.status.last_error = None;
                        }
                        None => {
                            s.status.discarded += 1;
                            drop(guard);
                            drop(sandbox);
                        }
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

#[cfg(test)]
mod tests {
    use super::{may_build_now, share};

    #[test]
    fn a_group_that_holds_a_sandbox_is_refilled_after_the_runs_in_flight_not_beside_them() {
        assert!(may_build_now(1, 0));
        assert!(!may_build_now(1, 1));
        assert!(!may_build_now(3, 2));
        // An empty group cannot wait: its next run would build its own.
        assert!(may_build_now(0, 5));
    }

    #[test]
    fn the_shares_add_up_to_the_size_and_the_recent_groups_get_the_remainder() {
        for size in 0..6 {
            for n in 1..=size.max(1) {
                let total: usize = (0..n).map(|i| share(size, n, i)).sum();
                assert_eq!(total, size, "size {size}, {n} groups");
            }
        }
        assert_eq!((share(3, 2, 0), share(3, 2, 1)), (2, 1));
        assert_eq!((share(2, 2, 0), share(2, 2, 1)), (1, 1));
        assert_eq!(share(0, 0, 0), 0);
    }
}
