//! The kill switch, for `airlock kill <session>|--all` embedded and the host's `/v1/kill`.
//!
//! For each session it
//! 1. marks the session `killed` in the store, which cancels its pending approvals and
//!    revokes its grants in the same transaction (a killed session never takes work again);
//! 2. drops a `killed` marker in the session's run dir `<state>/run/<session>/` and unlinks
//!    the proxy socket there, so nothing new can reach the session's egress proxy;
//! 3. SIGKILLs the sandbox helper of every run registered in that dir. The helper is the
//!    parent of the sandbox's PID 1, which holds a parent-death signal, so the whole
//!    sandboxed process tree goes with it;
//! 4. appends a `session-killed` record to the audit log naming the operator.
//!
//! `--all` first revokes every standing grant, operator rules included (a rule-scoped
//! grant belongs to no session, so killing sessions alone would leave it in force for the
//! next one), each with its own `grant-revoked` record.
//!
//! The other half lives in the running exec ([`RunGuard`], embedded or in the host): it
//! registers its process's pid and each sandbox helper's pid in the run dir, and a watcher
//! thread that sees the marker kills the helper itself too, so the run ends within a
//! fraction of a second even if the killing process could not signal it, and records the
//! run's outcome as `killed`.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;

use airlock_audit::AuditEvent;
use airlock_store::{SessionStatus, SessionStore, StoreError, Timestamp};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::config;
use crate::home::Home;
use crate::service::approvals::open_store;
use crate::service::decider::Decider;
use crate::service::fault;
use crate::service::record_log::RecordLog;

/// Marker file whose presence in a run dir tells the running exec it was killed.
pub const KILLED_MARKER: &str = "killed";
/// Pid of the `airlock exec` process that owns the run dir.
pub const EXEC_PID_FILE: &str = "exec.pid";
/// Pids of the sandbox helpers the run started, one per line.
pub const SANDBOX_PIDS_FILE: &str = "sandbox.pids";
/// The proxy socket in a run dir (see [`crate::egress`]).
const PROXY_SOCKET: &str = "proxy.sock";
/// Exit status of an `airlock exec` whose session was killed (128 + SIGKILL).
pub const EXIT_KILLED: i32 = 128 + 9;
/// How often a running exec looks for the marker.
const WATCH_INTERVAL: Duration = Duration::from_millis(50);
/// How long `airlock kill` waits for the killed helpers to be gone.
const KILL_WAIT: Duration = Duration::from_secs(1);

/// What to kill: one session, or every active one (and every running exec).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KillInput {
    #[serde(default)]
    pub session: Option<String>,
    #[serde(default)]
    pub all: bool,
}

/// What a kill did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KillReport {
    /// Standing grants revoked first (`all` only).
    pub grants_revoked: Option<usize>,
    /// Scheduled tasks paused (`all` only); each waits for the owner's resume.
    #[serde(default)]
    pub tasks_paused: Option<usize>,
    /// How many sessions and run dirs `all` went through.
    pub targets: usize,
    pub killed: Vec<SessionKilled>,
    /// How long the kill waited for the helpers to be gone.
    pub kill_wait_ms: u64,
}

/// What killing one session did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SessionKilled {
    pub id: String,
    pub cancelled_approvals: usize,
    pub revoked_grants: usize,
    pub helpers_killed: Vec<u32>,
    /// Helpers still alive after the wait (a failure to report).
    pub helpers_left: Vec<u32>,
}

/// What killing one session did, before it is recorded.
#[derive(Debug, Default)]
struct Killed {
    in_store: bool,
    /// The store had it killed already: a repeat (a second command, or a request the
    /// host took after its client had given up on it and killed embedded).
    already_killed: bool,
    cancelled_approvals: usize,
    revoked_grants: usize,
    run_dir: Option<PathBuf>,
    helpers_killed: Vec<u32>,
    helpers_left: Vec<u32>,
}

/// Kill `input`'s sessions, each recorded as the act of the operator at the command line.
pub fn kill_sessions(home: &Home, input: &KillInput) -> anyhow::Result<KillReport> {
    kill_sessions_as(home, input, &Decider::cli())
}

/// Kill `input`'s sessions, each recorded as `who`'s act.
///
/// The switch is pulled before anything slow: the store marks the sessions killed and
/// their sandboxes are SIGKILLed first, and only then is the audit log opened (its key,
/// the secrets for its redactor) for the records of what was done. A log that cannot be
/// written then fails the command, saying the sessions were killed all the same: the
/// kill switch never waits on the log.
pub fn kill_sessions_as(
    home: &Home,
    input: &KillInput,
    who: &Decider,
) -> anyhow::Result<KillReport> {
    anyhow::ensure!(
        input.all != input.session.is_some(),
        "name one session or --all\nhelp: airlock kill <session> | airlock kill --all"
    );
    let store = open_store(home).map_err(fault)?;
    let run_root = home.state.join("run");

    // Schedules stop first, so no task run wakes its model after this: a run the
    // scheduler picked before the pause either has its session in the store by now, and
    // the listing below kills it, or it sees the pause once its session exists and ends
    // before the model is called (`crate::host::scheduler`). (A pre-check that looked at
    // its task before the pause may still start its one command after the listing,
    // within its time limit; it never wakes the model.) The tasks stay paused until the
    // owner resumes each one.
    let paused_tasks = if input.all {
        Some(crate::service::tasks::pause_all_for_kill(home).map_err(fault)?)
    } else {
        None
    };

    let targets: Vec<String> = if input.all {
        let mut ids = BTreeSet::new();
        // Active sessions (finished and killed ones run nothing), plus every run dir: a
        // run whose session row is missing must still be stopped.
        let listing = store
            .list_sessions(Some(SessionStatus::Active))
            .map_err(|e| fault(anyhow::anyhow!("cannot list the sessions: {e}")))?;
        for s in listing.items {
            ids.insert(s.id);
        }
        if let Ok(entries) = std::fs::read_dir(&run_root) {
            for e in entries.flatten() {
                if let Some(name) = e.file_name().to_str() {
                    ids.insert(name.to_string());
                }
            }
        }
        ids.into_iter().collect()
    } else {
        let id = input.session.clone().unwrap_or_default();
        airlock_store::validate_id("session", &id).map_err(|e| anyhow::anyhow!("{e}"))?;
        // Its sub-agents go with it: the store kills them with the parent, and their
        // sandboxes are stopped here like the parent's, each with its own record.
        let family = store.descendants(&id).unwrap_or_default();
        std::iter::once(id).chain(family).collect()
    };

    let mut done = Vec::new();
    for id in &targets {
        let k = kill_one(&store, &run_root, id, who)?;
        if !k.in_store && k.run_dir.is_none() {
            if input.all {
                continue;
            }
            anyhow::bail!(
                "no session `{id}` in the store and no running exec under {}\nhelp: `airlock exec` runs are named exec-<ms>-<pid>; list {} to see the running ones",
                run_root.display(),
                run_root.display()
            );
        }
        done.push((id.clone(), k));
    }

    let unrecorded = |e: anyhow::Error| {
        fault(anyhow::anyhow!(
            "the sessions were killed, but the record of it failed: {e:#}"
        ))
    };
    let cfg = config::load(&home.config_file()).map_err(unrecorded)?;
    let mut log = RecordLog::open(home, &cfg).map_err(unrecorded)?;
    let tasks_paused = match paused_tasks {
        Some(ids) => {
            log.append(
                AuditEvent::by(
                    "tasks-paused",
                    crate::config_audit::CONFIG_SESSION,
                    &who.attribution(),
                )
                .with_detail(json!({"decided_by": who.detail(), "by": "kill --all", "tasks": ids})),
            )
            .map_err(|e| {
                fault(anyhow::anyhow!(
                    "the tasks were paused, but their record failed: {e}"
                ))
            })?;
            Some(ids.len())
        }
        None => None,
    };
    let grants_revoked = if input.all {
        Some(log.with(|log| {
            crate::service::grants::revoke_all_recorded(&store, log, "kill --all", who)
        })?)
    } else {
        None
    };

    let mut killed = Vec::new();
    for (id, k) in done {
        let ev =
            AuditEvent::by("session-killed", id.as_str(), &who.attribution()).with_detail(json!({
                "decided_by": who.detail(),
                "in_store": k.in_store,
                "already_killed": k.already_killed,
                "cancelled_approvals": k.cancelled_approvals,
                "revoked_grants": k.revoked_grants,
                "run_dir": k.run_dir,
                "helpers_killed": k.helpers_killed,
                "helpers_left": k.helpers_left,
            }));
        log.append(ev).map_err(|e| {
            fault(anyhow::anyhow!(
                "session `{id}` was killed, but its audit record failed: {e}"
            ))
        })?;
        killed.push(SessionKilled {
            id,
            cancelled_approvals: k.cancelled_approvals,
            revoked_grants: k.revoked_grants,
            helpers_killed: k.helpers_killed,
            helpers_left: k.helpers_left,
        });
    }
    log.close().map_err(|e| fault(anyhow::anyhow!("{e}")))?;
    Ok(KillReport {
        grants_revoked,
        tasks_paused,
        targets: targets.len(),
        killed,
        kill_wait_ms: KILL_WAIT.as_millis() as u64,
    })
}

fn kill_one(
    store: &airlock_store::SqliteStore,
    run_root: &Path,
    id: &str,
    who: &Decider,
) -> anyhow::Result<Killed> {
    let mut k = Killed::default();
    // The store first: an exec that starts after this sees the session killed and never
    // launches (it checks after registering its run dir).
    match store.kill_session(id, who.principal(), Timestamp::now()) {
        Ok(report) => {
            k.in_store = true;
            k.already_killed = report.already_killed;
            k.cancelled_approvals = report.cancelled_approvals;
            k.revoked_grants = report.revoked_grants;
        }
        Err(StoreError::NotFound { .. }) => {}
        Err(e) => anyhow::bail!("cannot kill session `{id}` in the store: {e}"),
    }
    let dir = run_root.join(id);
    if dir.is_dir() {
        // A run with no session row was killed before when its marker is there.
        if !k.in_store && dir.join(KILLED_MARKER).exists() {
            k.already_killed = true;
        }
        let (killed, left) = kill_run_dir(&dir)?;
        k.helpers_killed = killed;
        k.helpers_left = left;
        k.run_dir = Some(dir);
    }
    Ok(k)
}

/// Mark the run dir killed, cut the proxy socket, and SIGKILL the registered helpers.
/// Returns the pids signalled and those still alive after [`KILL_WAIT`].
fn kill_run_dir(dir: &Path) -> anyhow::Result<(Vec<u32>, Vec<u32>)> {
    let marker = dir.join(KILLED_MARKER);
    std::fs::write(&marker, b"killed by the operator\n")
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", marker.display()))?;
    let _ = std::fs::remove_file(dir.join(PROXY_SOCKET));
    let exec_pid = read_pids(&dir.join(EXEC_PID_FILE)).into_iter().next();
    let mut signalled = Vec::new();
    for pid in read_pids(&dir.join(SANDBOX_PIDS_FILE)) {
        // Only a helper still parented by the exec that registered it: a pid the kernel
        // has since given to another process is never signalled.
        if exec_pid.is_some()
            && parent_of(pid) == exec_pid
            && kill(to_pid(pid), Signal::SIGKILL).is_ok()
        {
            signalled.push(pid);
        }
    }
    let deadline = Instant::now() + KILL_WAIT;
    let mut left: Vec<u32> = signalled.clone();
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        left.retain(|p| is_running(*p));
    }
    Ok((signalled, left))
}

fn to_pid(pid: u32) -> Pid {
    Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX))
}

fn read_pids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .filter(|p| *p > 1)
        .collect()
}

/// `(state, ppid)` from `/proc/<pid>/stat`. The command name may hold spaces and
/// parentheses, so the fields are read after the last `)`.
fn proc_stat(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

fn parent_of(pid: u32) -> Option<u32> {
    proc_stat(pid).map(|(_, ppid)| ppid)
}

/// Alive and not a zombie waiting to be reaped.
pub fn is_running(pid: u32) -> bool {
    matches!(proc_stat(pid), Some((s, _)) if s != 'Z' && s != 'X')
}

/// A running `airlock exec`'s registration in its run dir, and the watcher that ends the
/// run when `airlock kill` leaves the marker.
pub struct RunGuard {
    dir: PathBuf,
    state: Arc<GuardState>,
    /// Dropping it wakes the watcher at once to stop (a join must not wait out a poll
    /// interval at the end of every run).
    stop: Option<std::sync::mpsc::Sender<()>>,
    watcher: Option<std::thread::JoinHandle<()>>,
}

struct GuardState {
    killed: AtomicBool,
    /// Killed because the host's client went away, not by `airlock kill`.
    hung_up: AtomicBool,
    helpers: Mutex<Vec<u32>>,
}

impl GuardState {
    fn kill_helpers(&self) {
        let helpers = self.helpers.lock().unwrap_or_else(|p| p.into_inner());
        for pid in helpers.iter() {
            // Our own unreaped child: the pid cannot have been reused.
            let _ = kill(to_pid(*pid), Signal::SIGKILL);
        }
    }
}

impl RunGuard {
    /// Write this process's pid into `dir` (the run dir) and start watching for the
    /// marker.
    pub fn register(dir: &Path) -> std::io::Result<RunGuard> {
        std::fs::write(dir.join(EXEC_PID_FILE), format!("{}\n", std::process::id()))?;
        let state = Arc::new(GuardState {
            killed: AtomicBool::new(false),
            hung_up: AtomicBool::new(false),
            helpers: Mutex::new(Vec::new()),
        });
        let marker = dir.join(KILLED_MARKER);
        let watched = state.clone();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let watcher = std::thread::Builder::new()
            .name("airlock-kill-watch".into())
            .spawn(move || loop {
                if marker.exists() {
                    watched.killed.store(true, Ordering::Release);
                    watched.kill_helpers();
                }
                match stopped.recv_timeout(WATCH_INTERVAL) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                    _ => break,
                }
            })?;
        Ok(RunGuard {
            dir: dir.to_path_buf(),
            state,
            stop: Some(stop),
            watcher: Some(watcher),
        })
    }

    /// Mark the run killed from this process (the store says the session is killed).
    pub fn mark_killed(&self) {
        self.state.killed.store(true, Ordering::Release);
    }

    /// The run's helpers have been reaped: forget their pids, which the kernel may now
    /// give to other processes.
    pub fn run_ended(&self) {
        self.state
            .helpers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// What a client of the host that goes away calls: the run ends as it would for
    /// `airlock kill`, and its record says the client went away.
    pub fn hang_up_switch(&self) -> impl Fn() + Send + Sync + 'static {
        let state = self.state.clone();
        move || {
            state.hung_up.store(true, Ordering::Release);
            state.killed.store(true, Ordering::Release);
            state.kill_helpers();
        }
    }

    /// Who ended a killed run, for its record and the caller.
    pub fn killed_by(&self) -> &'static str {
        if self.state.hung_up.load(Ordering::Acquire) && !self.dir.join(KILLED_MARKER).exists() {
            "client, which went away"
        } else {
            "operator"
        }
    }

    /// Whether the session was killed (marker seen, or [`RunGuard::mark_killed`]).
    pub fn was_killed(&self) -> bool {
        self.state.killed.load(Ordering::Acquire) || self.dir.join(KILLED_MARKER).exists()
    }

    /// The hook for [`airlock_sandbox::Sandbox::on_spawn`]: records each helper's pid in
    /// the run dir, and kills it at once if the session is already killed.
    pub fn spawn_hook(&self) -> impl Fn(u32) + Send + Sync + 'static {
        let state = self.state.clone();
        let dir = self.dir.clone();
        move |pid| {
            state
                .helpers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(pid);
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join(SANDBOX_PIDS_FILE));
            let recorded = file.and_then(|mut f| writeln!(f, "{pid}"));
            // A helper that `airlock kill` could not find must not run: fail closed.
            if recorded.is_err()
                || state.killed.load(Ordering::Acquire)
                || dir.join(KILLED_MARKER).exists()
            {
                if recorded.is_err() {
                    eprintln!(
                        "airlock: cannot register the sandbox in {}; stopping it",
                        dir.display()
                    );
                } else {
                    state.killed.store(true, Ordering::Release);
                }
                let _ = kill(to_pid(pid), Signal::SIGKILL);
            }
        }
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
        // The run dir may outlive the run (a session's proxy keeps it for the session's
        // next call): pids the kernel may give to other processes must not stay in it
        // for a later `airlock kill` to find.
        let _ = std::fs::remove_file(self.dir.join(SANDBOX_PIDS_FILE));
        let _ = std::fs::remove_file(self.dir.join(EXEC_PID_FILE));
    }
}
